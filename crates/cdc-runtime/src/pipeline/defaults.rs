//! Default settings of a pipeline.

use std::time::Duration;

/// The default number of change events per batch.
pub const DEFAULT_BATCH_SIZE: usize = 1000;
/// The default bytes of row data per batch (1 MiB): rows of up to 1 KB
/// fill the whole [`DEFAULT_BATCH_SIZE`], and wider ones end a batch
/// sooner, so the batches queued for the sinks hold a few MiB however wide
/// the rows are (1,000 documents of 1 MB would otherwise be one batch of
/// 1 GB).
pub const DEFAULT_BATCH_BYTES: usize = 1024 * 1024;
/// The default least interval between the starts of two flushes of a sink
/// while the job catches up (5 ms; see
/// [`PipelineOptions::min_flush_interval`](super::PipelineOptions::min_flush_interval)).
/// Measured with `e2e_stream` on 20,000 transactions of 10 rows, read from a
/// backlog and written as Debezium JSON to the fsynced file sink: 352–486
/// fsyncs (narrow rows) and 376–707 (realistic rows) at zero, 215–284 and
/// 109–369 at 5 ms, in three runs each; client CPU on the realistic rows
/// 0.34 s against 0.39 s (medians of four alternating rounds). A job that
/// keeps up is not paced: the `latency` bench's p99 at 2,000 transactions
/// a second did not move. Kafka's producer waits the same 5 ms
/// (`linger.ms`) to fill a batch.
pub const DEFAULT_MIN_FLUSH_INTERVAL: Duration = Duration::from_millis(5);
/// The default budget for buffered streamed transactions (64 MiB).
pub const DEFAULT_BYTE_BUDGET: usize = 64 * 1024 * 1024;
/// The default interval between standby status updates (10 s).
pub const DEFAULT_STATUS_INTERVAL: Duration = Duration::from_secs(10);
/// The default number of batches buffered per sink.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 4;
/// The default replication receive timeout (90 s): with nothing at all
/// from the server for this long, not even a keepalive, the connection is
/// taken for dead and replication reconnects. The walsender sends a
/// keepalive every `wal_sender_timeout / 2` (30 s by default) when idle.
pub const DEFAULT_RECEIVE_TIMEOUT: Duration = Duration::from_secs(90);
/// The default time one sink operation (a write, a flush, a reconnect, a
/// checkpoint commit) may take (120 s): far above any healthy one, well
/// below forever. Past it the operation fails as transient and is retried.
pub const DEFAULT_SINK_TIMEOUT: Duration = Duration::from_secs(120);
