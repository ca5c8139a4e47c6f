//! `pgcdc`'s exit status: what kind of failure stopped it, so scripts and
//! supervisors can tell a configuration to fix from a server to wait for.

use cdc_runtime::checkpoint::RecoveryError;
use cdc_runtime::job::{JobError, LockError};
use cdc_runtime::pipeline::PipelineError;
use cdc_runtime::replication::ReplicationError;
use cdc_runtime::setup::SetupError;
use checkpoint_api::CheckpointError;

/// The exit statuses, as `pgcdc --help` lists them.
pub const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  success (run: stopped cleanly on SIGINT/SIGTERM)
  1  any other failure (the server is not ready, a sink or the pipeline failed, ...)
  2  configuration or command-line error (pgcdc.toml, PGCDC_* variables, arguments)
  3  cannot connect to the source or the checkpoint database
  4  refused to start: another instance holds the job's lock, the slot and
     the checkpoints disagree (e.g. the slot is confirmed past the newest checkpoint),
     or the slot is lost (invalidated; source.on_slot_lost = \"fail\")
  5  fenced: another instance (a standby) took the job over while this one ran;
     it stopped without writing a checkpoint";

/// Why pgcdc failed, as its exit status says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// 1: anything else.
    Failure,
    /// 2: the configuration or the command line is wrong.
    Config,
    /// 3: a server could not be reached or refused the connection.
    Connect,
    /// 4: the job refused to start (lock held, slot and checkpoints
    /// disagree, slot lost).
    Refused,
    /// 5: another instance took the job over (lock or lease).
    Fenced,
}

impl ExitKind {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            ExitKind::Failure => 1,
            ExitKind::Config => 2,
            ExitKind::Connect => 3,
            ExitKind::Refused => 4,
            ExitKind::Fenced => 5,
        }
    }

    /// The kind of a job's failure.
    pub fn of_job(e: &JobError) -> ExitKind {
        match e {
            JobError::Invalid { .. } => ExitKind::Config,
            JobError::Connect(e) => ExitKind::of_connect(e),
            JobError::Setup(SetupError::Connection(e)) if is_connect(e) => ExitKind::Connect,
            JobError::Fenced { .. }
            | JobError::Store(CheckpointError::Fenced { .. })
            | JobError::Pipeline(PipelineError::Checkpoint(CheckpointError::Fenced { .. })) => {
                ExitKind::Fenced
            }
            JobError::Store(e) => ExitKind::of_store(e),
            JobError::Lock(LockError::Held { .. }) => ExitKind::Refused,
            JobError::Recovery(RecoveryError::Store(e)) => ExitKind::of_store(e),
            JobError::Recovery(_) => ExitKind::Refused,
            JobError::SlotLost(_) => ExitKind::Refused,
            _ => ExitKind::Failure,
        }
    }

    /// The kind of an error from opening a replication connection: invalid
    /// settings are configuration errors, the rest (unreachable, TLS,
    /// authentication) connection errors.
    pub fn of_connect(e: &ReplicationError) -> ExitKind {
        match e {
            ReplicationError::Config(_) => ExitKind::Config,
            _ => ExitKind::Connect,
        }
    }

    /// The kind of a checkpoint store error: unreachable is a connection
    /// error.
    pub fn of_store(e: &CheckpointError) -> ExitKind {
        match e {
            CheckpointError::Unavailable { .. } => ExitKind::Connect,
            _ => ExitKind::Failure,
        }
    }
}

/// Whether `e` is a failure to reach the server (rather than a query error).
fn is_connect(e: &ReplicationError) -> bool {
    matches!(
        e,
        ReplicationError::Connect { .. } | ReplicationError::ConnectTimeout { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_errors_map_to_distinct_statuses() {
        let invalid = JobError::Invalid {
            key: "checkpoint.keep".into(),
            reason: "must be positive".into(),
        };
        assert_eq!(ExitKind::of_job(&invalid).code(), 2);
        let refused = JobError::Connect(ReplicationError::Connect {
            addr: "127.0.0.1:1".into(),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        });
        assert_eq!(ExitKind::of_job(&refused).code(), 3);
        let held = JobError::Lock(LockError::Held {
            job: "j".into(),
            pid: 7,
            holder: "pgcdc".into(),
        });
        assert_eq!(ExitKind::of_job(&held).code(), 4);
        let lock_query = JobError::Lock(LockError::Database("boom".into()));
        assert_eq!(ExitKind::of_job(&lock_query).code(), 1);
        let wal = JobError::Setup(SetupError::WalLevel("replica".into()));
        assert_eq!(ExitKind::of_job(&wal).code(), 1);
        assert_eq!(ExitKind::of_job(&JobError::Sink("full".into())).code(), 1);
        let fenced = JobError::Fenced {
            job: "j".into(),
            reason: "taken over".into(),
        };
        assert_eq!(ExitKind::of_job(&fenced).code(), 5);
        assert!(fenced
            .to_string()
            .starts_with("fenced: another instance took over job"));
    }
}
