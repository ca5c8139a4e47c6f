//! The logical replication connection: TCP/TLS, startup and authentication,
//! replication commands and the CopyBoth stream.
//!
//! This is the transport only. It yields raw CopyData payloads (`bytes::Bytes`)
//! and sends raw CopyData; parsing XLogData (`w`) / keepalives (`k`) and
//! encoding standby status updates (`r`) belongs to `cdc_core`'s sans-IO
//! replication framing.
//!
//! ```
//! use cdc_runtime::replication::{PgOutputOptions, ReplicationConfig, SslMode};
//!
//! let config: ReplicationConfig =
//!     "postgresql://cdc:s%3Acret@db.example:6432/app?sslmode=verify-full&sslrootcert=/etc/ca.pem"
//!         .parse()?;
//! assert_eq!(config.get_password(), Some("s:cret"));
//! assert_eq!(config.get_sslmode(), SslMode::VerifyFull);
//! // Safe to log: no password in Display or Debug.
//! assert!(!config.to_string().contains("s:cret"));
//! assert!(!format!("{config:?}").contains("s:cret"));
//!
//! // pgoutput options for a PostgreSQL 15 server: protocol 3, streaming on.
//! let options = PgOutputOptions::for_server(150_004, ["orders", "it's"]);
//! assert_eq!(
//!     options.option_list(),
//!     r#"(proto_version '3', publication_names '"orders","it''s"', messages 'true', streaming 'on')"#
//! );
//! # Ok::<(), cdc_runtime::replication::ConfigError>(())
//! ```
//!
//! # Session settings
//!
//! Every connection is opened with `replication=database`,
//! `client_encoding=UTF8` and `options=`[`SESSION_OPTIONS`]
//! (`DateStyle=ISO`, `IntervalStyle=postgres`, `extra_float_digits=3`,
//! `TimeZone=UTC`), so text values arrive in one known form. The connection
//! checks the reported `client_encoding`, `DateStyle` and `IntervalStyle` and
//! refuses a server that ignored them. The same `options` carry the
//! server side of TCP keepalives, set on the socket too (see
//! [`keepalive`](crate::keepalive)).
//!
//! # Authentication and TLS
//!
//! trust, cleartext `password`, `md5` and `SCRAM-SHA-256` are supported;
//! over TLS, `SCRAM-SHA-256-PLUS` with `tls-server-end-point` channel binding
//! is used when the server offers it (see [`ChannelBinding`]). TLS uses rustls with the `ring` provider and libpq's
//! `sslmode` meanings; see [`SslMode`].
//!
//! # Error handling
//!
//! Every failure is a [`ReplicationError`]. [`ReplicationError::is_transient`]
//! separates errors worth a reconnect (I/O, connection reset, the server
//! shutting down or starting, a slot still held by a dying walsender) from
//! definite ones that need the user (authentication failed, missing database,
//! slot or publication, TLS required but not offered, invalid settings).

mod auth;
pub(crate) mod channel_binding;
mod command;
mod config;
mod connection;
mod error;
mod stream;
pub(crate) mod tls;
mod transport;
mod wire;

pub use command::{
    max_proto_version, quote_identifier, quote_literal, PgOutputOptions, SnapshotAction,
    UnsupportedOption, FAILOVER_SLOTS_SINCE,
};
pub use config::{
    ChannelBinding, ConfigError, Endpoint, ReplicationConfig, RootCertSource, SslMode,
    TargetSessionAttrs, DEFAULT_APPLICATION_NAME, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT,
};
pub use connection::{
    CreatedSlot, IdentifySystem, ReplicationConnection, SimpleQueryResult, SESSION_OPTIONS,
};
pub use error::{AuthError, DbError, HostFailure, ProtocolError, ReplicationError, TlsError};
pub use stream::ReplicationStream;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    /// The pipeline moves connections, streams and their futures across tokio
    /// tasks and boxes errors: keep them `Send` (and errors `Sync + 'static`).
    #[allow(dead_code)]
    async fn futures_are_send(config: ReplicationConfig, mut stream: ReplicationStream) {
        assert_send(&ReplicationConnection::connect(&config));
        assert_send(&stream.next_message());
        assert_send(&stream.send(b""));
        assert_send(&stream.finish());
    }

    #[test]
    fn types_are_thread_safe() {
        assert_send_sync_static::<ReplicationError>();
        assert_send_sync_static::<ReplicationConfig>();
        assert_send_sync_static::<ReplicationConnection>();
        assert_send_sync_static::<ReplicationStream>();
    }
}
