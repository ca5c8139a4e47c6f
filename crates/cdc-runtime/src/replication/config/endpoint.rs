//! One server of a connection's host list.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

/// One server of a connection's host list: a name, maybe an address that
/// replaces resolving it, and a port.
///
/// As in libpq, a host that starts with `/` is the directory of the
/// server's Unix-domain socket, `<host>/.s.PGSQL.<port>` (unless a
/// `hostaddr` is given, which is then connected to over TCP).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub(super) host: String,
    pub(super) hostaddr: Option<IpAddr>,
    pub(super) port: u16,
}

impl Endpoint {
    /// The host name (or IP address); also the name TLS checks. For a Unix
    /// domain socket, the socket's directory.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The path of the Unix-domain socket connected to, when the host is a
    /// socket directory (and no `hostaddr` replaces it): `<host>/.s.PGSQL.<port>`.
    pub fn unix_socket(&self) -> Option<PathBuf> {
        if self.hostaddr.is_some() || !is_socket_directory(&self.host) {
            return None;
        }
        Some(PathBuf::from(&self.host).join(format!(".s.PGSQL.{}", self.port)))
    }

    /// The address connected to instead of resolving the host, if any.
    pub fn hostaddr(&self) -> Option<IpAddr> {
        self.hostaddr
    }

    /// The TCP port (or the Unix-domain socket's number).
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Whether a host names a Unix-domain socket directory (an absolute path),
/// as libpq reads it.
fn is_socket_directory(host: &str) -> bool {
    host.starts_with('/')
}

/// Whether a host names an abstract-namespace Unix-domain socket (`@name`),
/// as libpq reads it; pgcdc does not support those.
pub(super) fn is_abstract_socket(host: &str) -> bool {
    host.starts_with('@')
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(path) = self.unix_socket() {
            return write!(f, "socket {}", path.display());
        }
        match self.hostaddr {
            Some(ip) => write!(f, "{} ({ip}) port {}", self.host, self.port),
            None => write!(f, "{} port {}", self.host, self.port),
        }
    }
}
