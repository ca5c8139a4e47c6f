//! One server of a connection's host list.

use std::fmt;
use std::net::IpAddr;

/// One server of a connection's host list: a name, maybe an address that
/// replaces resolving it, and a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub(super) host: String,
    pub(super) hostaddr: Option<IpAddr>,
    pub(super) port: u16,
}

impl Endpoint {
    /// The host name (or IP address); also the name TLS checks.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The address connected to instead of resolving the host, if any.
    pub fn hostaddr(&self) -> Option<IpAddr> {
        self.hostaddr
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.hostaddr {
            Some(ip) => write!(f, "{} ({ip}) port {}", self.host, self.port),
            None => write!(f, "{} port {}", self.host, self.port),
        }
    }
}
