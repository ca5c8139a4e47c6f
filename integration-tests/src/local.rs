//! [`LocalCluster`]: a throwaway PostgreSQL cluster run from local server binaries.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::binaries::{run_output, PgBinaries, RunAs};
use crate::conn::{ConnectionInfo, TestDatabase};
use crate::error::{HarnessError, Result};
use crate::watchdog::Watchdog;

/// The superuser every harness cluster is initialised with.
pub const SUPERUSER: &str = "postgres";

/// Settings every local cluster gets (before [`ClusterOptions::setting`] overrides).
///
/// `fsync=off` and `full_page_writes=off` trade crash safety of the *throwaway*
/// cluster against OS crashes for test speed; tests that need a really durable
/// server turn them back on with [`ClusterOptions::setting`].
/// `synchronous_commit` stays `on`: the SQL decoding functions only read WAL up
/// to the flush position, so with it off a just-committed change may be missing
/// from `pg_logical_slot_get_changes` for up to `wal_writer_delay`.
pub const DEFAULT_SETTINGS: &[(&str, &str)] = &[
    ("listen_addresses", "'127.0.0.1'"),
    ("wal_level", "logical"),
    ("max_replication_slots", "20"),
    ("max_wal_senders", "20"),
    ("max_prepared_transactions", "20"),
    ("max_connections", "150"),
    ("fsync", "off"),
    ("full_page_writes", "off"),
    ("timezone", "'UTC'"),
    ("log_timezone", "'UTC'"),
    ("lc_messages", "'C'"),
    ("log_min_messages", "warning"),
    ("log_line_prefix", "'%m [%p] %q%a '"),
];

/// Extra configuration for a dedicated cluster ([`LocalCluster::create`]).
///
/// ```no_run
/// # async fn f() -> Result<(), integration_tests::HarnessError> {
/// use integration_tests::{ClusterOptions, LocalCluster};
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
    settings: Vec<(String, String)>,
    hba_host_lines: Vec<String>,
    superuser_password: Option<String>,
    data_files: Vec<(String, Vec<u8>)>,
}

impl ClusterOptions {
    /// The defaults: [`DEFAULT_SETTINGS`], trust authentication.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `name = value` to postgresql.conf (later lines win, so this overrides
    /// the defaults). `value` is written verbatim: quote strings, e.g. `"'5s'"`.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    /// Replaces the default TCP lines of pg_hba.conf (`host all|replication all
    /// 127.0.0.1/32 trust`) with the given lines; the unix-socket lines stay
    /// `trust` so the harness itself can always get in.
    pub fn hba_host_line(mut self, line: impl Into<String>) -> Self {
        self.hba_host_lines.push(line.into());
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
        self.data_files.push((name.into(), contents.into()));
        self
    }
}

/// A PostgreSQL cluster in a temporary directory, owned by the caller.
///
/// `initdb` runs with `--no-locale -E UTF8 -U postgres -A trust`; the server
/// listens on `127.0.0.1` on a free port and on a unix socket in the temp dir,
/// with [`DEFAULT_SETTINGS`]. When the test process is root, the server programs
/// run as the `postgres` system user.
///
/// Dropping it stops the server (immediate shutdown) and removes the directory;
/// a watchdog process does the same if the test process dies first.
#[derive(Debug, Clone)]
pub struct LocalCluster {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    bins: PgBinaries,
    run_as: RunAs,
    root: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    password: Option<String>,
    watchdog: Mutex<Option<Watchdog>>,
}

static CLUSTER_COUNTER: AtomicU64 = AtomicU64::new(0);
static DB_COUNTER: AtomicU64 = AtomicU64::new(0);

impl LocalCluster {
    /// Initialises and starts a new cluster with `options`.
    pub async fn create(options: ClusterOptions) -> Result<LocalCluster> {
        let inner = blocking(move || Inner::create(&options).map(|i| (i, options))).await?;
        let (inner, options) = inner;
        let cluster = LocalCluster {
            inner: Arc::new(inner),
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
                .map_err(|e| HarnessError::pg("set the superuser password", e))?;
        }
        Ok(cluster)
    }

