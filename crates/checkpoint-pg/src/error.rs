//! Mapping driver and pool errors into [`CheckpointError`].

use cdc_core::fault::{classify, Connection, Fault};
use checkpoint_api::CheckpointError;

/// A driver error under the one fault policy ([`cdc_core::fault`]), for
/// every component that talks to PostgreSQL through tokio-postgres (this
/// store, and cdc-runtime's sinks and snapshot readers): the server's
/// SQLSTATE decides when it sent one. Without one, the connection counts as
/// lost when the driver says it is closed, an IO error or a timeout broke
/// it; a TLS setup the same server will refuse again and client-side errors
/// (a value that does not convert) are permanent.
pub fn pg_fault(e: &tokio_postgres::Error) -> Fault {
    match e.as_db_error() {
        Some(db) => classify(Some(db.code().code()), Connection::Usable),
        None if is_tls_setup_failure(e) => Fault::Permanent,
        None => classify(None, connection(e)),
    }
}

/// Whether the connection `e` arrived on is gone. (tokio-postgres does not
/// expose its error kinds: an IO error is its source; a connect timeout is
/// displayed as "timeout waiting for server".)
fn connection(e: &tokio_postgres::Error) -> Connection {
    use std::error::Error as _;
    let io = e.source().is_some_and(|s| s.is::<std::io::Error>());
    if e.is_closed() || io || e.to_string() == "timeout waiting for server" {
        Connection::Lost
    } else {
        Connection::Usable
    }
}

/// A TLS failure that retrying cannot fix. tokio-postgres does not expose its error kinds;
/// its TLS errors are the ones displayed as "error performing TLS handshake".
fn is_tls_setup_failure(e: &tokio_postgres::Error) -> bool {
    use std::error::Error as _;
    if !e.to_string().starts_with("error performing TLS handshake") {
        return false;
    }
    match e.source().and_then(|s| s.downcast_ref::<std::io::Error>()) {
        // rustls reports a refused certificate or protocol violation as InvalidData.
        Some(io) => io.kind() == std::io::ErrorKind::InvalidData,
        None => true,
    }
}

/// `e` while doing `what`, as a [`CheckpointError`].
pub(crate) fn pg(what: &str, e: tokio_postgres::Error) -> CheckpointError {
    if pg_fault(&e).is_transient() {
        CheckpointError::unavailable(what.to_owned(), e)
    } else {
        CheckpointError::backend(what.to_owned(), e)
    }
}

/// `e` and its causes, `: `-separated (tokio-postgres shows only the kind of error itself).
fn with_causes(e: &tokio_postgres::Error) -> String {
    use std::error::Error as _;
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A pool error while getting a connection.
pub(crate) fn pool(e: deadpool_postgres::PoolError) -> CheckpointError {
    use deadpool_postgres::PoolError;
    match e {
        // The driver's message says what went wrong (refused, TLS, authentication); it
        // never holds the password.
        PoolError::Backend(e) => pg(&format!("connecting: {}", with_causes(&e)), e),
        PoolError::Timeout(_) => CheckpointError::unavailable("connection pool timed out", e),
        PoolError::Closed => CheckpointError::unavailable("connection pool closed", e),
        other => CheckpointError::backend("connection pool", other),
    }
}

/// A definite failure with no underlying error.
pub(crate) fn definite(message: impl Into<String>) -> CheckpointError {
    CheckpointError::Backend {
        message: message.into(),
        source: None,
    }
}
