//! [`LocalCluster`]: a throwaway PostgreSQL cluster run from local server binaries.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{ClusterSpec, EmbeddedCluster, SUPERUSER};

use crate::conn::{ConnectionInfo, TestDatabase};
use crate::error::{Error, Result};

/// Extra configuration for a dedicated cluster ([`LocalCluster::create`]).
///
/// ```no_run
/// # async fn f() -> Result<(), throwaway_pg::Error> {
/// use throwaway_pg::{ClusterOptions, LocalCluster};
/// let cluster = LocalCluster::create(
///     ClusterOptions::new()
///         .setting("wal_sender_timeout", "'5s'")
///         .superuser_password("secret")
///         .hba_host_line("host all all 127.0.0.1/32 scram-sha-256")
///         .hba_host_line("host replication all 127.0.0.1/32 scram-sha-256"),
/// )
/// .await?;
/// cluster.restart().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    spec: ClusterSpec,
    superuser_password: Option<String>,
}

impl ClusterOptions {
    /// The defaults: [`DEFAULT_SETTINGS`](crate::DEFAULT_SETTINGS), trust authentication.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `name = value` to postgresql.conf (later lines win, so this overrides
    /// the defaults). `value` is written verbatim: quote strings, e.g. `"'5s'"`.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.spec = self.spec.setting(name, value);
        self
    }

    /// Replaces the default TCP lines of pg_hba.conf (`host all|replication all
    /// 127.0.0.1/32 trust`) with the given lines; the unix-socket lines stay
    /// `trust` so the harness itself can always get in.
    pub fn hba_host_line(mut self, line: impl Into<String>) -> Self {
        self.spec = self.spec.hba_host_line(line);
        self
    }

    /// Runs PostgreSQL `major` (e.g. 18) rather than the default binaries;
    /// see [`PgBinaries::find_major`](crate::PgBinaries::find_major).
    pub fn major(mut self, major: u32) -> Self {
        self.spec = self.spec.major(major);
        self
    }

    /// Listens on `port` rather than a free one, e.g. a new standby on the
    /// port of the primary that failed, so clients keep their host list.
    pub fn port(mut self, port: u16) -> Self {
        self.spec = self.spec.port(port);
        self
    }

    /// Sets the superuser's password once the cluster is up (over the socket).
    pub fn superuser_password(mut self, password: impl Into<String>) -> Self {
        self.superuser_password = Some(password.into());
        self
    }

    /// Turns TLS on (`ssl = on`) with `tls`'s server certificate and key. Combine
    /// with `hostssl` lines from [`hba_host_line`](Self::hba_host_line) to require it.
    pub fn tls(self, tls: &crate::TestTls) -> Self {
        self.data_file("server.crt", tls.server_cert_pem.as_bytes())
            .data_file("server.key", tls.server_key_pem.as_bytes())
            .setting("ssl", "on")
            .setting("ssl_cert_file", "'server.crt'")
            .setting("ssl_key_file", "'server.key'")
    }

    /// Writes a file into the data directory, mode 0600, owned by the server user
    /// (e.g. `server.crt` / `server.key` for `ssl = on`).
    pub fn data_file(mut self, name: impl Into<String>, contents: impl Into<Vec<u8>>) -> Self {
        self.spec = self.spec.data_file(name, contents);
        self
    }
}

/// A PostgreSQL cluster in a temporary directory, owned by the caller: the
/// async face of [`crate::EmbeddedCluster`].
///
/// `initdb` runs with `--no-locale -E UTF8 -U postgres -A trust`; the server
/// listens on `127.0.0.1` on a free port and on a unix socket in the temp dir,
/// with [`DEFAULT_SETTINGS`](crate::DEFAULT_SETTINGS). When the test process
/// is root, the server programs run as the `postgres` system user.
///
/// Dropping it stops the server (immediate shutdown) and removes the directory;
/// a watchdog process does the same if the test process dies first.
#[derive(Debug, Clone)]
pub struct LocalCluster {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cluster: EmbeddedCluster,
    password: Option<String>,
}

static DB_COUNTER: AtomicU64 = AtomicU64::new(0);

impl LocalCluster {
    /// Initialises and starts a new cluster with `options`.
    pub async fn create(options: ClusterOptions) -> Result<LocalCluster> {
        let spec = options.spec;
        let cluster = blocking(move || EmbeddedCluster::create(&spec)).await?;
        let cluster = LocalCluster {
            inner: Arc::new(Inner {
                cluster,
                password: options.superuser_password.clone(),
            }),
        };
        if let Some(password) = &options.superuser_password {
            let client = cluster.socket_connect("postgres").await?;
            let sql = format!(
                "ALTER ROLE {SUPERUSER} PASSWORD '{}'",
                password.replace('\'', "''")
            );
            client
                .batch_execute(&sql)
                .await
                .map_err(|e| Error::pg("set the superuser password", e))?;
        }
        Ok(cluster)
    }

