//! Server errors as text that says what to fix, and as a [`Fault`].

use cdc_core::fault::Fault;

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

/// `e` under the one fault policy: [`checkpoint_pg::pg_fault`], the one
/// mapping of driver errors onto [`cdc_core::fault`].
pub(crate) fn fault(e: &tokio_postgres::Error) -> Fault {
    checkpoint_pg::pg_fault(e)
}
