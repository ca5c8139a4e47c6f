//! Opening the job's checkpoint store from the configuration.

use checkpoint_api::CheckpointError;
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};

use crate::config::{CheckpointConfig, Config, ConfigFileError};
use crate::replication::SslMode;

use super::JobError;

/// The connection settings of the checkpoint store: `checkpoint.url`, or
/// the source database with the source's credentials.
pub fn store_connection_config(
    config: &Config,
    cc: &CheckpointConfig,
) -> Result<tokio_postgres::Config, ConfigFileError> {
    let mut pg = match &cc.url {
        Some(url) => url
            .expose()
            .parse::<tokio_postgres::Config>()
            .map_err(|e| {
                ConfigFileError::Invalid {
                    key: "checkpoint.url".into(),
                    // tokio-postgres' parse errors never echo the password.
                    reason: e.to_string(),
                }
            })?,
        None => {
            let s = &config.source;
            let mut pg = tokio_postgres::Config::new();
            pg.host(&s.host)
                .port(s.port)
                .dbname(&s.database)
                .user(&s.user);
            if let Some(p) = s.resolve_password()? {
                pg.password(p.expose());
            }
            pg
        }
    };
    if pg.get_application_name().is_none() {
        pg.application_name("pgcdc checkpoints");
    }
    Ok(pg)
}

/// Connects to the checkpoint store (creating or upgrading its tables).
pub async fn open_store(
    config: &Config,
    cc: &CheckpointConfig,
) -> Result<PgCheckpointStore, JobError> {
    let pg = store_connection_config(config, cc)?;
    let mut store_config = PgStoreConfig::default();
    store_config.schema = cc.schema.clone();
    store_config.table = cc.table.clone();
    store_config.keep_on_save = Some(cc.keep);
    store_config.inline_threshold = cc.inline_threshold;
    if cc.url.is_none() {
        if let Some(mode) = &config.source.sslmode {
            let mode: SslMode = mode.parse().map_err(|e: crate::replication::ConfigError| {
                ConfigFileError::Invalid {
                    key: "source.sslmode".into(),
                    reason: e.to_string(),
                }
            })?;
            if !matches!(mode, SslMode::Disable | SslMode::Prefer) {
                return Err(JobError::Store(CheckpointError::backend(
                    "opening the checkpoint store",
                    "the checkpoint store connects without TLS; with source.sslmode requiring TLS, set checkpoint.url to a connection string for the store",
                )));
            }
        }
    }
    Ok(PgCheckpointStore::connect(pg, store_config).await?)
}
