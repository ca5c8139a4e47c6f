//! Connection settings for a replication connection, parsed from libpq-style
//! `key=value` strings or `postgresql://` URLs (in [`parse`]).
//!
//! Several hosts may be given (`host=a,b port=5432,5433`,
//! `postgresql://a:5432,b:5433/db`), as in libpq: they are tried in order and
//! the first that accepts the connection and, with
//! `target_session_attrs=read-write` (the default when several hosts are
//! given), is not read-only, is used; see [`ReplicationConfig::endpoints`].

mod endpoint;
mod modes;
mod parse;

pub use endpoint::Endpoint;
pub use modes::{ChannelBinding, SslMode, TargetSessionAttrs};

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::error::{ReplicationError, TlsError};

/// The default TCP port of PostgreSQL.
pub const DEFAULT_PORT: u16 = 5432;
/// The `application_name` sent when none is configured.
pub const DEFAULT_APPLICATION_NAME: &str = "pgcdc";
/// How long connecting (TCP, TLS, startup and authentication) may take when no
/// `connect_timeout` is configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The keys accepted in a `key=value` string or as URL query parameters.
const SUPPORTED_KEYS: &str = "host, hostaddr, port, dbname, user, password, application_name, \
     fallback_application_name, sslmode, sslrootcert, channel_binding, connect_timeout, \
     target_session_attrs, replication";

/// Where trusted root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RootCertSource {
    /// A PEM file with one or more CA certificates.
    File(PathBuf),
    /// The operating system's trust store (`sslrootcert=system`, as in libpq 16).
    System,
}

/// A configuration setting that could not be parsed or is not supported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The `key=value` string is malformed.
    #[error("invalid connection string at byte {position}: {reason}")]
    Syntax {
        /// Byte offset in the input where the problem was found.
        position: usize,
        /// What was wrong.
        reason: &'static str,
    },
    /// The URL is malformed.
    #[error("invalid connection URL: {reason}")]
    Url {
        /// What was wrong.
        reason: &'static str,
    },
    /// A key that pgcdc does not know or support.
    #[error("unknown connection setting {key:?}; supported settings are: {SUPPORTED_KEYS}")]
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// A value that is not valid for its key. Passwords are never stored here.
    #[error("invalid value {value:?} for {key}: {reason}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The rejected value.
        value: String,
        /// What is expected.
        reason: &'static str,
    },
    /// No user name was given.
    #[error("no user given: set user=... in the connection string or user@ in the URL")]
    MissingUser,
    /// The lists of hosts, addresses and ports do not match.
    #[error("{0}")]
    HostCount(&'static str),
    /// An abstract-namespace Unix-domain socket (`@name`) was given as host.
    #[error("host {0:?} is an abstract Unix-domain socket, which is not supported; give the socket's directory (host=/var/run/postgresql) or a TCP host")]
    UnixSocket(String),
}

/// Settings of one replication connection.
///
/// Built with [`ReplicationConfig::new`] and setters, or parsed with
/// [`FromStr`](std::str::FromStr) from a libpq-style `key=value` string
/// (`host=db port=5432 user=cdc dbname=app sslmode=verify-full`) or a
/// `postgresql://user:password@host:port/dbname?sslmode=require` URL.
///
/// The password is never printed: [`fmt::Debug`] redacts it and
/// [`fmt::Display`] (the same as [`ReplicationConfig::redacted`]) leaves it out,
/// so both are safe for logs.
#[derive(Clone, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// Never empty.
    endpoints: Vec<Endpoint>,
    target_session_attrs: Option<TargetSessionAttrs>,
    dbname: Option<String>,
    user: String,
    password: Option<String>,
    application_name: Option<String>,
    fallback_application_name: Option<String>,
    sslmode: SslMode,
    sslrootcert: Option<RootCertSource>,
    channel_binding: ChannelBinding,
    connect_timeout: Duration,
}

