//! [`HarnessError`]: why a test server could not be provided.

use std::io;
use std::path::PathBuf;

/// Why the harness could not start, reach or use a PostgreSQL server.
///
/// Every variant's message says what was attempted; [`HarnessError::NoServer`]
/// also says how to make a server available.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// None of the three ways to get a server is available.
    #[error(
        "no PostgreSQL server available for tests: {reason}. Fix one of: install the PostgreSQL \
         15+ server binaries (e.g. `apt-get install postgresql`; initdb/pg_ctl/postgres are looked \
         up on PATH and under /usr/lib/postgresql/*/bin), start Docker, or set \
         PGCDC_TEST_DATABASE_URL to a server with wal_level=logical"
    )]
    NoServer {
        /// What was tried and why it failed.
        reason: String,
    },
    /// The shared server failed to start earlier in this process (the message is
    /// that first failure; it is not retried).
    #[error("{0}")]
    SharedUnavailable(String),
    /// A server program (initdb, pg_ctl, docker ...) could not be run.
    #[error("could not run `{program}`: {source}")]
    Spawn {
        /// The program that failed to start.
        program: String,
        /// The operating-system error.
        #[source]
        source: io::Error,
    },
    /// A server program ran and failed.
    #[error("`{command}` failed ({status}): {output}")]
    CommandFailed {
        /// The command line, for the reader.
        command: String,
        /// Its exit status.
        status: String,
        /// Its stderr/stdout, and the server log where there is one.
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
    /// The server is reachable but unsuitable (version, settings).
    #[error("unsuitable PostgreSQL server: {0}")]
    Unsuitable(String),
    /// A SQL statement or connection failed.
    #[error("{context}: {source}")]
    Postgres {
        /// What the harness was doing.
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
    /// The `pgcdc` binary is not built next to the test executable.
    #[error(
        "the pgcdc binary is not built ({path} is missing): run `cargo build -p cdc-runtime --bin \
         pgcdc` (with the same profile as the tests), or `cargo test --workspace`, which builds it"
    )]
    NotBuilt {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// Something the harness waited for did not happen in time.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// A throwaway cluster ([`cdc_runtime::embedded`]) could not be started or driven.
    #[error(transparent)]
    Cluster(cdc_runtime::embedded::EmbeddedError),
    /// A background task of the harness panicked or was cancelled.
    #[error("harness task failed: {0}")]
    Task(String),
}

impl HarnessError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        HarnessError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn pg(context: impl Into<String>, source: tokio_postgres::Error) -> Self {
        HarnessError::Postgres {
            context: context.into(),
            source,
        }
    }
}

impl From<cdc_runtime::embedded::EmbeddedError> for HarnessError {
    /// Missing server programs stay [`HarnessError::NoServer`], whose message
    /// lists every way to get a server; everything else is
    /// [`HarnessError::Cluster`].
    fn from(e: cdc_runtime::embedded::EmbeddedError) -> Self {
        match e {
            cdc_runtime::embedded::EmbeddedError::NoServer { reason } => {
                HarnessError::NoServer { reason }
            }
            other => HarnessError::Cluster(other),
        }
    }
}

/// Result alias for the harness.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;
