//! Errors of the replication connection, split into *transient* (reconnect and
//! retry) and *definite* (stop and tell the user) by [`ReplicationError::is_transient`].

use std::fmt;
use std::io;
use std::time::Duration;

use super::config::ConfigError;

/// Anything that can go wrong on a replication connection.
///
/// [`is_transient`](Self::is_transient) drives the retry decision: a transient
/// error (network trouble, a server restarting, a slot still held by a previous
/// connection) is worth a reconnect; a definite one (bad password, missing slot
/// or database, TLS required but unavailable, invalid settings, a protocol
/// violation) will fail the same way again and must be reported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicationError {
    /// The settings are invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The TCP connection could not be opened.
    #[error("could not connect to {addr}: {source}; check that the server is running and accepts TCP connections there")]
    Connect {
        /// `host:port` as configured.
        addr: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Connecting, TLS and authentication took longer than `connect_timeout`.
    #[error("timed out after {timeout:?} connecting to {addr}")]
    ConnectTimeout {
        /// `host:port` as configured.
        addr: String,
        /// The configured limit.
        timeout: Duration,
    },
    /// Reading or writing the socket failed.
    #[error("I/O error on the replication connection: {0}")]
    Io(#[from] io::Error),
    /// Nothing arrived on the replication stream within the receive timeout.
    #[error("no data or keepalive from the server for {0:?}; the connection is presumed dead")]
    ReceiveTimeout(Duration),
    /// The server closed the connection unexpectedly.
    #[error("the server closed the connection unexpectedly")]
    Closed,
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The client could not authenticate (the server's own refusals arrive as [`ReplicationError::Server`]).
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The server answered with an `ErrorResponse`.
    #[error(transparent)]
    Server(#[from] Box<DbError>),
    /// The server sent something the protocol does not allow here.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// An argument (slot name, query, ...) cannot be sent, e.g. it holds a NUL byte.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The replication stream has ended (server CopyDone, or an earlier error);
    /// call `finish` or reconnect.
    #[error("the replication stream has ended; reconnect to continue streaming")]
    StreamEnded,
    /// The server lacks a feature that was asked for.
    #[error(transparent)]
    Unsupported(#[from] super::command::UnsupportedOption),
    /// `target_session_attrs=read-write`, but the server only reads: a hot
    /// standby (perhaps about to be promoted) or `default_transaction_read_only`.
    #[error("{addr} is {why}, but target_session_attrs=read-write asks for a server that accepts writes (the primary)")]
    ReadOnlyServer {
        /// The host as configured.
        addr: String,
        /// `a hot standby (in recovery)` or `read-only (default_transaction_read_only = on)`.
        why: &'static str,
    },
    /// Several hosts were configured and none could be used.
    #[error("no usable server among {} hosts: {}", .0.len(), HostFailures(.0))]
    NoHostUsable(Vec<HostFailure>),
}

/// Why one of several hosts was not used.
#[derive(Debug)]
pub struct HostFailure {
    /// The host as configured (`name port N`).
    pub addr: String,
    /// What happened.
    pub error: ReplicationError,
}

struct HostFailures<'a>(&'a [HostFailure]);

impl fmt::Display for HostFailures<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, h) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "[{}] {}: {}", i + 1, h.addr, h.error)?;
        }
        Ok(())
    }
}

impl ReplicationError {
    /// Whether reconnecting may help. See the type's documentation.
    pub fn is_transient(&self) -> bool {
        match self {
            ReplicationError::Connect { .. }
            | ReplicationError::ConnectTimeout { .. }
            | ReplicationError::Io(_)
            | ReplicationError::Closed
            | ReplicationError::ReceiveTimeout(_)
            | ReplicationError::StreamEnded
            // A standby may be promoted: try again.
            | ReplicationError::ReadOnlyServer { .. } => true,
            // One host that may come back (or be promoted) is reason enough.
            ReplicationError::NoHostUsable(failures) => {
                failures.iter().any(|h| h.error.is_transient())
            }
            ReplicationError::Tls(e) => e.is_transient(),
            ReplicationError::Server(e) => e.is_transient(),
            ReplicationError::Config(_)
            | ReplicationError::Auth(_)
            | ReplicationError::Protocol(_)
            | ReplicationError::InvalidArgument(_)
            | ReplicationError::Unsupported(_) => false,
        }
    }

    /// The server's error, when the server reported one.
    pub fn as_db_error(&self) -> Option<&DbError> {
        match self {
            ReplicationError::Server(e) => Some(e),
            _ => None,
        }
    }

