//! The active instance's liveness beat, and the watch on its lock session.
//!
//! While a job runs, a task runs `SELECT 1` on the session holding the job's
//! lock every quarter of the takeover timeout. That keeps the session's
//! `query_start` in `pg_stat_activity` fresh: a standby reads it (by the
//! server's clock) and ends the session once it is older than the takeover
//! timeout, which is how a frozen instance is taken over (see
//! [`standby`](super::standby)).
//!
//! The same statement watches the session. When it fails (a standby ended
//! the session, or the checkpoint database restarted), the task tries to take
//! the lock again on a new session: if another session holds it, another
//! instance took the job over, and [`LockWatch::lost`] resolves so the job
//! stops at once, before it writes anything more. If the lock is free it is
//! taken again and the job goes on (the lease's epoch still fences the
//! checkpoint saves if somebody ran the job in between). If the database
//! cannot be reached, the task tries again at every beat.

use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Pool};
use tokio::sync::watch;

use super::lock::{holder, lock_session, JobLock, KEY_SQL};

/// The beat's period for a takeover timeout: a quarter of it, between 50 ms
/// and 15 s.
pub(super) fn beat_period(takeover_after: Duration) -> Duration {
    (takeover_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(15))
}

/// A held job lock with its beat running; dropping it ends the beat and
/// closes the session (freeing the lock).
#[derive(Debug)]
pub(super) struct LockWatch {
    job: String,
    lost: watch::Receiver<Option<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LockWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LockWatch {
    /// Starts beating on `lock`'s session every `period`.
    pub(super) fn start(lock: JobLock, pool: Pool, period: Duration) -> LockWatch {
        let (tx, rx) = watch::channel(None);
        let job = lock.job.clone();
        let task = tokio::spawn(beat(lock, pool, period, tx));
        LockWatch {
            job,
            lost: rx,
            task,
        }
    }

    /// The job.
    pub(super) fn job(&self) -> &str {
        &self.job
    }

    /// Resolves, with the reason, once another instance holds the lock.
    pub(super) async fn lost(&mut self) -> String {
        // The guard is dropped before any further await: the job's future
        // stays `Send`.
        let reason = self
            .lost
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|r| r.clone());
        match reason {
            Some(reason) => reason,
            // The task ended without a verdict (it never does but when
            // aborted): nothing to report.
            None => std::future::pending().await,
        }
    }
}

async fn beat(lock: JobLock, pool: Pool, period: Duration, lost: watch::Sender<Option<String>>) {
    let JobLock { client, job } = lock;
    let mut client = Some(client);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Some(c) = client.as_ref() {
            match tokio::time::timeout(
                period.max(Duration::from_secs(5)),
                c.simple_query("SELECT 1"),
            )
            .await
            {
                Ok(Ok(_)) => continue,
                // Slow, not failed: the session's keepalives end a dead one.
                Err(_) => continue,
                Ok(Err(e)) => {
                    tracing::warn!(job, error = %e, "the job lock's session ended; taking the lock again");
                    client = None;
                }
            }
        }
        match retake(&pool, &job).await {
            Ok(Retaken::Yes(c)) => {
                tracing::warn!(job, "took the job lock again on a new session: no other instance had taken the job over");
                client = Some(c);
            }
            Ok(Retaken::HeldBy(who)) => {
                lost.send_replace(Some(format!(
                    "its lock session in the checkpoint database was ended and {who} holds the lock now"
                )));
                return;
            }
            Err(e) => {
                tracing::warn!(job, error = %e, "cannot take the job lock again yet; trying at the next beat");
            }
        }
    }
}

enum Retaken {
    Yes(ClientWrapper),
    HeldBy(String),
}

async fn retake(pool: &Pool, job: &str) -> Result<Retaken, super::LockError> {
    let client = lock_session(pool, Duration::from_millis(1)).await?;
    let row = client
        .query_one(
            &format!("SELECT pg_catalog.pg_try_advisory_lock({KEY_SQL})"),
            &[&job],
        )
        .await
        .map_err(|e| super::LockError::Database(e.to_string()))?;
    if row.try_get::<_, bool>(0).unwrap_or(false) {
        return Ok(Retaken::Yes(client));
    }
    let who = match holder(&client, job).await? {
        Some(h) => format!("backend {} ({})", h.pid, h.describe()),
        None => "another session".to_owned(),
    };
    Ok(Retaken::HeldBy(who))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_beat_is_a_quarter_of_the_takeover_timeout() {
        assert_eq!(
            beat_period(Duration::from_secs(1)),
            Duration::from_millis(250)
        );
        assert_eq!(
            beat_period(Duration::from_millis(100)),
            Duration::from_millis(50)
        );
        assert_eq!(
            beat_period(Duration::from_secs(600)),
            Duration::from_secs(15)
        );
    }
}
