//! Liveness and readiness of a running job.
//!
//! The pipeline records what readiness depends on; [`Health::readiness`]
//! decides, with the time passed in (no clock of its own, so the rules are
//! tested without waiting). A job is ready while:
//!
//! * the replication stream is connected, and moving: it is not behind the
//!   server's WAL end with nothing received for [`STALL`];
//! * with checkpoints, the newest one (or the start, before the first) is
//!   younger than three checkpoint intervals;
//! * every sink is healthy (not retrying a transient error).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cdc_core::Lsn;

/// How long the stream may receive nothing while the server has WAL it has
/// not sent before it counts as stalled.
pub const STALL: Duration = Duration::from_secs(30);

/// How a sink is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkState {
    /// Writing and flushing.
    Healthy,
    /// Retrying after a transient error (the error).
    Retrying(String),
    /// Stopped by an error (the error).
    Failed(String),
}

#[derive(Debug)]
struct State {
    started: Instant,
    connected: bool,
    last_error: Option<String>,
    received: Lsn,
    received_at: Instant,
    server_wal_end: Lsn,
    checkpoint_interval: Option<Duration>,
    last_checkpoint: Option<Instant>,
    sinks: Vec<(String, SinkState)>,
    job: String,
    slot: String,
    confirmed: Lsn,
    events: u64,
    checkpoints: Vec<CheckpointEntry>,
    snapshot: Vec<SnapshotEntry>,
}

/// A retained checkpoint, for the status page.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CheckpointEntry {
    /// Its id.
    pub id: u64,
    /// The position it resumes from.
    pub lsn: String,
    /// When it was created (Unix milliseconds).
    pub created_unix_ms: i64,
    /// Stored size.
    pub bytes: u64,
}

/// A table of the snapshot, for the status page.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SnapshotEntry {
    /// `schema.table`.
    pub table: String,
    /// Rows read.
    pub rows: u64,
    /// Rows read over the estimate (1 when done).
    pub ratio: f64,
}

/// What the status page shows, at one moment.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StatusReport {
    /// The job's name (the slot's without checkpoints).
    pub job: String,
    /// The replication slot.
    pub slot: String,
    /// Whether the stream is connected.
    pub connected: bool,
    /// The highest position received.
    pub received: String,
    /// The confirmed position.
    pub confirmed: String,
    /// The server's WAL end minus the confirmed position.
    pub lag_bytes: u64,
    /// Change events handed to the sinks.
    pub events: u64,
    /// Readiness.
    pub ready: bool,
    /// Why not ready.
    pub reasons: Vec<String>,
    /// Retained checkpoints, newest first.
    pub checkpoints: Vec<CheckpointEntry>,
    /// Tables the snapshot read or reads.
    pub snapshot: Vec<SnapshotEntry>,
    /// Sinks: name and state (`healthy`, or the error).
    pub sinks: Vec<(String, String)>,
}

/// What readiness depends on, shared by the pipeline and the endpoint.
#[derive(Debug, Clone)]
pub struct Health {
    state: Arc<Mutex<State>>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

/// The answer of [`Health::readiness`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Ready for traffic.
    pub ready: bool,
    /// Why not (empty when ready).
    pub reasons: Vec<String>,
}

impl Health {
    /// A job that has just started: not connected yet.
    pub fn new() -> Self {
        let now = Instant::now();
        Health {
            state: Arc::new(Mutex::new(State {
                started: now,
                connected: false,
                last_error: None,
                received: Lsn::INVALID,
                received_at: now,
                server_wal_end: Lsn::INVALID,
                checkpoint_interval: None,
                last_checkpoint: None,
                sinks: Vec::new(),
                job: String::new(),
                slot: String::new(),
                confirmed: Lsn::INVALID,
                events: 0,
                checkpoints: Vec::new(),
                snapshot: Vec::new(),
            })),
        }
    }

    fn with(&self, f: impl FnOnce(&mut State)) {
        if let Ok(mut s) = self.state.lock() {
            f(&mut s);
        }
    }

    /// The job takes checkpoints every `interval`.
    pub fn set_checkpoint_interval(&self, interval: Duration) {
        self.with(|s| s.checkpoint_interval = Some(interval));
    }

    /// The sinks, by index, with their types.
    pub fn set_sinks(&self, kinds: &[&str]) {
        self.with(|s| {
            s.sinks = kinds
                .iter()
                .enumerate()
                .map(|(i, k)| (format!("{i} ({k})"), SinkState::Healthy))
                .collect();
        });
    }

    pub(crate) fn connected(&self, now: Instant) {
        self.with(|s| {
            s.connected = true;
            s.last_error = None;
            s.received_at = now;
        });
    }

    pub(crate) fn disconnected(&self, error: &str) {
        self.with(|s| {
            s.connected = false;
            s.last_error = Some(error.to_owned());
        });
    }

    /// The job and slot names, for the status page.
    pub fn set_names(&self, job: &str, slot: &str) {
        self.with(|s| {
            s.job = job.to_owned();
            s.slot = slot.to_owned();
        });
    }

    pub(crate) fn set_checkpoints(&self, list: Vec<CheckpointEntry>) {
        self.with(|s| s.checkpoints = list);
    }

    pub(crate) fn snapshot_table(&self, entry: SnapshotEntry) {
        self.with(
            |s| match s.snapshot.iter_mut().find(|e| e.table == entry.table) {
                Some(e) => *e = entry,
                None => s.snapshot.push(entry),
            },
        );
    }

