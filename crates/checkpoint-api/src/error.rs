//! [`CheckpointError`]: what a [`CheckpointStore`](crate::CheckpointStore) reports.

use std::error::Error as StdError;

use cdc_core::Lsn;

use crate::codec::{DecodeError, EncodeError};
use crate::model::{CheckpointId, JobName};
use crate::store::Epoch;

/// A boxed error from a backend (driver, pool, IO).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// What a checkpoint store reports.
///
/// [`CheckpointError::is_retryable`] separates transient failures (retry the same call
/// later) from definite ones (retrying cannot help: stop or report).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A stored checkpoint does not decode or does not match its metadata.
    #[error("checkpoint {id} of job {job} is corrupt: {source}")]
    Corrupt {
        /// Job.
        job: JobName,
        /// Checkpoint.
        id: CheckpointId,
        /// Why it is corrupt.
        #[source]
        source: CorruptKind,
    },
    /// The writer's lease is stale: another writer took the job over.
    #[error("job {job}: writer with epoch {held} was fenced off by epoch {current}")]
    Fenced {
        /// Job.
        job: JobName,
        /// The epoch the writer holds.
        held: Epoch,
        /// The job's current epoch.
        current: Epoch,
    },
    /// No such checkpoint (or no lease for the job).
    #[error("job {job}: {what} not found")]
    NotFound {
        /// Job.
        job: JobName,
        /// What was looked for.
        what: NotFound,
    },
    /// A save would move the job backward.
    #[error("job {job}: {regression}")]
    Regressed {
        /// Job.
        job: JobName,
        /// What would move backward.
        regression: Regression,
    },
    /// A save was refused before anything was written (e.g. the checkpoint's job is not the
    /// lease's job, or it does not encode).
    #[error("checkpoint rejected: {reason}")]
    Rejected {
        /// Why.
        reason: Rejection,
    },
    /// The backend is unreachable or overloaded; the same call may succeed later.
    #[error("checkpoint store unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The backend failed in a way retrying will not fix (schema missing, permission denied,
    /// constraint violated, ...).
    #[error("checkpoint store failed: {message}")]
    Backend {
        /// What failed.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
}

impl CheckpointError {
    /// Whether retrying the same call later may succeed. Only [`CheckpointError::Unavailable`]
    /// is retryable; a fenced writer, in particular, must stop.
    pub fn is_retryable(&self) -> bool {
        matches!(self, CheckpointError::Unavailable { .. })
    }

    /// A transient backend failure.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        CheckpointError::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A definite backend failure.
    pub fn backend(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        CheckpointError::Backend {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// Why a stored checkpoint is corrupt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorruptKind {
    /// The envelope does not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The stored chunks do not match the stored manifest.
    #[error("chunks do not match the manifest: {0}")]
    Manifest(#[from] crate::codec::ManifestError),
    /// The envelope decodes, but to another job's or another id's checkpoint.
    #[error("decoded checkpoint is {found_job}/{found_id}, not the one stored under this key")]
    Mismatch {
        /// Job found inside.
        found_job: JobName,
        /// Id found inside.
        found_id: CheckpointId,
    },
    /// Backend-specific inconsistency (e.g. a missing large object).
    #[error("{0}")]
    Other(String),
}

/// What was not found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotFound {
    /// A checkpoint.
    Checkpoint(CheckpointId),
    /// A lease: nobody ever acquired one for the job.
    Lease,
}

impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotFound::Checkpoint(id) => write!(f, "checkpoint {id}"),
            NotFound::Lease => f.write_str("lease"),
        }
    }
}

/// What a refused save would have moved backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Regression {
    /// The id is not greater than every id the job ever saved.
    #[error("checkpoint id {attempted} is not greater than {latest}, the highest ever saved")]
    Id {
        /// Highest id ever saved for the job.
        latest: CheckpointId,
        /// Id of the refused checkpoint.
        attempted: CheckpointId,
    },
    /// The source position is before the newest stored checkpoint's.
    #[error("commit end LSN {attempted} is before {latest}, the newest stored checkpoint's")]
    Lsn {
        /// LSN of the newest stored checkpoint.
        latest: Lsn,
        /// LSN of the refused checkpoint.
        attempted: Lsn,
    },
}

/// Why a save was refused up front.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The checkpoint belongs to another job than the lease.
    #[error("checkpoint is for job {checkpoint}, the lease is for job {lease}")]
    JobMismatch {
        /// The lease's job.
        lease: JobName,
        /// The checkpoint's job.
        checkpoint: JobName,
    },
    /// The checkpoint does not encode.
    #[error(transparent)]
    Encode(#[from] EncodeError),
}
