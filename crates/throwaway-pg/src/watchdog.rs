//! [`Watchdog`]: a cleanup process that outlives its parent.
//!
//! A `static` is never dropped, and a killed process runs no destructors, so a
//! server started by a process that dies would leak. The watchdog is a tiny
//! `sh` child whose stdin is a pipe held open by the parent process (the write end
//! is close-on-exec, so no other child inherits it). When the parent process ends
//! for any reason, the kernel closes the pipe, `read` returns, and the script
//! runs its cleanup command. It ignores SIGINT/SIGTERM/SIGHUP and sits in its own
//! process group, so a Ctrl-C aimed at the parent does not stop it first.

use std::process::{Child, ChildStdin, Command, Stdio};

use std::os::unix::process::CommandExt;

use crate::error::{Error, Result};

/// A running watchdog. Dropping it (or the parent process ending) triggers the cleanup.
#[derive(Debug)]
pub struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts `sh -c 'read; <cleanup>'`; `args` become `$1`, `$2`, ... of the script.
    pub fn spawn(cleanup: &str, args: &[&std::ffi::OsStr]) -> Result<Watchdog> {
        let script = format!("trap '' INT TERM HUP\nread _ignored\n{cleanup}\n");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("pgcdc-watchdog")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|source| Error::Spawn {
                program: "sh (watchdog)".to_owned(),
                source,
            })?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Runs the cleanup now and waits for it to finish.
    pub fn trigger_and_wait(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.trigger_and_wait();
    }
}
