//! Running the real `pgcdc` binary as a child process ([`pgcdc_binary`], [`Pgcdc`]).
//!
//! `cargo test --workspace` builds the `pgcdc` binary of `cdc-runtime` into the
//! same target directory as the test executables (`target/<profile>/pgcdc`,
//! the tests live in `target/<profile>/deps/`). `cargo test -p integration-tests`
//! alone does not build it; [`pgcdc_binary`] then fails with the command to run.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output, Stdio};
use std::time::Duration;

use crate::{HarnessError, Result};

/// How to build the binary when it is missing.
const NOT_BUILT: &str = "run `cargo build -p pgcdc --bin pgcdc` (with the same profile as the \
     tests), or `cargo test --workspace`, which builds it";

/// The `pgcdc` binary built next to the running test executable.
///
/// Fails with [`HarnessError::Missing`] (whose message says
/// `cargo build -p pgcdc --bin pgcdc`) when it is not there.
pub fn pgcdc_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()
        .map_err(|e| HarnessError::io("locate", "the test executable", e))?;
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/pgcdc
    let profile_dir = exe
        .parent()
        .filter(|d| d.file_name().is_some_and(|n| n == "deps"))
        .and_then(Path::parent)
        .or_else(|| exe.parent())
        .ok_or_else(|| HarnessError::Missing {
            path: exe.clone(),
            hint: NOT_BUILT,
        })?;
    let path = profile_dir.join("pgcdc");
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::Missing {
            path,
            hint: NOT_BUILT,
        })
    }
}

/// A `pgcdc` command with a clean environment: no `PGCDC_SOURCE_*` or
/// `PGCDC_PIPELINE_*` overrides leak in from the caller's environment,
/// `RUST_LOG` is `info` unless given, and the monitoring endpoint takes any
/// free port (`PGCDC_METRICS_LISTEN=:0`).
fn command(args: &[&str]) -> Result<tokio::process::Command> {
    let mut cmd = tokio::process::Command::new(pgcdc_binary()?);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("PGCDC_")) {
            cmd.env_remove(&name);
        }
    }
    // Tests run in parallel on one host: each job's monitoring endpoint
    // takes a free port instead of the default 9187.
    cmd.env("RUST_LOG", "info")
        .env("PGCDC_METRICS_LISTEN", ":0")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    Ok(cmd)
}

/// Runs `pgcdc <args>` to completion (stdout and stderr captured), failing
/// with [`HarnessError::Timeout`] if it takes longer than `timeout` (the
/// process is then killed).
pub async fn run_pgcdc(args: &[&str], timeout: Duration) -> Result<Output> {
    let mut cmd = command(args)?;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().map_err(|source| HarnessError::Spawn {
        program: "pgcdc".to_owned(),
        source,
    })?;
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(out) => out.map_err(|source| HarnessError::Spawn {
            program: "pgcdc".to_owned(),
            source,
        }),
        Err(_) => Err(HarnessError::Timeout(format!("`pgcdc {}`", args.join(" ")))),
    }
}

/// A running `pgcdc run --config <file>`, killed (SIGKILL) if dropped while
/// running. Its stderr goes to a file next to the config, readable at any time
/// with [`stderr`](Self::stderr).
#[derive(Debug)]
pub struct Pgcdc {
    child: tokio::process::Child,
    stderr_path: PathBuf,
}

impl Pgcdc {
    /// Starts `pgcdc run --config <config>`; stderr goes to `<config>.stderr`
    /// and stdout is discarded.
    pub fn run(config: &Path) -> Result<Pgcdc> {
        Self::run_with_log(config, "info")
    }

    /// [`run`](Self::run) with the log filter `RUST_LOG=<filter>`.
    pub fn run_with_log(config: &Path, filter: &str) -> Result<Pgcdc> {
        let stderr_path = config.with_extension("stderr");
        let stderr = std::fs::File::create(&stderr_path)
            .map_err(|e| HarnessError::io("create", &stderr_path, e))?;
        let config_arg = config
            .to_str()
            .ok_or_else(|| HarnessError::Config(format!("{} is not UTF-8", config.display())))?;
        let mut cmd = command(&["run", "--config", config_arg])?;
        cmd.env("RUST_LOG", filter)
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = cmd.spawn().map_err(|source| HarnessError::Spawn {
            program: "pgcdc run".to_owned(),
            source,
        })?;
        Ok(Pgcdc { child, stderr_path })
    }

    /// The process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Everything it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Whether it has exited (without waiting); `Some(status)` if so.
    pub fn try_status(&mut self) -> Result<Option<ExitStatus>> {
        self.child
            .try_wait()
            .map_err(|e| HarnessError::io("wait for", "pgcdc", e))
    }

    /// Sends SIGTERM (a clean shutdown request) and waits up to `timeout` for
    /// the process to exit.
    pub async fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        if let Some(pid) = self.child.id() {
            // `kill(1)`: the harness has no unsafe code for a libc call.
            let mut kill = std::process::Command::new("kill");
            kill.args(["-TERM", &pid.to_string()]);
            throwaway_pg::run_output(&mut kill, "kill -TERM")?;
        }
        self.wait(timeout).await
    }

    /// Waits up to `timeout` for the process to exit by itself.
    pub async fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.map_err(|e| HarnessError::io("wait for", "pgcdc", e)),
            Err(_) => Err(HarnessError::Timeout(format!(
                "pgcdc to exit; stderr:\n{}",
                self.stderr()
            ))),
        }
    }
}
