//! `tokio-postgres` connections with the replication connection's TLS: rustls
//! (`ring` provider) and libpq's `sslmode` / `sslrootcert` meanings.
//!
//! The checkpoint store's pool ([`checkpoint_store`]) and the PostgreSQL table
//! sink open ordinary (non-replication) connections through `tokio-postgres`.
//! [`PgClientSettings::new`] turns a [`ReplicationConfig`] (the same `key=value`
//! or URL syntax and the same settings as the source) into a
//! `tokio_postgres::Config` and a [`RustlsConnect`] that checks the server the
//! way the replication connection does:
//!
//! | sslmode | TLS | chain checked | host name checked |
//! |---|---|---|---|
//! | `disable` | never | | |
//! | `prefer` | if the server offers it | only with `sslrootcert` | no |
//! | `require` | always | only with `sslrootcert` | no |
//! | `verify-ca` | always | yes | no |
//! | `verify-full` | always | yes | yes |
//!
//! `sslrootcert` defaults to `~/.postgresql/root.crt` when that file exists,
//! as in libpq. Over TLS, SCRAM channel binding (`tls-server-end-point`)
//! follows `channel_binding`.
//!
//! ```no_run
//! use cdc_runtime::replication::ReplicationConfig;
//! use cdc_runtime::tls_connect::{checkpoint_store, PgClientSettings};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let source: ReplicationConfig =
//!     "host=db.example user=cdc dbname=app sslmode=verify-full sslrootcert=/etc/pgcdc/ca.pem"
//!         .parse()?;
//! // A plain tokio-postgres client with the same settings:
//! let settings = PgClientSettings::new(&source)?;
//! let (client, connection) = settings.config.connect(settings.tls.clone()).await?;
//! tokio::spawn(connection);
//! # drop(client);
//! // The checkpoint store's pool:
//! let store = checkpoint_store(&source, checkpoint_pg::PgStoreConfig::default()).await?;
//! # drop(store);
//! # Ok(()) }
//! ```

use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use checkpoint_api::CheckpointError;
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding as TlsChannelBinding, MakeTlsConnect, TlsConnect};

use crate::replication::channel_binding::tls_server_end_point;
use crate::replication::tls::{client_config, server_name};
use crate::replication::{
    ChannelBinding, ReplicationConfig, SslMode, TargetSessionAttrs, TlsError,
};

type BoxError = Box<dyn StdError + Send + Sync>;

/// A `tokio-postgres` client configuration with its TLS connector.
#[derive(Clone)]
#[non_exhaustive]
pub struct PgClientSettings {
    /// Host, port, user, password, database, application name, connect timeout,
    /// channel binding and the `tokio-postgres` side of `sslmode`.
    pub config: tokio_postgres::Config,
    /// The TLS connector that checks the server as `sslmode` asks.
    pub tls: RustlsConnect,
}

/// The password is left out.
impl std::fmt::Debug for PgClientSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgClientSettings")
            .field("host", &self.config.get_hosts())
            .field("port", &self.config.get_ports())
            .field("user", &self.config.get_user())
            .field("dbname", &self.config.get_dbname())
            .field("ssl_mode", &self.config.get_ssl_mode())
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl PgClientSettings {
    /// The settings of `source` for a `tokio-postgres` connection; reads the
    /// root certificates now, so a bad `sslrootcert` fails here.
    ///
    /// A host that is a Unix-domain socket directory is connected to without
    /// TLS whatever `sslmode` says, as libpq does (PostgreSQL never offers
    /// TLS there). A host list that mixes such sockets with TCP hosts must
    /// then not require TLS: the mode applies to every host of the list.
    pub fn new(source: &ReplicationConfig) -> Result<Self, TlsError> {
        source.check_socket_tls()?;
        let only_sockets = source.endpoints().iter().all(|e| e.unix_socket().is_some());
        let mut config = tokio_postgres::Config::new();
        // Several hosts: tokio-postgres tries them in order and, with
        // read-write, skips read-only ones, as the replication connection does.
        for endpoint in source.endpoints() {
            config.host(endpoint.host()).port(endpoint.port());
        }
        let addrs: Option<Vec<_>> = source.endpoints().iter().map(|e| e.hostaddr()).collect();
        for addr in addrs.unwrap_or_default() {
            config.hostaddr(addr);
        }
        config.target_session_attrs(match source.get_target_session_attrs() {
            TargetSessionAttrs::ReadWrite => tokio_postgres::config::TargetSessionAttrs::ReadWrite,
            _ => tokio_postgres::config::TargetSessionAttrs::Any,
        });
        config
            .user(source.get_user())
            .dbname(source.get_dbname())
            .application_name(source.get_application_name())
            .connect_timeout(source.get_connect_timeout())
            .ssl_mode(match source.get_sslmode() {
                _ if only_sockets => tokio_postgres::config::SslMode::Disable,
                SslMode::Disable => tokio_postgres::config::SslMode::Disable,
                SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
                // verify-ca / verify-full: tokio-postgres only needs to know TLS is
                // mandatory; the connector does the checks.
                _ => tokio_postgres::config::SslMode::Require,
            })
            .channel_binding(match source.get_channel_binding() {
                ChannelBinding::Disable => tokio_postgres::config::ChannelBinding::Disable,
                ChannelBinding::Require => tokio_postgres::config::ChannelBinding::Require,
                _ => tokio_postgres::config::ChannelBinding::Prefer,
            });
        if let Some(password) = source.get_password() {
            config.password(password);
        }
        crate::keepalive::configure(&mut config);
        Ok(PgClientSettings {
            config,
            tls: RustlsConnect {
                config: if only_sockets {
                    None
                } else {
                    client_config(source)?
                },
            },
        })
    }

    /// Connects as `application_name` and drives the connection on a
    /// spawned task (which logs, at debug, why it ended).
    pub async fn connect(
        &self,
        application_name: &str,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let mut config = self.config.clone();
        config.application_name(application_name);
        let (client, connection) = config.connect(self.tls.clone()).await?;
        let name = application_name.to_owned();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, connection = %name, "connection ended");
            }
        });
        Ok(client)
    }
}

