//! `[[sinks]] type = "nats"`: a NATS JetStream sink.

use std::path::PathBuf;
use std::time::Duration;

use cdc_runtime::encoding::DebeziumOptions;
use cdc_runtime::sinks::nats::{
    NatsAuth, NatsSinkOptions, NatsStorage, NatsStreamOptions, NatsTls, NatsTlsMode,
    DEFAULT_SUBJECT,
};
use serde::Deserialize;

use super::{invalid, ConfigFileError, Format, Secret};

/// A NATS sink's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSinkConfig {
    /// Server URLs (default `["nats://127.0.0.1:4222"]`).
    #[serde(default = "default_servers")]
    pub servers: Vec<String>,
    /// Subject template: `{prefix}`, `{schema}`, `{table}`, `{partition}`.
    #[serde(default)]
    pub subject: Option<String>,
    /// `{prefix}` (default: the `[debezium]` `topic.prefix`).
    #[serde(default)]
    pub prefix: Option<String>,
    /// How many partitions `{partition}` spreads keys over.
    #[serde(default = "one")]
    pub partitions: u32,
    /// JSON shape.
    #[serde(default)]
    pub format: Format,
    /// Debezium format: payloads `{"key":…,"value":…}`, with tombstones.
    #[serde(default)]
    pub key: bool,
    /// Publish schema-change events in the Debezium format too.
    #[serde(default)]
    pub schema_changes: bool,
    /// Publishes awaiting their PubAck, at most.
    #[serde(default = "default_in_flight")]
    pub max_in_flight: usize,
    /// Seconds a PubAck may take.
    #[serde(default = "default_ack_timeout")]
    pub ack_timeout_secs: u64,
    /// The `Nats-Msg-Id` prefix (default: the checkpoint job's name, else the slot).
    #[serde(default)]
    pub job: Option<String>,
    /// User (with `password`).
    #[serde(default)]
    pub user: Option<String>,
    /// Password (not logged).
    #[serde(default)]
    pub password: Option<Secret>,
    /// Token (not logged).
    #[serde(default)]
    pub token: Option<Secret>,
    /// An NKey seed file.
    #[serde(default)]
    pub nkey_seed_file: Option<PathBuf>,
    /// A `.creds` file.
    #[serde(default)]
    pub credentials_file: Option<PathBuf>,
    /// `disable`, `require`, `verify-ca` or `verify-full`.
    #[serde(default)]
    pub tls: TlsModeConfig,
    /// Trusted CA certificates (PEM).
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// Client certificate (PEM).
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    /// Client key (PEM).
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// The stream.
    #[serde(default)]
    pub stream: StreamConfig,
}

/// `tls` of a NATS sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsModeConfig {
    /// No TLS.
    #[default]
    Disable,
    /// Encrypt, no certificate check.
    Require,
    /// Check the chain.
    VerifyCa,
    /// Check the chain and host name.
    VerifyFull,
}

/// `[sinks.stream]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    /// Name (default: the prefix in upper case).
    #[serde(default)]
    pub name: Option<String>,
    /// Create it when missing.
    #[serde(default = "yes")]
    pub create: bool,
    /// Subjects (default `["{prefix}.>"]`).
    #[serde(default)]
    pub subjects: Vec<String>,
    /// `file` or `memory`.
    #[serde(default)]
    pub storage: StorageConfig,
    /// Accept a stream with memory storage, and at-least-once delivery
    /// with it (without this the sink refuses one).
    #[serde(default)]
    pub allow_memory_storage: bool,
    /// Replicas.
    #[serde(default = "one_usize")]
    pub replicas: usize,
    /// Seconds messages are kept (0: for ever).
    #[serde(default)]
    pub max_age_secs: u64,
    /// Seconds JetStream remembers message ids.
    #[serde(default = "default_window")]
    pub duplicate_window_secs: u64,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            name: None,
            create: true,
            subjects: Vec::new(),
            storage: StorageConfig::File,
            allow_memory_storage: false,
            replicas: 1,
            max_age_secs: 0,
            duplicate_window_secs: default_window(),
        }
    }
}

/// `storage` of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageConfig {
    /// On disk.
    #[default]
    File,
    /// In memory (lost when the server restarts: not exactly once, so
    /// refused unless `allow_memory_storage`).
    Memory,
}

fn default_servers() -> Vec<String> {
    vec!["nats://127.0.0.1:4222".to_owned()]
}
fn one() -> u32 {
    1
}
fn one_usize() -> usize {
    1
}
fn yes() -> bool {
    true
}
fn default_in_flight() -> usize {
    1024
}
fn default_ack_timeout() -> u64 {
    10
}
fn default_window() -> u64 {
    120
}

