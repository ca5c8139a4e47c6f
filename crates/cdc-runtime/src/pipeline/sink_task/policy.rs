//! How a sink task retries: the policy and the time limit of one operation.

use std::time::Duration;

use crate::sinks::SinkError;

use super::super::Backoff;

/// How a sink task retries transient errors (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SinkRetry {
    /// Delays between attempts; `max_attempts` bounds consecutive failures.
    pub(crate) backoff: Backoff,
    /// Events kept for a replay; past it a transient error stops the task.
    pub(crate) max_retained_events: usize,
    /// Memory those events may take ([`ChangeEvent::approx_size`]); past it, as
    /// past `max_retained_events`, a transient error stops the task. Without
    /// it a huge transaction of wide rows kept 100,000 of them alive after
    /// they were written (42 MB for ~400-byte events).
    pub(crate) max_retained_bytes: usize,
    /// How long one sink operation (a write, a flush, a reset, a checkpoint
    /// commit) may take before it fails as the transient
    /// [`SinkError::Timeout`] and is retried like a lost connection.
    pub(crate) operation_timeout: Option<Duration>,
}

impl SinkRetry {
    /// The default policy with `timeout` per operation.
    pub(crate) fn with_timeout(timeout: Option<Duration>) -> Self {
        SinkRetry {
            operation_timeout: timeout,
            ..SinkRetry::default()
        }
    }
}

impl Default for SinkRetry {
    /// 200 ms doubling to 10 s, giving up after 10 consecutive failures
    /// (about a minute of waiting); up to 100,000 events kept (100 batches
    /// of the default size, shared with the other sinks) taking up to 16 MiB.
    fn default() -> Self {
        SinkRetry {
            backoff: Backoff {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(10),
                max_attempts: Some(10),
            },
            max_retained_events: 100_000,
            max_retained_bytes: 16 << 20,
            operation_timeout: Some(super::super::DEFAULT_SINK_TIMEOUT),
        }
    }
}

/// Runs `op` within `limit` (`None`: no limit); on expiry
/// [`SinkError::Timeout`] naming `what`.
pub(super) async fn timed<T>(
    limit: Option<Duration>,
    what: &'static str,
    op: impl std::future::Future<Output = Result<T, SinkError>>,
) -> Result<T, SinkError> {
    match limit {
        None => op.await,
        Some(after) => tokio::time::timeout(after, op)
            .await
            .unwrap_or(Err(SinkError::Timeout { what, after })),
    }
}
