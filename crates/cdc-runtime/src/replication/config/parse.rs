//! Parsing `key=value` connection strings and `postgresql://` URLs.

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::{
    ChannelBinding, ConfigError, ReplicationConfig, RootCertSource, SslMode,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT,
};

impl ReplicationConfig {
    /// Parse a libpq `key=value` connection string.
    pub fn from_key_value(input: &str) -> Result<Self, ConfigError> {
        let mut builder = Builder::default();
        for pair in KeyValueParser::new(input) {
            let (key, value) = pair?;
            builder.set(&key, value)?;
        }
        builder.finish()
    }

    /// Parse a `postgresql://` (or `postgres://`) URL, percent-decoding every part.
    pub fn from_url(input: &str) -> Result<Self, ConfigError> {
        let rest = input
            .strip_prefix("postgresql://")
            .or_else(|| input.strip_prefix("postgres://"))
            .ok_or(ConfigError::Url {
                reason: "expected the scheme postgresql:// or postgres://",
            })?;
        let mut builder = Builder::default();
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (before_query, None),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        if let Some(userinfo) = userinfo {
            let (user, password) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            if !user.is_empty() {
                builder.set("user", percent_decode("user", user)?)?;
            }
            if let Some(password) = password {
                builder.set("password", percent_decode("password", password)?)?;
            }
        }
        if hostport.contains(',') {
            return Err(ConfigError::MultipleHosts(hostport.into()));
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (addr, after) = v6.split_once(']').ok_or(ConfigError::Url {
                reason: "unterminated [ in an IPv6 host",
            })?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or(ConfigError::Url {
                    reason: "expected :port after ]",
                })?),
            };
            (addr, port)
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if !host.is_empty() {
            builder.set("host", percent_decode("host", host)?)?;
        }
        if let Some(port) = port {
            if !port.is_empty() {
                builder.set("port", port.to_owned())?;
            }
        }
        if let Some(path) = path {
            if !path.is_empty() {
                builder.set("dbname", percent_decode("dbname", path)?)?;
            }
        }
        if let Some(query) = query {
            for param in query.split('&').filter(|p| !p.is_empty()) {
                let (key, value) = param.split_once('=').ok_or(ConfigError::Url {
                    reason: "query parameter without =",
                })?;
                let key = percent_decode("query parameter", key)?;
                let value = percent_decode(&key, value)?;
                builder.set(&key, value)?;
            }
        }
        builder.finish()
    }
}

impl FromStr for ReplicationConfig {
    type Err = ConfigError;

    /// Parses a URL when the input starts with `postgresql://` or `postgres://`,
    /// a `key=value` string otherwise.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim_start();
        if trimmed.starts_with("postgresql://") || trimmed.starts_with("postgres://") {
            Self::from_url(trimmed.trim_end())
        } else {
            Self::from_key_value(s)
        }
    }
}

#[derive(Default)]
struct Builder {
    host: Option<String>,
    hostaddr: Option<IpAddr>,
    port: Option<u16>,
    dbname: Option<String>,
    user: Option<String>,
    password: Option<String>,
    application_name: Option<String>,
    fallback_application_name: Option<String>,
    sslmode: Option<SslMode>,
    sslrootcert: Option<RootCertSource>,
    channel_binding: Option<ChannelBinding>,
    connect_timeout: Option<Duration>,
}