    /// The TCP port (fixed for the life of the cluster, also across restarts).
    pub fn port(&self) -> u16 {
        self.inner.cluster.port()
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        self.inner.cluster.data_dir()
    }

    /// The directory holding the unix socket (and the data dir and log).
    pub fn socket_dir(&self) -> &Path {
        self.inner.cluster.root_dir()
    }

    /// The server log file.
    pub fn log_path(&self) -> &Path {
        self.inner.cluster.log_path()
    }

    /// The server log so far (for failure messages).
    pub fn log_contents(&self) -> String {
        self.inner.cluster.log_contents()
    }

    /// `postgres --version` of the binaries in use.
    pub fn server_version(&self) -> &str {
        self.inner.cluster.server_version()
    }

    /// Major version of the binaries in use.
    pub fn major_version(&self) -> u32 {
        self.inner.cluster.major_version()
    }

    /// Superuser connection to the `postgres` database over TCP.
    pub fn admin(&self) -> ConnectionInfo {
        ConnectionInfo {
            host: "127.0.0.1".to_owned(),
            port: self.inner.cluster.port(),
            user: SUPERUSER.to_owned(),
            password: self.inner.password.clone(),
            dbname: "postgres".to_owned(),
            socket_dir: Some(self.inner.cluster.root_dir().to_path_buf()),
        }
    }

    /// Creates a fresh, uniquely named database.
    pub async fn create_database(&self) -> Result<TestDatabase> {
        create_database(&self.admin()).await
    }

    /// Starts the server again after [`stop`](Self::stop) or [`kill`](Self::kill).
    pub async fn start(&self) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        blocking(move || inner.cluster.start()).await
    }

    /// Stops the server (fast shutdown: clients are disconnected, a shutdown
    /// checkpoint is written). Waits until it is down.
    pub async fn stop(&self) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        blocking(move || inner.cluster.stop()).await
    }

    /// Stops the server without a checkpoint (immediate shutdown, like a crash:
    /// the next start runs crash recovery). Waits until it is down.
    pub async fn kill(&self) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        blocking(move || inner.cluster.kill()).await
    }

    /// A streaming physical standby of this cluster, started on its own port
    /// and kept in sync through the physical slot `slot` (created on this
    /// cluster now); on PostgreSQL 17+ it synchronises failover slots. See
    /// [`EmbeddedCluster::create_standby`] for its settings; `options` adds
    /// to them (its password and TLS settings are not applied: the standby
    /// copies the primary's roles and files).
    pub async fn create_standby(
        &self,
        options: ClusterOptions,
        slot: &str,
    ) -> Result<LocalCluster> {
        let inner = Arc::clone(&self.inner);
        let spec = options.spec;
        let slot = slot.to_owned();
        let cluster = blocking(move || inner.cluster.create_standby(&spec, &slot)).await?;
        Ok(LocalCluster {
            inner: Arc::new(Inner {
                cluster,
                password: self.inner.password.clone(),
            }),
        })
    }

    /// Promotes a standby (`pg_ctl promote -w`): it leaves recovery and
    /// accepts writes. Waits until it does.
    pub async fn promote(&self) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        blocking(move || inner.cluster.promote()).await
    }

    /// [`stop`](Self::stop) then [`start`](Self::start), on the same port.
    pub async fn restart(&self) -> Result<()> {
        self.stop().await?;
        self.start().await
    }

    /// Whether the postmaster is running (`pg_ctl status`).
    pub async fn is_running(&self) -> Result<bool> {
        let inner = Arc::clone(&self.inner);
        blocking(move || inner.cluster.is_running()).await
    }

    async fn socket_connect(&self, dbname: &str) -> Result<tokio_postgres::Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(self.inner.cluster.root_dir())
            .port(self.inner.cluster.port())
            .user(SUPERUSER)
            .dbname(dbname);
        crate::conn::connect_with(&config, "connect over the unix socket").await
    }
}

/// Runs blocking process work off the async worker threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()))?
}

/// Creates `pgcdc_t_<pid>_<n>_<nanos>` through `admin` and returns its handle.
pub(crate) async fn create_database(admin: &ConnectionInfo) -> Result<TestDatabase> {
    let n = DB_COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!("pgcdc_t_{}_{n}_{nanos:x}", std::process::id());
    let client = admin.connect().await?;
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(|e| Error::pg(format!("CREATE DATABASE {name}"), e))?;
    Ok(TestDatabase {
        info: admin.with_dbname(name),
    })
}