    /// What the status page shows at `now`.
    pub fn status(&self, now: Instant) -> StatusReport {
        let readiness = self.readiness(now);
        let Ok(s) = self.state.lock() else {
            return StatusReport {
                job: String::new(),
                slot: String::new(),
                connected: false,
                received: String::new(),
                confirmed: String::new(),
                lag_bytes: 0,
                events: 0,
                ready: false,
                reasons: readiness.reasons,
                checkpoints: Vec::new(),
                snapshot: Vec::new(),
                sinks: Vec::new(),
            };
        };
        let end = s.server_wal_end.max(s.received);
        StatusReport {
            job: s.job.clone(),
            slot: s.slot.clone(),
            connected: s.connected,
            received: s.received.to_string(),
            confirmed: s.confirmed.to_string(),
            lag_bytes: end.as_u64().saturating_sub(s.confirmed.as_u64()),
            events: s.events,
            ready: readiness.ready,
            reasons: readiness.reasons,
            checkpoints: s.checkpoints.iter().rev().cloned().collect(),
            snapshot: s.snapshot.clone(),
            sinks: s
                .sinks
                .iter()
                .map(|(n, st)| {
                    let state = match st {
                        SinkState::Healthy => "healthy".to_owned(),
                        SinkState::Retrying(e) => format!("retrying: {e}"),
                        SinkState::Failed(e) => format!("failed: {e}"),
                    };
                    (n.clone(), state)
                })
                .collect(),
        }
    }

    /// The stream's positions and event count at `now` (one lock per
    /// published progress).
    pub(crate) fn stream_position(
        &self,
        received: Lsn,
        server_wal_end: Lsn,
        confirmed: Lsn,
        events: u64,
        now: Instant,
    ) {
        self.with(|s| {
            s.confirmed = confirmed;
            s.events = events;
            if received > s.received {
                s.received = received;
                s.received_at = now;
            }
            s.server_wal_end = s.server_wal_end.max(server_wal_end);
        });
    }

    pub(crate) fn checkpoint_saved(&self, now: Instant) {
        self.with(|s| s.last_checkpoint = Some(now));
    }

    pub(crate) fn sink(&self, index: usize, state: SinkState) {
        self.with(|s| {
            while s.sinks.len() <= index {
                let i = s.sinks.len();
                s.sinks.push((i.to_string(), SinkState::Healthy));
            }
            if let Some(entry) = s.sinks.get_mut(index) {
                entry.1 = state;
            }
        });
    }

    /// Whether the job is ready at `now`, and why not.
    pub fn readiness(&self, now: Instant) -> Readiness {
        let Ok(s) = self.state.lock() else {
            return Readiness {
                ready: false,
                reasons: vec!["health state unavailable".into()],
            };
        };
        let mut reasons = Vec::new();
        if !s.connected {
            reasons.push(match &s.last_error {
                Some(e) => format!("replication is not connected: {e}"),
                None => "replication is not connected yet".into(),
            });
        } else if s.server_wal_end > s.received
            && now.saturating_duration_since(s.received_at) > STALL
        {
            reasons.push(format!(
                "replication is not moving: nothing received for {} s while the server's WAL is at {} (received {})",
                now.saturating_duration_since(s.received_at).as_secs(),
                s.server_wal_end,
                s.received
            ));
        }
        if let Some(interval) = s.checkpoint_interval {
            let since = s.last_checkpoint.unwrap_or(s.started);
            let age = now.saturating_duration_since(since);
            if age > interval * 3 {
                reasons.push(format!(
                    "the newest checkpoint is {} s old (more than 3 checkpoint intervals of {} s)",
                    age.as_secs(),
                    interval.as_secs_f64()
                ));
            }
        }
        for (name, state) in &s.sinks {
            match state {
                SinkState::Healthy => {}
                SinkState::Retrying(e) => {
                    reasons.push(format!("sink {name} is retrying: {e}"));
                }
                SinkState::Failed(e) => reasons.push(format!("sink {name} failed: {e}")),
            }
        }
        Readiness {
            ready: reasons.is_empty(),
            reasons,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_connection_movement_checkpoints_and_sinks() {
        let h = Health::new();
        let t0 = Instant::now();
        h.set_checkpoint_interval(Duration::from_secs(1));
        h.set_sinks(&["file"]);
        assert!(!h.readiness(t0).ready, "not connected yet");
        h.connected(t0);
        h.checkpoint_saved(t0);
        assert_eq!(h.readiness(t0).reasons, Vec::<String>::new());
        // Behind the server and nothing received: stalled after STALL.
        h.stream_position(Lsn::from_u64(10), Lsn::from_u64(20), Lsn::INVALID, 0, t0);
        h.checkpoint_saved(t0 + STALL / 2);
        assert!(h.readiness(t0 + STALL / 2).ready, "not stalled yet");
        h.checkpoint_saved(t0 + STALL);
        let r = h.readiness(t0 + STALL + Duration::from_secs(1));
        assert!(!r.ready && r.reasons[0].contains("not moving"), "{r:?}");
        // Caught up: idle is fine.
        h.stream_position(
            Lsn::from_u64(20),
            Lsn::from_u64(20),
            Lsn::INVALID,
            0,
            t0 + STALL,
        );
        assert!(h.readiness(t0 + STALL + Duration::from_secs(1)).ready);
        // An old checkpoint.
        let r = h.readiness(t0 + STALL + Duration::from_secs(4));
        assert!(!r.ready && r.reasons[0].contains("checkpoint"), "{r:?}");
        h.checkpoint_saved(t0 + STALL + Duration::from_secs(4));
        h.sink(0, SinkState::Retrying("connection refused".into()));
        let r = h.readiness(t0 + STALL + Duration::from_secs(4));
        assert_eq!(r.reasons, ["sink 0 (file) is retrying: connection refused"]);
        h.sink(0, SinkState::Healthy);
        h.disconnected("server closed the connection");
        let r = h.readiness(t0 + STALL + Duration::from_secs(4));
        assert!(r.reasons[0].contains("server closed"), "{r:?}");
    }
}
