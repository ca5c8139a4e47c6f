//! NATS JetStream servers for the NATS sink's tests: [`NatsServer`] runs its
//! own `nats-server -js` (optionally with user/password, token, NKey or
//! operator-mode JWT auth, and TLS), [`NatsCluster`] a JetStream cluster of
//! several, and [`TestNats`] is a server a test shares or owns; [`read_stream`] reads a
//! whole stream back in stream order and [`delete_stream`] removes one.
//!
//! `nats-server` is looked up on `PATH` and in `/usr/sbin` (Debian's
//! `nats-server` package); `PGCDC_NATS_SERVER` names the binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;

use crate::{TempDir, Watchdog};

/// How long a server may take to answer with JetStream after it starts
/// (a restart recovers its streams first).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The URL of the JetStream server tests share unless `PGCDC_TEST_NATS_URL`
/// names another.
pub const SHARED_NATS_URL: &str = "nats://127.0.0.1:4222";

/// Why a NATS server could not be started, reached or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsError {
    /// `nats-server` could not be started.
    #[error("could not run `{program}`: {source} (install it with `apt-get install nats-server`, or set PGCDC_NATS_SERVER)")]
    Spawn {
        /// The binary.
        program: String,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },
    /// A file of the server could not be written or read.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },
    /// The server exited or did not answer in time.
    #[error("nats-server on port {port}: {what}; its log:\n{log}")]
    NotReady {
        /// Its port.
        port: u16,
        /// What went wrong.
        what: String,
        /// The end of its log.
        log: String,
    },
    /// A NATS or JetStream request failed.
    #[error("{context}: {source}")]
    Nats {
        /// What was being done.
        context: String,
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Certificates could not be made.
    #[error("certificates: {0}")]
    Certificates(String),
    /// Keys or JWTs of operator mode could not be made.
    #[error("JWT: {0}")]
    Jwt(String),
}

impl NatsError {
    fn nats(context: impl Into<String>, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        NatsError::Nats {
            context: context.into(),
            source: Box::new(e),
        }
    }
}

/// The harness's result.
pub type NatsResult<T> = std::result::Result<T, NatsError>;

/// How clients authenticate to a [`NatsServer`].
#[derive(Clone, PartialEq, Eq)]
pub enum NatsAuthConfig {
    /// `authorization { user, password }`.
    UserPassword {
        /// The user.
        user: String,
        /// Its password.
        password: String,
    },
    /// `authorization { token }`.
    Token(String),
    /// `authorization { users = [{ nkey }] }`: one user, by its NKey.
    Nkey {
        /// The user's public key (`U…`), which the server authorizes.
        public_key: String,
        /// Its seed (`SU…`), for the harness's own clients.
        seed: String,
    },
    /// Operator mode: the server trusts an operator and knows its system
    /// account and one account with JetStream (`resolver: MEMORY`,
    /// preloaded); clients present a user JWT that account signed, with
    /// the user's seed (a `.creds` file; see
    /// [`NatsServer::credentials_file`]).
    Operator(NatsOperator),
}

impl std::fmt::Debug for NatsAuthConfig {
    // Secrets stay out of test output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsAuthConfig::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .finish_non_exhaustive(),
            NatsAuthConfig::Token(_) => f.write_str("Token(..)"),
            NatsAuthConfig::Nkey { public_key, .. } => f
                .debug_struct("Nkey")
                .field("public_key", public_key)
                .finish_non_exhaustive(),
            NatsAuthConfig::Operator(operator) => {
                f.debug_tuple("Operator").field(operator).finish()
            }
        }
    }
}