    /// The SQLSTATE code, when the server reported an error.
    pub fn code(&self) -> Option<&str> {
        self.as_db_error().map(DbError::code)
    }
}

impl From<DbError> for ReplicationError {
    fn from(e: DbError) -> Self {
        ReplicationError::Server(Box::new(e))
    }
}

/// Problems setting up TLS.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// TLS is required but the server answered the SSLRequest with `N`.
    #[error("the server does not support SSL, but sslmode={sslmode} requires it; set sslmode=disable or prefer, or enable ssl on the server")]
    NotSupportedByServer {
        /// The configured mode.
        sslmode: &'static str,
    },
    /// The server answered the SSLRequest with something other than `S` or `N`.
    #[error("the server answered the SSL request with byte {0:#04x} instead of 'S' or 'N'; is this a PostgreSQL server?")]
    UnexpectedResponse(u8),
    /// Verification was asked for but no root certificate is configured.
    #[error("sslmode={sslmode} needs trusted root certificates: set sslrootcert=/path/to/ca.pem (or sslrootcert=system), or use sslmode=require to encrypt without verifying")]
    NoRootCertificate {
        /// The configured mode.
        sslmode: &'static str,
    },
    /// The root certificate file could not be read.
    #[error("could not read sslrootcert {path}: {source}")]
    ReadRootCert {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The root certificate file holds no usable certificate.
    #[error("sslrootcert {path} holds no usable PEM certificate: {reason}")]
    InvalidRootCert {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A host list mixes Unix-domain sockets (never TLS) with TCP hosts under
    /// an `sslmode` that requires TLS of every host.
    #[error("sslmode={sslmode} requires TLS, which PostgreSQL never offers on a Unix-domain socket, and the host list mixes socket directories with TCP hosts; list only one kind, or use sslmode=prefer")]
    SocketsBesideTcpHosts {
        /// The configured mode.
        sslmode: &'static str,
    },
    /// The host is not a valid TLS server name.
    #[error("host {0:?} cannot be used as a TLS server name")]
    InvalidServerName(String),
    /// The TLS handshake failed because of the server's certificate or TLS setup.
    #[error("TLS handshake with {host} failed: {source}; {advice}")]
    Handshake {
        /// The host name used for verification.
        host: String,
        /// What rustls reported.
        #[source]
        source: rustls::Error,
        /// What to do about it.
        advice: &'static str,
    },
}

impl TlsError {
    /// TLS errors are definite: the same server will answer the same way.
    pub fn is_transient(&self) -> bool {
        false
    }

    pub(crate) fn handshake(host: &str, source: rustls::Error) -> Self {
        let advice = match &source {
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)
            | rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            ) => "the certificate is not valid for this host name; connect with the name in the certificate, or use sslmode=verify-ca",
            rustls::Error::InvalidCertificate(_) => {
                "the server certificate was rejected; check that sslrootcert holds the CA that signed it"
            }
            _ => "check the server's TLS settings",
        };
        TlsError::Handshake {
            host: host.to_owned(),
            source,
            advice,
        }
    }
}

