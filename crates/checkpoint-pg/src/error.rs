//! Mapping driver and pool errors into [`CheckpointError`].

use checkpoint_api::CheckpointError;
use tokio_postgres::error::SqlState;

/// Whether a server error is transient: connection trouble, shutdown, overload,
/// serialization failure or deadlock.
fn is_transient(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    let Some(db) = e.as_db_error() else {
        // No server error: IO, TLS or protocol trouble on the connection.
        return true;
    };
    let code = db.code();
    let class = code.code().get(..2).unwrap_or_default();
    matches!(class, "08" | "53" | "57") && code != &SqlState::QUERY_CANCELED
        || code == &SqlState::T_R_SERIALIZATION_FAILURE
        || code == &SqlState::T_R_DEADLOCK_DETECTED
        || code == &SqlState::LOCK_NOT_AVAILABLE
}

/// `e` while doing `what`, as a [`CheckpointError`].
pub(crate) fn pg(what: &str, e: tokio_postgres::Error) -> CheckpointError {
    if is_transient(&e) {
        CheckpointError::unavailable(what.to_owned(), e)
    } else {
        CheckpointError::backend(what.to_owned(), e)
    }
}

/// A pool error while getting a connection.
pub(crate) fn pool(e: deadpool_postgres::PoolError) -> CheckpointError {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Backend(e) => pg("connecting", e),
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
