//! Deleting checkpoints: one by id, all but the newest N (on request, or after each
//! save, off the caller's path), and the orphans `vacuum` removes. Every delete also
//! removes the checkpoint's chunk rows and large object.

use std::collections::HashMap;
use std::sync::Arc;

use checkpoint_api::{CheckpointError, CheckpointId, JobName, Lease, NotFound};

use super::fencing::check_epoch;
use super::rows::{db_id, lease_and_count};
use super::PgCheckpointStore;
use crate::error::pg;

impl PgCheckpointStore {
    /// Unlinks large objects this store created that no checkpoint references any more
    /// (left by manual deletes or older versions); returns how many. Large objects this store
    /// did not create are never touched. Also deletes chunk rows whose checkpoint row is gone
    /// (deleted by hand: nothing cascades), and logs how many.
    pub async fn vacuum(&self) -> Result<u64, CheckpointError> {
        let client = self.client().await?;
        let row = client
            .query_one(&self.inner.sql.vacuum, &[])
            .await
            .map_err(|e| pg("vacuum", e))?;
        let unlinked: i64 = row.try_get(0).map_err(|e| pg("vacuum", e))?;
        let strays: i64 = row.try_get(1).map_err(|e| pg("vacuum", e))?;
        if strays > 0 {
            tracing::info!(
                table = %self.inner.names.chunks, rows = strays,
                "deleted chunk rows whose checkpoint row is gone"
            );
        }
        Ok(u64::try_from(unlinked).unwrap_or_default())
    }

    /// Deletes checkpoint `id` ([`CheckpointStore::delete`]).
    ///
    /// [`CheckpointStore::delete`]: checkpoint_api::CheckpointStore::delete
    pub(super) async fn delete_one(
        &self,
        lease: &Lease,
        id: CheckpointId,
    ) -> Result<(), CheckpointError> {
        let deleted = self
            .delete_under_lease("delete", lease, &self.sql().delete, db_id(id)?)
            .await?;
        if deleted == 0 {
            return Err(CheckpointError::NotFound {
                job: lease.job().clone(),
                what: NotFound::Checkpoint(id),
            });
        }
        Ok(())
    }

    /// Deletes all but the newest `keep` checkpoints ([`CheckpointStore::retain`]).
    ///
    /// [`CheckpointStore::retain`]: checkpoint_api::CheckpointStore::retain
    pub(super) async fn retain_newest(
        &self,
        lease: &Lease,
        keep: usize,
    ) -> Result<usize, CheckpointError> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        let deleted = self
            .delete_under_lease("retain", lease, &self.sql().retain, keep)
            .await?;
        Ok(usize::try_from(deleted).unwrap_or_default())
    }

    /// Runs the delete statement `sql` (`$1` the job, `$2` `arg`, `$3` the lease's epoch)
    /// under the lease row's lock, checks that the lease still holds, and returns how
    /// many checkpoints it deleted.
    async fn delete_under_lease(
        &self,
        what: &str,
        lease: &Lease,
        sql: &str,
        arg: i64,
    ) -> Result<i64, CheckpointError> {
        let epoch = i64::try_from(lease.epoch().0).unwrap_or(i64::MAX);
        let job = lease.job();
        let r = self
            .under_lease_lock(what, job, sql, &[&job.as_str(), &arg, &epoch])
            .await?;
        let (current, deleted) = lease_and_count(&r)?;
        check_epoch(lease, current)?;
        Ok(deleted)
    }
}

/// How often the retention task looks for saves to trim after.
pub(super) const RETENTION_TICK: std::time::Duration = std::time::Duration::from_millis(100);

