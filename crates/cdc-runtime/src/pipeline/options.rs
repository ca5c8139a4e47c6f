//! The pipeline's settings: [`PipelineOptions`] and the reconnect pacing
//! [`Backoff`]. Plain data that the stages read; nothing here does IO.

use std::path::PathBuf;
use std::time::Duration;

use cdc_core::Lsn;

use crate::replication::ReplicationConfig;

/// How reconnects are paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// The largest delay.
    pub max: Duration,
    /// Give up after this many consecutive failed attempts (`None`: never).
    pub max_attempts: Option<u32>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(30),
            max_attempts: None,
        }
    }
}

impl Backoff {
    /// The delay before attempt `attempt` (1-based): `initial * 2^(attempt-1)`
    /// capped at `max`, then scaled by a random factor in `[0.5, 1.0]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .initial
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let capped = exp.min(self.max);
        capped.mul_f64(0.5 + 0.5 * jitter())
    }
}

/// A random number in `[0, 1)` from std's randomly keyed hasher.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Settings of a [`Pipeline`](super::Pipeline).
#[derive(Debug, Clone)]
pub struct PipelineOptions {
    /// The replication connection (password never printed).
    pub replication: ReplicationConfig,
    /// The logical replication slot (must exist, plugin pgoutput).
    pub slot: String,
    /// Publications to stream.
    pub publications: Vec<String>,
    /// Where to start if nothing was confirmed yet (`None`: the slot's position).
    pub start_lsn: Option<Lsn>,
    /// The pgoutput protocol version to ask for (`None`: the newest the
    /// server speaks). Version 1 has no streaming of in-progress
    /// transactions: the server holds large ones until they commit.
    pub proto_version: Option<u32>,
    /// Ask the server to stream large transactions while they are in
    /// progress (protocol 2 and later; ignored on 1). On, the server sends
    /// a transaction past its `logical_decoding_work_mem` before it commits
    /// and pgcdc holds it (spilling past [`byte_budget`](Self::byte_budget))
    /// until it does; off, the server holds it (spilling to its own disk)
    /// and sends it after the commit. Default: [`DEFAULT_STREAM_IN_PROGRESS`].
    pub stream_in_progress: bool,
    /// Change events per batch: at most this many.
    pub batch_size: usize,
    /// Bytes of row data per batch: a batch also ends once the rows of its
    /// streamed changes, as the server sent them, reach this many bytes, so
    /// that the batches held for the sinks stay small however wide the rows
    /// are (see [`DEFAULT_BATCH_BYTES`](super::DEFAULT_BATCH_BYTES)). Rows
    /// of an initial snapshot come in the readers' chunks and are counted
    /// by `batch_size` only.
    pub batch_bytes: usize,
    /// Bytes of streamed in-progress transactions held in memory; past it
    /// the largest is spilled to a file in `spill_dir`.
    pub byte_budget: usize,
    /// The least time between the starts of two flushes of a sink (an
    /// fsync for the file sink) while the job catches up. A sink flushes
    /// once a commit is written and no batch waits behind it (group
    /// commit). While the newest commit written is over 100 ms old and
    /// commits come more than twice as often as this, a flush that falls
    /// due sooner than this after the last one is held until then, and the
    /// batches that arrive meanwhile share it. A flush for a checkpoint, or
    /// after 16 batches since a commit, is never held, and a job that keeps
    /// up flushes each commit at once. It adds at most this much latency,
    /// and only to commits already over 100 ms old (by this machine's
    /// clock against the server's commit time). Zero: flush whenever a
    /// commit is due.
    /// Default: [`DEFAULT_MIN_FLUSH_INTERVAL`](super::DEFAULT_MIN_FLUSH_INTERVAL).
    pub min_flush_interval: Duration,
    /// Where spill files go.
    pub spill_dir: PathBuf,
    /// Interval between standby status updates.
    pub status_interval: Duration,
    /// Batches buffered per sink.
    pub channel_capacity: usize,
    /// Fail a silent connection after this long without any message.
    pub receive_timeout: Option<Duration>,
    /// How long one sink operation (write, flush, reconnect, checkpoint
    /// commit) may take before it fails as transient and is retried
    /// (default [`DEFAULT_SINK_TIMEOUT`](super::DEFAULT_SINK_TIMEOUT); `None`: no limit).
    pub sink_timeout: Option<Duration>,
    /// Reconnect pacing.
    pub backoff: Backoff,
    /// After a socket read that brought in less than [`READ_PAUSE_BELOW`]
    /// bytes, wait this long before reading again, so that the next read
    /// takes in what the server sent meanwhile at once: while the server
    /// sends faster than one small read at a time, every read otherwise
    /// costs a system call, a readiness wait and a task wake-up for a few
    /// messages. No pause when the socket already holds that many bytes
    /// (the read was small for want of buffer room, not of data). During
    /// the pause the socket's receive low-water mark is raised to that
    /// many bytes (Linux), so segments arriving meanwhile do not wake the
    /// runtime for nothing; the next read lowers it first. It adds at most
    /// this much latency, and only while data keeps arriving in small
    /// pieces. Zero: read again at once.
    pub read_pause: Duration,
    /// Metrics and health to keep up to date (see [`crate::monitor`]).
    pub monitor: Option<crate::monitor::Monitor>,
    /// Emit transaction boundary events ([`Operation::Transaction`]) before
    /// and after the events of each transaction (for Debezium's
    /// `provide.transaction.metadata`; a job turns it on when a sink's
    /// format asks for them).
    ///
    /// [`Operation::Transaction`]: crate::event::Operation::Transaction
    pub transaction_markers: bool,
}