impl ReplicationConfig {
    /// Settings for `user` on `localhost:5432`, database named like the user,
    /// `sslmode=prefer`, no password.
    pub fn new(user: impl Into<String>) -> Self {
        ReplicationConfig {
            endpoints: vec![Endpoint {
                host: "localhost".into(),
                hostaddr: None,
                port: DEFAULT_PORT,
            }],
            target_session_attrs: None,
            dbname: None,
            user: user.into(),
            password: None,
            application_name: None,
            fallback_application_name: None,
            sslmode: SslMode::default(),
            sslrootcert: None,
            channel_binding: ChannelBinding::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// The one host name (or IP address) to connect to; also the name
    /// checked by `sslmode=verify-full`. A host that starts with `/` is the
    /// directory of the server's Unix-domain socket (see [`Endpoint`]).
    /// Replaces a list of hosts (keeping the first one's port and address).
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.endpoints.truncate(1);
        if let Some(e) = self.endpoints.first_mut() {
            e.host = host.into();
        }
        self
    }

    /// Several hosts, tried in order (see [`target_session_attrs`](Self::target_session_attrs)),
    /// each with its port. An empty list is ignored.
    pub fn hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = (S, u16)>,
        S: Into<String>,
    {
        let endpoints: Vec<Endpoint> = hosts
            .into_iter()
            .map(|(host, port)| Endpoint {
                host: host.into(),
                hostaddr: None,
                port,
            })
            .collect();
        if !endpoints.is_empty() {
            self.endpoints = endpoints;
        }
        self
    }

    /// An IP address to connect to instead of resolving [`host`](Self::host),
    /// which is then only used for TLS name checks (libpq's `hostaddr`); for
    /// the first host.
    pub fn hostaddr(mut self, addr: IpAddr) -> Self {
        if let Some(e) = self.endpoints.first_mut() {
            e.hostaddr = Some(addr);
        }
        self
    }

    /// Which of several hosts is acceptable (libpq's `target_session_attrs`).
    pub fn target_session_attrs(mut self, attrs: TargetSessionAttrs) -> Self {
        self.target_session_attrs = Some(attrs);
        self
    }

    /// The user name.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = user.into();
        self
    }

    /// The port of every host (TCP, or the Unix-domain socket's number).
    pub fn port(mut self, port: u16) -> Self {
        for e in &mut self.endpoints {
            e.port = port;
        }
        self
    }

    /// The database whose changes are streamed (defaults to the user name).
    pub fn dbname(mut self, dbname: impl Into<String>) -> Self {
        self.dbname = Some(dbname.into());
        self
    }

