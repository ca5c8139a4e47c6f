//! [`PgCheckpointStore`]: the [`CheckpointStore`] over a deadpool-postgres pool.
//!
//! The store type and its pooled connections live here; each concern has its module:
//!
//! * `connect`: the pool, the configuration check and the schema migration on open;
//! * `save`: the entry points of a save, inline (one statement) or big;
//! * `large`: a big save's chunks, as chunk rows (binary `COPY`) or a large object;
//! * `load`: `latest`, `load` and `list`, and the checks of what they read;
//! * `fencing`: leases, and why a save is refused (the rules are `checkpoint-api`'s);
//! * `retention`: `delete`, `retain`, `vacuum` and the retention after each save;
//! * `rows`: mapping rows to metadata and ids to columns.

use std::sync::Arc;

use async_trait::async_trait;
use checkpoint_api::{
    Checkpoint, CheckpointError, CheckpointId, CheckpointMeta, CheckpointStore, JobName, Latest,
    Lease, OwnerId, StoredCheckpoint,
};
use deadpool_postgres::{Object, Pool};

use crate::config::PgStoreConfig;
use crate::error::{pg, pool as pool_err};
use crate::schema::Names;
use crate::sql::Sql;

mod connect;
mod fencing;
mod large;
mod load;
mod retention;
mod rows;
mod save;

/// Chunks encoded ahead of the one being sent.
const PIPELINE_DEPTH: usize = 2;

/// A [`CheckpointStore`] in PostgreSQL tables.
///
/// See the [crate docs](crate) for the layout and guarantees. Cloning is cheap and shares
/// the pool.
#[derive(Clone)]
pub struct PgCheckpointStore {
    pool: Pool,
    inner: Arc<Inner>,
}

struct Inner {
    config: PgStoreConfig,
    names: Names,
    sql: Sql,
    after_save: retention::AfterSave,
}

impl std::fmt::Debug for PgCheckpointStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCheckpointStore")
            .field("table", &self.inner.names.checkpoints)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

impl PgCheckpointStore {
    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The configuration.
    pub fn config(&self) -> &PgStoreConfig {
        &self.inner.config
    }

    /// The quoted, schema-qualified name of the checkpoints table.
    pub fn checkpoints_table(&self) -> &str {
        &self.inner.names.checkpoints
    }

    /// The quoted, schema-qualified name of the lease table (one row per job: its epoch,
    /// highest id, newest stored LSN and lowest id).
    pub fn leases_table(&self) -> &str {
        &self.inner.names.leases
    }

    /// The quoted, schema-qualified name of the chunk-rows table.
    pub fn chunks_table(&self) -> &str {
        &self.inner.names.chunks
    }

    /// The quoted, schema-qualified name of the table recording our large objects.
    pub fn large_objects_table(&self) -> &str {
        &self.inner.names.large_objects
    }

    /// The identity of the store's database, to compare with another
    /// connection's (see [`save_in`](Self::save_in)).
    pub async fn database_identity(&self) -> Result<crate::DatabaseIdentity, CheckpointError> {
        let client = self.client().await?;
        crate::database_identity(&client)
            .await
            .map_err(|e| pg("identifying the database", e))
    }

    fn sql(&self) -> &Sql {
        &self.inner.sql
    }

    /// A pooled connection that is not known to be closed. A connection whose
    /// server side went away while it sat in the pool is discarded, not handed out.
    async fn client(&self) -> Result<Object, CheckpointError> {
        let attempts = self.pool.status().max_size + 1;
        for _ in 0..attempts {
            let client = self.pool.get().await.map_err(pool_err)?;
            if !client.is_closed() {
                return Ok(client);
            }
            drop(Object::take(client));
        }
        self.pool.get().await.map_err(pool_err)
    }
}

impl PgCheckpointStore {
    /// Runs `op` (`what` names it) within
    /// [`PoolOptions::operation_timeout`](crate::PoolOptions::operation_timeout).
    /// On a timeout the idle pooled connections are dropped: the one the
    /// operation was stuck on went back to the pool when it was cancelled
    /// (an open transaction of it is rolled back by the driver).
    async fn timed<T>(
        &self,
        what: &'static str,
        op: impl std::future::Future<Output = Result<T, CheckpointError>>,
    ) -> Result<T, CheckpointError> {
        let Some(limit) = self.inner.config.pool.operation_timeout else {
            return op.await;
        };
        let result = tokio::time::timeout(limit, op).await;
        match result {
            Ok(r) => r,
            Err(elapsed) => {
                self.pool.retain(|_, _| false);
                Err(CheckpointError::unavailable(
                    format!(
                        "{what}: the checkpoint database did not answer within {} s (PoolOptions::operation_timeout; in pgcdc.toml checkpoint.store_timeout_secs)",
                        limit.as_secs_f64()
                    ),
                    elapsed,
                ))
            }
        }
    }
}

#[async_trait]
impl CheckpointStore for PgCheckpointStore {
    async fn acquire_lease(
        &self,
        job: &JobName,
        owner: &OwnerId,
    ) -> Result<Lease, CheckpointError> {
        self.timed("taking the lease", self.acquire(job, owner))
            .await
    }

    async fn save(
        &self,
        lease: &Lease,
        checkpoint: &Checkpoint,
    ) -> Result<CheckpointMeta, CheckpointError> {
        self.timed("saving a checkpoint", self.save_pooled(lease, checkpoint))
            .await
    }

    async fn latest(&self, job: &JobName) -> Result<Latest, CheckpointError> {
        self.timed("loading the newest checkpoint", self.find_latest(job))
            .await
    }

    async fn load(
        &self,
        job: &JobName,
        id: CheckpointId,
    ) -> Result<StoredCheckpoint, CheckpointError> {
        self.timed("loading a checkpoint", self.load_one(job, id))
            .await
    }

    async fn list(&self, job: &JobName) -> Result<Vec<CheckpointMeta>, CheckpointError> {
        self.timed("listing checkpoints", self.list_metas(job))
            .await
    }

    async fn delete(&self, lease: &Lease, id: CheckpointId) -> Result<(), CheckpointError> {
        self.timed("deleting a checkpoint", self.delete_one(lease, id))
            .await
    }

    async fn retain(&self, lease: &Lease, keep: usize) -> Result<usize, CheckpointError> {
        self.timed("deleting old checkpoints", self.retain_newest(lease, keep))
            .await
    }
}
