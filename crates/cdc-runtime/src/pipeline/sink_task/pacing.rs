//! How often a sink task may flush: group commit with a floor on the
//! interval between flushes while a job catches up.

use std::time::Duration;

use tokio::time::Instant;

/// A transaction that committed longer ago than this is being caught up
/// with: a few milliseconds more before its flush are little next to its
/// age, and the flushes they save are CPU. Far above the commit-to-sink
/// latency of a job that keeps up (a p99 of 3–5 ms at 2,000 transactions
/// a second in the `latency` bench), and far below the age of a backlog.
pub(super) const CATCHING_UP_AFTER: Duration = Duration::from_millis(100);

/// When the next flush of a sink may start.
///
/// While the job catches up (the newest commit written committed more than
/// [`CATCHING_UP_AFTER`] ago) and commits come more than twice as often as
/// `min_interval`, flushes start at least `min_interval` apart: a flush
/// that falls due sooner is held until then, and the commits that arrive
/// meanwhile share it (one fsync for the file sink). A job that keeps up
/// flushes at once, so its commit-to-sink latency is unchanged; so are
/// commits that come further apart (held flushes would wait for commits
/// that do not come). Zero: never held.
///
/// A client clock ahead of the server's by more than [`CATCHING_UP_AFTER`]
/// makes every commit look old: fast streams are then paced too, adding at
/// most `min_interval` to their latency. One behind it never paces.
#[derive(Debug, Clone, Copy)]
pub(super) struct FlushPacing {
    min_interval: Duration,
    /// When the last flush started (or was due to start, when held).
    last_flush: Option<Instant>,
    /// When the last batch with a commit came, and the time since the one
    /// before it.
    last_commit: Option<Instant>,
    commit_gap: Option<Duration>,
    /// The newest commit written is older than [`CATCHING_UP_AFTER`].
    catching_up: bool,
}

impl FlushPacing {
    pub(super) fn new(min_interval: Duration) -> Self {
        FlushPacing {
            min_interval,
            last_flush: None,
            last_commit: None,
            commit_gap: None,
            catching_up: false,
        }
    }

    /// A batch with a commit came at `now`; its newest transaction
    /// committed `age` ago (`None`: unknown, or in the future by this
    /// machine's clock).
    pub(super) fn committed(&mut self, now: Instant, age: Option<Duration>) {
        self.catching_up = age.is_some_and(|a| a > CATCHING_UP_AFTER);
        if let Some(last) = self.last_commit {
            self.commit_gap = Some(now.saturating_duration_since(last));
        }
        self.last_commit = Some(now);
    }

    /// Until when a flush that is due at `now` is held; `None`: run it now.
    pub(super) fn hold_until(&self, now: Instant) -> Option<Instant> {
        let fast = self.catching_up && self.commit_gap? < self.min_interval / 2;
        let at = self.last_flush?.checked_add(self.min_interval)?;
        (fast && now < at).then_some(at)
    }

    /// A flush started at `at` (or was due then).
    pub(super) fn started(&mut self, at: Instant) {
        self.last_flush = Some(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    /// The age of a commit being caught up with.
    const OLD: Option<Duration> = Some(Duration::from_secs(60));

    /// Commits every `gap`, each flushed at once or with the flush held for
    /// it (which the commits until then share), as the sink task does;
    /// returns how long each waited.
    fn waits(
        interval: Duration,
        gap: Duration,
        commits: u32,
        age: Option<Duration>,
    ) -> Vec<Duration> {
        let t0 = Instant::now();
        let mut p = FlushPacing::new(interval);
        let mut held: Option<Instant> = None;
        let mut waits = Vec::new();
        for k in 0..commits {
            let now = t0 + gap * k;
            if let Some(at) = held.filter(|at| *at <= now) {
                p.started(at);
                held = None;
            }
            p.committed(now, age);
            match held.or_else(|| p.hold_until(now)) {
                Some(at) => {
                    held = Some(at);
                    waits.push(at - now);
                }
                None => {
                    p.started(now);
                    waits.push(Duration::ZERO);
                }
            }
        }
        waits
    }

    #[test]
    fn the_first_flushes_run_at_once() {
        let t0 = Instant::now();
        let mut p = FlushPacing::new(5 * MS);
        p.committed(t0, OLD);
        assert_eq!(p.hold_until(t0), None);
        p.started(t0);
        // The second commit, 1 ms later: no gap known before it, so no hold.
        assert_eq!(p.hold_until(t0 + MS), None);
    }

    #[test]
    fn fast_commits_are_flushed_at_most_once_per_interval() {
        let t0 = Instant::now();
        let mut p = FlushPacing::new(5 * MS);
        p.committed(t0, OLD);
        p.started(t0);
        p.committed(t0 + MS, OLD);
        assert_eq!(p.hold_until(t0 + MS), Some(t0 + 5 * MS));
        p.committed(t0 + 2 * MS, OLD);
        assert_eq!(p.hold_until(t0 + 2 * MS), Some(t0 + 5 * MS));
        // Due at the interval: at once.
        p.committed(t0 + 3 * MS, OLD);
        assert_eq!(p.hold_until(t0 + 5 * MS), None);
    }

    #[test]
    fn a_steady_stream_near_the_interval_is_never_held() {
        // 200 commits a second against 5 ms: each one is flushed at once.
        for gap in [5 * MS, 3 * MS, Duration::from_micros(2_600)] {
            assert!(
                waits(5 * MS, gap, 100, OLD).iter().all(|w| w.is_zero()),
                "{gap:?}"
            );
        }
    }

    #[test]
    fn a_fast_stream_waits_at_most_the_interval() {
        let w = waits(5 * MS, Duration::from_micros(500), 100, OLD);
        assert!(w.iter().any(|w| !w.is_zero()));
        assert!(w.iter().all(|w| *w <= 5 * MS), "{w:?}");
    }

    #[test]
    fn a_job_that_keeps_up_flushes_at_once() {
        // 2,000 commits a second, each a few milliseconds old, or of an
        // unknown age, or dated ahead of this clock.
        for age in [Some(3 * MS), Some(CATCHING_UP_AFTER), None] {
            let w = waits(5 * MS, Duration::from_micros(500), 100, age);
            assert!(w.iter().all(|w| w.is_zero()), "{age:?}");
        }
    }

    #[test]
    fn zero_never_holds() {
        let t0 = Instant::now();
        let mut p = FlushPacing::new(Duration::ZERO);
        p.committed(t0, OLD);
        p.started(t0);
        p.committed(t0, OLD);
        assert_eq!(p.hold_until(t0), None);
    }
}
