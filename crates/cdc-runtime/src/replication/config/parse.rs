//! Parsing `key=value` connection strings and `postgresql://` URLs.

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::{
    ChannelBinding, ConfigError, Endpoint, ReplicationConfig, RootCertSource, SslMode,
    TargetSessionAttrs, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT,
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
        // Several `host[:port]` entries separated by commas, as libpq takes them.
        let mut hosts = Vec::new();
        let mut ports = Vec::new();
        for hostport in hostport.split(',') {
            let (host, port) = split_host_port(hostport)?;
            hosts.push(percent_decode("host", host)?);
            ports.push(port.unwrap_or("").to_owned());
        }
        if hosts.iter().any(|h| !h.is_empty()) {
            builder.set("host", hosts.join(","))?;
        }
        if ports.iter().any(|p| !p.is_empty()) {
            builder.set("port", ports.join(","))?;
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

/// One URL host entry: `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_host_port(hostport: &str) -> Result<(&str, Option<&str>), ConfigError> {
    if let Some(v6) = hostport.strip_prefix('[') {
        let (addr, after) = v6.split_once(']').ok_or(ConfigError::Url {
            reason: "unterminated [ in an IPv6 host",
        })?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(ConfigError::Url {
                reason: "expected :port after ]",
            })?),
        };
        Ok((addr, port))
    } else {
        Ok(match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        })
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
    hosts: Vec<String>,
    hostaddrs: Vec<Option<IpAddr>>,
    /// `None`: the default port.
    ports: Vec<Option<u16>>,
    target_session_attrs: Option<TargetSessionAttrs>,
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
                let mut hosts = Vec::new();
                for host in value.split(',') {
                    // `/dir` is a socket directory (see `Endpoint`); `@name`,
                    // libpq's abstract-namespace socket, is not supported.
                    if super::endpoint::is_abstract_socket(host) {
                        return Err(ConfigError::UnixSocket(host.to_owned()));
                    }
                    if host.is_empty() {
                        return Err(invalid("no host may be empty", value));
                    }
                    hosts.push(host.to_owned());
                }
                self.hosts = hosts;
            }
            "hostaddr" => {
                let mut addrs = Vec::new();
                for addr in value.split(',') {
                    if addr.is_empty() {
                        addrs.push(None);
                        continue;
                    }
                    let addr = addr.parse::<IpAddr>().map_err(|_| {
                        invalid("expected numeric IPv4 or IPv6 addresses", value.clone())
                    })?;
                    addrs.push(Some(addr));
                }
                self.hostaddrs = addrs;
            }
            "port" => {
                let mut ports = Vec::new();
                for port in value.split(',') {
                    if port.trim().is_empty() {
                        ports.push(None);
                        continue;
                    }
                    let port = port
                        .trim()
                        .parse::<u16>()
                        .ok()
                        .filter(|p| *p != 0)
                        .ok_or_else(|| {
                            invalid("expected TCP port numbers 1-65535", value.clone())
                        })?;
                    ports.push(Some(port));
                }
                self.ports = ports;
            }
            "target_session_attrs" => self.target_session_attrs = Some(value.parse()?),
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
        let mut hosts = self.hosts;
        if hosts.is_empty() {
            // libpq: hostaddr alone names the servers; TLS then checks "localhost".
            hosts = vec!["localhost".to_owned(); self.hostaddrs.len().max(1)];
        }
        let n = hosts.len();
        if !self.hostaddrs.is_empty() && self.hostaddrs.len() != n {
            return Err(ConfigError::HostCount(
                "hostaddr lists a different number of addresses than host lists hosts",
            ));
        }
        if self.ports.len() > 1 && self.ports.len() != n {
            return Err(ConfigError::HostCount(
                "port must give one port for all hosts or one per host",
            ));
        }
        let endpoints = hosts
            .into_iter()
            .enumerate()
            .map(|(i, host)| Endpoint {
                host,
                hostaddr: self.hostaddrs.get(i).copied().flatten(),
                port: match self.ports.as_slice() {
                    [one] => *one,
                    many => many.get(i).copied().flatten(),
                }
                .unwrap_or(DEFAULT_PORT),
            })
            .collect();
        Ok(ReplicationConfig {
            endpoints,
            target_session_attrs: self.target_session_attrs,
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
    fn a_socket_directory_names_a_unix_domain_socket() {
        let forms = [
            "user=a host=/var/run/postgresql port=5433",
            "postgresql://a@%2Fvar%2Frun%2Fpostgresql:5433/db",
            "postgresql:///db?user=a&host=/var/run/postgresql&port=5433",
        ];
        for form in forms {
            let c: ReplicationConfig = form.parse().unwrap();
            let endpoint = c.first_endpoint();
            assert_eq!(
                endpoint.unix_socket().as_deref(),
                Some(std::path::Path::new("/var/run/postgresql/.s.PGSQL.5433")),
                "{form}"
            );
            assert_eq!(
                endpoint.to_string(),
                "socket /var/run/postgresql/.s.PGSQL.5433"
            );
        }
        // A hostaddr is connected to over TCP, as in libpq.
        let c: ReplicationConfig = "user=a host=/tmp hostaddr=127.0.0.1".parse().unwrap();
        assert_eq!(c.first_endpoint().unix_socket(), None);
        // A host name is never a socket.
        let c: ReplicationConfig = "user=a host=db.example".parse().unwrap();
        assert_eq!(c.first_endpoint().unix_socket(), None);
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
            "user=a host=@pg".parse::<ReplicationConfig>(),
            Err(ConfigError::UnixSocket(_))
        ));
        assert!(matches!(
            "user=a host=a,b port=1,2,3".parse::<ReplicationConfig>(),
            Err(ConfigError::HostCount(_))
        ));
        assert!(matches!(
            "user=a host=a,,b".parse::<ReplicationConfig>(),
            Err(ConfigError::InvalidValue { key, .. }) if key == "host"
        ));
        assert!(matches!(
            "user=a target_session_attrs=standby".parse::<ReplicationConfig>(),
            Err(ConfigError::InvalidValue { key, .. }) if key == "target_session_attrs"
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
    fn several_hosts_as_libpq_takes_them() {
        let c: ReplicationConfig = "user=a host=p,s port=5432,5433".parse().unwrap();
        let hosts: Vec<(&str, u16)> = c.endpoints().iter().map(|e| (e.host(), e.port())).collect();
        assert_eq!(hosts, [("p", 5432), ("s", 5433)]);
        assert_eq!(c.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
        // One port for all hosts.
        let c: ReplicationConfig = "user=a host=p,s port=7000".parse().unwrap();
        assert!(c.endpoints().iter().all(|e| e.port() == 7000));
        // A URL with a port on some hosts only, and an IPv6 host.
        let c: ReplicationConfig = "postgresql://a@p:6000,[::1],s/db?target_session_attrs=any"
            .parse()
            .unwrap();
        let hosts: Vec<(&str, u16)> = c.endpoints().iter().map(|e| (e.host(), e.port())).collect();
        assert_eq!(hosts, [("p", 6000), ("::1", 5432), ("s", 5432)]);
        assert_eq!(c.get_target_session_attrs(), TargetSessionAttrs::Any);
        // One host: any server, unless asked.
        let c: ReplicationConfig = "user=a host=p".parse().unwrap();
        assert_eq!(c.get_target_session_attrs(), TargetSessionAttrs::Any);
        let c: ReplicationConfig = "user=a host=p target_session_attrs=read-write"
            .parse()
            .unwrap();
        assert_eq!(c.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
        // Display keeps every host and port.
        let c: ReplicationConfig = "user=a host=p,s port=1,2 hostaddr=127.0.0.1,"
            .parse()
            .unwrap();
        let back: ReplicationConfig = c.to_string().parse().unwrap();
        assert_eq!(back.endpoints(), c.endpoints());
        assert_eq!(c.endpoints()[1].hostaddr(), None);
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
