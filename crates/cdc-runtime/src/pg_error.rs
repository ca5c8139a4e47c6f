//! Server errors as text that says what to fix, and as a [`Fault`].

use cdc_core::fault::{self, Connection, Fault};

/// tokio-postgres' `Display` of a server error is just "db error": add the
/// server's message, detail and hint, which say what to fix.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{}: {} ({})", db.severity(), db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                s.push_str("; ");
                s.push_str(detail);
            }
            if let Some(hint) = db.hint() {
                s.push_str("; hint: ");
                s.push_str(hint);
            }
            s
        }
        None => e.to_string(),
    }
}

/// `e` under the one fault policy ([`cdc_core::fault`]): the server's
/// SQLSTATE decides when it sent one. Without one, the connection counts as
/// lost when the driver says it is closed, an IO error or a timeout broke
/// it; a TLS setup that the same server will refuse again and client-side
/// errors (a value that does not convert) are permanent.
pub(crate) fn fault(e: &tokio_postgres::Error) -> Fault {
    match e.as_db_error() {
        Some(db) => fault::classify(Some(db.code().code()), Connection::Usable),
        None if is_tls_setup_failure(e) => Fault::Permanent,
        None => fault::classify(None, connection(e)),
    }
}

/// Whether the connection `e` arrived on is gone. (tokio-postgres does not
/// expose its error kinds: an IO error is its source; a connect timeout is
/// displayed as "timeout waiting for server".)
pub(crate) fn connection(e: &tokio_postgres::Error) -> Connection {
    use std::error::Error as _;
    let io = e.source().is_some_and(|s| s.is::<std::io::Error>());
    if e.is_closed() || io || e.to_string() == "timeout waiting for server" {
        Connection::Lost
    } else {
        Connection::Usable
    }
}

/// A TLS failure that retrying cannot fix. tokio-postgres does not expose
/// its error kinds; its TLS errors are the ones displayed as "error
/// performing TLS handshake" (the same test as the checkpoint store's).
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