    /// The TCP port (fixed for the life of the cluster, also across restarts).
    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.inner.data
    }

    /// The directory holding the unix socket (and the data dir and log).
    pub fn socket_dir(&self) -> &Path {
        &self.inner.root
    }

    /// The server log file.
    pub fn log_path(&self) -> &Path {
        &self.inner.log
    }

    /// The server log so far (for failure messages).
    pub fn log_contents(&self) -> String {
        fs::read_to_string(&self.inner.log).unwrap_or_default()
    }

    /// `postgres --version` of the binaries in use.
    pub fn server_version(&self) -> &str {
        &self.inner.bins.version
    }

    /// Major version of the binaries in use.
    pub fn major_version(&self) -> u32 {
        self.inner.bins.major
    }

    /// Superuser connection to the `postgres` database over TCP.
    pub fn admin(&self) -> ConnectionInfo {
        ConnectionInfo {
            host: "127.0.0.1".to_owned(),
            port: self.inner.port,
            user: SUPERUSER.to_owned(),
            password: self.inner.password.clone(),
            dbname: "postgres".to_owned(),
            socket_dir: Some(self.inner.root.clone()),
        }
    }

    /// Creates a fresh, uniquely named database.
    pub async fn create_database(&self) -> Result<TestDatabase> {
        create_database(&self.admin()).await
    }

    /// Starts the server again after [`stop`](Self::stop) or [`kill`](Self::kill).
    pub async fn start(&self) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        blocking(move || inner.pg_ctl_start()).await
    }

    /// Stops the server (fast shutdown: clients are disconnected, a shutdown
    /// checkpoint is written). Waits until it is down.
    pub async fn stop(&self) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        blocking(move || inner.pg_ctl_stop("fast")).await
    }

    /// Stops the server without a checkpoint (immediate shutdown, like a crash:
    /// the next start runs crash recovery). Waits until it is down.
    pub async fn kill(&self) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        blocking(move || inner.pg_ctl_stop("immediate")).await
    }

    /// [`stop`](Self::stop) then [`start`](Self::start), on the same port.
    pub async fn restart(&self) -> Result<()> {
        self.stop().await?;
        self.start().await
    }

    /// Whether the postmaster is running (`pg_ctl status`).
    pub async fn is_running(&self) -> Result<bool> {
        let inner = Arc::clone(&self.inner);
        blocking(move || {
            let mut cmd = inner.pg_ctl();
            cmd.arg("status")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let status = cmd.status().map_err(|source| HarnessError::Spawn {
                program: "pg_ctl status".to_owned(),
                source,
            })?;
            Ok(status.success())
        })
        .await
    }

    async fn socket_connect(&self, dbname: &str) -> Result<tokio_postgres::Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(&self.inner.root)
            .port(self.inner.port)
            .user(SUPERUSER)
            .dbname(dbname);
        crate::conn::connect_with(&config, "connect over the unix socket").await
    }
}

impl Inner {
    fn create(options: &ClusterOptions) -> Result<Inner> {
        let bins = PgBinaries::find()?;
        let run_as = RunAs::detect()?;
        let root = make_root_dir()?;
        run_as.chown(&root)?;
        let data = root.join("data");
        let log = root.join("server.log");

        // From here on, a failure must not leak the directory.
        let result = (|| {
            let mut initdb = run_as.command(&bins.tool("initdb"), &root);
            initdb
                .arg("-D")
                .arg(&data)
                .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-locale"])
                .args(["--no-sync", "--no-instructions"]);
            run_output(&mut initdb, "initdb")?;
            write_config(&data, options, &root, &run_as)?;
            // Watchdog before the first start, so there is no window without one.
            let watchdog = spawn_watchdog(&data, &root)?;
            Ok(watchdog)
        })();
        let watchdog = match result {
            Ok(w) => w,
            Err(e) => {
                let _ = fs::remove_dir_all(&root);
                return Err(e);
            }
        };

        let mut inner = Inner {
            bins,
            run_as,
            root,
            data,
            log,
            port: 0,
            password: options.superuser_password.clone(),
            watchdog: Mutex::new(Some(watchdog)),
        };
        // Pick a free port; another process may grab it before the server binds,
        // so retry with a new one when that happens.
        let mut last_error = None;
        for _ in 0..8 {
            let port = free_port()?;
            inner.port = port;
            write_port(&inner.data, port, &inner.run_as)?;
            let log_len = fs::metadata(&inner.log).map(|m| m.len()).unwrap_or(0);
            match inner.pg_ctl_start() {
                Ok(()) => return Ok(inner),
                Err(e) => {
                    let log = fs::read(&inner.log).unwrap_or_default();
                    let new_log =
                        String::from_utf8_lossy(log.get(log_len as usize..).unwrap_or(&[]))
                            .into_owned();
                    if new_log.contains("could not bind") || new_log.contains("already in use") {
                        last_error = Some(e);
                        continue;
                    }
                    return Err(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| {
            HarnessError::Unsuitable("could not find a free TCP port".to_owned())
        }))
    }

    fn pg_ctl(&self) -> std::process::Command {
        let mut cmd = self.run_as.command(&self.bins.tool("pg_ctl"), &self.root);
        cmd.arg("-D").arg(&self.data);
        cmd
    }

    fn pg_ctl_start(&self) -> Result<()> {
        let mut cmd = self.pg_ctl();
        cmd.arg("-l")
            .arg(&self.log)
            .args(["-w", "-t", "60", "-s", "start"])
            // pg_ctl's stdout is inherited by the postmaster; don't hold our pipes.
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        run_output(&mut cmd, "pg_ctl start").map_err(|e| self.with_log(e))?;
        Ok(())
    }

    fn pg_ctl_stop(&self, mode: &str) -> Result<()> {
        let mut cmd = self.pg_ctl();
        cmd.args(["-w", "-t", "60", "-s", "-m", mode, "stop"]);
        run_output(&mut cmd, "pg_ctl stop").map_err(|e| self.with_log(e))?;
        Ok(())
    }

    fn with_log(&self, e: HarnessError) -> HarnessError {
        match e {
            HarnessError::CommandFailed {
                command,
                status,
                output,
            } => {
                let log = fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                let mut output = output;
                let _ = write!(output, "\n--- server log (last lines) ---");
                for line in tail.into_iter().rev() {
                    let _ = write!(output, "\n{line}");
                }
                HarnessError::CommandFailed {
                    command,
                    status,
                    output,
                }
            }
            other => other,
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.pg_ctl_stop("immediate");
        let _ = fs::remove_dir_all(&self.root);
        if let Ok(mut guard) = self.watchdog.lock() {
            if let Some(mut w) = guard.take() {
                w.trigger_and_wait();
            }
        }
    }
}

/// Runs blocking process work off the async worker threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| HarnessError::Task(e.to_string()))?
}

fn make_root_dir() -> Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    // Kept short: unix socket paths are limited to ~107 bytes.
    let base = std::env::temp_dir();
    for attempt in 0..100u32 {
        let n = CLUSTER_COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!(
            "pgcdc-{}-{n}-{:x}",
            std::process::id(),
            nanos.wrapping_add(attempt)
        ));
        match fs::create_dir(&dir) {
            Ok(()) => {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                    .map_err(|e| HarnessError::io("chmod", &dir, e))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(HarnessError::io("create", dir, e)),
        }
    }
    Err(HarnessError::Unsuitable(
        "could not create a unique temp directory".to_owned(),
    ))
}

fn free_port() -> Result<u16> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| HarnessError::io("bind", "127.0.0.1:0", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| HarnessError::io("bind", "127.0.0.1:0", e))?
        .port();
    Ok(port)
}

