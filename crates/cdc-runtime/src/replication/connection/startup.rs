//! Opening a [`ReplicationConnection`]: TCP (or a Unix-domain socket), the TLS negotiation
//! (SSLRequest), the startup message with the session settings,
//! authentication, and the checks on what the server reported, all within
//! the connect timeout.

use std::collections::HashMap;

use bytes::BytesMut;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::super::auth::authenticate;
use super::super::config::{ConfigError, ReplicationConfig, TargetSessionAttrs};
use super::super::error::{HostFailure, ProtocolError, ReplicationError, TlsError};
use super::super::tls;
use super::super::transport::{log_notice, Socket, Transport};
use super::super::wire::{self, parse_error_fields, parse_parameter_status};
use super::{ReplicationConnection, SESSION_OPTIONS};

impl ReplicationConnection {
    /// Connects, negotiates TLS as `sslmode` says, authenticates and waits for
    /// the server to be ready. The whole sequence is bounded by the connect
    /// timeout, per host when several are given (tried in order; see
    /// [`ReplicationConfig::get_target_session_attrs`]).
    pub async fn connect(config: &ReplicationConfig) -> Result<Self, ReplicationError> {
        Self::connect_as(config, true).await
    }

    /// An ordinary session (no `replication` startup parameter, so no
    /// walsender) with the host, credentials, TLS and session settings of
    /// `config`: the snapshot reads its chunks through one with
    /// [`copy_out`](Self::copy_out). Only SQL applies, no replication command.
    pub(crate) async fn connect_session(
        config: &ReplicationConfig,
    ) -> Result<Self, ReplicationError> {
        Self::connect_as(config, false).await
    }

    /// Tries the hosts in order, as libpq does, each within the connect
    /// timeout; the first that connects and suits `target_session_attrs`
    /// is used. With one host its error is returned as is, with several
    /// every host's error ([`ReplicationError::NoHostUsable`]).
    async fn connect_as(
        config: &ReplicationConfig,
        replication: bool,
    ) -> Result<Self, ReplicationError> {
        config.check_hosts()?;
        let endpoints = config.endpoints();
        if let [_] = endpoints {
            return Self::connect_one(config, replication).await;
        }
        let mut failures = Vec::new();
        for endpoint in endpoints {
            let one = config.for_endpoint(endpoint);
            match Self::connect_one(&one, replication).await {
                Ok(conn) => {
                    if !failures.is_empty() {
                        tracing::debug!(host = %endpoint, skipped = failures.len(), "connected to a later host of the list");
                    }
                    return Ok(conn);
                }
                Err(error) => {
                    tracing::debug!(host = %endpoint, %error, "host not usable; trying the next");
                    failures.push(HostFailure {
                        addr: endpoint.to_string(),
                        error,
                    });
                }
            }
        }
        Err(ReplicationError::NoHostUsable(failures))
    }

    /// Connects to the one host of `config`.
    async fn connect_one(
        config: &ReplicationConfig,
        replication: bool,
    ) -> Result<Self, ReplicationError> {
        let timeout = config.get_connect_timeout();
        let mut conn =
            match tokio::time::timeout(timeout, Self::connect_inner(config, replication)).await {
                Ok(result) => result?,
                Err(_) => {
                    return Err(ReplicationError::ConnectTimeout {
                        addr: display_addr(config),
                        timeout,
                    })
                }
            };
        if config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite {
            if let Some(why) = conn.read_only().await? {
                let _ = conn.close().await;
                return Err(ReplicationError::ReadOnlyServer {
                    addr: display_addr(config),
                    why,
                });
            }
        }
        Ok(conn)
    }