/// An operator, the accounts it signed (the system account and one with
/// JetStream) and a user of the latter, as NATS JWT v2 (made here with
/// `nkeys`, as `nsc` would): what a server in operator mode trusts, and the
/// user's `.creds`.
#[derive(Clone, PartialEq, Eq)]
pub struct NatsOperator {
    /// The operator's JWT (self-signed), which the server trusts.
    pub operator_jwt: String,
    /// The system account's public key (`A…`), named in the operator JWT.
    pub system_account_public_key: String,
    /// The system account's JWT (signed by the operator).
    pub system_account_jwt: String,
    /// The account's public key (`A…`).
    pub account_public_key: String,
    /// The account's JWT (signed by the operator), with JetStream enabled.
    pub account_jwt: String,
    /// The user's public key (`U…`).
    pub user_public_key: String,
    /// The user's `.creds` text: its JWT (signed by the account) and its
    /// seed.
    pub creds: String,
}

impl std::fmt::Debug for NatsOperator {
    // The creds hold the user's seed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsOperator")
            .field("account_public_key", &self.account_public_key)
            .field("user_public_key", &self.user_public_key)
            .finish_non_exhaustive()
    }
}

impl NatsOperator {
    /// A fresh operator, its system account, an account with JetStream and
    /// its user (`name` goes into their names).
    pub fn generate(name: &str) -> NatsResult<NatsOperator> {
        let operator = nkeys::KeyPair::new_operator();
        let system = nkeys::KeyPair::new_account();
        let account = nkeys::KeyPair::new_account();
        // JetStream needs a system account in operator mode.
        let operator_jwt = jwt(
            &operator,
            &operator.public_key(),
            &format!("{name}-operator"),
            serde_json::json!({
                "type": "operator",
                "version": 2,
                "system_account": system.public_key(),
            }),
        )?;
        let account_claims = |limits: serde_json::Value| {
            serde_json::json!({
                "type": "account",
                "version": 2,
                "limits": limits,
            })
        };
        // -1: no limit.
        let mut limits = serde_json::json!({
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
            "wildcards": true, "conn": -1, "leaf": -1,
        });
        let system_jwt = jwt(
            &operator,
            &system.public_key(),
            &format!("{name}-system"),
            account_claims(limits.clone()),
        )?;
        // The JetStream limits enable JetStream for the account.
        if let Some(map) = limits.as_object_mut() {
            for key in ["mem_storage", "disk_storage", "streams", "consumer"] {
                map.insert(key.to_owned(), serde_json::json!(-1));
            }
        }
        let account_jwt = jwt(
            &operator,
            &account.public_key(),
            &format!("{name}-account"),
            account_claims(limits),
        )?;
        let (user_public_key, creds) = user_creds(&account, &format!("{name}-user"))?;
        Ok(NatsOperator {
            operator_jwt,
            system_account_public_key: system.public_key(),
            system_account_jwt: system_jwt,
            account_public_key: account.public_key(),
            account_jwt,
            user_public_key,
            creds,
        })
    }
}

