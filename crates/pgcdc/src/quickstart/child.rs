//! [`PgcdcChild`]: `pgcdc run --config <file>` as a child process that can be
//! killed (SIGKILL, a crash) and stopped (SIGTERM, a clean shutdown).

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use super::error::QuickstartError;

/// A running `pgcdc run`; killed if dropped while running.
#[derive(Debug)]
pub(super) struct PgcdcChild {
    child: tokio::process::Child,
    log: PathBuf,
}

impl PgcdcChild {
    /// Starts `<exe> run --config <config>`, appending its stderr to `log`.
    /// `PGCDC_*` variables of the caller are not passed on: they would
    /// override the generated config.
    pub(super) fn spawn(exe: &Path, config: &Path, log: &Path) -> Result<Self, QuickstartError> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| QuickstartError::io("open", log, e))?;
        let mut cmd = tokio::process::Command::new(exe);
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(|n| n.starts_with("PGCDC_")) {
                cmd.env_remove(&name);
            }
        }
        cmd.arg("run")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|source| throwaway_pg::Error::Spawn {
            program: exe.display().to_string(),
            source,
        })?;
        Ok(PgcdcChild {
            child,
            log: log.to_path_buf(),
        })
    }

    /// `Some(status)` once it has exited.
    pub(super) fn exited(&mut self) -> Result<Option<ExitStatus>, QuickstartError> {
        self.child
            .try_wait()
            .map_err(|e| QuickstartError::io("wait for", "pgcdc run", e))
    }

    /// SIGKILL: no flush, no final checkpoint, like a crash. Waits for the exit.
    pub(super) async fn sigkill(&mut self) -> Result<(), QuickstartError> {
        self.child
            .kill()
            .await
            .map_err(|e| QuickstartError::io("kill", "pgcdc run", e))
    }

    /// SIGTERM (a clean shutdown request); waits up to `timeout` for the exit.
    pub(super) async fn sigterm(
        &mut self,
        timeout: Duration,
    ) -> Result<ExitStatus, QuickstartError> {
        if let Some(pid) = self.child.id() {
            // `kill(1)`: this crate has no unsafe code for a libc call.
            let mut kill = std::process::Command::new("kill");
            kill.args(["-TERM", &pid.to_string()]);
            throwaway_pg::run_output(&mut kill, "kill -TERM")?;
        }
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.map_err(|e| QuickstartError::io("wait for", "pgcdc run", e)),
            Err(_) => Err(QuickstartError::Timeout {
                what: "`pgcdc run` to stop after SIGTERM".to_owned(),
                log: self.log_tail(),
            }),
        }
    }

    /// The last lines of its log, for error messages.
    pub(super) fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(15).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}