impl NatsSinkConfig {
    /// The typed settings (the job fills in its name and checkpoint interval).
    pub fn options(&self, debezium: &DebeziumOptions) -> Result<NatsSinkOptions, ConfigFileError> {
        let format = self
            .format
            .json_format(debezium, self.schema_changes, self.key);
        let mut o = NatsSinkOptions::new(self.job.clone().unwrap_or_default(), format);
        if self.servers.is_empty() {
            return Err(invalid("sinks.servers", "name at least one server"));
        }
        o.servers = self.servers.clone();
        o.subject = self
            .subject
            .clone()
            .unwrap_or_else(|| DEFAULT_SUBJECT.to_owned());
        o.prefix = self.prefix.clone().unwrap_or_else(|| debezium.name.clone());
        o.partitions = self.partitions;
        if self.max_in_flight == 0 {
            return Err(invalid("sinks.max_in_flight", "must be at least 1"));
        }
        o.max_in_flight = self.max_in_flight;
        if self.ack_timeout_secs == 0 {
            return Err(invalid("sinks.ack_timeout_secs", "must be at least 1"));
        }
        o.ack_timeout = Duration::from_secs(self.ack_timeout_secs);
        o.auth = self.auth()?;
        o.tls = self.tls()?;
        let s = &self.stream;
        if !(1..=5).contains(&s.replicas) {
            return Err(invalid("sinks.stream.replicas", "must be 1 to 5"));
        }
        let mut stream = NatsStreamOptions::default();
        stream.name = s.name.clone();
        stream.create = s.create;
        stream.subjects = s.subjects.clone();
        stream.storage = match s.storage {
            StorageConfig::File => NatsStorage::File,
            StorageConfig::Memory => NatsStorage::Memory,
        };
        stream.allow_memory_storage = s.allow_memory_storage;
        stream.replicas = s.replicas;
        stream.max_age = (s.max_age_secs > 0).then(|| Duration::from_secs(s.max_age_secs));
        stream.duplicate_window = Duration::from_secs(s.duplicate_window_secs);
        o.stream = stream;
        Ok(o)
    }

    fn auth(&self) -> Result<NatsAuth, ConfigFileError> {
        let set = [
            self.user.is_some() || self.password.is_some(),
            self.token.is_some(),
            self.nkey_seed_file.is_some(),
            self.credentials_file.is_some(),
        ];
        if set.iter().filter(|s| **s).count() > 1 {
            return Err(invalid(
                "sinks",
                "a nats sink takes one of user/password, token, nkey_seed_file and credentials_file",
            ));
        }
        Ok(match (&self.user, &self.password) {
            (Some(user), Some(password)) => NatsAuth::UserPassword {
                user: user.clone(),
                password: password.expose().to_owned(),
            },
            (Some(_), None) | (None, Some(_)) => {
                return Err(invalid(
                    "sinks",
                    "a nats sink's user needs a password and a password a user",
                ))
            }
            (None, None) => match (&self.token, &self.nkey_seed_file, &self.credentials_file) {
                (Some(t), _, _) => NatsAuth::Token(t.expose().to_owned()),
                (_, Some(p), _) => NatsAuth::NkeySeedFile(p.clone()),
                (_, _, Some(p)) => NatsAuth::CredentialsFile(p.clone()),
                _ => NatsAuth::None,
            },
        })
    }

    fn tls(&self) -> Result<NatsTls, ConfigFileError> {
        let mut tls = NatsTls::default();
        tls.mode = match self.tls {
            TlsModeConfig::Disable => NatsTlsMode::Disable,
            TlsModeConfig::Require => NatsTlsMode::Require,
            TlsModeConfig::VerifyCa => NatsTlsMode::VerifyCa,
            TlsModeConfig::VerifyFull => NatsTlsMode::VerifyFull,
        };
        tls.ca_file = self.tls_ca_file.clone();
        tls.client_cert = match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            _ => {
                return Err(invalid(
                    "sinks.tls_cert_file",
                    "a client certificate needs both tls_cert_file and tls_key_file",
                ))
            }
        };
        if tls.mode == NatsTlsMode::Disable && (tls.ca_file.is_some() || tls.client_cert.is_some())
        {
            return Err(invalid(
                "sinks.tls",
                "tls_ca_file and tls_cert_file need tls = \"require\", \"verify-ca\" or \"verify-full\"",
            ));
        }
        if matches!(tls.mode, NatsTlsMode::VerifyCa | NatsTlsMode::VerifyFull)
            && tls.ca_file.is_none()
        {
            return Err(invalid(
                "sinks.tls_ca_file",
                "tls = \"verify-ca\" and \"verify-full\" need tls_ca_file, the CA that signed the server's certificate",
            ));
        }
        Ok(tls)
    }
}
