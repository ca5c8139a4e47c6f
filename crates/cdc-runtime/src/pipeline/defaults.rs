//! Default settings of a pipeline.

use std::time::Duration;

/// The default number of change events per batch.
pub const DEFAULT_BATCH_SIZE: usize = 1000;
/// The default budget for buffered streamed transactions (64 MiB).
pub const DEFAULT_BYTE_BUDGET: usize = 64 * 1024 * 1024;
/// The default interval between standby status updates (10 s).
pub const DEFAULT_STATUS_INTERVAL: Duration = Duration::from_secs(10);
/// The default number of batches buffered per sink.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 4;
