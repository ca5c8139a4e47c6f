//! The one fault policy: is a PostgreSQL error worth retrying?
//!
//! Every component that talks to a PostgreSQL server (the replication
//! connection, the snapshot readers, the sinks, the checkpoint store) maps its
//! own error type onto [`classify`] and acts on the [`Fault`]:
//!
//! * [`Fault::Transient`]: the same work may succeed on a new connection or a
//!   new transaction a moment later. The caller backs off, reconnects and
//!   retries (from a position that loses and duplicates nothing).
//! * [`Fault::Permanent`] (Materialize calls it *definite*): the same work
//!   will fail the same way again. The caller stops and tells the user what
//!   failed and where.
//!
//! Pure: the caller passes the SQLSTATE as text and whether the connection
//! is still usable; no driver types, no IO.
//!
//! # The table
//!
//! A SQLSTATE decides when there is one; without one, a lost connection
//! (closed, reset, an IO error on the socket) is transient and anything else
//! (a client-side conversion error, a protocol violation) is permanent.
//!
//! | SQLSTATE | Name | Fault | Why |
//! |---|---|---|---|
//! | class `08` except `08P01` | connection exception | transient | the connection broke or could not be made; a new one may work |
//! | `08P01` | protocol_violation | permanent | a client bug; a new connection sends the same bytes |
//! | `40001` | serialization_failure | transient | the server asks for the transaction to be retried (also raised for recovery conflicts on a standby) |
//! | `40P01` | deadlock_detected | transient | one of the deadlocked transactions is chosen to fail; a retry usually passes |
//! | rest of class `40` | transaction rollback | permanent | `40002` is a deferred constraint violation: the data is wrong |
//! | `53xxx` | insufficient resources (disk full, out of memory, too many connections, configuration limit) | transient | load and space change; bounded retries give an operator time, then the job stops |
//! | `55006` | object_in_use | transient | a replication slot still held by a dying walsender is released within seconds |
//! | `55P03` | lock_not_available | transient | `lock_timeout` or `NOWAIT` met a lock someone else holds; it will be released |
//! | `57P01` | admin_shutdown | transient | `pg_terminate_backend` or a fast shutdown: the session was ended, not the work refused |
//! | `57P02` | crash_shutdown | transient | the server restarts after another backend crashed |
//! | `57P03` | cannot_connect_now | transient | the server is starting up or in recovery |
//! | `57P05` | idle_session_timeout | transient | the session was ended for being idle; a new one is not idle |
//! | `25P03` | idle_in_transaction_session_timeout | transient | same, for a transaction left open (the checkpoint-committing sink holds one between checkpoints); the replay re-opens it |
//! | `57014` | query_canceled | **permanent** | see below |
//! | `57P04` | database_dropped | permanent | the database is gone |
//! | `58000`, `58030` | system_error, io_error | transient | an OS-level failure on the server (often a full or failing volume being dealt with) |
//! | `58P01`, `58P02` | undefined_file, duplicate_file | permanent | a missing library or a stray file needs an operator; retrying cannot create it |
//! | class `28`, `3D`, `42` | authorization, invalid database, syntax or access rule | permanent | credentials, names, privileges and schemas do not fix themselves |
//! | class `22`, `23` | data exception, integrity constraint violation | permanent | the data does not fit the target; it fails identically on replay |
//! | class `XX` | internal error, data or index corrupted | permanent | needs an operator |
//! | anything else | | permanent | unknown failures are reported, not retried blindly |
//!
//! ## 57014 query_canceled
//!
//! PostgreSQL raises it for two reasons: `statement_timeout` expired, or
//! someone called `pg_cancel_backend`. A statement timeout is a limit the
//! operator configured, and a retry replays the same batch with the same
//! statements, so it would most likely time out again and turn one clear
//! error into a long retry loop. `pg_cancel_backend` is an operator's
//! deliberate request to stop *this work*; the tool for "drop the session,
//! the client will reconnect" is `pg_terminate_backend` (57P01, transient).
//! Both readings say: stop and report. (Until now the replication connection
//! retried it and the checkpoint store did not.)
//!
//! ## Connection state
//!
//! An error without a SQLSTATE on a connection that is gone (the driver says
//! "closed", or the socket failed) is transient: the server may have been
//! killed between two messages. A FATAL error that closes the connection
//! still carries its SQLSTATE, and that decides: `28P01` (bad password) is
//! permanent although the connection is gone; `57P01` is transient.

