//! Mapping driver and pool errors into [`CheckpointError`].

use checkpoint_api::CheckpointError;

/// Whether an error is transient under the one fault policy
/// ([`cdc_core::fault`]): the server's SQLSTATE decides when it sent one
/// (connection trouble, shutdown, overload, serialization failure, deadlock,
/// a lock timeout; not a cancelled statement). Without one the connection
/// counts as lost when the driver says it is closed, an IO error or a
/// timeout broke it (the same test as `cdc-runtime`'s `pg_error::fault`),
/// except for a TLS setup the server will refuse again; anything else (a
/// value that does not convert) is permanent.
fn is_transient(e: &tokio_postgres::Error) -> bool {
    use cdc_core::fault::{classify, Connection};
    use std::error::Error as _;
    if let Some(db) = e.as_db_error() {
        return classify(Some(db.code().code()), Connection::Usable).is_transient();
    }
    if is_tls_setup_failure(e) {
        return false;
    }
    let io = e.source().is_some_and(|s| s.is::<std::io::Error>());
    let lost = e.is_closed() || io || e.to_string() == "timeout waiting for server";
    let connection = if lost {
        Connection::Lost
    } else {
        Connection::Usable
    };
    classify(None, connection).is_transient()
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
    if is_transient(&e) {
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