    /// Why the server does not accept writes, if it does not: from the
    /// `in_hot_standby` and `default_transaction_read_only` the server
    /// reports at startup (PostgreSQL 14+), else `SHOW transaction_read_only`
    /// (a replication command too), as libpq does.
    async fn read_only(&mut self) -> Result<Option<&'static str>, ReplicationError> {
        const STANDBY: &str = "a hot standby (in recovery)";
        const READ_ONLY: &str = "read-only (default_transaction_read_only = on)";
        if let Some(standby) = self.parameter("in_hot_standby") {
            return Ok(if standby == "on" {
                Some(STANDBY)
            } else if self.parameter("default_transaction_read_only") == Some("on") {
                Some(READ_ONLY)
            } else {
                None
            });
        }
        let read_only = self.show("transaction_read_only").await?;
        Ok((read_only == "on").then_some(STANDBY))
    }

    async fn connect_inner(
        config: &ReplicationConfig,
        replication: bool,
    ) -> Result<Self, ReplicationError> {
        let socket = match config.first_endpoint().unix_socket() {
            Some(path) => unix_socket(&path, config).await?,
            None => tcp_socket(config).await?,
        };
        let mut conn = ReplicationConnection {
            transport: Transport::new(socket),
            parameters: HashMap::new(),
            backend_pid: None,
            server_version_num: None,
        };
        conn.startup(config, replication).await?;
        tracing::debug!(
            config = %config,
            tls = conn.is_tls(),
            server_version = conn.parameter("server_version"),
            "replication connection ready"
        );
        Ok(conn)
    }

    async fn startup(
        &mut self,
        config: &ReplicationConfig,
        replication: bool,
    ) -> Result<(), ReplicationError> {
        let options = format!("{SESSION_OPTIONS} {}", crate::keepalive::SERVER_OPTIONS);
        let params = [
            ("user", config.get_user()),
            ("database", config.get_dbname()),
            ("replication", "database"),
            ("application_name", config.get_application_name()),
            ("client_encoding", "UTF8"),
            ("options", &options),
        ];
        for (key, value) in params {
            if value.contains('\0') {
                return Err(ConfigError::InvalidValue {
                    key: key.into(),
                    value: value.replace('\0', "\\0"),
                    reason: "must not contain a NUL byte",
                }
                .into());
            }
        }
        let params = params
            .into_iter()
            .filter(|(key, _)| replication || *key != "replication");
        frontend::startup_message(params, &mut self.transport.write)?;
        self.transport.send().await?;
        authenticate(&mut self.transport, config).await?;
        loop {
            let frame = self.transport.read_frame().await?;
            match frame.tag {
                b'S' => self.set_parameter(frame.body)?,
                b'K' => {
                    let mut r = wire::Reader::new(frame.body, "BackendKeyData");
                    self.backend_pid = Some(r.i32()?);
                    // The secret key (4 bytes, longer in protocol 3.2) is not needed.
                    let _ = r.rest();
                }
                b'Z' => break,
                b'E' => return Err(parse_error_fields(frame.body)?.into()),
                b'N' => log_notice(parse_error_fields(frame.body)),
                b'v' => {}
                tag => {
                    return Err(ProtocolError::Unexpected {
                        tag: char::from(tag),
                        state: "starting up",
                    }
                    .into())
                }
            }
        }
        self.check_session_settings()
    }

    /// Refuses servers (or poolers) that ignored the startup settings, since
    /// value text would then be in another form than the decoder expects.
    fn check_session_settings(&self) -> Result<(), ReplicationError> {
        type Check = (&'static str, &'static str, fn(&str) -> bool);
        let checks: [Check; 3] = [
            ("client_encoding", "UTF8", |v| {
                v.eq_ignore_ascii_case("UTF8")
            }),
            ("DateStyle", "ISO, ...", |v| v.starts_with("ISO")),
            ("IntervalStyle", "postgres", |v| v == "postgres"),
        ];
        for (name, expected, ok) in checks {
            if let Some(value) = self.parameters.get(name) {
                if !ok(value) {
                    return Err(ProtocolError::SessionSetting {
                        name,
                        value: value.clone(),
                        expected,
                    }
                    .into());
                }
            }
        }
        Ok(())
    }

    pub(super) fn set_parameter(&mut self, body: bytes::Bytes) -> Result<(), ReplicationError> {
        let (name, value) = parse_parameter_status(body)?;
        self.parameters.insert(name, value);
        Ok(())
    }
}