/// What a caller should do about an error. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Back off, reconnect and retry.
    Transient,
    /// Stop and report.
    Permanent,
}

impl Fault {
    /// Whether the fault is [`Fault::Transient`].
    pub fn is_transient(self) -> bool {
        self == Fault::Transient
    }
}

/// The state of the connection an error arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Connection {
    /// The connection still works (the server rejected one statement).
    Usable,
    /// The connection is closed or broken (closed by the server, reset, an
    /// IO error on the socket, a timeout).
    Lost,
}

/// Classifies an error by its SQLSTATE, if the server sent one, and the
/// state of the connection. The SQLSTATE decides when there is one.
pub fn classify(sqlstate: Option<&str>, connection: Connection) -> Fault {
    match (sqlstate, connection) {
        (Some(code), _) => classify_sqlstate(code),
        (None, Connection::Lost) => Fault::Transient,
        (None, Connection::Usable) => Fault::Permanent,
    }
}

/// Classifies a five-character SQLSTATE code (see the table in the
/// [module docs](self)). Anything not listed as transient is permanent,
/// including malformed codes.
pub fn classify_sqlstate(code: &str) -> Fault {
    let transient = match code {
        "08P01" => false,
        "40001" | "40P01" => true,
        "55006" | "55P03" => true,
        "57P01" | "57P02" | "57P03" | "57P05" => true,
        "25P03" => true,
        "58000" | "58030" => true,
        _ => code.len() == 5 && (code.starts_with("08") || code.starts_with("53")),
    };
    if transient {
        Fault::Transient
    } else {
        Fault::Permanent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_codes() {
        for code in [
            "08000", "08003", "08006", "08001", "08004", "40001", "40P01", "53000", "53100",
            "53200", "53300", "53400", "55006", "55P03", "57P01", "57P02", "57P03", "57P05",
            "25P03", "58000", "58030",
        ] {
            assert_eq!(classify_sqlstate(code), Fault::Transient, "{code}");
            assert!(classify(Some(code), Connection::Usable).is_transient());
        }
    }

    #[test]
    fn permanent_codes() {
        for code in [
            "57014", "57P04", "57000", "08P01", "40000", "40002", "40003", "58P01", "58P02",
            "28000", "28P01", "3D000", "42P01", "42501", "42703", "42601", "22001", "22P02",
            "23505", "23502", "XX000", "XX001", "XX002", "0A000", "55000", "25P02", "25P04",
            "HV000", "P0001",
        ] {
            assert_eq!(classify_sqlstate(code), Fault::Permanent, "{code}");
        }
    }

    #[test]
    fn malformed_codes_are_permanent() {
        for code in ["", "08", "5330", "533000", "53", "4"] {
            assert_eq!(classify_sqlstate(code), Fault::Permanent, "{code:?}");
        }
    }

    #[test]
    fn the_sqlstate_decides_over_the_connection_state() {
        // A FATAL authentication failure closes the connection, yet retrying
        // cannot help.
        assert_eq!(classify(Some("28P01"), Connection::Lost), Fault::Permanent);
        // pg_terminate_backend: FATAL 57P01, then the server closes.
        assert_eq!(classify(Some("57P01"), Connection::Lost), Fault::Transient);
    }

    #[test]
    fn without_a_sqlstate_the_connection_state_decides() {
        assert_eq!(classify(None, Connection::Lost), Fault::Transient);
        assert_eq!(classify(None, Connection::Usable), Fault::Permanent);
    }
}