/// See [`PipelineOptions::stream_in_progress`].
///
/// Off: measured with `e2e_stream` on a transaction of 1,000,000 rows of
/// (bigint, int, 100 characters of text, timestamptz, numeric) written as
/// Debezium JSON to the file sink, streaming with pgcdc's spill ran at 0.86x
/// pg_recvlogical's events/s with 4.6 s of CPU and 92 MB peak, against 1.15x,
/// 3.1 s and 29 MB with the server holding the transaction; on a 3-column
/// row streaming was ahead (1.81x against 1.42x), and both were above the
/// peer. Debezium does not stream in-progress transactions either.
pub const DEFAULT_STREAM_IN_PROGRESS: bool = false;

/// See [`PipelineOptions::read_pause`].
pub const READ_PAUSE_BELOW: usize = 64 * 1024;

impl PipelineOptions {
    /// Options with the defaults (newest protocol version, batch 1000 events
    /// or 1 MiB of rows, 64 MiB
    /// budget, flushes at least 5 ms apart, spill files in the system
    /// temporary directory, 10 s status
    /// interval, 4 batches per sink channel, 90 s receive timeout, 120 s
    /// sink timeout, 1 ms read pause).
    pub fn new(
        replication: ReplicationConfig,
        slot: impl Into<String>,
        publication: impl Into<String>,
    ) -> Self {
        PipelineOptions {
            replication,
            slot: slot.into(),
            publications: vec![publication.into()],
            start_lsn: None,
            proto_version: None,
            stream_in_progress: DEFAULT_STREAM_IN_PROGRESS,
            batch_size: super::DEFAULT_BATCH_SIZE,
            batch_bytes: super::DEFAULT_BATCH_BYTES,
            byte_budget: super::DEFAULT_BYTE_BUDGET,
            min_flush_interval: super::DEFAULT_MIN_FLUSH_INTERVAL,
            spill_dir: std::env::temp_dir(),
            status_interval: super::DEFAULT_STATUS_INTERVAL,
            channel_capacity: super::DEFAULT_CHANNEL_CAPACITY,
            receive_timeout: Some(super::DEFAULT_RECEIVE_TIMEOUT),
            sink_timeout: Some(super::DEFAULT_SINK_TIMEOUT),
            backoff: Backoff::default(),
            read_pause: Duration::from_millis(1),
            monitor: None,
            transaction_markers: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_with_jitter_and_a_cap() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            max_attempts: None,
        };
        for (attempt, full) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (40, 1000),
        ] {
            let d = b.delay(attempt);
            let full = Duration::from_millis(full);
            assert!(
                d >= full / 2 && d <= full,
                "attempt {attempt}: {d:?} vs {full:?}"
            );
        }
        // Jitter: not every delay is the same.
        let delays: std::collections::HashSet<_> = (0..20).map(|_| b.delay(3)).collect();
        assert!(delays.len() > 1);
    }
}