/// Opens a [`PgCheckpointStore`] on the database of `source`, over TLS as its
/// `sslmode` asks (see the [module docs](self)).
pub async fn checkpoint_store(
    source: &ReplicationConfig,
    store: PgStoreConfig,
) -> Result<PgCheckpointStore, CheckpointError> {
    let settings = PgClientSettings::new(source)
        .map_err(|e| CheckpointError::backend(format!("checkpoint store: {e}"), e))?;
    PgCheckpointStore::connect_with_tls(settings.config, settings.tls, store).await
}

/// A rustls [`MakeTlsConnect`] for `tokio-postgres`.
///
/// Built by [`PgClientSettings::new`], or from any rustls configuration with
/// [`RustlsConnect::new`]. Without a configuration (`sslmode=disable`) it never
/// connects; pair it with `SslMode::Disable` in the `tokio-postgres` config.
#[derive(Clone)]
pub struct RustlsConnect {
    config: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for RustlsConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RustlsConnect")
            .field("enabled", &self.config.is_some())
            .finish()
    }
}

impl RustlsConnect {
    /// A connector with `config` (its certificate verifier decides what is checked).
    pub fn new(config: Arc<ClientConfig>) -> Self {
        RustlsConnect {
            config: Some(config),
        }
    }
}

impl<S> MakeTlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnectHost;
    type Error = TlsError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnectHost, TlsError> {
        let target = match &self.config {
            // No name: a Unix-domain socket, where the server offers no TLS.
            _ if domain.is_empty() => None,
            None => None,
            Some(config) => Some((config.clone(), server_name(domain)?)),
        };
        Ok(RustlsConnectHost {
            host: domain.to_owned(),
            target,
        })
    }
}

/// The connector for one host, made by [`RustlsConnect`].
pub struct RustlsConnectHost {
    host: String,
    target: Option<(Arc<ClientConfig>, ServerName<'static>)>,
}

impl std::fmt::Debug for RustlsConnectHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RustlsConnectHost")
            .field("host", &self.host)
            .field("enabled", &self.target.is_some())
            .finish()
    }
}

impl<S> TlsConnect<S> for RustlsConnectHost
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<RustlsStream<S>, BoxError>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let Some((config, name)) = self.target else {
                return Err("TLS is disabled (sslmode=disable)".into());
            };
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map_err(|e| handshake_error(&self.host, e))?;
            Ok(RustlsStream(Box::new(tls)))
        })
    }
}

/// A rustls failure with libpq-style advice; other IO errors as they are.
fn handshake_error(host: &str, e: io::Error) -> BoxError {
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .cloned();
    match rustls_error {
        Some(r) => Box::new(TlsError::handshake(host, r)),
        None => Box::new(e),
    }
}

/// A TLS stream made by [`RustlsConnect`].
pub struct RustlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S> std::fmt::Debug for RustlsStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RustlsStream")
    }
}

impl<S> tokio_postgres::tls::TlsStream for RustlsStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn channel_binding(&self) -> TlsChannelBinding {
        let end_point = self
            .0
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|certs| certs.first())
            .and_then(|cert| tls_server_end_point(cert));
        match end_point {
            Some(hash) => TlsChannelBinding::tls_server_end_point(hash),
            None => TlsChannelBinding::none(),
        }
    }
}

impl<S> AsyncRead for RustlsStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(self.0.as_mut()).poll_read(cx, buf)
    }
}

impl<S> AsyncWrite for RustlsStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.0.as_mut()).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.0.as_mut()).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.0.as_mut()).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.0.as_mut()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_follow_the_source() {
        let source: ReplicationConfig =
            "host=db.example port=6543 user=cdc password=s3cret dbname=app sslmode=disable"
                .parse()
                .unwrap();
        let s = PgClientSettings::new(&source).unwrap();
        assert_eq!(s.config.get_user(), Some("cdc"));
        assert_eq!(s.config.get_dbname(), Some("app"));
        assert_eq!(s.config.get_ports(), &[6543]);
        assert_eq!(s.config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(
            s.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
        assert!(s.tls.config.is_none());
        assert!(!format!("{s:?}").contains("s3cret"));

        let source = source.sslmode(SslMode::Require);
        let s = PgClientSettings::new(&source).unwrap();
        assert_eq!(
            s.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        assert!(s.tls.config.is_some());
    }

    #[test]
    fn verify_needs_a_root_certificate_file_that_exists() {
        let dir = tempfile::tempdir().unwrap();
        let source = ReplicationConfig::new("cdc")
            .sslmode(SslMode::VerifyFull)
            .sslrootcert(crate::replication::RootCertSource::File(
                dir.path().join("missing.pem"),
            ));
        let e = PgClientSettings::new(&source).unwrap_err();
        assert!(matches!(e, TlsError::ReadRootCert { .. }), "{e}");
    }

    #[test]
    fn an_invalid_host_name_is_refused_before_connecting() {
        let source = ReplicationConfig::new("cdc").sslmode(SslMode::Require);
        let mut tls = PgClientSettings::new(&source).unwrap().tls;
        let made = <RustlsConnect as MakeTlsConnect<tokio::net::TcpStream>>::make_tls_connect(
            &mut tls,
            "bad name!",
        );
        assert!(matches!(made, Err(TlsError::InvalidServerName(_))));
    }
}
