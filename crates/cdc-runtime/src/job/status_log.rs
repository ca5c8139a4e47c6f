//! The periodic status line: how fast events flow, how far the slot is
//! confirmed, how old the newest checkpoint is, and the snapshot's state.

use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::pipeline::Progress;
use crate::snapshot::SnapshotState;

/// One status line's figures, computed from two progress readings.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct StatusFigures {
    /// Events per second since the previous line.
    pub(super) events_per_sec: f64,
    /// Bytes received from the server but not yet confirmed to it.
    pub(super) unconfirmed_bytes: u64,
    /// Seconds since the newest checkpoint was saved (`None`: none yet).
    pub(super) checkpoint_age_secs: Option<u64>,
}

impl StatusFigures {
    /// The figures for `now` against `previous`, `elapsed` apart, at wall
    /// time `wall` (for the checkpoint's age).
    pub(super) fn compute(
        previous: &Progress,
        now: &Progress,
        elapsed: Duration,
        wall: SystemTime,
    ) -> Self {
        let events = now.events.saturating_sub(previous.events);
        let secs = elapsed.as_secs_f64();
        StatusFigures {
            events_per_sec: if secs > 0.0 {
                events as f64 / secs
            } else {
                0.0
            },
            unconfirmed_bytes: now.received.as_u64().saturating_sub(now.confirmed.as_u64()),
            checkpoint_age_secs: now
                .checkpoints
                .last_saved_at
                .map(|at| wall.duration_since(at).unwrap_or_default().as_secs()),
        }
    }
}

/// Logs a status line at INFO every `every` until dropped (aborted).
pub(super) async fn run(mut progress: watch::Receiver<Progress>, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut previous = *progress.borrow_and_update();
    let mut at = tokio::time::Instant::now();
    loop {
        ticker.tick().await;
        let now = *progress.borrow_and_update();
        let f = StatusFigures::compute(&previous, &now, at.elapsed(), SystemTime::now());
        at = tokio::time::Instant::now();
        let snapshot = match now.snapshot {
            SnapshotState::None => "none",
            SnapshotState::Running => "running",
            SnapshotState::Complete => "complete",
        };
        let age = f
            .checkpoint_age_secs
            .map_or_else(|| "-".to_owned(), |s| format!("{s}s"));
        tracing::info!(
            events_per_sec = format_args!("{:.1}", f.events_per_sec),
            events = now.events,
            confirmed = %now.confirmed,
            unconfirmed_bytes = f.unconfirmed_bytes,
            checkpoint_age = %age,
            checkpoints = now.checkpoints.saved,
            reconnects = now.reconnects,
            snapshot,
            "status"
        );
        previous = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_core::Lsn;

    #[test]
    fn rate_lag_and_checkpoint_age() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let previous = Progress {
            events: 100,
            ..Progress::default()
        };
        let mut now = Progress {
            events: 400,
            received: Lsn::from_u64(5_000),
            confirmed: Lsn::from_u64(4_200),
            ..Progress::default()
        };
        let f = StatusFigures::compute(&previous, &now, Duration::from_secs(30), wall);
        assert_eq!(f.events_per_sec, 10.0);
        assert_eq!(f.unconfirmed_bytes, 800);
        assert_eq!(f.checkpoint_age_secs, None);

        now.checkpoints.last_saved_at = Some(wall - Duration::from_secs(7));
        // A confirmed position ahead of what was received (an idle keepalive)
        // is no lag; a clock that went back is age zero, not a panic.
        now.confirmed = Lsn::from_u64(6_000);
        let f = StatusFigures::compute(&previous, &now, Duration::ZERO, wall);
        assert_eq!(f.events_per_sec, 0.0);
        assert_eq!(f.unconfirmed_bytes, 0);
        assert_eq!(f.checkpoint_age_secs, Some(7));
        now.checkpoints.last_saved_at = Some(wall + Duration::from_secs(5));
        let f = StatusFigures::compute(&previous, &now, Duration::from_secs(1), wall);
        assert_eq!(f.checkpoint_age_secs, Some(0));
    }
}