/// Authentication problems on the client side.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The server asks for a password but none is configured.
    #[error("the server requires {method} authentication but no password is configured; set password=... (or in the URL)")]
    PasswordRequired {
        /// The method the server asked for.
        method: &'static str,
    },
    /// The server asked for a method pgcdc does not implement.
    #[error("the server requested {0} authentication, which pgcdc does not support; use scram-sha-256, md5, password or trust in pg_hba.conf")]
    UnsupportedMethod(&'static str),
    /// None of the offered SASL mechanisms is supported.
    #[error(
        "the server offered SASL mechanisms {0:?}, none of which pgcdc supports (SCRAM-SHA-256)"
    )]
    NoSupportedMechanism(Vec<String>),
    /// The SCRAM exchange failed (bad server messages or a server signature mismatch).
    #[error("SCRAM-SHA-256 authentication failed: {0}")]
    Scram(#[source] io::Error),
    /// `channel_binding=require`, but it could not be used.
    #[error("channel_binding=require, but {0}; use sslmode=require or stricter with scram-sha-256 in pg_hba.conf, or set channel_binding=prefer")]
    ChannelBindingRequired(&'static str),
    /// The server reported success before finishing the SCRAM exchange, so it never
    /// proved it knows the password.
    #[error("the server ended SCRAM authentication without proving its identity; refusing the connection")]
    IncompleteScram,
}

/// The server sent bytes that break the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A message's length field is impossible.
    #[error("invalid message length {len} for message type {tag:?}")]
    InvalidLength {
        /// The message type byte.
        tag: char,
        /// The length field.
        len: u32,
    },
    /// A message body ended early or has trailing bytes.
    #[error("malformed {message} message: {reason}")]
    Malformed {
        /// Which message.
        message: &'static str,
        /// What was wrong.
        reason: &'static str,
    },
    /// A message that is not allowed at this point.
    #[error("unexpected message type {tag:?} while {state}")]
    Unexpected {
        /// The message type byte.
        tag: char,
        /// What the client was doing.
        state: &'static str,
    },
    /// A reply to a replication command did not have the expected shape.
    #[error("unexpected reply to {command}: {reason}")]
    BadReply {
        /// Which command.
        command: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// The server's session settings differ from those the startup asked for.
    #[error("the server reports {name}={value:?} but pgcdc needs {expected}; values would be decoded wrongly")]
    SessionSetting {
        /// The setting.
        name: &'static str,
        /// What the server reported.
        value: String,
        /// What is needed.
        expected: &'static str,
    },
}

/// An `ErrorResponse` (or `NoticeResponse`) from the server.
#[derive(Clone, PartialEq, Eq)]
pub struct DbError {
    pub(crate) severity: String,
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) detail: Option<String>,
    pub(crate) hint: Option<String>,
    pub(crate) where_: Option<String>,
    pub(crate) routine: Option<String>,
}

impl DbError {
    /// The non-localized severity (`ERROR`, `FATAL`, `PANIC`, `WARNING`, ...).
    pub fn severity(&self) -> &str {
        &self.severity
    }

    /// The five-character SQLSTATE code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The primary message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The optional detail message.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// The server's optional hint.
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The context (`WHERE` field), if any.
    pub fn where_(&self) -> Option<&str> {
        self.where_.as_deref()
    }

    /// The server source routine that raised the error, if reported.
    pub fn routine(&self) -> Option<&str> {
        self.routine.as_deref()
    }

    /// Whether retrying on a new connection may succeed, by SQLSTATE under
    /// the one fault policy ([`cdc_core::fault`]): connection exceptions
    /// (class 08), a server shutting down, crashed or starting (57P01-57P03),
    /// insufficient resources (class 53), an object in use such as a slot
    /// still held by a dying walsender (55006), serialization failures and
    /// deadlocks (40001, 40P01) and OS-level system errors (58000, 58030).
    /// Everything else (authentication 28xxx, a missing database 3D000 or
    /// slot 42704, a duplicate slot 42710, wrong wal_level 55000, missing
    /// privileges 42501, a cancelled statement 57014, a dropped database
    /// 57P04, ...) is definite.
    pub fn is_transient(&self) -> bool {
        cdc_core::classify_sqlstate(&self.code).is_transient() || self.is_slot_being_synced()
    }

    /// `cannot use replication slot ... for logical decoding`, DETAIL `This
    /// replication slot is being synchronized from the primary server`: a
    /// standby's copy of a failover slot (PostgreSQL 17+), usable once the
    /// standby is promoted, so worth a retry (SQLSTATE 55000 alone is not).
    pub fn is_slot_being_synced(&self) -> bool {
        self.code == "55000"
            && self
                .detail
                .as_deref()
                .is_some_and(|d| d.contains("being synchronized"))
    }

    /// pgcdc's advice for well-known codes, if any.
    pub fn advice(&self) -> Option<&'static str> {
        Some(match self.code.as_str() {
            "28P01" => "check the user name and password",
            "28000" if self.message.contains("pg_hba.conf") => "the server's pg_hba.conf does not allow this connection; add a line for this user, database and address (logical replication matches the database name, not the `replication` keyword)",
            "3D000" => "check dbname",
            "42704" => "the object does not exist; check the slot and publication names",
            "42710" => "the object already exists; use another slot name or drop the old slot",
            "42501" => "the user needs the REPLICATION attribute (ALTER ROLE ... REPLICATION)",
            "55000" if crate::checkpoint::is_invalidated_refusal(&self.code, &self.message, self.detail.as_deref()) => "the server invalidated the replication slot: its changes cannot be streamed any more; see source.on_slot_lost",
            "55000" => "check the server's replication settings (wal_level=logical, max_replication_slots, max_wal_senders)",
            "55006" => "another connection is using the slot; retrying once it is released",
            "57P01" | "57P02" | "57P03" => "the server is shutting down or starting; reconnecting later",
            _ => return None,
        })
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, "; DETAIL: {detail}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "; HINT: {hint}")?;
        }
        if let Some(advice) = self.advice() {
            write!(f, " ({advice})")?;
        }
        Ok(())
    }
}