/// Retention after a pooled save ([`PgStoreConfig::keep_on_save`]), off the caller's path.
///
/// A save returns once its own statement committed; deleting what it made old (for a big
/// state, hundreds of TOAST or chunk rows) runs in a task of the store's, usually within
/// [`RETENTION_TICK`]: runs go one at a time for all jobs, and one waits for the lease row
/// while a big save of the job holds it. Saves in between are gathered: a run covers every
/// job saved since the last, with the newest lease of each. If the process ends first, the
/// next retention of the job deletes what was left, so a job briefly holds one checkpoint
/// (or a few) more than it keeps, never fewer.
///
/// [`PgStoreConfig::keep_on_save`]: crate::PgStoreConfig::keep_on_save
#[derive(Default)]
pub(super) struct AfterSave {
    /// Jobs saved since their retention last ran, with the lease of the newest save.
    pending: std::sync::Mutex<HashMap<JobName, Lease>>,
    /// Held while retention runs, so runs never overlap and follow the saves' order.
    running: tokio::sync::Mutex<()>,
}

impl PgCheckpointStore {
    /// Notes that `lease`'s job was saved; the retention task deletes what the save made
    /// old, usually within [`RETENTION_TICK`].
    ///
    /// Only a map insert: starting a task here, or waking one, cost the save 20–40 µs on a
    /// 2-vCPU VM (waking an idle worker thread), a fifth of a tiny save.
    pub(super) fn retain_after_save(&self, lease: &Lease) {
        if self.inner.config.keep_on_save.is_none() {
            return;
        }
        // The newest lease of the job: a fenced writer's save, noted late, must not put
        // its lease (whose retention is refused) over the current one's.
        let mut pending = self.pending();
        let newer = pending
            .get(lease.job())
            .is_none_or(|noted| noted.epoch().0 <= lease.epoch().0);
        if newer {
            pending.insert(lease.job().clone(), lease.clone());
        }
    }

    /// Starts the task that runs the retention of pooled saves every [`RETENTION_TICK`]
    /// while the store lives (not without `keep_on_save`, nor off a Tokio runtime: then
    /// only [`settle_retention`](Self::settle_retention) runs it).
    pub(super) fn start_retention_task(&self) {
        if self.inner.config.keep_on_save.is_none() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Weak both: the task must not keep the store, nor its connections, alive.
        let inner = Arc::downgrade(&self.inner);
        let pool = self.pool.weak();
        handle.spawn(async move {
            let mut tick = tokio::time::interval(RETENTION_TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // The store is gone: so is its pending work (the next retention of each job
                // catches up).
                let (Some(inner), Some(pool)) = (inner.upgrade(), pool.upgrade()) else {
                    break;
                };
                let store = PgCheckpointStore { pool, inner };
                if !store.pending().is_empty() {
                    store.settle_retention().await;
                }
            }
        });
    }

    /// Runs the retention of every save so far that has not had it yet, and waits for any
    /// run already going. After this, each job this store saved keeps no more than
    /// [`PgStoreConfig::keep_on_save`] checkpoints (unless a retention failed: that is
    /// logged, and the job's next save tries again).
    ///
    /// Saves do not wait for their retention; call this where the count must hold now (a
    /// test, before a shutdown that should leave the table trimmed).
    ///
    /// [`PgStoreConfig::keep_on_save`]: crate::PgStoreConfig::keep_on_save
    pub async fn settle_retention(&self) {
        let Some(keep) = self.inner.config.keep_on_save else {
            return;
        };
        let _running = self.inner.after_save.running.lock().await;
        let jobs = std::mem::take(&mut *self.pending());
        for lease in jobs.into_values() {
            match self
                .timed("deleting old checkpoints", self.retain_newest(&lease, keep))
                .await
            {
                Ok(_) => {}
                // A newer writer took the job over: its own saves trim it.
                Err(CheckpointError::Fenced { .. }) => {
                    tracing::debug!(job = %lease.job(), "retention after save skipped: the lease was taken over");
                }
                Err(e) => tracing::warn!(
                    job = %lease.job(), error = %e,
                    "deleting old checkpoints after a save failed; the next save tries again"
                ),
            }
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<JobName, Lease>> {
        // A panic while the map was held cannot leave it inconsistent (one insert or take).
        self.inner
            .after_save
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
