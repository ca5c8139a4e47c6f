//! Where a job's checkpoints are stored: [`StoreOptions`].

use checkpoint_api::CheckpointError;
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};

use crate::replication::ReplicationConfig;
use crate::tls_connect::checkpoint_store;

/// A PostgreSQL checkpoint store: the connection (the same keys, TLS and
/// authentication as a source) and the store's tables and layout.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Where the store is (often the source database itself).
    pub connection: ReplicationConfig,
    /// Schema, table, inline threshold, ... (`keep_on_save` is not used: the pipeline
    /// deletes old checkpoints itself)
    pub config: PgStoreConfig,
}

impl StoreOptions {
    /// A store at `connection` with the default tables (`pgcdc.checkpoints`).
    pub fn new(connection: ReplicationConfig) -> Self {
        StoreOptions {
            connection,
            config: PgStoreConfig::default(),
        }
    }

    /// Connects to the store, creating or upgrading its tables.
    pub async fn open(&self) -> Result<PgCheckpointStore, CheckpointError> {
        let rc = self
            .connection
            .clone()
            .application_name("pgcdc checkpoints");
        tracing::debug!(store = %rc, "opening the checkpoint store");
        // The pipeline deletes old checkpoints itself after each save (`keep`), and so do
        // the CLI's `checkpoints` commands where asked: the store's own retention after a
        // save would only repeat it.
        let mut config = self.config.clone();
        config.keep_on_save = None;
        checkpoint_store(&rc, config).await
    }
}
