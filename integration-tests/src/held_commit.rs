//! A commit held between the WAL and visibility: the server streams a
//! transaction once its commit record is flushed, and the committing session
//! leaves the running set only afterwards. A synchronous standby that never
//! answers holds a session in that moment for as long as a test needs.

use std::time::Duration;

use throwaway_pg::{ClusterOptions, Error, LocalCluster, Result, TestDatabase, TestPostgres};
use tokio_postgres::Client;

/// A server of its own whose sessions commit locally unless they set
/// `synchronous_commit = on`: then their commit waits for a standby
/// (`nobody`) that never comes.
pub async fn cluster_with_held_commits() -> Result<LocalCluster> {
    TestPostgres::dedicated(
        ClusterOptions::new()
            .setting("synchronous_standby_names", "'nobody'")
            .setting("synchronous_commit", "local"),
    )
    .await
}

/// `sql` running on a session of its own whose commit is held.
#[derive(Debug)]
pub struct HeldCommit {
    pid: i32,
    task: tokio::task::JoinHandle<std::result::Result<(), tokio_postgres::Error>>,
}

impl HeldCommit {
    /// Starts `sql` (on a database of [`cluster_with_held_commits`]); its
    /// commit is streamed but stays invisible until [`release`](Self::release).
    pub async fn start(db: &TestDatabase, sql: &str) -> Result<HeldCommit> {
        let session = db.connect().await?;
        let pid: i32 = session
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .map_err(|e| Error::pg("the held session's pid", e))?
            .get(0);
        let sql = format!("SET synchronous_commit = on; {sql}");
        let task = tokio::spawn(async move { session.batch_execute(&sql).await });
        Ok(HeldCommit { pid, task })
    }

    /// Whether the statement returned (its commit is not held).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Ends the wait for the standby (the commit is local already, so it
    /// completes and becomes visible), waits for the statement, and turns
    /// the standby off, so that no later commit waits (pgcdc's snapshot
    /// sessions commit their watermarks with `synchronous_commit = on`).
    /// Panics if the statement failed.
    pub async fn release(self, client: &Client) -> Result<()> {
        client
            .query_one("SELECT pg_cancel_backend($1)", &[&self.pid])
            .await
            .map_err(|e| Error::pg("cancelling the wait for the standby", e))?;
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("the held statement failed: {e}"),
            Err(e) => panic!("the held statement's task: {e}"),
        }
        client
            .batch_execute("ALTER SYSTEM SET synchronous_standby_names = ''")
            .await
            .map_err(|e| Error::pg("turning the standby off", e))?;
        client
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .map_err(|e| Error::pg("reloading the configuration", e))?;
        Ok(())
    }
}

/// Waits until a session other than `client`'s asks for
/// `txid_current_snapshot()`: pgcdc waiting for a streamed transaction to
/// become visible.
pub async fn await_visibility_wait(client: &Client, timeout: Duration) {
    crate::eventually("pgcdc waiting for the transaction", timeout, || async {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE query LIKE '%txid_current_snapshot%' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .ok()?
            .get(0);
        (waiting > 0).then_some(())
    })
    .await
}
