//! Opening a store: the pool, the configuration check and the schema migration.

use std::sync::Arc;

use checkpoint_api::CheckpointError;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{NoTls, Socket};

use super::{Inner, PgCheckpointStore};
use crate::config::PgStoreConfig;
use crate::error::pool as pool_err;
use crate::schema::{migrate, Names};
use crate::sql::Sql;

impl PgCheckpointStore {
    /// Connects without TLS, creating or upgrading the schema.
    pub async fn connect(
        pg_config: tokio_postgres::Config,
        config: PgStoreConfig,
    ) -> Result<Self, CheckpointError> {
        Self::connect_with_tls(pg_config, NoTls, config).await
    }

    /// Connects with `tls` (any tokio-postgres TLS connector, e.g. `postgres-native-tls` or
    /// `tokio-postgres-rustls`), creating or upgrading the schema.
    pub async fn connect_with_tls<T>(
        pg_config: tokio_postgres::Config,
        tls: T,
        config: PgStoreConfig,
    ) -> Result<Self, CheckpointError>
    where
        T: MakeTlsConnect<Socket> + Clone + Sync + Send + 'static,
        T::Stream: Sync + Send,
        T::TlsConnect: Sync + Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        config
            .validate()
            .map_err(|e| CheckpointError::backend("invalid configuration", e))?;
        let manager = Manager::from_config(
            pg_config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let p = &config.pool;
        let pool = Pool::builder(manager)
            .max_size(p.max_size)
            .wait_timeout(p.wait_timeout)
            .create_timeout(p.create_timeout)
            .recycle_timeout(p.recycle_timeout)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| CheckpointError::backend("building the connection pool", e))?;
        Self::from_pool(pool, config).await
    }

    /// A store over an existing pool, creating or upgrading the schema.
    pub async fn from_pool(pool: Pool, config: PgStoreConfig) -> Result<Self, CheckpointError> {
        config
            .validate()
            .map_err(|e| CheckpointError::backend("invalid configuration", e))?;
        let names = Names::new(&config);
        let sql = Sql::new(&names);
        let mut client = pool.get().await.map_err(pool_err)?;
        migrate(&mut client, &names).await?;
        let store = PgCheckpointStore {
            pool,
            inner: Arc::new(Inner {
                config,
                names,
                sql,
                after_save: Default::default(),
            }),
        };
        store.start_retention_task();
        Ok(store)
    }
}
