//! A hot standby: waiting for a job's lock without a deadline, and taking
//! the job over from an active instance that died or froze.
//!
//! A dead instance's sessions close (at once after a crash, within the
//! keepalive bound after its host died: see [`keepalive`](crate::keepalive)),
//! the server frees its lock, and the standby's waiting statement is granted.
//! A frozen one (SIGSTOP, a VM paused, a long GC-like stall) keeps its
//! sessions open, since its kernel still answers: the standby sees that its
//! lock session went silent (no statement for the takeover timeout, by the
//! server's clock in `pg_stat_activity`) and ends that session with
//! `pg_terminate_backend`. The job then takes the lease as always, which
//! fences the old instance's checkpoint saves, and ends the old walsender
//! still streaming the slot (see [`end_old_walsender`]).

use std::time::Duration;

use deadpool_postgres::Pool;

use super::lock::{holder, lock_session, wait_for_lock, JobLock, LockError};
use crate::checkpoint::SlotState;
use crate::replication::{ReplicationConnection, ReplicationError};

/// Waits for the lock of `job` until it is taken, ending the holder's
/// session once it has been silent for `takeover_after`. Returns the lock
/// and whether a silent holder was ended.
///
/// The lock is waited for on the server with no timeout (so a holder whose
/// session ends is replaced at once, and the server log stays quiet); a
/// second session looks at the holder's beat meanwhile.
pub(super) async fn stand_by(
    pool: &Pool,
    job: &str,
    takeover_after: Duration,
) -> Result<(JobLock, bool), LockError> {
    let client = lock_session(pool, Duration::ZERO).await?;
    // lock_timeout = 0 waits forever. If this process stops while waiting,
    // the server notices the closed connection within a second (14+) and
    // leaves the queue, rather than when the lock is granted.
    client
        .batch_execute("SET lock_timeout = 0")
        .await
        .map_err(|e| LockError::Database(e.to_string()))?;
    let _ = client
        .batch_execute("SET client_connection_check_interval = 1000")
        .await;
    let mut ended = false;
    let wait = async {
        while !wait_for_lock(&client, job).await? {}
        Ok::<(), LockError>(())
    };
    tokio::select! {
        taken = wait => taken?,
        watched = watch_holder(pool, job, takeover_after, &mut ended) => watched?,
    }
    if ended {
        end_stalled_transactions(&client, takeover_after / 2).await?;
    }
    let lock = JobLock {
        client,
        job: job.to_owned(),
    };
    Ok((lock, ended))
}

/// Ends this role's sessions on the checkpoint database's server that have
/// sat in an open transaction for longer than `silent`: those of the frozen
/// instance just taken over. Its open transactions hold row locks (the lease
/// row mid-save; with the PostgreSQL sink committing with the checkpoints,
/// every row written since the last checkpoint) that would block this
/// instance's lease and its replayed writes until the frozen process ends.
async fn end_stalled_transactions(
    client: &deadpool_postgres::ClientWrapper,
    silent: Duration,
) -> Result<(), LockError> {
    let rows = client
        .query(
            "SELECT pid, coalesce(application_name, ''), pg_catalog.pg_terminate_backend(pid) \
             FROM pg_catalog.pg_stat_activity \
             WHERE usename = current_user AND datname = pg_catalog.current_database() \
             AND pid <> pg_catalog.pg_backend_pid() \
             AND state LIKE 'idle in transaction%' \
             AND state_change < pg_catalog.clock_timestamp() - make_interval(secs => $1)",
            &[&silent.as_secs_f64()],
        )
        .await
        .map_err(|e| LockError::Database(e.to_string()))?;
    for row in rows {
        let pid: i32 = row.try_get(0).unwrap_or(0);
        let app: String = row.try_get(1).unwrap_or_default();
        tracing::warn!(pid, application_name = %app,
            "ended a session of the instance taken over that sat in an open transaction (its locks would block this one)");
    }
    Ok(())
}

/// Looks at the holder's beat every quarter of `takeover_after` (at most
/// every second), ending its session once silent for `takeover_after`.
/// Returns only with an error (the lock's wait ends the select).
async fn watch_holder(
    pool: &Pool,
    job: &str,
    takeover_after: Duration,
    ended: &mut bool,
) -> Result<(), LockError> {
    let poll = (takeover_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let obj = pool
        .get()
        .await
        .map_err(|e| LockError::Database(e.to_string()))?;
    let client = deadpool_postgres::Object::take(obj);
    let mut announced = false;
    let mut blind = false;
    loop {
        tokio::time::sleep(poll).await;
        let Some(h) = holder(&client, job).await? else {
            continue; // freed: the lock's wait takes it
        };
        if !announced {
            tracing::info!(job, holder_pid = h.pid, holder = %h.describe(),
                takeover_after_ms = takeover_after.as_millis() as u64,
                "standing by: another instance runs the job; taking over when its lock session ends or stops beating");
            announced = true;
        }
        if !h.beats() {
            continue; // not a pgcdc lock session that beats: wait for it to end
        }
        let Some(silent) = h.silent_for else {
            if !blind {
                tracing::warn!(job, holder_pid = h.pid,
                    "cannot see the lock holder's activity in pg_stat_activity (grant pg_read_all_stats, or run the standby as the same role): taking over only when its session ends");
                blind = true;
            }
            continue;
        };
        if silent < takeover_after.as_secs_f64() {
            continue;
        }
        tracing::warn!(job, holder_pid = h.pid, holder = %h.describe(), silent_ms = (silent * 1000.0) as u64,
            "the active instance stopped beating: ending its lock session (pg_terminate_backend) to take the job over");
        // Set first: the lock is granted the moment the session ends, which
        // may end this future before the answer below is read.
        *ended = true;
        let done = client
            .query_one("SELECT pg_catalog.pg_terminate_backend($1)", &[&h.pid])
            .await
            .map_err(|e| LockError::Database(e.to_string()))?;
        if !done.try_get::<_, bool>(0).unwrap_or(false) {
            *ended = false;
            tracing::warn!(job, holder_pid = h.pid,
                "could not end the lock holder's session (this role may not signal it: grant pg_signal_backend, or run the standby as the same role)");
        }
    }
}

/// Ends the walsender still streaming `slot` for an instance that was taken
/// over (its process frozen: the server has not noticed), so this instance's
/// `START_REPLICATION` can take the slot. Called with the job's lock and
/// lease held, so the old instance is fenced already.
pub(super) async fn end_old_walsender(
    conn: &mut ReplicationConnection,
    slot: Option<&SlotState>,
) -> Result<(), ReplicationError> {
    let Some(pid) = slot.and_then(|s| s.active_pid) else {
        return Ok(());
    };
    let name = slot.map(|s| s.name.as_str()).unwrap_or_default();
    tracing::warn!(slot = name, walsender_pid = pid,
        "the slot is still streamed by the instance taken over: ending its walsender (pg_terminate_backend)");
    conn.simple_query(&format!("SELECT pg_catalog.pg_terminate_backend({pid})"))
        .await?;
    Ok(())
}
