//! `[pipeline]`: batching, memory, status and runtime settings.

use std::path::PathBuf;

use cdc_runtime::pipeline::{
    DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, DEFAULT_BYTE_BUDGET, DEFAULT_CHANNEL_CAPACITY,
    DEFAULT_MIN_FLUSH_INTERVAL, DEFAULT_SINK_TIMEOUT, DEFAULT_STATUS_INTERVAL,
    DEFAULT_STREAM_IN_PROGRESS,
};
use serde::Deserialize;

/// `[pipeline]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    /// Change events per batch handed to the sinks.
    pub batch_size: usize,
    /// Bytes of row data (as the server sent them) at which a batch ends
    /// before `batch_size` events, so that the batches held for the sinks
    /// stay small however wide the rows are.
    pub batch_bytes: usize,
    /// Bytes of streamed in-progress transactions held in memory; past it
    /// the largest is spilled to a file in `spill_dir`.
    pub byte_budget: usize,
    /// Milliseconds at least between the starts of two flushes of a sink
    /// (an fsync for the file sink) while the job catches up (its commits
    /// over 100 ms old) with fast commits; a flush due sooner waits and is
    /// shared by what arrives meanwhile (0: none).
    pub min_flush_interval_ms: u64,
    /// Whether the server streams large transactions before they commit
    /// (pgcdc then holds them, spilling past `byte_budget`); off, the
    /// server holds them and sends them after the commit.
    pub stream_in_progress: bool,
    /// Directory for spill files (`None`: the system temporary directory).
    pub spill_dir: Option<PathBuf>,
    /// Seconds between standby status updates.
    pub status_interval_secs: u64,
    /// Batches buffered between the source and each sink (backpressure).
    pub channel_capacity: usize,
    /// Seconds between status lines in the log (events/s, unconfirmed
    /// bytes, newest checkpoint's age, snapshot); 0: none.
    pub status_log_interval_secs: u64,
    /// Threads of the async runtime (`None`: `TOKIO_WORKER_THREADS` if set,
    /// else [`default_worker_threads`]).
    pub worker_threads: Option<usize>,
    /// Seconds one sink operation (a write, a flush, a reconnect, a
    /// checkpoint commit) may take before it fails as transient and is
    /// retried (default 120; 0: no limit).
    pub sink_timeout_secs: u64,
}

/// At most this many runtime threads unless configured: a streaming job keeps
/// about two tasks busy (the source and a sink, which hand batches to each
/// other), plus the readers of an initial snapshot. More threads than busy
/// tasks add cross-thread wake-ups, not throughput (tokio's own default is a
/// thread per core).
pub const DEFAULT_WORKER_THREADS: usize = 2;

/// The default runtime threads: [`DEFAULT_WORKER_THREADS`], or fewer on a
/// machine with fewer cores.
pub fn default_worker_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(DEFAULT_WORKER_THREADS))
}

impl PipelineConfig {
    /// The runtime threads to start: `worker_threads`, else
    /// `tokio_worker_threads` (the value of the `TOKIO_WORKER_THREADS`
    /// environment variable, if set and a positive number), else
    /// [`default_worker_threads`].
    pub fn runtime_threads(&self, tokio_worker_threads: Option<&str>) -> usize {
        self.worker_threads
            .or_else(|| tokio_worker_threads.and_then(|v| v.trim().parse().ok()))
            .filter(|&n| n > 0)
            .unwrap_or_else(default_worker_threads)
    }
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            batch_size: DEFAULT_BATCH_SIZE,
            batch_bytes: DEFAULT_BATCH_BYTES,
            byte_budget: DEFAULT_BYTE_BUDGET,
            min_flush_interval_ms: u64::try_from(DEFAULT_MIN_FLUSH_INTERVAL.as_millis())
                .unwrap_or(u64::MAX),
            stream_in_progress: DEFAULT_STREAM_IN_PROGRESS,
            spill_dir: None,
            status_interval_secs: DEFAULT_STATUS_INTERVAL.as_secs(),
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            status_log_interval_secs: cdc_runtime::job::DEFAULT_STATUS_LOG_INTERVAL.as_secs(),
            worker_threads: None,
            sink_timeout_secs: DEFAULT_SINK_TIMEOUT.as_secs(),
        }
    }
}