impl Builder {
    fn set(&mut self, key: &str, value: String) -> Result<(), ConfigError> {
        let invalid = |reason: &'static str, value: String| ConfigError::InvalidValue {
            key: key.into(),
            value,
            reason,
        };
        match key {
            "host" => {
                if value.contains(',') {
                    return Err(ConfigError::MultipleHosts(value));
                }
                if value.starts_with('/') || value.starts_with('@') {
                    return Err(ConfigError::UnixSocket(value));
                }
                if value.is_empty() {
                    return Err(invalid("the host must not be empty", value));
                }
                self.host = Some(value);
            }
            "hostaddr" => {
                if value.contains(',') {
                    return Err(ConfigError::MultipleHosts(value));
                }
                let addr = value
                    .parse::<IpAddr>()
                    .map_err(|_| invalid("expected a numeric IPv4 or IPv6 address", value))?;
                self.hostaddr = Some(addr);
            }
            "port" => {
                let port = value
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| invalid("expected a TCP port number 1-65535", value))?;
                self.port = Some(port);
            }
            "dbname" => self.dbname = Some(value),
            "user" => self.user = Some(value),
            "password" => self.password = Some(value),
            "application_name" => self.application_name = Some(value),
            "fallback_application_name" => self.fallback_application_name = Some(value),
            "sslmode" => self.sslmode = Some(value.parse()?),
            "sslrootcert" => {
                self.sslrootcert = Some(if value == "system" {
                    RootCertSource::System
                } else if value.is_empty() {
                    return Err(invalid("expected a file path or `system`", value));
                } else {
                    RootCertSource::File(PathBuf::from(value))
                })
            }
            "channel_binding" => self.channel_binding = Some(value.parse()?),
            "connect_timeout" => {
                let secs = value.trim().parse::<u64>().map_err(|_| {
                    invalid("expected a whole number of seconds (0 = no limit)", value)
                })?;
                // libpq: 0 means wait forever; we bound it to a day so a typo cannot hang a job.
                let secs = if secs == 0 { 86_400 } else { secs.max(2) };
                self.connect_timeout = Some(Duration::from_secs(secs));
            }
            "replication" => {
                if value != "database" {
                    return Err(invalid(
                        "pgcdc always opens logical replication connections (replication=database)",
                        value,
                    ));
                }
            }
            _ => return Err(ConfigError::UnknownKey { key: key.into() }),
        }
        Ok(())
    }

    fn finish(self) -> Result<ReplicationConfig, ConfigError> {
        let user = self
            .user
            .filter(|u| !u.is_empty())
            .ok_or(ConfigError::MissingUser)?;
        Ok(ReplicationConfig {
            host: self.host.unwrap_or_else(|| "localhost".into()),
            hostaddr: self.hostaddr,
            port: self.port.unwrap_or(DEFAULT_PORT),
            dbname: self.dbname.filter(|d| !d.is_empty()),
            user,
            password: self.password,
            application_name: self.application_name,
            fallback_application_name: self.fallback_application_name,
            sslmode: self.sslmode.unwrap_or_default(),
            sslrootcert: self.sslrootcert,
            channel_binding: self.channel_binding.unwrap_or_default(),
            connect_timeout: self.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
        })
    }
}

/// Percent-decodes one URL component, rejecting malformed escapes and invalid UTF-8.
fn percent_decode(key: &str, raw: &str) -> Result<String, ConfigError> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let ok = matches!(
                (bytes.get(i + 1), bytes.get(i + 2)),
                (Some(h), Some(l)) if h.is_ascii_hexdigit() && l.is_ascii_hexdigit()
            );
            if !ok {
                return Err(ConfigError::Url {
                    reason: "a % must be followed by two hexadecimal digits",
                });
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ConfigError::InvalidValue {
            key: key.into(),
            // Never echo what may be a password.
            value: String::new(),
            reason: "percent-decoded value is not valid UTF-8",
        })
}

/// Iterates over the `key=value` pairs of a libpq connection string.
struct KeyValueParser<'a> {
    input: &'a str,
    pos: usize,
    failed: bool,
}

impl<'a> KeyValueParser<'a> {
    fn new(input: &'a str) -> Self {
        KeyValueParser {
            input,
            pos: 0,
            failed: false,
        }
    }

    fn peek(&self) -> Option<char> {
        self.input.get(self.pos..).and_then(|s| s.chars().next())
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    fn err(&mut self, reason: &'static str) -> ConfigError {
        self.failed = true;
        ConfigError::Syntax {
            position: self.pos,
            reason,
        }
    }

    fn pair(&mut self) -> Result<(String, String), ConfigError> {
        let mut key = String::new();
        while let Some(c) = self.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            self.bump();
        }
        if key.is_empty() {
            return Err(self.err("expected a key"));
        }
        self.skip_ws();
        if self.peek() != Some('=') {
            return Err(self.err("expected = after the key"));
        }
        self.bump();
        self.skip_ws();
        let mut value = String::new();
        if self.peek() == Some('\'') {
            self.bump();
            loop {
                match self.bump() {
                    None => return Err(self.err("unterminated quoted value")),
                    Some('\'') => break,
                    Some('\\') => match self.bump() {
                        Some(c) => value.push(c),
                        None => return Err(self.err("unterminated quoted value")),
                    },
                    Some(c) => value.push(c),
                }
            }
            if self.peek().is_some_and(|c| !c.is_whitespace()) {
                return Err(self.err("expected whitespace after a quoted value"));
            }
        } else {
            while let Some(c) = self.peek() {
                if c.is_whitespace() {
                    break;
                }
                self.bump();
                if c == '\\' {
                    match self.bump() {
                        Some(escaped) => value.push(escaped),
                        None => return Err(self.err("a backslash at the end of the input")),
                    }
                } else {
                    value.push(c);
                }
            }
        }
        Ok((key, value))
    }
}