fn display_addr(config: &ReplicationConfig) -> String {
    config.first_endpoint().to_string()
}

/// Connects over TCP, with keepalives, and negotiates TLS as `sslmode` says.
async fn tcp_socket(config: &ReplicationConfig) -> Result<Socket, ReplicationError> {
    let tls_config = tls::client_config(config)?;
    let port = config.get_port();
    let tcp = match config.get_hostaddr() {
        Some(ip) => TcpStream::connect((ip, port)).await,
        None => TcpStream::connect((config.get_host(), port)).await,
    }
    .map_err(|source| ReplicationError::Connect {
        addr: display_addr(config),
        source,
    })?;
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("could not set TCP_NODELAY: {e}");
    }
    crate::keepalive::apply(&tcp);
    match tls_config {
        None => Ok(Socket::Plain(tcp)),
        Some(tls_config) => negotiate_tls(tcp, tls_config, config).await,
    }
}

/// Connects to the server's Unix-domain socket. `sslmode` does not apply:
/// PostgreSQL never offers TLS there, and libpq ignores `sslmode` for such
/// sockets, as pgcdc does (the socket file's permissions guard it). Nor do
/// keepalives: both ends are on one host.
#[cfg(unix)]
async fn unix_socket(
    path: &std::path::Path,
    config: &ReplicationConfig,
) -> Result<Socket, ReplicationError> {
    let stream = tokio::net::UnixStream::connect(path)
        .await
        .map_err(|source| ReplicationError::Connect {
            addr: display_addr(config),
            source,
        })?;
    Ok(Socket::Unix(stream))
}

#[cfg(not(unix))]
async fn unix_socket(
    _path: &std::path::Path,
    config: &ReplicationConfig,
) -> Result<Socket, ReplicationError> {
    Err(ReplicationError::Connect {
        addr: display_addr(config),
        source: std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "Unix-domain sockets are not available on this platform; use a TCP host",
        ),
    })
}

/// Sends SSLRequest and, when the server agrees, performs the TLS handshake.
async fn negotiate_tls(
    mut tcp: TcpStream,
    tls_config: std::sync::Arc<rustls::ClientConfig>,
    config: &ReplicationConfig,
) -> Result<Socket, ReplicationError> {
    let mut request = BytesMut::with_capacity(8);
    frontend::ssl_request(&mut request);
    tcp.write_all(&request).await?;
    // Read exactly one byte: anything after it belongs to the TLS handshake
    // (and must not be buffered in plaintext, CVE-2021-23222).
    let mut answer = [0u8; 1];
    if let Err(e) = tcp.read_exact(&mut answer).await {
        return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ReplicationError::Closed
        } else {
            ReplicationError::Io(e)
        });
    }
    match answer[0] {
        b'S' => {
            let name = tls::server_name(config.get_host())?;
            match TlsConnector::from(tls_config).connect(name, tcp).await {
                Ok(stream) => Ok(Socket::Tls(Box::new(stream))),
                Err(e) => {
                    let tls_error = e
                        .get_ref()
                        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                        .cloned();
                    Err(match tls_error {
                        Some(t) => TlsError::handshake(config.get_host(), t).into(),
                        None => ReplicationError::Io(e),
                    })
                }
            }
        }
        b'N' if config.get_sslmode().requires_tls() => Err(TlsError::NotSupportedByServer {
            sslmode: config.get_sslmode().as_str(),
        }
        .into()),
        b'N' => {
            tracing::debug!("server does not offer TLS; continuing without (sslmode=prefer)");
            Ok(Socket::Plain(tcp))
        }
        other => Err(TlsError::UnexpectedResponse(other).into()),
    }
}
