//! [`Error`]: why a throwaway server could not be provided, started or used.

use std::io;
use std::path::PathBuf;

/// Why a throwaway PostgreSQL server could not be found, started, reached or
/// driven.
///
/// Every variant's message says what was attempted; [`Error::NoServer`] also
/// says how to make a server available.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable `initdb`/`pg_ctl`/`postgres` (and, for tests, no other way to
    /// get a server).
    #[error(
        "no usable PostgreSQL server: {reason}. Install the PostgreSQL 15+ server binaries, e.g. \
         `apt-get install postgresql` (initdb, pg_ctl and postgres are looked up on PATH and \
         under /usr/lib/postgresql/*/bin; PGCDC_PG_BINDIR names a directory)"
    )]
    NoServer {
        /// What was looked for and why it did not fit.
        reason: String,
    },
    /// The shared test server failed to start earlier in this process (the
    /// message is that first failure; it is not retried).
    #[error("{0}")]
    SharedUnavailable(String),
    /// A program (initdb, pg_ctl, sh, docker ...) could not be started.
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
    /// A file or directory could not be written or read.
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
    /// The options, the machine or the server cannot give a working cluster
    /// (bad data file name, no free port, too old a server, wrong settings).
    #[error("unsuitable PostgreSQL server: {0}")]
    Unsuitable(String),
    /// A SQL statement or connection failed.
    #[error("{context}: {source}")]
    Postgres {
        /// What was being done.
        context: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Docker was reachable but the container could not be started.
    #[error("docker: {0}")]
    Docker(String),
    /// `PGCDC_TEST_DATABASE_URL` or another setting could not be parsed.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The operation needs something the chosen backend cannot do.
    #[error("not supported by the {backend} backend: {what}")]
    Unsupported {
        /// The backend in use.
        backend: &'static str,
        /// The unsupported operation.
        what: &'static str,
    },
    /// A program the caller needs is not where it should be.
    #[error("{path} is missing: {hint}")]
    Missing {
        /// Where it was looked for.
        path: PathBuf,
        /// How to provide it.
        hint: &'static str,
    },
    /// Something awaited did not happen in time.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// A background task panicked or was cancelled.
    #[error("task failed: {0}")]
    Task(String),
}

impl Error {
    /// An [`Error::Io`].
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// An [`Error::Postgres`].
    pub fn pg(context: impl Into<String>, source: tokio_postgres::Error) -> Self {
        Error::Postgres {
            context: context.into(),
            source,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