fn write_file(path: &Path, contents: &[u8], mode: u32, run_as: &RunAs) -> Result<()> {
    let mut f = fs::File::create(path).map_err(|e| HarnessError::io("create", path, e))?;
    f.write_all(contents)
        .map_err(|e| HarnessError::io("write", path, e))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| HarnessError::io("chmod", path, e))?;
    run_as.chown(path)
}

fn write_config(data: &Path, options: &ClusterOptions, root: &Path, run_as: &RunAs) -> Result<()> {
    let conf = data.join("postgresql.conf");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(&conf)
        .map_err(|e| HarnessError::io("open", &conf, e))?;
    f.write_all(b"\n# pgcdc test harness\ninclude 'pgcdc.conf'\ninclude 'pgcdc-port.conf'\n")
        .map_err(|e| HarnessError::io("write", &conf, e))?;

    let mut settings = String::from("# written by the pgcdc test harness\n");
    let socket_dir = root.display().to_string().replace('\'', "''");
    let _ = writeln!(settings, "unix_socket_directories = '{socket_dir}'");
    for (name, value) in DEFAULT_SETTINGS {
        let _ = writeln!(settings, "{name} = {value}");
    }
    for (name, value) in &options.settings {
        let _ = writeln!(settings, "{name} = {value}");
    }
    write_file(&data.join("pgcdc.conf"), settings.as_bytes(), 0o600, run_as)?;

    let mut hba = String::from(
        "# written by the pgcdc test harness\n\
         local all all trust\n\
         local replication all trust\n",
    );
    if options.hba_host_lines.is_empty() {
        hba.push_str(
            "host all all 127.0.0.1/32 trust\n\
             host replication all 127.0.0.1/32 trust\n",
        );
    } else {
        for line in &options.hba_host_lines {
            let _ = writeln!(hba, "{line}");
        }
    }
    write_file(&data.join("pg_hba.conf"), hba.as_bytes(), 0o600, run_as)?;

    for (name, contents) in &options.data_files {
        if name.contains('/') || name.starts_with('.') {
            return Err(HarnessError::Config(format!(
                "data file name {name:?} must be a plain file name"
            )));
        }
        write_file(&data.join(name), contents, 0o600, run_as)?;
    }
    Ok(())
}

fn write_port(data: &Path, port: u16, run_as: &RunAs) -> Result<()> {
    write_file(
        &data.join("pgcdc-port.conf"),
        format!("port = {port}\n").as_bytes(),
        0o600,
        run_as,
    )
}

/// `$1` = data dir, `$2` = root dir. SIGQUIT to the postmaster is an immediate
/// shutdown; it works whoever runs the server when the watchdog is root, and for
/// the same user otherwise (pg_ctl itself refuses to run as root).
const CLUSTER_CLEANUP: &str = r#"
pidfile="$1/postmaster.pid"
if [ -f "$pidfile" ]; then
  pid=$(head -n 1 "$pidfile")
  if [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null; then
    i=0
    while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  fi
fi
rm -rf "$2"
"#;

fn spawn_watchdog(data: &Path, root: &Path) -> Result<Watchdog> {
    Watchdog::spawn(CLUSTER_CLEANUP, &[data.as_os_str(), root.as_os_str()])
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
        .map_err(|e| HarnessError::pg(format!("CREATE DATABASE {name}"), e))?;
    Ok(TestDatabase {
        info: admin.with_dbname(name),
    })
}
