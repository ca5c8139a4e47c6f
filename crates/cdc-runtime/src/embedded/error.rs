//! [`EmbeddedError`]: why a throwaway cluster could not be started or driven.

use std::io;
use std::path::PathBuf;

/// Why a throwaway cluster could not be started, stopped or configured.
///
/// Every variant's message says what was attempted; [`EmbeddedError::NoServer`]
/// also says how to install the server programs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbeddedError {
    /// No usable `initdb`/`pg_ctl`/`postgres`, or no user to run them as.
    #[error(
        "no usable PostgreSQL server programs: {reason}. Install the PostgreSQL 15+ server \
         binaries, e.g. `apt-get install postgresql` (initdb, pg_ctl and postgres are looked up \
         on PATH and under /usr/lib/postgresql/*/bin; PGCDC_PG_BINDIR names a directory)"
    )]
    NoServer {
        /// What was looked for and why it did not fit.
        reason: String,
    },
    /// A program (initdb, pg_ctl, sh ...) could not be started.
    #[error("could not run `{program}`: {source}")]
    Spawn {
        /// The program that failed to start.
        program: String,
        /// The operating-system error.
        #[source]
        source: io::Error,
    },
    /// A program ran and failed.
    #[error("`{command}` failed ({status}): {output}")]
    CommandFailed {
        /// The command, for the reader.
        command: String,
        /// Its exit status.
        status: String,
        /// Its stderr/stdout, and the end of the server log where there is one.
        output: String,
    },
    /// A file or directory of the cluster could not be written or read.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done ("create", "write", ...).
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The operating-system error.
        #[source]
        source: io::Error,
    },
    /// The cluster options or the machine cannot give a working cluster
    /// (bad data file name, no free port, no temp directory).
    #[error("cannot set up the cluster: {0}")]
    Unsuitable(String),
}

impl EmbeddedError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        EmbeddedError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// Result alias for [`embedded`](crate::embedded).
pub type Result<T, E = EmbeddedError> = std::result::Result<T, E>;
