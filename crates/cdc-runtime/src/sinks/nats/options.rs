//! The settings of a NATS JetStream sink.

use std::path::PathBuf;
use std::time::Duration;

use crate::encoding::JsonFormat;

/// The default subject template.
pub const DEFAULT_SUBJECT: &str = "{prefix}.{schema}.{table}";

/// How much longer than the checkpoint interval a stream's
/// `duplicate_window` must be: the time a restart may take before the
/// replay reaches JetStream.
pub const DEDUPE_MARGIN: Duration = Duration::from_secs(60);

/// Settings of a [`NatsSink`](super::NatsSink).
#[derive(Clone)]
#[non_exhaustive]
pub struct NatsSinkOptions {
    /// Server URLs (`nats://host:port`, `tls://host:port`).
    pub servers: Vec<String>,
    /// How to authenticate.
    pub auth: NatsAuth,
    /// TLS.
    pub tls: NatsTls,
    /// The subject template: `{prefix}`, `{schema}`, `{table}`, `{partition}`.
    pub subject: String,
    /// `{prefix}`: the Debezium `topic.prefix` by default.
    pub prefix: String,
    /// The number of partitions `{partition}` spreads keys over.
    pub partitions: u32,
    /// The payload's JSON shape.
    pub format: JsonFormat,
    /// Publishes whose PubAck has not arrived yet, at most.
    pub max_in_flight: usize,
    /// How long a PubAck may take before the publish counts as failed.
    pub ack_timeout: Duration,
    /// The first part of every `Nats-Msg-Id` (the job's name).
    pub job: String,
    /// The stream the subjects belong to.
    pub stream: NatsStreamOptions,
    /// The job's checkpoint interval, for the duplicate window rule
    /// (`None`: the job has no checkpoints, and only the margin counts).
    pub checkpoint_interval: Option<Duration>,
}

impl NatsSinkOptions {
    /// Defaults: `nats://127.0.0.1:4222`, no auth or TLS, the default
    /// subject with prefix `pgcdc`, one partition, the Debezium format, a
    /// window of 1,024 publishes, 10 s ack timeout, stream `PGCDC`.
    pub fn new(job: impl Into<String>, format: JsonFormat) -> Self {
        NatsSinkOptions {
            servers: vec!["nats://127.0.0.1:4222".to_owned()],
            auth: NatsAuth::None,
            tls: NatsTls::default(),
            subject: DEFAULT_SUBJECT.to_owned(),
            prefix: "pgcdc".to_owned(),
            partitions: 1,
            format,
            max_in_flight: 1024,
            ack_timeout: Duration::from_secs(10),
            job: job.into(),
            stream: NatsStreamOptions::default(),
            checkpoint_interval: None,
        }
    }

    /// The stream's name: the one set, else the prefix in upper case with
    /// every character a stream name cannot hold as `_`.
    pub fn stream_name(&self) -> String {
        match &self.stream.name {
            Some(name) => name.clone(),
            None => self
                .prefix
                .chars()
                .map(|c| match c {
                    c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                        c.to_ascii_uppercase()
                    }
                    _ => '_',
                })
                .collect(),
        }
    }

    /// The stream's subjects: the ones set, else `{prefix}.>`.
    pub fn stream_subjects(&self) -> Vec<String> {
        if self.stream.subjects.is_empty() {
            vec![format!("{}.>", self.prefix)]
        } else {
            self.stream.subjects.clone()
        }
    }
}

impl std::fmt::Debug for NatsSinkOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSinkOptions")
            .field("servers", &self.servers)
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .field("subject", &self.subject)
            .field("prefix", &self.prefix)
            .field("partitions", &self.partitions)
            .field("max_in_flight", &self.max_in_flight)
            .field("ack_timeout", &self.ack_timeout)
            .field("job", &self.job)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

/// How the sink authenticates to NATS.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum NatsAuth {
    /// No credentials.
    #[default]
    None,
    /// A user and password.
    UserPassword {
        /// The user.
        user: String,
        /// The password (never printed).
        password: String,
    },
    /// A token (never printed).
    Token(String),
    /// An NKey seed, read from a file.
    NkeySeedFile(PathBuf),
    /// A `.creds` file (a user JWT and its NKey seed).
    CredentialsFile(PathBuf),
}

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsAuth::None => f.write_str("None"),
            NatsAuth::UserPassword { user, .. } => write!(f, "UserPassword({user:?}, ***)"),
            NatsAuth::Token(_) => f.write_str("Token(***)"),
            NatsAuth::NkeySeedFile(p) => write!(f, "NkeySeedFile({})", p.display()),
            NatsAuth::CredentialsFile(p) => write!(f, "CredentialsFile({})", p.display()),
        }
    }
}

/// TLS to the NATS servers, with libpq's `sslmode` choice of checks.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct NatsTls {
    /// Which checks.
    pub mode: NatsTlsMode,
    /// Trusted roots (PEM); `verify-ca` and `verify-full` need it.
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM) and its key, for servers that ask for one.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NatsTlsMode {
    /// No TLS (unless a `tls://` URL or the server asks for it: then as `require`).
    #[default]
    Disable,
    /// Encrypted; the certificate is not checked (the handshake signature is).
    Require,
    /// Encrypted; the certificate chains to `ca_file`, any host name.
    VerifyCa,
    /// Encrypted; the certificate chains to `ca_file` and names the host.
    VerifyFull,
}

impl NatsTlsMode {
    /// The setting's name.
    pub fn as_str(self) -> &'static str {
        match self {
            NatsTlsMode::Disable => "disable",
            NatsTlsMode::Require => "require",
            NatsTlsMode::VerifyCa => "verify-ca",
            NatsTlsMode::VerifyFull => "verify-full",
        }
    }
}

/// The JetStream stream the sink publishes into.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NatsStreamOptions {
    /// The stream's name (default: from the prefix, see
    /// [`NatsSinkOptions::stream_name`]).
    pub name: Option<String>,
    /// Create the stream when it is missing.
    pub create: bool,
    /// Its subjects (default `{prefix}.>`).
    pub subjects: Vec<String>,
    /// File or memory storage.
    pub storage: NatsStorage,
    /// Accept a stream with memory storage (created so, or found so). It
    /// loses its messages and its duplicate-id window when the server
    /// restarts, so the sink is at least once on it, not exactly once;
    /// without this the sink refuses it.
    pub allow_memory_storage: bool,
    /// Replicas (1 to 5).
    pub replicas: usize,
    /// How long messages are kept (`None`: for ever).
    pub max_age: Option<Duration>,
    /// How long JetStream remembers a `Nats-Msg-Id` to drop a repeat.
    pub duplicate_window: Duration,
}

impl Default for NatsStreamOptions {
    fn default() -> Self {
        NatsStreamOptions {
            name: None,
            create: true,
            subjects: Vec::new(),
            storage: NatsStorage::File,
            allow_memory_storage: false,
            replicas: 1,
            max_age: None,
            duplicate_window: Duration::from_secs(120),
        }
    }
}

/// Where a stream keeps its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NatsStorage {
    /// On disk.
    #[default]
    File,
    /// In memory (lost when the server restarts: the sink refuses it
    /// unless [`NatsStreamOptions::allow_memory_storage`] is set).
    Memory,
}
