//! Deleting checkpoints: one by id, all but the newest N, and the orphans `vacuum`
//! removes. Every delete also removes the checkpoint's chunk rows and large object.

use checkpoint_api::{CheckpointError, CheckpointId, Lease, NotFound};

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
        let db = db_id(id)?;
        let epoch = i64::try_from(lease.epoch().0).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&self.sql().delete)
            .await
            .map_err(|e| pg("delete: prepare", e))?;
        let r = client
            .query_one(&stmt, &[&lease.job().as_str(), &db, &epoch])
            .await
            .map_err(|e| pg("delete", e))?;
        let (current, deleted) = lease_and_count(&r)?;
        check_epoch(lease, current)?;
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
        let epoch = i64::try_from(lease.epoch().0).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&self.sql().retain)
            .await
            .map_err(|e| pg("retain: prepare", e))?;
        let r = client
            .query_one(&stmt, &[&lease.job().as_str(), &keep, &epoch])
            .await
            .map_err(|e| pg("retain", e))?;
        let (current, deleted) = lease_and_count(&r)?;
        check_epoch(lease, current)?;
        Ok(usize::try_from(deleted).unwrap_or_default())
    }
}