impl Iterator for KeyValueParser<'_> {
    type Item = Result<(String, String), ConfigError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        self.skip_ws();
        self.peek()?;
        Some(self.pair())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_with_quotes_and_escapes() {
        let c: ReplicationConfig = r"host=db.example port = 6543 dbname='my db' user=cdc password='it\'s \\ secret' sslmode=verify-full sslrootcert=/etc/ca.pem channel_binding=require connect_timeout=7 application_name=job\ 1"
            .parse()
            .unwrap();
        assert_eq!(c.get_host(), "db.example");
        assert_eq!(c.get_port(), 6543);
        assert_eq!(c.get_dbname(), "my db");
        assert_eq!(c.get_user(), "cdc");
        assert_eq!(c.get_password(), Some(r"it's \ secret"));
        assert_eq!(c.get_sslmode(), SslMode::VerifyFull);
        assert_eq!(
            c.get_sslrootcert(),
            Some(&RootCertSource::File("/etc/ca.pem".into()))
        );
        assert_eq!(c.get_connect_timeout(), Duration::from_secs(7));
        assert_eq!(c.get_application_name(), "job 1");
        assert_eq!(c.get_channel_binding(), ChannelBinding::Require);
    }

    #[test]
    fn defaults() {
        let c: ReplicationConfig = "user=alice".parse().unwrap();
        assert_eq!(c.get_host(), "localhost");
        assert_eq!(c.get_port(), 5432);
        assert_eq!(c.get_dbname(), "alice");
        assert_eq!(c.get_sslmode(), SslMode::Prefer);
        assert_eq!(c.get_application_name(), "pgcdc");
        assert_eq!(c.get_password(), None);
        assert_eq!(c.get_channel_binding(), ChannelBinding::Prefer);
    }

    #[test]
    fn key_value_errors_are_typed() {
        assert_eq!(
            "host=x".parse::<ReplicationConfig>(),
            Err(ConfigError::MissingUser)
        );
        assert!(matches!(
            "user=a bogus=1".parse::<ReplicationConfig>(),
            Err(ConfigError::UnknownKey { key }) if key == "bogus"
        ));
        assert!(matches!(
            "user=a port=70000".parse::<ReplicationConfig>(),
            Err(ConfigError::InvalidValue { key, .. }) if key == "port"
        ));
        assert!(matches!(
            "user=a sslmode=allow".parse::<ReplicationConfig>(),
            Err(ConfigError::InvalidValue { key, .. }) if key == "sslmode"
        ));
        assert!(matches!(
            "user='a".parse::<ReplicationConfig>(),
            Err(ConfigError::Syntax { .. })
        ));
        assert!(matches!(
            "user a".parse::<ReplicationConfig>(),
            Err(ConfigError::Syntax { position: 5, .. })
        ));
        assert!(matches!(
            "user=a host=/var/run/postgresql".parse::<ReplicationConfig>(),
            Err(ConfigError::UnixSocket(_))
        ));
        assert!(matches!(
            "user=a host=a,b".parse::<ReplicationConfig>(),
            Err(ConfigError::MultipleHosts(_))
        ));
        assert!(matches!(
            "user=a replication=true".parse::<ReplicationConfig>(),
            Err(ConfigError::InvalidValue { key, .. }) if key == "replication"
        ));
    }

    #[test]
    fn url_with_percent_decoding() {
        let c: ReplicationConfig =
            "postgresql://us%40er:p%3Ass%2Fw@db.example:6000/my%20db?sslmode=require&application_name=a%26b"
                .parse()
                .unwrap();
        assert_eq!(c.get_user(), "us@er");
        assert_eq!(c.get_password(), Some("p:ss/w"));
        assert_eq!(c.get_host(), "db.example");
        assert_eq!(c.get_port(), 6000);
        assert_eq!(c.get_dbname(), "my db");
        assert_eq!(c.get_sslmode(), SslMode::Require);
        assert_eq!(c.get_application_name(), "a&b");
    }

    #[test]
    fn url_ipv6_and_query_user() {
        let c: ReplicationConfig = "postgres://[::1]:5433?user=bob".parse().unwrap();
        assert_eq!(c.get_host(), "::1");
        assert_eq!(c.get_port(), 5433);
        assert_eq!(c.get_user(), "bob");
        assert_eq!(c.get_dbname(), "bob");
    }

    #[test]
    fn url_errors() {
        assert!(matches!(
            ReplicationConfig::from_url("mysql://a@b"),
            Err(ConfigError::Url { .. })
        ));
        assert!(matches!(
            "postgresql://a@h/db%zz".parse::<ReplicationConfig>(),
            Err(ConfigError::Url { .. })
        ));
        assert!(matches!(
            "postgresql://a@h1,h2/db".parse::<ReplicationConfig>(),
            Err(ConfigError::MultipleHosts(_))
        ));
        assert!(matches!(
            "postgresql://a@h:notaport/db".parse::<ReplicationConfig>(),
            Err(ConfigError::InvalidValue { key, .. }) if key == "port"
        ));
        assert!(matches!(
            "postgresql://h/db".parse::<ReplicationConfig>(),
            Err(ConfigError::MissingUser)
        ));
        assert!(matches!(
            "postgresql://a@[::1/db".parse::<ReplicationConfig>(),
            Err(ConfigError::Url { .. })
        ));
    }
}