/// A new user that `account` signs: its public key and its `.creds` text
/// (the JWT and the seed, in the blocks `nsc generate creds` writes).
pub fn user_creds(account: &nkeys::KeyPair, name: &str) -> NatsResult<(String, String)> {
    let user = nkeys::KeyPair::new_user();
    let user_jwt = jwt(
        account,
        &user.public_key(),
        name,
        serde_json::json!({
            "type": "user", "version": 2,
            "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
        }),
    )?;
    let seed = user.seed().map_err(|e| NatsError::Jwt(e.to_string()))?;
    let creds = format!(
        "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    );
    Ok((user.public_key(), creds))
}

/// A NATS JWT v2 of `subject` that `issuer` signs:
/// `base64url(header).base64url(claims).base64url(signature)`, unpadded,
/// the signature ed25519 over the first two parts.
fn jwt(
    issuer: &nkeys::KeyPair,
    subject: &str,
    name: &str,
    nats: serde_json::Value,
) -> NatsResult<String> {
    static JTI: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let claims = serde_json::json!({
        "jti": format!(
            "pgcdc-{}-{}-{}",
            std::process::id(),
            JTI.fetch_add(1, Ordering::Relaxed),
            now.as_nanos()
        ),
        "iat": now.as_secs(),
        "iss": issuer.public_key(),
        "sub": subject,
        "name": name,
        "nats": nats,
    });
    let header = base64url(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let signed = format!("{header}.{}", base64url(claims.to_string().as_bytes()));
    let signature = issuer
        .sign(signed.as_bytes())
        .map_err(|e| NatsError::Jwt(format!("signing {name}: {e}")))?;
    Ok(format!("{signed}.{}", base64url(&signature)))
}

/// Base64url without padding (RFC 4648 §5), as JWTs have it.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// How a [`NatsServer`] is set up.
#[derive(Debug, Clone, Default)]
pub struct NatsServerOptions {
    /// Clients must authenticate so.
    pub auth: Option<NatsAuthConfig>,
    /// The server speaks TLS (certificates made by [`NatsPki::generate`]).
    pub tls: bool,
    /// With `tls`: clients must present a certificate signed by the test CA.
    pub verify_clients: bool,
    /// A node of a JetStream cluster (see [`NatsCluster`]).
    pub cluster: Option<NatsClusterNode>,
}

/// How a [`NatsServer`] joins a cluster.
#[derive(Debug, Clone)]
pub struct NatsClusterNode {
    /// `--cluster_name`, the same for every node.
    pub cluster_name: String,
    /// `--name`, one per node (JetStream clustering needs it unique).
    pub server_name: String,
    /// Its route port on 127.0.0.1 (`--cluster`).
    pub cluster_port: u16,
    /// The route ports of the other nodes (`--routes`).
    pub routes: Vec<u16>,
}

/// The TLS material of a [`NatsServer`] with TLS, as PEM files in its
/// directory: a CA, the server's certificate for `localhost` and
/// `127.0.0.1`, and a client certificate, all signed by that CA.
#[derive(Debug, Clone)]
pub struct NatsPki {
    /// The CA certificate clients trust.
    pub ca_file: PathBuf,
    /// The server certificate (SAN `localhost`, `127.0.0.1`).
    pub server_cert_file: PathBuf,
    /// Its key (PKCS#8).
    pub server_key_file: PathBuf,
    /// A client certificate (CN `pgcdc`).
    pub client_cert_file: PathBuf,
    /// Its key.
    pub client_key_file: PathBuf,
}

impl NatsPki {
    /// Makes fresh material with rcgen and writes it into `dir`.
    pub fn generate(dir: &Path) -> NatsResult<NatsPki> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let err = |e: rcgen::Error| NatsError::Certificates(e.to_string());
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "pgcdc NATS test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose| {
            let key = KeyPair::generate().map_err(err)?;
            let mut params = CertificateParams::new(names).map_err(err)?;
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &issuer).map_err(err)?;
            Ok::<_, NatsError>((cert.pem(), key.serialize_pem()))
        };
        let (server_cert, server_key) = leaf(
            vec!["localhost".into(), "127.0.0.1".into()],
            "localhost",
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let (client_cert, client_key) = leaf(vec![], "pgcdc", ExtendedKeyUsagePurpose::ClientAuth)?;
        let pki = NatsPki {
            ca_file: dir.join("ca.pem"),
            server_cert_file: dir.join("server.pem"),
            server_key_file: dir.join("server.key"),
            client_cert_file: dir.join("client.pem"),
            client_key_file: dir.join("client.key"),
        };
        for (path, text) in [
            (&pki.ca_file, ca_cert.pem()),
            (&pki.server_cert_file, server_cert),
            (&pki.server_key_file, server_key),
            (&pki.client_cert_file, client_cert),
            (&pki.client_key_file, client_key),
        ] {
            std::fs::write(path, text).map_err(|source| NatsError::Io {
                action: "write",
                path: path.clone(),
                source,
            })?;
        }
        Ok(pki)
    }
}

/// A `nats-server -js` of its own on a free port of 127.0.0.1, with its
/// store in a temporary directory. [`restart`](Self::restart) keeps the
/// port and the store; dropping it kills the server (so does the end of the
/// test process, through a [`Watchdog`]).
#[derive(Debug)]
pub struct NatsServer {
    port: u16,
    dir: TempDir,
    options: NatsServerOptions,
    pki: Option<NatsPki>,
    child: Option<Child>,
    watchdog: Option<Watchdog>,
    starts: u32,
}