    /// The password, used for cleartext, md5 and SCRAM-SHA-256 authentication.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The `application_name` shown in `pg_stat_replication`.
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = Some(name.into());
        self
    }

    /// The TLS mode.
    pub fn sslmode(mut self, mode: SslMode) -> Self {
        self.sslmode = mode;
        self
    }

    /// Trusted root certificates for `verify-ca` / `verify-full` (and `require`).
    pub fn sslrootcert(mut self, source: RootCertSource) -> Self {
        self.sslrootcert = Some(source);
        self
    }

    /// Whether SCRAM channel binding is used.
    pub fn channel_binding(mut self, mode: ChannelBinding) -> Self {
        self.channel_binding = mode;
        self
    }

    /// How long connecting, TLS and authentication may take in total.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The (first) configured host name.
    pub fn get_host(&self) -> &str {
        self.first_endpoint().host()
    }

    /// The (first) configured `hostaddr`, if any.
    pub fn get_hostaddr(&self) -> Option<IpAddr> {
        self.first_endpoint().hostaddr()
    }

    /// The (first host's) TCP port.
    pub fn get_port(&self) -> u16 {
        self.first_endpoint().port()
    }

    /// Every host, in the order they are tried; never empty.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// Which server is acceptable: as configured, else
    /// [`TargetSessionAttrs::ReadWrite`] when several hosts are given (the
    /// primary among them) and [`TargetSessionAttrs::Any`] for one host
    /// (which may be a standby that decodes logically, PostgreSQL 16+).
    pub fn get_target_session_attrs(&self) -> TargetSessionAttrs {
        self.target_session_attrs
            .unwrap_or(if self.endpoints.len() > 1 {
                TargetSessionAttrs::ReadWrite
            } else {
                TargetSessionAttrs::Any
            })
    }

    /// These settings for `endpoint` alone (the other settings unchanged,
    /// including the effective [`target_session_attrs`](Self::get_target_session_attrs)).
    pub fn for_endpoint(&self, endpoint: &Endpoint) -> ReplicationConfig {
        let mut one = self.clone();
        one.target_session_attrs = Some(self.get_target_session_attrs());
        one.endpoints = vec![endpoint.clone()];
        one
    }

    /// Refuses host lists that can never connect as configured, which the
    /// setters ([`host`](Self::host), [`hosts`](Self::hosts)) take without
    /// complaint and the parser refuses: an abstract-namespace socket
    /// (`@name`), and socket directories listed beside TCP hosts under an
    /// `sslmode` that requires TLS (see [`TlsError::SocketsBesideTcpHosts`]).
    ///
    /// Connecting checks this first; call it to refuse such settings when
    /// they are loaded, before any connection is tried.
    pub fn check_hosts(&self) -> Result<(), ReplicationError> {
        if let Some(e) = self
            .endpoints
            .iter()
            .find(|e| endpoint::is_abstract_socket(&e.host))
        {
            return Err(ConfigError::UnixSocket(e.host.clone()).into());
        }
        self.check_socket_tls()?;
        Ok(())
    }

    /// Sockets never offer TLS, so a host list that mixes socket directories
    /// with TCP hosts must not require TLS: the mode applies to every host.
    /// A list of sockets alone connects without TLS whatever the mode says,
    /// as libpq does.
    pub(crate) fn check_socket_tls(&self) -> Result<(), TlsError> {
        let sockets = self
            .endpoints
            .iter()
            .filter(|e| e.unix_socket().is_some())
            .count();
        if sockets > 0 && sockets < self.endpoints.len() && self.sslmode.requires_tls() {
            return Err(TlsError::SocketsBesideTcpHosts {
                sslmode: self.sslmode.as_str(),
            });
        }
        Ok(())
    }

    /// The (first) host, address and port.
    pub(crate) fn first_endpoint(&self) -> &Endpoint {
        // `endpoints` is never empty: every constructor and setter keeps one.
        static FALLBACK: Endpoint = Endpoint {
            host: String::new(),
            hostaddr: None,
            port: DEFAULT_PORT,
        };
        self.endpoints.first().unwrap_or(&FALLBACK)
    }

    /// The database name (the user name when none was set).
    pub fn get_dbname(&self) -> &str {
        self.dbname.as_deref().unwrap_or(&self.user)
    }

    /// The user name.
    pub fn get_user(&self) -> &str {
        &self.user
    }

    /// The password, if one is configured. Take care not to log it.
    pub fn get_password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The `application_name` sent to the server.
    pub fn get_application_name(&self) -> &str {
        self.application_name
            .as_deref()
            .or(self.fallback_application_name.as_deref())
            .unwrap_or(DEFAULT_APPLICATION_NAME)
    }

    /// The TLS mode.
    pub fn get_sslmode(&self) -> SslMode {
        self.sslmode
    }

    /// The configured root certificates, if any.
    pub fn get_sslrootcert(&self) -> Option<&RootCertSource> {
        self.sslrootcert.as_ref()
    }

    /// The channel binding mode.
    pub fn get_channel_binding(&self) -> ChannelBinding {
        self.channel_binding
    }

    /// The connect timeout.
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// A `key=value` form of these settings without the password, for logs.
    pub fn redacted(&self) -> String {
        self.to_string()
    }
}

impl fmt::Debug for ReplicationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationConfig")
            .field("endpoints", &self.endpoints)
            .field("target_session_attrs", &self.target_session_attrs)
            .field("dbname", &self.get_dbname())
            .field("user", &self.user)
            .field(
                "password",
                &self.password.as_ref().map(|_| Redacted).as_ref(),
            )
            .field("application_name", &self.get_application_name())
            .field("sslmode", &self.sslmode)
            .field("sslrootcert", &self.sslrootcert)
            .field("channel_binding", &self.channel_binding)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `key=value` form without the password; values are quoted when needed.
impl fmt::Display for ReplicationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hosts: Vec<&str> = self.endpoints.iter().map(|e| e.host.as_str()).collect();
        write!(f, "host={}", QuotedValue(&hosts.join(",")))?;
        if self.endpoints.iter().any(|e| e.hostaddr.is_some()) {
            let addrs: Vec<String> = self
                .endpoints
                .iter()
                .map(|e| e.hostaddr.map(|a| a.to_string()).unwrap_or_default())
                .collect();
            write!(f, " hostaddr={}", addrs.join(","))?;
        }
        let ports: Vec<String> = self.endpoints.iter().map(|e| e.port.to_string()).collect();
        write!(
            f,
            " port={} dbname={} user={} application_name={} sslmode={}",
            ports.join(","),
            QuotedValue(self.get_dbname()),
            QuotedValue(&self.user),
            QuotedValue(self.get_application_name()),
            self.sslmode
        )?;
        match &self.sslrootcert {
            Some(RootCertSource::File(path)) => {
                write!(
                    f,
                    " sslrootcert={}",
                    QuotedValue(&path.display().to_string())
                )?;
            }
            Some(RootCertSource::System) => f.write_str(" sslrootcert=system")?,
            None => {}
        }
        write!(
            f,
            " channel_binding={} connect_timeout={}",
            self.channel_binding,
            self.connect_timeout.as_secs()
        )?;
        if let Some(attrs) = self.target_session_attrs {
            write!(f, " target_session_attrs={attrs}")?;
        }
        Ok(())
    }
}

