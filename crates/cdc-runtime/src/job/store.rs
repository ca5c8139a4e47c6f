//! Opening the job's checkpoint store from the configuration.

use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};

use crate::config::{CheckpointConfig, Config, ConfigFileError};
use crate::replication::ReplicationConfig;
use crate::tls_connect::checkpoint_store;

use super::JobError;

/// The connection settings of the checkpoint store: `checkpoint.url` (the
/// same keys as the source, `sslmode` up to `verify-full` included), or the
/// source database with the source's credentials and TLS settings.
pub fn store_connection(
    config: &Config,
    cc: &CheckpointConfig,
) -> Result<ReplicationConfig, ConfigFileError> {
    let rc = match &cc.url {
        Some(url) => {
            url.expose()
                .parse::<ReplicationConfig>()
                .map_err(|e| ConfigFileError::Invalid {
                    key: "checkpoint.url".into(),
                    // The parser's errors never echo the password.
                    reason: e.to_string(),
                })?
        }
        None => config.source.replication_config()?,
    };
    Ok(rc.application_name("pgcdc checkpoints"))
}

/// Connects to the checkpoint store (creating or upgrading its tables).
pub async fn open_store(
    config: &Config,
    cc: &CheckpointConfig,
) -> Result<PgCheckpointStore, JobError> {
    let rc = store_connection(config, cc)?;
    let mut store_config = PgStoreConfig::default();
    store_config.schema = cc.schema.clone();
    store_config.table = cc.table.clone();
    store_config.keep_on_save = Some(cc.keep);
    if let Some(threshold) = cc.inline_threshold {
        store_config.inline_threshold = threshold;
    }
    tracing::debug!(store = %rc, "opening the checkpoint store");
    Ok(checkpoint_store(&rc, store_config).await?)
}
