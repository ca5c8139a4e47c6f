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
//! on the server, before it calls the job taken. A standby instance waits
//! without a deadline, and takes the job over from a holder that stopped
//! beating (see [`liveness`](super::liveness)).

use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Object, Pool};
use tokio_postgres::error::SqlState;

/// How long [`JobLock::acquire`] waits for a held lock to be freed.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The `application_name` of the session holding a job's lock. The holder
/// beats on it (runs a statement at least every quarter of the takeover
/// timeout), and a standby ends only sessions of this name that went silent.
pub const LOCK_APPLICATION_NAME: &str = "pgcdc job lock";

/// Holds a job's advisory lock until dropped (the connection is closed).
#[derive(Debug)]
pub struct JobLock {
    pub(super) client: ClientWrapper,
    pub(super) job: String,
}

/// Why a job's lock could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another instance runs the job.
    #[error("job {job:?} is already running: PostgreSQL backend {pid} ({holder}) holds its lock in the checkpoint database; stop that instance first, or run this one with --standby to take over when it dies")]
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

pub(super) const KEY_SQL: &str = "pg_catalog.hashtextextended('pgcdc job ' || $1, 0)";

/// The session holding a job's lock, as `pg_stat_activity` shows it.
#[derive(Debug, Clone)]
pub(super) struct Holder {
    pub(super) pid: i32,
    pub(super) application_name: String,
    pub(super) address: String,
    /// Seconds since its last statement started or ended (`None`: not
    /// visible to this role, which needs the holder's role or
    /// `pg_read_all_stats`).
    pub(super) silent_for: Option<f64>,
}

impl Holder {
    /// Whether the holder beats (a pgcdc that knows about standbys).
    pub(super) fn beats(&self) -> bool {
        self.application_name == LOCK_APPLICATION_NAME
    }

    pub(super) fn describe(&self) -> String {
        format!("{} from {}", self.application_name, self.address)
    }
}

/// A connection of its own out of `pool` (never returned to it), named
/// [`LOCK_APPLICATION_NAME`], with `lock_timeout` = `wait`.
pub(super) async fn lock_session(pool: &Pool, wait: Duration) -> Result<ClientWrapper, LockError> {
    let obj = pool
        .get()
        .await
        .map_err(|e| LockError::Database(e.to_string()))?;
    let client = Object::take(obj);
    let millis = wait.as_millis().clamp(1, i32::MAX as u128);
    client
        .batch_execute(&format!(
            "SET lock_timeout = {millis}; SET application_name = '{LOCK_APPLICATION_NAME}'"
        ))
        .await
        .map_err(|e| LockError::Database(e.to_string()))?;
    Ok(client)
}

/// Waits (up to the session's `lock_timeout`) for the lock: `Ok(false)` if
/// it timed out.
pub(super) async fn wait_for_lock(client: &ClientWrapper, job: &str) -> Result<bool, LockError> {
    let taken = client
        .execute(
            &format!("SELECT pg_catalog.pg_advisory_lock({KEY_SQL})"),
            &[&job],
        )
        .await;
    match taken {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => Ok(false),
        Err(e) => Err(LockError::Database(e.to_string())),
    }
}

/// The session holding the lock of `job`, if any.
pub(super) async fn holder(client: &ClientWrapper, job: &str) -> Result<Option<Holder>, LockError> {
    let row = client
        .query_opt(
            &format!(
                "SELECT l.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local'), \
                 extract(epoch FROM pg_catalog.clock_timestamp() - greatest(a.query_start, a.state_change))::float8 \
                 FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid \
                 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                 AND ((l.classid::int8 << 32) | l.objid::int8) = {KEY_SQL} LIMIT 1"
            ),
            &[&job],
        )
        .await
        .map_err(|e| LockError::Database(e.to_string()))?;
    Ok(row.map(|row| Holder {
        pid: row.try_get(0).unwrap_or(0),
        application_name: row.try_get(1).unwrap_or_default(),
        address: row.try_get(2).unwrap_or_default(),
        silent_for: row.try_get(3).ok().flatten(),
    }))
}

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
        // The wait happens on the server: the lock is granted the moment
        // its holder's session ends, or the statement fails at the timeout.
        let client = lock_session(pool, wait).await?;
        if wait_for_lock(&client, job).await? {
            // The connection serves the lock alone: its lock_timeout stays.
            return Ok(JobLock {
                client,
                job: job.to_owned(),
            });
        }
        let (pid, holder) = match holder(&client, job).await? {
            Some(h) => (h.pid, h.describe()),
            None => (0, "unknown".to_owned()),
        };
        Err(LockError::Held {
            job: job.to_owned(),
            pid,
            holder,
        })
    }

    /// The job whose lock this is.
    pub fn job(&self) -> &str {
        &self.job
    }
}