/// A value in libpq `key=value` syntax: quoted when empty or when it holds
/// whitespace, quotes or backslashes.
struct QuotedValue<'a>(&'a str);

impl fmt::Display for QuotedValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let needs_quotes = self.0.is_empty()
            || self
                .0
                .chars()
                .any(|c| c.is_whitespace() || c == '\'' || c == '\\');
        if !needs_quotes {
            return f.write_str(self.0);
        }
        f.write_str("'")?;
        for c in self.0.chars() {
            if c == '\'' || c == '\\' {
                f.write_str("\\")?;
            }
            write!(f, "{c}")?;
        }
        f.write_str("'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_never_printed() {
        let c: ReplicationConfig = "user=a password=hunter2 host=h".parse().unwrap();
        let debug = format!("{c:?}");
        let display = c.to_string();
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
        assert!(!display.contains("hunter2"), "{display}");
        assert!(!display.contains("password"), "{display}");
        assert_eq!(c.redacted(), display);
    }

    #[test]
    fn display_round_trips_without_password() {
        let c = ReplicationConfig::new("o'neil")
            .host("db")
            .port(7000)
            .dbname("a b")
            .password("secret")
            .application_name("")
            .sslmode(SslMode::VerifyCa)
            .channel_binding(ChannelBinding::Disable)
            .sslrootcert(RootCertSource::File("/tmp/my ca.pem".into()));
        let back: ReplicationConfig = c.redacted().parse().unwrap();
        assert_eq!(back.get_user(), "o'neil");
        assert_eq!(back.get_dbname(), "a b");
        assert_eq!(back.get_port(), 7000);
        assert_eq!(back.get_sslmode(), SslMode::VerifyCa);
        assert_eq!(back.get_sslrootcert(), c.get_sslrootcert());
        assert_eq!(back.get_channel_binding(), ChannelBinding::Disable);
        assert_eq!(back.get_password(), None);
        assert_eq!(back, c.clone().password_cleared());
    }

    #[test]
    fn check_hosts_refuses_what_the_setters_take() {
        let abstract_socket = ReplicationConfig::new("u").hosts([("db", 5432), ("@pg", 5432)]);
        assert!(matches!(
            abstract_socket.check_hosts(),
            Err(ReplicationError::Config(ConfigError::UnixSocket(h))) if h == "@pg"
        ));
        let mixed = |mode| {
            ReplicationConfig::new("u")
                .hosts([("/var/run/postgresql", 5432), ("db", 5432)])
                .sslmode(mode)
        };
        assert!(matches!(
            mixed(SslMode::Require).check_hosts(),
            Err(ReplicationError::Tls(TlsError::SocketsBesideTcpHosts {
                sslmode: "require"
            }))
        ));
        assert!(mixed(SslMode::Prefer).check_hosts().is_ok());
        let sockets = ReplicationConfig::new("u")
            .hosts([("/var/run/postgresql", 5432), ("/tmp", 5433)])
            .sslmode(SslMode::VerifyFull);
        assert!(sockets.check_hosts().is_ok());
        // A `hostaddr` makes the socket directory a TCP host's TLS name.
        let addressed = mixed(SslMode::Require).hostaddr(IpAddr::from([127, 0, 0, 1]));
        assert!(addressed.check_hosts().is_ok());
    }

    #[tokio::test]
    async fn connecting_checks_the_hosts_before_any_socket() {
        let mixed = ReplicationConfig::new("u")
            .hosts([("/nonexistent-pgcdc-dir", 5432), ("db.invalid", 5432)])
            .sslmode(SslMode::Require);
        let refused = crate::replication::ReplicationConnection::connect(&mixed).await;
        assert!(
            matches!(
                refused,
                Err(ReplicationError::Tls(
                    TlsError::SocketsBesideTcpHosts { .. }
                ))
            ),
            "{:?}",
            refused.err()
        );
    }

    impl ReplicationConfig {
        fn password_cleared(mut self) -> Self {
            self.password = None;
            self
        }
    }
}