impl fmt::Debug for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbError")
            .field("severity", &self.severity)
            .field("code", &self.code)
            .field("message", &self.message)
            .field("detail", &self.detail)
            .field("hint", &self.hint)
            .field("where", &self.where_)
            .field("routine", &self.routine)
            .finish()
    }
}

impl std::error::Error for DbError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(code: &str) -> DbError {
        DbError {
            severity: "FATAL".into(),
            code: code.into(),
            message: "m".into(),
            detail: None,
            hint: None,
            where_: None,
            routine: None,
        }
    }

    #[test]
    fn sqlstate_classification() {
        for code in [
            "57P01", "57P02", "57P03", "08006", "08001", "53300", "55006", "40P01", "58030",
        ] {
            assert!(db(code).is_transient(), "{code} should be transient");
            assert!(ReplicationError::from(db(code)).is_transient());
        }
        for code in [
            "28P01", "28000", "3D000", "42704", "42710", "42501", "55000", "XX000", "0A000",
            "42601", "57014", "57P04",
        ] {
            assert!(!db(code).is_transient(), "{code} should be definite");
            assert!(!ReplicationError::from(db(code)).is_transient());
        }
    }

    #[test]
    fn failover_errors_are_transient() {
        let mut synced = db("55000");
        synced.detail =
            Some("This replication slot is being synchronized from the primary server.".into());
        assert!(synced.is_transient());
        let standby = ReplicationError::ReadOnlyServer {
            addr: "s port 2".into(),
            why: "a hot standby (in recovery)",
        };
        assert!(standby.is_transient());
        let refused = || ReplicationError::Connect {
            addr: "p port 1".into(),
            source: io::Error::from(io::ErrorKind::ConnectionRefused),
        };
        let all = ReplicationError::NoHostUsable(vec![
            HostFailure {
                addr: "p port 1".into(),
                error: refused(),
            },
            HostFailure {
                addr: "s port 2".into(),
                error: standby,
            },
        ]);
        assert!(all.is_transient());
        let text = all.to_string();
        assert!(text.contains("[1] p port 1: could not connect"), "{text}");
        assert!(
            text.contains("[2] s port 2: s port 2 is a hot standby"),
            "{text}"
        );
        let auth = ReplicationError::NoHostUsable(vec![HostFailure {
            addr: "p port 1".into(),
            error: ReplicationError::from(db("28P01")),
        }]);
        assert!(!auth.is_transient());
    }

    #[test]
    fn error_kinds_classification() {
        assert!(
            ReplicationError::Io(io::Error::from(io::ErrorKind::ConnectionReset)).is_transient()
        );
        assert!(ReplicationError::Closed.is_transient());
        assert!(ReplicationError::Connect {
            addr: "h:1".into(),
            source: io::Error::from(io::ErrorKind::ConnectionRefused)
        }
        .is_transient());
        assert!(!ReplicationError::Config(ConfigError::MissingUser).is_transient());
        assert!(
            !ReplicationError::Tls(TlsError::NotSupportedByServer { sslmode: "require" })
                .is_transient()
        );
        assert!(!ReplicationError::Auth(AuthError::IncompleteScram).is_transient());
        assert!(!ReplicationError::Protocol(ProtocolError::Unexpected {
            tag: 'x',
            state: "s"
        })
        .is_transient());
    }

    #[test]
    fn messages_say_what_to_do() {
        let tls = TlsError::NotSupportedByServer { sslmode: "require" }.to_string();
        assert!(tls.contains("does not support SSL"), "{tls}");
        assert!(tls.contains("sslmode=disable or prefer"), "{tls}");
        let mut e = db("28P01");
        e.hint = Some("h".into());
        let s = e.to_string();
        assert!(s.starts_with("FATAL 28P01: m; HINT: h"), "{s}");
        assert!(s.contains("password"), "{s}");
        let mut cb = db("28000");
        cb.message = "SCRAM channel binding check failed".into();
        assert_eq!(cb.advice(), None, "28000 is not always pg_hba.conf");
        let mut hba = db("28000");
        hba.message = "no pg_hba.conf entry for host".into();
        assert!(hba.advice().is_some());
        let name = TlsError::handshake(
            "h",
            rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName),
        )
        .to_string();
        assert!(name.contains("verify-ca"), "{name}");
    }
}
