//! Helpers the end-to-end tests share: a temporary directory, the newest
//! checkpoint's snapshot progress, a SIGKILL of `pgcdc run` that waits
//! until the server has seen the killed process's sessions end, and a sink
//! that keeps what it is given.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cdc_runtime::event::ChangeEvent;
use cdc_runtime::sinks::{Sink, SinkError};

use checkpoint_api::{CheckpointStore, JobName, SnapshotProgress};
use checkpoint_pg::PgCheckpointStore;

use crate::{eventually, Pgcdc, TestDatabase};

/// A directory under the system temp directory, removed when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new, empty directory named after `tag`, the process and the time.
    pub fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("pgcdc-test-{tag}-{}-{nanos}", std::process::id()));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            panic!("cannot create {}: {e}", dir.display());
        }
        TempDir(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The snapshot progress of `job`'s newest checkpoint (`None`: no
/// checkpoint, or none readable yet).
pub async fn snapshot_progress(store: &PgCheckpointStore, job: &str) -> Option<SnapshotProgress> {
    let job = JobName::new(job).ok()?;
    store
        .latest(&job)
        .await
        .ok()?
        .checkpoint?
        .checkpoint
        .snapshot
}

/// SIGKILLs `pgcdc`, waits for it, then waits until `db`'s server has seen
/// its sessions end (pgcdc's are named `pgcdc` or `pgcdc <role>`): a commit
/// it sent before it died can land until then.
pub async fn kill_and_wait(pgcdc: &mut Pgcdc, db: &TestDatabase, timeout: Duration) {
    let Some(pid) = pgcdc.id() else {
        panic!("pgcdc has already exited");
    };
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    assert!(killed.is_ok_and(|s| s.success()), "kill -KILL {pid} failed");
    if let Err(e) = pgcdc.wait(Duration::from_secs(10)).await {
        panic!("the killed pgcdc did not exit: {e}");
    }
    let admin = match db.connect().await {
        Ok(c) => c,
        Err(e) => panic!("cannot connect: {e}"),
    };
    eventually("the killed instance's sessions to end", timeout, || async {
        let left: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND (application_name = 'pgcdc' OR application_name LIKE 'pgcdc %')",
                &[],
            )
            .await
            .ok()?
            .try_get(0)
            .ok()?;
        (left == 0).then_some(())
    })
    .await
}

/// A sink that keeps every event it is given; clones share the events.
#[derive(Debug, Clone, Default)]
pub struct CollectSink(pub Arc<Mutex<Vec<ChangeEvent>>>);

impl CollectSink {
    /// The events so far.
    pub fn events(&self) -> Vec<ChangeEvent> {
        self.0.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl Sink for CollectSink {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        if let Ok(mut events) = self.0.lock() {
            events.extend_from_slice(batch);
        }
        Ok(())
    }
    async fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
    async fn close(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}
