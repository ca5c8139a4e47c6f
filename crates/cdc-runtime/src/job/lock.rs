//! [`JobLock`]: one running instance per job.
//!
//! The store's lease fences a stale writer, but taking it is a takeover: a
//! second `pgcdc run` of a job would fence the first. So before taking the
//! lease, the runtime takes a session-level advisory lock on the checkpoint
//! database, on a connection of its own held for the whole run. A second
//! instance finds the lock taken and stops with a message naming the holder;
//! when the first dies its connection closes and the lock is free again.
//!
//! The server frees the lock only once it has seen the dead instance's
//! connection close, a moment after the process died. So a job restarted
//! at once (by a supervisor, say) waits for the lock, up to [`LOCK_WAIT`],
//! on the server, before it calls the job taken.

use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use tokio_postgres::error::SqlState;

/// How long [`JobLock::acquire`] waits for a held lock to be freed.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Holds a job's advisory lock until dropped (the connection is closed).
#[derive(Debug)]
pub struct JobLock {
    _client: deadpool_postgres::ClientWrapper,
}

/// Why a job's lock could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another instance runs the job.
    #[error("job {job:?} is already running: PostgreSQL backend {pid} ({holder}) holds its lock in the checkpoint database; stop that instance first")]
    Held {
        /// The job.
        job: String,
        /// The holder's backend pid.
        pid: i32,
        /// The holder's application name and address.
        holder: String,
    },
    /// The database could not be asked.
    #[error("taking the job lock: {0}")]
    Database(String),
}

const KEY_SQL: &str = "pg_catalog.hashtextextended('pgcdc job ' || $1, 0)";

impl JobLock {
    /// Takes the lock of `job` on a connection taken out of `pool` (it is
    /// not returned to the pool: dropping the lock closes it). Waits up to
    /// [`LOCK_WAIT`] while another session holds it.
    pub async fn acquire(pool: &Pool, job: &str) -> Result<JobLock, LockError> {
        Self::acquire_within(pool, job, LOCK_WAIT).await
    }

    /// [`acquire`](Self::acquire), waiting up to `wait` (at least 1 ms).
    pub async fn acquire_within(
        pool: &Pool,
        job: &str,
        wait: Duration,
    ) -> Result<JobLock, LockError> {
        let obj = pool
            .get()
            .await
            .map_err(|e| LockError::Database(e.to_string()))?;
        let client = Object::take(obj);
        // The wait happens on the server: the lock is granted the moment
        // its holder's session ends, or the statement fails at the timeout.
        let millis = wait.as_millis().clamp(1, i32::MAX as u128);
        client
            .batch_execute(&format!("SET lock_timeout = {millis}"))
            .await
            .map_err(|e| LockError::Database(e.to_string()))?;
        let taken = client
            .execute(
                &format!("SELECT pg_catalog.pg_advisory_lock({KEY_SQL})"),
                &[&job],
            )
            .await;
        match taken {
            // The connection serves the lock alone: its lock_timeout stays.
            Ok(_) => return Ok(JobLock { _client: client }),
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {}
            Err(e) => return Err(LockError::Database(e.to_string())),
        }
        let holder = client
            .query_opt(
                &format!(
                    "SELECT l.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local') \
                     FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid \
                     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                     AND ((l.classid::int8 << 32) | l.objid::int8) = {KEY_SQL} LIMIT 1"
                ),
                &[&job],
            )
            .await
            .map_err(|e| LockError::Database(e.to_string()))?;
        let (pid, holder) = match holder {
            Some(row) => {
                let pid: i32 = row.try_get(0).unwrap_or(0);
                let app: String = row.try_get(1).unwrap_or_default();
                let addr: String = row.try_get(2).unwrap_or_default();
                (pid, format!("{app} from {addr}"))
            }
            None => (0, "unknown".to_owned()),
        };
        Err(LockError::Held {
            job: job.to_owned(),
            pid,
            holder,
        })
    }
}
