//! [`QuickstartError`]: why the quickstart could not run to the end.

use std::io;
use std::path::PathBuf;

use checkpoint_api::CheckpointError;

use crate::config::ConfigFileError;
use throwaway_pg::Error as EmbeddedError;

/// Why `pgcdc quickstart` stopped before its checks could run. (Checks
/// that ran and failed are in the [`Report`](super::Report) instead.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuickstartError {
    /// The throwaway server could not be started, reached or used, or a
    /// file or program of the quickstart failed (the same error type the
    /// throwaway server's own code uses).
    #[error(transparent)]
    Cluster(#[from] EmbeddedError),
    /// The generated configuration was rejected.
    #[error("the generated configuration is invalid: {0}")]
    Config(#[from] ConfigFileError),
    /// The checkpoint store could not be opened.
    #[error("cannot open the checkpoint store: {0}")]
    OpenStore(String),
    /// The checkpoint store failed.
    #[error("checkpoint store: {0}")]
    Store(#[from] CheckpointError),
    /// `pgcdc run` exited when it should have been running.
    #[error("`pgcdc run` exited unexpectedly ({status}); its log ends with:\n{log}")]
    PgcdcExited {
        /// Its exit status.
        status: String,
        /// The end of its log.
        log: String,
    },
    /// Something awaited did not happen in time.
    #[error("timed out waiting for {what}; the log of `pgcdc run` ends with:\n{log}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The end of the `pgcdc run` log.
        log: String,
    },
    /// A line of the events file is not a Debezium event of the demo table.
    #[error("{path}:{line}: {reason}")]
    Event {
        /// The events file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A background task panicked.
    #[error("quickstart task failed: {0}")]
    Task(String),
}

impl QuickstartError {
    pub(super) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        QuickstartError::Cluster(EmbeddedError::io(action, path, source))
    }

    pub(super) fn pg(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Self {
        move |source| QuickstartError::Cluster(EmbeddedError::pg(context, source))
    }
}