impl NatsServer {
    /// A server with JetStream and no auth or TLS, answering.
    pub async fn start() -> NatsResult<NatsServer> {
        Self::start_with(NatsServerOptions::default()).await
    }

    /// A server set up as `options` says, answering.
    pub async fn start_with(options: NatsServerOptions) -> NatsResult<NatsServer> {
        let [port] = free_ports::<1>()?;
        let mut server = Self::prepare(options, port)?;
        server.launch().await?;
        Ok(server)
    }

    /// A server on `port` with its directory and config written, not
    /// started.
    fn prepare(options: NatsServerOptions, port: u16) -> NatsResult<NatsServer> {
        let dir = TempDir::new("nats");
        let pki = if options.tls {
            Some(NatsPki::generate(dir.path())?)
        } else {
            None
        };
        let server = NatsServer {
            port,
            dir,
            options,
            pki,
            child: None,
            watchdog: None,
            starts: 0,
        };
        server.write_config()?;
        Ok(server)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `nats://127.0.0.1:<port>` (also with TLS: the server asks clients to
    /// upgrade; its certificate names `127.0.0.1` and `localhost`).
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Its TLS material, when it speaks TLS.
    pub fn pki(&self) -> Option<&NatsPki> {
        self.pki.as_ref()
    }

    /// Its JetStream store directory.
    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("jetstream")
    }

    /// A directory of the server's that lives as long as it (for config
    /// files, seeds, credentials).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What it wrote to its log so far (all its runs).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// With [`NatsAuthConfig::Operator`]: the user's `.creds` file, in
    /// [`dir`](Self::dir).
    pub fn credentials_file(&self) -> Option<PathBuf> {
        match &self.options.auth {
            Some(NatsAuthConfig::Operator(_)) => Some(self.dir.path().join("user.creds")),
            _ => None,
        }
    }

    /// How many times it was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// A client with the server's auth and TLS settings.
    pub async fn connect(&self) -> NatsResult<async_nats::Client> {
        let mut opts = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .name("pgcdc-test-harness");
        match &self.options.auth {
            Some(NatsAuthConfig::UserPassword { user, password }) => {
                opts = opts.user_and_password(user.clone(), password.clone());
            }
            Some(NatsAuthConfig::Token(token)) => opts = opts.token(token.clone()),
            Some(NatsAuthConfig::Nkey { seed, .. }) => opts = opts.nkey(seed.clone()),
            Some(NatsAuthConfig::Operator(operator)) => {
                opts = opts
                    .credentials(&operator.creds)
                    .map_err(|e| NatsError::nats("the harness's .creds", e))?;
            }
            None => {}
        }
        if let Some(pki) = &self.pki {
            opts = opts
                .require_tls(true)
                .add_root_certificates(pki.ca_file.clone());
            if self.options.verify_clients {
                opts = opts.add_client_certificate(
                    pki.client_cert_file.clone(),
                    pki.client_key_file.clone(),
                );
            }
        }
        let url = self.url();
        opts.connect(url.as_str())
            .await
            .map_err(|e| NatsError::nats(format!("connect to {url}"), e))
    }

    /// A JetStream context over a new [`connect`](Self::connect)ion.
    pub async fn jetstream(&self) -> NatsResult<jetstream::Context> {
        Ok(jetstream::new(self.connect().await?))
    }

    /// SIGKILLs the server and waits for it to exit; [`start_again`](Self::start_again)
    /// brings it back.
    pub fn kill(&mut self) {
        // The watchdog kills it (`kill -9 <pid>`) while the pid is still
        // ours: the child is reaped only after that.
        if let Some(mut watchdog) = self.watchdog.take() {
            watchdog.trigger_and_wait();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again after [`kill`](Self::kill), on the same port
    /// with the same store, and waits until it answers with JetStream.
    pub async fn start_again(&mut self) -> NatsResult<()> {
        self.kill();
        self.launch().await
    }

    /// [`kill`](Self::kill) then [`start_again`](Self::start_again).
    pub async fn restart(&mut self) -> NatsResult<()> {
        self.kill();
        self.launch().await
    }

    /// Whether the server process is running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.log")
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.conf")
    }

    /// The config file for auth and TLS (the listen address and JetStream
    /// are on the command line).
    fn write_config(&self) -> NatsResult<()> {
        let mut conf = String::new();
        match &self.options.auth {
            Some(NatsAuthConfig::UserPassword { user, password }) => conf.push_str(&format!(
                "authorization {{\n  user: {user:?}\n  password: {password:?}\n}}\n"
            )),
            Some(NatsAuthConfig::Token(token)) => {
                conf.push_str(&format!("authorization {{\n  token: {token:?}\n}}\n"));
            }
            Some(NatsAuthConfig::Nkey { public_key, .. }) => conf.push_str(&format!(
                "authorization {{\n  users: [\n    {{ nkey: {public_key:?} }}\n  ]\n}}\n"
            )),
            Some(NatsAuthConfig::Operator(operator)) => {
                // The operator JWT as a file: what every 2.x reads.
                let operator_file = self.dir.path().join("operator.jwt");
                write_file(&operator_file, &operator.operator_jwt)?;
                if let Some(creds) = self.credentials_file() {
                    write_file(&creds, &operator.creds)?;
                }
                conf.push_str(&format!(
                    "operator: {:?}\nsystem_account: {:?}\nresolver: MEMORY\n\
                     resolver_preload: {{\n  {}: {:?}\n  {}: {:?}\n}}\n",
                    operator_file.display().to_string(),
                    operator.system_account_public_key,
                    operator.system_account_public_key,
                    operator.system_account_jwt,
                    operator.account_public_key,
                    operator.account_jwt,
                ));
            }
            None => {}
        }
        if let Some(pki) = &self.pki {
            let path = |p: &Path| format!("{:?}", p.display().to_string());
            conf.push_str(&format!(
                "tls {{\n  cert_file: {}\n  key_file: {}\n  ca_file: {}\n  verify: {}\n  timeout: 5\n}}\n",
                path(&pki.server_cert_file),
                path(&pki.server_key_file),
                path(&pki.ca_file),
                self.options.verify_clients,
            ));
        }
        write_file(&self.config_path(), &conf)
    }

    async fn launch(&mut self) -> NatsResult<()> {
        self.spawn()?;
        self.wait_ready().await
    }

    /// Starts the process, without waiting for it to answer.
    fn spawn(&mut self) -> NatsResult<()> {
        let log_path = self.log_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|source| NatsError::Io {
                action: "open",
                path: log_path.clone(),
                source,
            })?;
        let program = nats_server_binary();
        let mut command = Command::new(&program);
        command
            .arg("-js")
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .arg("-sd")
            .arg(self.store_dir())
            .arg("-c")
            .arg(self.config_path());
        if let Some(node) = &self.options.cluster {
            let routes: Vec<String> = node
                .routes
                .iter()
                .map(|p| format!("nats://127.0.0.1:{p}"))
                .collect();
            command
                .args(["--name", &node.server_name])
                .args(["--cluster_name", &node.cluster_name])
                .args([
                    "--cluster",
                    &format!("nats://127.0.0.1:{}", node.cluster_port),
                ])
                .args(["--routes", &routes.join(",")]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|source| NatsError::Spawn {
                program: program.display().to_string(),
                source,
            })?;
        let pid = child.id().to_string();
        self.watchdog =
            Watchdog::spawn("kill -9 \"$1\" 2>/dev/null", &[std::ffi::OsStr::new(&pid)]).ok();
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    /// Waits until a client connects and JetStream answers an account
    /// request (after a restart, once the streams are recovered).
    async fn wait_ready(&mut self) -> NatsResult<()> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        let mut last = String::from("no answer");
        loop {
            if !self.is_running() {
                return Err(self.not_ready("it exited".into()));
            }
            // The port answers before JetStream is ready: a TCP connect
            // first (cheap), then a JetStream request.
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                match self.connect().await {
                    Ok(client) => match jetstream_answers(&jetstream::new(client)).await {
                        Ok(()) => return Ok(()),
                        Err(e) => last = format!("JetStream: {e}"),
                    },
                    Err(e) => last = e.to_string(),
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.not_ready(format!("no JetStream answer in time ({last})")));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn not_ready(&self, what: String) -> NatsError {
        let log = self.log();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        NatsError::NotReady {
            port: self.port,
            what,
            log: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn write_file(path: &Path, text: &str) -> NatsResult<()> {
    std::fs::write(path, text).map_err(|source| NatsError::Io {
        action: "write",
        path: path.to_owned(),
        source,
    })
}

/// `PGCDC_NATS_SERVER`, else `nats-server` on `PATH`, else `/usr/sbin/nats-server`.
fn nats_server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("PGCDC_NATS_SERVER") {
        return PathBuf::from(p);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("nats-server"))
            .find(|p| p.is_file())
    });
    on_path.unwrap_or_else(|| PathBuf::from("/usr/sbin/nats-server"))
}

/// `N` distinct ports of 127.0.0.1 nobody listens on right now (all bound
/// at once, so none is handed out twice).
fn free_ports<const N: usize>() -> NatsResult<[u16; N]> {
    let mut listeners = Vec::with_capacity(N);
    let mut ports = [0u16; N];
    for port in &mut ports {
        let listener =
            std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(|source| NatsError::Io {
                action: "bind",
                path: "127.0.0.1:0".into(),
                source,
            })?;
        *port = listener
            .local_addr()
            .map(|a| a.port())
            .map_err(|source| NatsError::Io {
                action: "read the address of",
                path: "127.0.0.1:0".into(),
                source,
            })?;
        listeners.push(listener);
    }
    Ok(ports)
}

/// A JetStream cluster of three `nats-server -js` on free ports of
/// 127.0.0.1, routed to each other, each with its own store; answering
/// (a meta leader elected and room for a stream of three replicas) once
/// [`start`](Self::start) returns. Dropping it kills them all.
#[derive(Debug)]
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts the three nodes and waits until a stream of three replicas
    /// can be created (a probe stream, deleted again).
    pub async fn start() -> NatsResult<NatsCluster> {
        let [c1, c2, c3, p1, p2, p3] = free_ports::<6>()?;
        let cluster_ports = [c1, c2, c3];
        let name = format!("pgcdc-test-{}", std::process::id());
        let mut nodes = Vec::with_capacity(3);
        for (i, (&cluster_port, port)) in cluster_ports.iter().zip([p1, p2, p3]).enumerate() {
            let node = NatsClusterNode {
                cluster_name: name.clone(),
                server_name: format!("{name}-n{i}"),
                cluster_port,
                routes: cluster_ports
                    .iter()
                    .copied()
                    .filter(|p| *p != cluster_port)
                    .collect(),
            };
            nodes.push(NatsServer::prepare(
                NatsServerOptions {
                    cluster: Some(node),
                    ..Default::default()
                },
                port,
            )?);
        }
        // All started before any is waited for: JetStream answers only once
        // a majority of the nodes elected a meta leader.
        for node in &mut nodes {
            node.spawn()?;
        }
        for node in &mut nodes {
            node.wait_ready().await?;
        }
        let cluster = NatsCluster { nodes };
        cluster.wait_for_replicas(3).await?;
        Ok(cluster)
    }

    /// Its nodes.
    pub fn nodes(&self) -> &[NatsServer] {
        &self.nodes
    }

    /// The client URLs of all its nodes.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(NatsServer::url).collect()
    }

    /// A JetStream context over a client of the first node.
    pub async fn jetstream(&self) -> NatsResult<jetstream::Context> {
        match self.nodes.first() {
            Some(node) => node.jetstream().await,
            None => Err(NatsError::NotReady {
                port: 0,
                what: "a cluster without nodes".into(),
                log: String::new(),
            }),
        }
    }

    /// Waits until a stream of `replicas` replicas can be created: every
    /// node has joined the JetStream meta group.
    async fn wait_for_replicas(&self, replicas: usize) -> NatsResult<()> {
        const PROBE: &str = "PGCDC_HARNESS_REPLICAS_PROBE";
        let js = self.jetstream().await?;
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            let created = js
                .create_stream(jetstream::stream::Config {
                    name: PROBE.to_owned(),
                    subjects: vec!["pgcdc_harness_replicas_probe".to_owned()],
                    storage: jetstream::stream::StorageType::Memory,
                    num_replicas: replicas,
                    ..Default::default()
                })
                .await;
            match created {
                Ok(_) => {
                    delete_stream(&js, PROBE).await?;
                    return Ok(());
                }
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    let node = &self.nodes[0];
                    return Err(node.not_ready(format!(
                        "no stream of {replicas} replicas could be created in time ({e})"
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// A JetStream server for a test that needs none of its own: the one at
/// `PGCDC_TEST_NATS_URL` or [`SHARED_NATS_URL`] when it answers with
/// JetStream, else a [`NatsServer`] started for (and dropped with) this
/// value. Tests on a shared server use their own stream names and subjects
/// ([`unique_name`]) and delete their streams.
#[derive(Debug)]
pub struct TestNats {
    url: String,
    own: Option<NatsServer>,
}

impl TestNats {
    /// The shared server if it answers, else one of its own.
    pub async fn new() -> NatsResult<TestNats> {
        let url = std::env::var("PGCDC_TEST_NATS_URL").unwrap_or_else(|_| SHARED_NATS_URL.into());
        if shared_answers(&url).await {
            return Ok(TestNats { url, own: None });
        }
        let own = NatsServer::start().await?;
        Ok(TestNats {
            url: own.url(),
            own: Some(own),
        })
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether it is a server started for this test.
    pub fn is_own(&self) -> bool {
        self.own.is_some()
    }

    /// A JetStream context over a new client.
    pub async fn jetstream(&self) -> NatsResult<jetstream::Context> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .name("pgcdc-test-harness")
            .connect(self.url.as_str())
            .await
            .map_err(|e| NatsError::nats(format!("connect to {}", self.url), e))?;
        Ok(jetstream::new(client))
    }
}

async fn shared_answers(url: &str) -> bool {
    let connect = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(2))
        .connect(url);
    let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(3), connect).await else {
        return false;
    };
    let js = jetstream::new(client);
    matches!(
        tokio::time::timeout(Duration::from_secs(3), jetstream_answers(&js)).await,
        Ok(Ok(()))
    )
}

/// Whether JetStream answers a request: the info of a stream that does not
/// exist (`$JS.API.ACCOUNT.INFO` would do, but async-nats 0.51 cannot parse
/// nats-server 2.9's answer).
async fn jetstream_answers(js: &jetstream::Context) -> Result<(), String> {
    match js.get_stream("PGCDC_HARNESS_PROBE").await {
        Ok(_) => Ok(()),
        Err(e) if is_stream_not_found(&e.kind()) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// A name unique to this test run: `<tag>_<pid>_<counter>_<time>`, lower
/// case, usable as a subject token and (upper-cased) as a stream name.
pub fn unique_name(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() % 1_000_000_000);
    format!(
        "{tag}_{}_{}_{micros}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
    .to_ascii_lowercase()
}

/// A message of a stream, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Its stream sequence.
    pub sequence: u64,
    /// Its subject.
    pub subject: String,
    /// Its headers (the first value of each; NATS headers may repeat).
    pub headers: BTreeMap<String, String>,
    /// Its payload.
    pub payload: Vec<u8>,
}

impl StoredMessage {
    /// The header `name`, if set.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The payload as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.payload).unwrap_or(serde_json::Value::Null)
    }
}

/// The number of messages stream `name` holds (`None`: no such stream).
pub async fn stream_len(js: &jetstream::Context, name: &str) -> NatsResult<Option<u64>> {
    match js.get_stream(name).await {
        Ok(mut stream) => {
            let info = stream
                .info()
                .await
                .map_err(|e| NatsError::nats(format!("stream {name} info"), e))?;
            Ok(Some(info.state.messages))
        }
        Err(e) if is_stream_not_found(&e.kind()) => Ok(None),
        Err(e) => Err(NatsError::nats(format!("get stream {name}"), e)),
    }
}

/// Every message of stream `name`, in stream order, read with an ephemeral
/// pull consumer (no acks) up to the last sequence the stream had when
/// called.
pub async fn read_stream(js: &jetstream::Context, name: &str) -> NatsResult<Vec<StoredMessage>> {
    let mut stream = js
        .get_stream(name)
        .await
        .map_err(|e| NatsError::nats(format!("get stream {name}"), e))?;
    let state = stream
        .info()
        .await
        .map_err(|e| NatsError::nats(format!("stream {name} info"), e))?
        .state
        .clone();
    if state.messages == 0 {
        return Ok(Vec::new());
    }
    let consumer = stream
        .create_consumer(consumer::pull::Config {
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(60),
            ..Default::default()
        })
        .await
        .map_err(|e| NatsError::nats(format!("a consumer of stream {name}"), e))?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(1000)
        .messages()
        .await
        .map_err(|e| NatsError::nats(format!("read stream {name}"), e))?;
    let mut out = Vec::with_capacity(usize::try_from(state.messages).unwrap_or(0));
    loop {
        let next = tokio::time::timeout(Duration::from_secs(30), messages.next())
            .await
            .map_err(|_| NatsError::NotReady {
                port: 0,
                what: format!(
                    "stream {name}: no message after sequence {} of {}",
                    out.last().map_or(0, |m: &StoredMessage| m.sequence),
                    state.last_sequence
                ),
                log: String::new(),
            })?;
        let Some(message) = next else { break };
        let message = message.map_err(|e| NatsError::nats(format!("read stream {name}"), e))?;
        let sequence = message
            .info()
            .map_err(|source| NatsError::Nats {
                context: format!("stream {name}: message info"),
                source,
            })?
            .stream_sequence;
        let headers = message
            .headers
            .as_ref()
            .map(|h| {
                h.iter()
                    .filter_map(|(k, v)| Some((k.to_string(), v.first()?.as_str().to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        out.push(StoredMessage {
            sequence,
            subject: message.subject.to_string(),
            headers,
            payload: message.payload.to_vec(),
        });
        if sequence >= state.last_sequence {
            break;
        }
    }
    let consumer_name = consumer.cached_info().name.clone();
    let _ = stream.delete_consumer(&consumer_name).await;
    Ok(out)
}

/// Creates stream `name` with `subjects` (file storage, defaults
/// otherwise), for tests that need one before the job starts.
pub async fn create_stream(
    js: &jetstream::Context,
    name: &str,
    subjects: &[&str],
) -> NatsResult<()> {
    js.create_stream(jetstream::stream::Config {
        name: name.to_owned(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    })
    .await
    .map(|_| ())
    .map_err(|e| NatsError::nats(format!("create stream {name}"), e))
}

/// Deletes stream `name`; `false` when there was none.
pub async fn delete_stream(js: &jetstream::Context, name: &str) -> NatsResult<bool> {
    match js.delete_stream(name).await {
        Ok(status) => Ok(status.success),
        Err(e)
            if matches!(
                e.kind(),
                jetstream::context::DeleteStreamErrorKind::JetStream(j)
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(NatsError::nats(format!("delete stream {name}"), e)),
    }
}

fn is_stream_not_found(kind: &jetstream::context::GetStreamErrorKind) -> bool {
    matches!(
        kind,
        jetstream::context::GetStreamErrorKind::JetStream(j)
            if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}
