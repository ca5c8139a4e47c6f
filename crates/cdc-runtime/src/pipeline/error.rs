//! [`PipelineError`].

use crate::event::ConvertError;
use crate::replication::ReplicationError;
use crate::sinks::SinkError;

/// Why a pipeline stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The replication connection failed.
    #[error("replication: {0}")]
    Replication(#[from] ReplicationError),
    /// A replication message could not be decoded.
    #[error("decoding the replication stream: {0}")]
    Decode(#[from] cdc_core::DecodeError),
    /// The server sent messages in an impossible order.
    #[error("replication protocol: {0}")]
    Protocol(#[from] cdc_core::ProtocolError),
    /// A transaction event could not be turned into change events.
    #[error("converting changes: {0}")]
    Convert(#[from] ConvertError),
    /// A sink failed.
    #[error("sink: {0}")]
    Sink(#[from] SinkError),
    /// A checkpoint could not be taken and streaming cannot go on (another
    /// instance took the job over, or operator state could not be captured).
    #[error("checkpoint: {0}")]
    Checkpoint(checkpoint_api::CheckpointError),
    /// An operator could not process an event.
    #[error("{0}")]
    Operator(crate::operators::OperatorError),
    /// An operator's state in the checkpoint could not be restored.
    #[error("restoring operator state: {0}")]
    Restore(checkpoint_api::OperatorStateError),
    /// The initial snapshot failed.
    #[error("initial snapshot: {0}")]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    /// A sink task stopped unexpectedly (panicked or was cancelled).
    #[error("a sink task stopped unexpectedly")]
    SinkStopped,
    /// No sinks were configured.
    #[error("the pipeline has no sinks")]
    NoSinks,
    /// A streamed transaction could not be spilled to disk or read back.
    #[error("{0}")]
    Spill(#[from] super::SpillError),
    /// Transient errors persisted through every reconnect attempt.
    #[error("giving up after {attempts} reconnect attempts: {last}")]
    RetriesExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: Box<PipelineError>,
    },
    /// Shutdown was requested before streaming started (not an error for callers of `run`).
    #[doc(hidden)]
    #[error("shut down while connecting")]
    ShutdownWhileConnecting,
    /// The source after a reconnect does not continue what this job
    /// delivered (another cluster, a timeline that forked before what was
    /// processed, a slot moved past it): resuming would be from a wrong
    /// position.
    #[error("{0}")]
    Diverged(String),
    /// A bug.
    #[error("internal error: {0}")]
    Internal(&'static str),
}

impl PipelineError {
    /// Whether reconnecting may help: transient replication errors, a
    /// snapshot reader that lost its connection (the snapshot's readers
    /// start again with the stream), and a full spill directory (the
    /// server sends the transaction again after the reconnect, by when
    /// space may be free).
    pub fn is_transient(&self) -> bool {
        match self {
            PipelineError::Replication(e) => e.is_transient(),
            PipelineError::Snapshot(e) => e.is_transient(),
            PipelineError::Spill(e) => e.is_disk_full(),
            _ => false,
        }
    }
}
