//! The connection settings that pick one of a few behaviours, with libpq's
//! names and meanings: `sslmode`, `channel_binding`, `target_session_attrs`.

use std::fmt;
use std::str::FromStr;

use super::ConfigError;

/// Whether and how TLS is used, with libpq's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SslMode {
    /// Never use TLS.
    Disable,
    /// Use TLS when the server offers it, without verifying the certificate
    /// unless `sslrootcert` is set (then the chain is checked, as in libpq);
    /// fall back to a plain connection when the server does not support TLS.
    #[default]
    Prefer,
    /// Always use TLS, fail when the server does not offer it. The certificate is
    /// not verified unless `sslrootcert` is set, in which case this behaves like
    /// [`SslMode::VerifyCa`] (as in libpq).
    Require,
    /// Always use TLS and check that the server certificate chains to a trusted
    /// root; the host name is not checked.
    VerifyCa,
    /// Always use TLS, check the chain and that the certificate is valid for the
    /// host name connected to.
    VerifyFull,
}

impl SslMode {
    /// The libpq spelling (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`).
    pub const fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection without TLS is refused.
    pub const fn requires_tls(self) -> bool {
        matches!(
            self,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
        )
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SslMode {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            // libpq's `allow` tries plain first; we do not offer that downgrade order.
            _ => Err(ConfigError::InvalidValue {
                key: "sslmode".into(),
                value: s.into(),
                reason: "expected disable, prefer, require, verify-ca or verify-full",
            }),
        }
    }
}

/// Whether SCRAM channel binding (`SCRAM-SHA-256-PLUS` with
/// `tls-server-end-point`) is used, with libpq's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ChannelBinding {
    /// Never use channel binding.
    Disable,
    /// Use it when the connection is encrypted and the server offers it.
    #[default]
    Prefer,
    /// Refuse to authenticate without it: the server must prove over SCRAM
    /// that it holds the certificate's key, which defeats a man in the middle
    /// even when the certificate is not verified. Implies SCRAM over TLS, so
    /// trust, password and md5 authentication are refused.
    Require,
}

impl ChannelBinding {
    /// The libpq spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            ChannelBinding::Disable => "disable",
            ChannelBinding::Prefer => "prefer",
            ChannelBinding::Require => "require",
        }
    }
}

impl fmt::Display for ChannelBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ChannelBinding {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "disable" => Ok(ChannelBinding::Disable),
            "prefer" => Ok(ChannelBinding::Prefer),
            "require" => Ok(ChannelBinding::Require),
            _ => Err(ConfigError::InvalidValue {
                key: "channel_binding".into(),
                value: s.into(),
                reason: "expected disable, prefer or require",
            }),
        }
    }
}

/// Which server of several hosts is acceptable, with libpq's meaning of
/// `target_session_attrs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TargetSessionAttrs {
    /// Any server that accepts the connection.
    Any,
    /// Only a server that accepts writes: not a hot standby (in recovery)
    /// and not `default_transaction_read_only`. After a failover this finds
    /// the promoted standby among the hosts.
    ReadWrite,
}

impl TargetSessionAttrs {
    /// The libpq spelling (`any`, `read-write`).
    pub const fn as_str(self) -> &'static str {
        match self {
            TargetSessionAttrs::Any => "any",
            TargetSessionAttrs::ReadWrite => "read-write",
        }
    }
}

impl fmt::Display for TargetSessionAttrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TargetSessionAttrs {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "any" => Ok(TargetSessionAttrs::Any),
            "read-write" => Ok(TargetSessionAttrs::ReadWrite),
            _ => Err(ConfigError::InvalidValue {
                key: "target_session_attrs".into(),
                value: s.into(),
                reason: "expected any or read-write (pgcdc captures from a primary)",
            }),
        }
    }
}
