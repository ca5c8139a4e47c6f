//! [`PgCheckpointStore`]: the [`CheckpointStore`] over a deadpool-postgres pool.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use cdc_core::Lsn;
use checkpoint_api::{
    verify_decoded, Checkpoint, CheckpointError, CheckpointId, CheckpointMeta, CheckpointStore,
    ChunkManifest, ChunkedDecoder, ChunkedEncoder, CorruptKind, Epoch, JobName, Latest, Lease,
    NotFound, OwnerId, Regression, Rejection, SkippedCheckpoint, StorageKind, StoredCheckpoint,
    Timestamp,
};
use deadpool_postgres::{
    Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime, StatementCache,
};
use futures_util::{pin_mut, stream, StreamExt, TryStreamExt};
use tokio::sync::mpsc;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::{PgLsn, Type};
use tokio_postgres::{IsolationLevel, NoTls, Row, Socket, Statement};

use crate::config::{LargeLayout, PgStoreConfig};
use crate::error::{definite, pg, pool};
use crate::schema::{migrate, Names};
use crate::sql::Sql;

/// Chunks encoded ahead of the one being sent.
const PIPELINE_DEPTH: usize = 2;

/// The connection a save runs on: a pooled one (statements cached per
/// connection) or a caller's, inside the caller's transaction.
#[derive(Clone, Copy)]
struct Db<'a> {
    client: &'a tokio_postgres::Client,
    cache: Option<&'a StatementCache>,
}

impl<'a> Db<'a> {
    fn pooled(client: &'a Object) -> Self {
        Db {
            client,
            cache: Some(&client.statement_cache),
        }
    }

    fn pooled_tx(tx: &'a deadpool_postgres::Transaction<'_>) -> Self {
        Db {
            client: tx.client(),
            cache: Some(&tx.statement_cache),
        }
    }

    async fn prepare(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        match self.cache {
            Some(cache) => cache.prepare(self.client, sql).await,
            None => self.client.prepare(sql).await,
        }
    }
}

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
}

impl std::fmt::Debug for PgCheckpointStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCheckpointStore")
            .field("table", &self.inner.names.checkpoints)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

/// How a stored checkpoint's bytes are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Storage {
    Inline,
    ChunkRows,
    LargeObject(u32),
}

/// A metadata row.
#[derive(Debug)]
struct MetaRow {
    meta: CheckpointMeta,
    storage: Storage,
    chunk_size: u64,
    chunk_count: u64,
}

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
        Ok(PgCheckpointStore {
            pool,
            inner: Arc::new(Inner { config, names, sql }),
        })
    }

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

    /// The quoted, schema-qualified name of the chunk-rows table.
    pub fn chunks_table(&self) -> &str {
        &self.inner.names.chunks
    }

    /// The quoted, schema-qualified name of the table recording our large objects.
    pub fn large_objects_table(&self) -> &str {
        &self.inner.names.large_objects
    }

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

    /// The identity of the store's database, to compare with another
    /// connection's (see [`save_in`](Self::save_in)).
    pub async fn database_identity(&self) -> Result<crate::DatabaseIdentity, CheckpointError> {
        let client = self.client().await?;
        crate::database_identity(&client)
            .await
            .map_err(|e| pg("identifying the database", e))
    }

    /// Saves `checkpoint` on `client`, inside a transaction the caller has
    /// begun there, and applies retention (keep the newest `keep`) in it;
    /// **nothing is committed**. The caller commits, and with it its own
    /// writes in that transaction and the checkpoint, or neither: a sink
    /// whose target is the store's database gets exactly-once delivery this
    /// way.
    ///
    /// `client` must be connected to the store's database (compare
    /// [`database_identity`](crate::database_identity) of both) with a
    /// transaction open; the store's tables must exist (opening the store
    /// creates them). The lease is checked exactly as by
    /// [`CheckpointStore::save`]; on any error the caller must roll back.
    pub async fn save_in(
        &self,
        client: &tokio_postgres::Client,
        lease: &Lease,
        checkpoint: &Checkpoint,
        keep: usize,
    ) -> Result<CheckpointMeta, CheckpointError> {
        lease.check_job(checkpoint)?;
        let config = &self.inner.config;
        let rejected = |e| CheckpointError::Rejected {
            reason: Rejection::Encode(e),
        };
        let db = Db {
            client,
            cache: None,
        };
        let keep_others = Some(i64::try_from(keep.max(1) - 1).unwrap_or(i64::MAX));
        let encoder =
            ChunkedEncoder::new(checkpoint, &config.encode, usize::MAX).map_err(rejected)?;
        if encoder.uncompressed_len() <= config.inline_threshold as u64 {
            return self
                .save_inline(db, lease, checkpoint, encoder, keep_others)
                .await;
        }
        let chunk_size = match config.large_layout {
            LargeLayout::ChunkRows => config.row_chunk_size,
            LargeLayout::LargeObject => config.large_object_chunk_size,
        };
        let encoder =
            ChunkedEncoder::new(checkpoint, &config.encode, chunk_size).map_err(rejected)?;
        self.write_large(
            db,
            lease,
            checkpoint,
            encoder,
            config.large_layout,
            keep_others,
        )
        .await
    }

    fn sql(&self) -> &Sql {
        &self.inner.sql
    }

    /// How many older checkpoints a save keeps besides the new one (`None`: all).
    fn keep_others(&self) -> Option<i64> {
        self.inner
            .config
            .keep_on_save
            .map(|k| i64::try_from(k.saturating_sub(1)).unwrap_or(i64::MAX))
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

    async fn save_inline(
        &self,
        db: Db<'_>,
        lease: &Lease,
        checkpoint: &Checkpoint,
        mut encoder: ChunkedEncoder,
        keep_others: Option<i64>,
    ) -> Result<CheckpointMeta, CheckpointError> {
        let mut envelope = BytesMut::new();
        let mut first: Option<Bytes> = None;
        for chunk in encoder.by_ref() {
            match first.take() {
                None if envelope.is_empty() => first = Some(chunk),
                Some(f) => {
                    envelope.extend_from_slice(&f);
                    envelope.extend_from_slice(&chunk);
                }
                None => envelope.extend_from_slice(&chunk),
            }
        }
        let envelope = first.unwrap_or_else(|| envelope.freeze());
        let manifest = finished(&encoder)?;
        let p = SaveParams::new(lease, checkpoint, &manifest)?;
        let stmt = db
            .prepare(&self.sql().save_inline)
            .await
            .map_err(|e| pg("save: prepare", e))?;
        let data: &[u8] = &envelope;
        let row = db
            .client
            .query_one(
                &stmt,
                &[
                    &p.job,
                    &p.id,
                    &p.epoch,
                    &p.lsn,
                    &p.created,
                    &p.format,
                    &p.stored,
                    &p.crc,
                    &p.chunk_size,
                    &p.chunk_count,
                    &data,
                    &keep_others,
                ],
            )
            .await
            .map_err(|e| pg("save", e))?;
        let inserted: bool = row.try_get(0).map_err(|e| pg("save: result", e))?;
        if !inserted {
            return Err(self.why_refused(db, lease, checkpoint).await);
        }
        Ok(p.meta(checkpoint, StorageKind::Inline))
    }

    /// Why the one-statement save of `checkpoint` inserted nothing, read after the fact.
    async fn why_refused(
        &self,
        db: Db<'_>,
        lease: &Lease,
        checkpoint: &Checkpoint,
    ) -> CheckpointError {
        let state = async {
            let stmt = db.prepare(&self.sql().lease_state).await?;
            db.client
                .query_opt(&stmt, &[&checkpoint.job.as_str()])
                .await
        }
        .await
        .map_err(|e| pg("save: reading the lease", e));
        let (epoch, highest, newest) = match state {
            Err(e) => return e,
            Ok(None) => (None, None, None),
            Ok(Some(r)) => match lease_row(&r) {
                Ok(t) => t,
                Err(e) => return e,
            },
        };
        refusal(lease, checkpoint, epoch, highest, newest).unwrap_or_else(|| {
            // The lease or the newest checkpoint changed between the save and this read.
            CheckpointError::Unavailable {
                message: "save: refused, but the lease or the newest checkpoint changed since; \
                          retry"
                    .into(),
                source: None,
            }
        })
    }

    /// A big save on a pooled connection: its own transaction.
    async fn save_large(
        &self,
        client: &mut Object,
        lease: &Lease,
        checkpoint: &Checkpoint,
        encoder: ChunkedEncoder,
        layout: LargeLayout,
    ) -> Result<CheckpointMeta, CheckpointError> {
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg("save: begin", e))?;
        let meta = self
            .write_large(
                Db::pooled_tx(&tx),
                lease,
                checkpoint,
                encoder,
                layout,
                self.keep_others(),
            )
            .await?;
        tx.commit().await.map_err(|e| pg("save: commit", e))?;
        Ok(meta)
    }

    /// Writes a big checkpoint inside the transaction open on `db`, without
    /// committing it.
    async fn write_large(
        &self,
        db: Db<'_>,
        lease: &Lease,
        checkpoint: &Checkpoint,
        encoder: ChunkedEncoder,
        layout: LargeLayout,
        keep_others: Option<i64>,
    ) -> Result<CheckpointMeta, CheckpointError> {
        let job = checkpoint.job.as_str();
        let id = db_id(checkpoint.id)?;
        let tx = db.client;
        let lock = db
            .prepare(&self.sql().lock_for_save)
            .await
            .map_err(|e| pg("save: prepare", e))?;
        let row = tx
            .query_opt(&lock, &[&job])
            .await
            .map_err(|e| pg("save: lock lease", e))?;
        let (epoch, highest, newest) = match row {
            None => (None, None, None),
            Some(r) => lease_row(&r)?,
        };
        if let Some(e) = refusal(lease, checkpoint, epoch, highest, newest) {
            return Err(e);
        }

        // Encode on a blocking thread, PIPELINE_DEPTH chunks ahead of the network.
        let (chunk_tx, mut chunk_rx) = mpsc::channel::<Bytes>(PIPELINE_DEPTH);
        let encoding = tokio::task::spawn_blocking(move || {
            let mut encoder = encoder;
            for chunk in encoder.by_ref() {
                if chunk_tx.blocking_send(chunk).is_err() {
                    return None; // the writer gave up
                }
            }
            encoder.manifest()
        });

        let (storage, lo_oid) = match layout {
            LargeLayout::ChunkRows => {
                let copy = db
                    .prepare(&self.sql().copy_chunks)
                    .await
                    .map_err(|e| pg("save: prepare", e))?;
                let sink = tx
                    .copy_in(&copy)
                    .await
                    .map_err(|e| pg("save: copy chunks", e))?;
                let writer = BinaryCopyInWriter::new(
                    sink,
                    &[Type::TEXT, Type::INT8, Type::INT4, Type::BYTEA],
                );
                pin_mut!(writer);
                let mut seq: i32 = 0;
                while let Some(chunk) = chunk_rx.recv().await {
                    let data: &[u8] = &chunk;
                    writer
                        .as_mut()
                        .write(&[&job, &id, &seq, &data])
                        .await
                        .map_err(|e| pg("save: copy chunks", e))?;
                    seq = seq
                        .checked_add(1)
                        .ok_or_else(|| definite("save: more than 2^31 chunks"))?;
                }
                writer
                    .finish()
                    .await
                    .map_err(|e| pg("save: copy chunks", e))?;
                ("chunk_rows", None)
            }
            LargeLayout::LargeObject => {
                let record = db
                    .prepare(&self.sql().record_lo)
                    .await
                    .map_err(|e| pg("save: prepare", e))?;
                let oid: u32 = tx
                    .query_one(&record, &[&job, &id])
                    .await
                    .and_then(|r| r.try_get(0))
                    .map_err(|e| pg("save: lo_create", e))?;
                let put = db
                    .prepare("SELECT lo_put($1, $2, $3)")
                    .await
                    .map_err(|e| pg("save: prepare", e))?;
                let tx_ref = &tx;
                let put_ref = &put;
                let mut offset: i64 = 0;
                let chunks = stream::poll_fn(|cx| chunk_rx.poll_recv(cx));
                chunks
                    .map(|chunk| {
                        let at = offset;
                        offset = offset.saturating_add(i64::try_from(chunk.len()).unwrap_or(0));
                        async move {
                            let data: &[u8] = &chunk;
                            tx_ref.execute(put_ref, &[&oid, &at, &data]).await
                        }
                    })
                    .buffered(PIPELINE_DEPTH + 1)
                    .try_for_each(|_| async { Ok(()) })
                    .await
                    .map_err(|e| pg("save: lo_put", e))?;
                ("large_object", Some(oid))
            }
        };
        let manifest = encoding
            .await
            .map_err(|e| CheckpointError::backend("save: encoder task", e))?
            .ok_or_else(|| definite("save: encoder did not finish"))?;
        let p = SaveParams::new(lease, checkpoint, &manifest)?;
        let finish = db
            .prepare(&self.sql().finish_large)
            .await
            .map_err(|e| pg("save: prepare", e))?;
        let r = tx
            .query_one(
                &finish,
                &[
                    &p.job,
                    &p.id,
                    &p.lsn,
                    &p.created,
                    &p.format,
                    &p.stored,
                    &p.crc,
                    &storage,
                    &p.chunk_size,
                    &p.chunk_count,
                    &p.epoch,
                    &lo_oid,
                    &keep_others,
                ],
            )
            .await
            .map_err(|e| pg("save: metadata", e))?;
        let get = |e| pg("save: metadata", e);
        let (inserted, bumped): (i64, i64) =
            (r.try_get(0).map_err(get)?, r.try_get(1).map_err(get)?);
        if inserted != 1 || bumped != 1 {
            return Err(definite(format!(
                "save: {inserted} metadata rows inserted and {bumped} lease rows updated, expected 1 each"
            )));
        }
        Ok(p.meta(
            checkpoint,
            StorageKind::Chunked {
                chunks: manifest.chunk_count,
            },
        ))
    }

    /// Verifies and decodes an inline checkpoint from the bytes of its `data` column.
    fn read_inline(
        &self,
        row: &MetaRow,
        data: Option<&[u8]>,
    ) -> Result<Checkpoint, CheckpointError> {
        let meta = &row.meta;
        let corrupt = |why: String| CheckpointError::Corrupt {
            job: meta.job.clone(),
            id: meta.id,
            source: CorruptKind::Other(why),
        };
        let data = data.ok_or_else(|| corrupt("inline data is NULL".into()))?;
        let mut check = ChunkCheck::new(row);
        check.push(data.len()).map_err(corrupt)?;
        check.finish().map_err(corrupt)?;
        let mut decoder = ChunkedDecoder::new(self.inner.config.decode.clone());
        verify_decoded(meta, decoder.push(data).and_then(|()| decoder.finish()))
    }

    /// Reads and verifies the checkpoint of `row` in `tx`.
    async fn read(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        row: &MetaRow,
        inline: Option<&[u8]>,
    ) -> Result<Checkpoint, CheckpointError> {
        if row.storage == Storage::Inline {
            return self.read_inline(row, inline);
        }
        let meta = &row.meta;
        let corrupt = |why: String| CheckpointError::Corrupt {
            job: meta.job.clone(),
            id: meta.id,
            source: CorruptKind::Other(why),
        };
        let mut decoder = ChunkedDecoder::new(self.inner.config.decode.clone());
        let mut check = ChunkCheck::new(row);
        let decode_err = |e| CheckpointError::Corrupt {
            job: meta.job.clone(),
            id: meta.id,
            source: CorruptKind::Decode(e),
        };
        let job = meta.job.as_str();
        let id = db_id(meta.id)?;
        match row.storage {
            Storage::Inline => return self.read_inline(row, inline),
            Storage::ChunkRows => {
                let stmt = tx
                    .prepare_cached(&self.sql().read_chunks)
                    .await
                    .map_err(|e| pg("load: prepare", e))?;
                let rows = tx
                    .query_raw(
                        &stmt,
                        [&job as &(dyn tokio_postgres::types::ToSql + Sync), &id],
                    )
                    .await
                    .map_err(|e| pg("load: chunks", e))?;
                pin_mut!(rows);
                while let Some(r) = rows.try_next().await.map_err(|e| pg("load: chunks", e))? {
                    let data: &[u8] = r.try_get(0).map_err(|e| pg("load: chunks", e))?;
                    check.push(data.len()).map_err(corrupt)?;
                    decoder.push(data).map_err(decode_err)?;
                }
            }
            Storage::LargeObject(oid) => {
                let get = tx
                    .prepare_cached("SELECT lo_get($1, $2, $3)")
                    .await
                    .map_err(|e| pg("load: prepare", e))?;
                let size = i32::try_from(row.chunk_size).unwrap_or(i32::MAX);
                let count = row.chunk_count;
                let offsets = (0..count).map(|i| i.saturating_mul(row.chunk_size));
                let mut reads = stream::iter(offsets)
                    .map(|at| {
                        let get = &get;
                        async move {
                            let at = i64::try_from(at).unwrap_or(i64::MAX);
                            tx.query_one(get, &[&oid, &at, &size]).await
                        }
                    })
                    .buffered(PIPELINE_DEPTH + 1);
                while let Some(r) = reads.next().await {
                    let r = r.map_err(|e| match e.as_db_error() {
                        Some(db)
                            if db.code() == &tokio_postgres::error::SqlState::UNDEFINED_OBJECT =>
                        {
                            corrupt(format!("large object {oid}: {}", db.message()))
                        }
                        _ => pg("load: lo_get", e),
                    })?;
                    let data: &[u8] = r.try_get(0).map_err(|e| pg("load: lo_get", e))?;
                    check.push(data.len()).map_err(corrupt)?;
                    decoder.push(data).map_err(decode_err)?;
                }
            }
        }
        check.finish().map_err(corrupt)?;
        verify_decoded(meta, decoder.finish())
    }

    async fn begin_read<'a>(
        client: &'a mut deadpool_postgres::Object,
    ) -> Result<deadpool_postgres::Transaction<'a>, CheckpointError> {
        client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| pg("begin", e))
    }
}

fn pool_err(e: deadpool_postgres::PoolError) -> CheckpointError {
    pool(e)
}

/// Checks chunk lengths against the metadata row as they arrive.
struct ChunkCheck {
    chunk_size: u64,
    chunk_count: u64,
    total: u64,
    seen_chunks: u64,
    seen_bytes: u64,
    short_seen: bool,
    inline: bool,
}

impl ChunkCheck {
    fn new(row: &MetaRow) -> Self {
        ChunkCheck {
            chunk_size: row.chunk_size,
            chunk_count: row.chunk_count,
            total: row.meta.stored_bytes,
            seen_chunks: 0,
            seen_bytes: 0,
            short_seen: false,
            inline: row.storage == Storage::Inline,
        }
    }

    fn push(&mut self, len: usize) -> Result<(), String> {
        let len = len as u64;
        if self.short_seen {
            return Err(format!("chunk {} follows a short chunk", self.seen_chunks));
        }
        if !self.inline && len != self.chunk_size {
            if len > self.chunk_size {
                return Err(format!(
                    "chunk {} has {len} bytes, more than the chunk size {}",
                    self.seen_chunks, self.chunk_size
                ));
            }
            self.short_seen = true;
        }
        self.seen_chunks += 1;
        self.seen_bytes += len;
        if self.seen_bytes > self.total {
            return Err(format!("more than the {} bytes recorded", self.total));
        }
        Ok(())
    }

    fn finish(&self) -> Result<(), String> {
        if self.seen_bytes != self.total {
            return Err(format!(
                "{} bytes stored, {} recorded",
                self.seen_bytes, self.total
            ));
        }
        if !self.inline && self.seen_chunks != self.chunk_count {
            return Err(format!(
                "{} chunks stored, {} recorded",
                self.seen_chunks, self.chunk_count
            ));
        }
        Ok(())
    }
}

/// The bind parameters of a save.
struct SaveParams<'a> {
    job: &'a str,
    id: i64,
    epoch: i64,
    lsn: PgLsn,
    created: i64,
    format: i32,
    stored: i64,
    crc: i64,
    chunk_size: i64,
    chunk_count: i64,
}

impl<'a> SaveParams<'a> {
    fn new(
        lease: &Lease,
        checkpoint: &'a Checkpoint,
        manifest: &ChunkManifest,
    ) -> Result<Self, CheckpointError> {
        let big = |what: &str| definite(format!("save: {what} does not fit a bigint"));
        Ok(SaveParams {
            job: checkpoint.job.as_str(),
            id: db_id(checkpoint.id)?,
            epoch: i64::try_from(lease.epoch().0).map_err(|_| big("epoch"))?,
            lsn: PgLsn::from(checkpoint.source.commit_end_lsn.as_u64()),
            created: checkpoint.created_at.as_unix_micros(),
            format: i32::try_from(Checkpoint::FORMAT_VERSION).unwrap_or(i32::MAX),
            stored: i64::try_from(manifest.total_len).map_err(|_| big("size"))?,
            crc: i64::from(manifest.crc32c),
            chunk_size: i64::try_from(manifest.chunk_size.min(manifest.total_len))
                .map_err(|_| big("chunk size"))?,
            chunk_count: i64::try_from(manifest.chunk_count).map_err(|_| big("chunk count"))?,
        })
    }

    fn meta(&self, checkpoint: &Checkpoint, storage: StorageKind) -> CheckpointMeta {
        CheckpointMeta {
            job: checkpoint.job.clone(),
            id: checkpoint.id,
            commit_end_lsn: checkpoint.source.commit_end_lsn,
            created_at: checkpoint.created_at,
            stored_bytes: u64::try_from(self.stored).unwrap_or_default(),
            storage,
        }
    }
}

fn db_id(id: CheckpointId) -> Result<i64, CheckpointError> {
    i64::try_from(id.get())
        .map_err(|_| definite(format!("checkpoint id {id} does not fit a bigint")))
}

fn finished(encoder: &ChunkedEncoder) -> Result<ChunkManifest, CheckpointError> {
    encoder
        .manifest()
        .ok_or_else(|| definite("save: encoder did not finish"))
}

/// Why a save is refused, given the lease row and the newest stored LSN; `None` if it may
/// proceed.
fn refusal(
    lease: &Lease,
    checkpoint: &Checkpoint,
    epoch: Option<i64>,
    highest: Option<i64>,
    newest: Option<PgLsn>,
) -> Option<CheckpointError> {
    let job = lease.job().clone();
    let Some(current) = epoch.and_then(|e| u64::try_from(e).ok()) else {
        return Some(CheckpointError::NotFound {
            job,
            what: NotFound::Lease,
        });
    };
    if current != lease.epoch().0 {
        return Some(CheckpointError::Fenced {
            job,
            held: lease.epoch(),
            current: Epoch(current),
        });
    }
    if let Some(latest) = highest
        .and_then(|h| u64::try_from(h).ok())
        .and_then(CheckpointId::new)
        .filter(|&h| checkpoint.id <= h)
    {
        return Some(CheckpointError::Regressed {
            job,
            regression: Regression::Id {
                latest,
                attempted: checkpoint.id,
            },
        });
    }
    let attempted = checkpoint.source.commit_end_lsn;
    if let Some(latest) = newest.map(|n| Lsn::from_u64(u64::from(n))) {
        if attempted < latest {
            return Some(CheckpointError::Regressed {
                job,
                regression: Regression::Lsn { latest, attempted },
            });
        }
    }
    None
}

/// `(epoch, highest id, newest LSN)` of a job, each `None` when unknown.
type LeaseState = (Option<i64>, Option<i64>, Option<PgLsn>);

/// The [`LeaseState`] of a lease_state / lock_for_save row.
fn lease_row(r: &Row) -> Result<LeaseState, CheckpointError> {
    let get = |e| pg("save: lease row", e);
    Ok((
        r.try_get(0).map_err(get)?,
        r.try_get(1).map_err(get)?,
        r.try_get(2).map_err(get)?,
    ))
}

/// A metadata row (columns [`crate::sql::META_COLUMNS`]).
fn meta_row(job: &JobName, r: &Row) -> Result<MetaRow, CheckpointError> {
    let get = |e| pg("reading metadata", e);
    let id: i64 = r.try_get(0).map_err(get)?;
    let id = u64::try_from(id)
        .ok()
        .and_then(CheckpointId::new)
        .ok_or_else(|| definite(format!("checkpoint id {id} in the table is not valid")))?;
    let lsn: PgLsn = r.try_get(1).map_err(get)?;
    let created: i64 = r.try_get(2).map_err(get)?;
    let stored: i64 = r.try_get(3).map_err(get)?;
    let storage: &str = r.try_get(4).map_err(get)?;
    let chunk_size: i64 = r.try_get(5).map_err(get)?;
    let chunk_count: i64 = r.try_get(6).map_err(get)?;
    let lo_oid: Option<u32> = r.try_get(7).map_err(get)?;
    let chunk_count = u64::try_from(chunk_count).unwrap_or_default();
    let storage_kind;
    let storage = match (storage, lo_oid) {
        ("inline", _) => {
            storage_kind = StorageKind::Inline;
            Storage::Inline
        }
        ("chunk_rows", _) => {
            storage_kind = StorageKind::Chunked {
                chunks: chunk_count,
            };
            Storage::ChunkRows
        }
        ("large_object", Some(oid)) => {
            storage_kind = StorageKind::Chunked {
                chunks: chunk_count,
            };
            Storage::LargeObject(oid)
        }
        (other, _) => {
            return Err(definite(format!(
                "checkpoint {id}: unknown storage {other:?} or missing large object"
            )))
        }
    };
    Ok(MetaRow {
        meta: CheckpointMeta {
            job: job.clone(),
            id,
            commit_end_lsn: Lsn::from_u64(u64::from(lsn)),
            created_at: Timestamp::from_unix_micros(created),
            stored_bytes: u64::try_from(stored).unwrap_or_default(),
            storage: storage_kind,
        },
        storage,
        chunk_size: u64::try_from(chunk_size).unwrap_or_default(),
        chunk_count,
    })
}

/// The count columns of a retain/delete answer: (lease epoch, rows deleted).
fn lease_and_count(r: &Row) -> Result<(Option<i64>, i64), CheckpointError> {
    let get = |e| pg("reading result", e);
    Ok((r.try_get(0).map_err(get)?, r.try_get(1).map_err(get)?))
}

fn check_epoch(lease: &Lease, epoch: Option<i64>) -> Result<(), CheckpointError> {
    let job = lease.job().clone();
    match epoch.and_then(|e| u64::try_from(e).ok()) {
        None => Err(CheckpointError::NotFound {
            job,
            what: NotFound::Lease,
        }),
        Some(current) if current != lease.epoch().0 => Err(CheckpointError::Fenced {
            job,
            held: lease.epoch(),
            current: Epoch(current),
        }),
        Some(_) => Ok(()),
    }
}

#[async_trait]
impl CheckpointStore for PgCheckpointStore {
    async fn acquire_lease(
        &self,
        job: &JobName,
        owner: &OwnerId,
    ) -> Result<Lease, CheckpointError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&self.sql().acquire)
            .await
            .map_err(|e| pg("acquire lease: prepare", e))?;
        let epoch: i64 = client
            .query_one(&stmt, &[&job.as_str(), &owner.as_str()])
            .await
            .and_then(|r| r.try_get(0))
            .map_err(|e| pg("acquire lease", e))?;
        let epoch = u64::try_from(epoch).map_err(|_| definite("negative epoch in lease table"))?;
        Ok(Lease::new(job.clone(), owner.clone(), Epoch(epoch)))
    }

    async fn save(
        &self,
        lease: &Lease,
        checkpoint: &Checkpoint,
    ) -> Result<CheckpointMeta, CheckpointError> {
        lease.check_job(checkpoint)?;
        let config = &self.inner.config;
        let rejected = |e| CheckpointError::Rejected {
            reason: Rejection::Encode(e),
        };
        // Inline candidates are encoded as one chunk; the decision uses the uncompressed
        // length, known before anything is compressed.
        let encoder =
            ChunkedEncoder::new(checkpoint, &config.encode, usize::MAX).map_err(rejected)?;
        let mut client = self.client().await?;
        let result = if encoder.uncompressed_len() <= config.inline_threshold as u64 {
            self.save_inline(
                Db::pooled(&client),
                lease,
                checkpoint,
                encoder,
                self.keep_others(),
            )
            .await
        } else {
            let chunk_size = match config.large_layout {
                LargeLayout::ChunkRows => config.row_chunk_size,
                LargeLayout::LargeObject => config.large_object_chunk_size,
            };
            match ChunkedEncoder::new(checkpoint, &config.encode, chunk_size) {
                Ok(encoder) => {
                    self.save_large(&mut client, lease, checkpoint, encoder, config.large_layout)
                        .await
                }
                Err(e) => Err(rejected(e)),
            }
        };
        if matches!(&result, Err(e) if e.is_retryable()) {
            // The connection may have died mid-save (server restart, terminated backend)
            // before the pool can tell: never hand it out again.
            drop(Object::take(client));
        }
        result
    }

    async fn latest(&self, job: &JobName) -> Result<Latest, CheckpointError> {
        let mut client = self.client().await?;
        // The usual case in one statement: the newest checkpoint is inline and valid.
        let newest = client
            .prepare_cached(&self.sql().newest)
            .await
            .map_err(|e| pg("latest: prepare", e))?;
        let Some(r) = client
            .query_opt(&newest, &[&job.as_str()])
            .await
            .map_err(|e| pg("latest", e))?
        else {
            return Ok(Latest::default());
        };
        let row = meta_row(job, &r)?;
        if row.storage == Storage::Inline {
            let data: Option<&[u8]> = r.try_get(8).map_err(|e| pg("latest: data", e))?;
            if let Ok(checkpoint) = self.read_inline(&row, data) {
                return Ok(Latest {
                    checkpoint: Some(StoredCheckpoint {
                        meta: row.meta,
                        checkpoint,
                    }),
                    skipped: Vec::new(),
                });
            }
        }
        drop(r);

        // Otherwise all of the job's checkpoints, newest first, in one snapshot, skipping
        // corrupt ones.
        let list = client
            .prepare_cached(&self.sql().list_desc)
            .await
            .map_err(|e| pg("latest: prepare", e))?;
        let tx = Self::begin_read(&mut client).await?;
        let rows = tx
            .query(&list, &[&job.as_str()])
            .await
            .map_err(|e| pg("latest: list", e))?;
        let mut latest = Latest::default();
        for r in &rows {
            let row = meta_row(job, r)?;
            let inline: Option<&[u8]> = r.try_get(8).map_err(|e| pg("latest: data", e))?;
            match self.read(&tx, &row, inline).await {
                Ok(checkpoint) => {
                    latest.checkpoint = Some(StoredCheckpoint {
                        meta: row.meta,
                        checkpoint,
                    });
                    break;
                }
                Err(CheckpointError::Corrupt { source, .. }) => {
                    tracing::warn!(
                        job = %job, checkpoint = %row.meta.id, error = %source,
                        "skipping corrupt checkpoint; falling back to an older one"
                    );
                    latest.skipped.push(SkippedCheckpoint {
                        meta: row.meta,
                        reason: source,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        tx.commit().await.map_err(|e| pg("latest: end", e))?;
        Ok(latest)
    }

    async fn load(
        &self,
        job: &JobName,
        id: CheckpointId,
    ) -> Result<StoredCheckpoint, CheckpointError> {
        let db = db_id(id)?;
        let not_found = || CheckpointError::NotFound {
            job: job.clone(),
            what: NotFound::Checkpoint(id),
        };
        let mut client = self.client().await?;
        let get = client
            .prepare_cached(&self.sql().get)
            .await
            .map_err(|e| pg("load: prepare", e))?;
        // An inline checkpoint is one statement, so one consistent read by itself.
        let r = client
            .query_opt(&get, &[&job.as_str(), &db])
            .await
            .map_err(|e| pg("load", e))?
            .ok_or_else(not_found)?;
        let row = meta_row(job, &r)?;
        if row.storage == Storage::Inline {
            let data: Option<&[u8]> = r.try_get(8).map_err(|e| pg("load: data", e))?;
            let checkpoint = self.read_inline(&row, data)?;
            return Ok(StoredCheckpoint {
                meta: row.meta,
                checkpoint,
            });
        }
        drop(r);
        // Chunks: the row again and its chunks in one snapshot.
        let tx = Self::begin_read(&mut client).await?;
        let r = tx
            .query_opt(&get, &[&job.as_str(), &db])
            .await
            .map_err(|e| pg("load", e))?
            .ok_or_else(not_found)?;
        let row = meta_row(job, &r)?;
        let inline: Option<&[u8]> = r.try_get(8).map_err(|e| pg("load: data", e))?;
        let checkpoint = self.read(&tx, &row, inline).await?;
        tx.commit().await.map_err(|e| pg("load: end", e))?;
        Ok(StoredCheckpoint {
            meta: row.meta,
            checkpoint,
        })
    }

    async fn list(&self, job: &JobName) -> Result<Vec<CheckpointMeta>, CheckpointError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&self.sql().list)
            .await
            .map_err(|e| pg("list: prepare", e))?;
        let rows = client
            .query(&stmt, &[&job.as_str()])
            .await
            .map_err(|e| pg("list", e))?;
        rows.iter()
            .map(|r| meta_row(job, r).map(|m| m.meta))
            .collect()
    }

    async fn delete(&self, lease: &Lease, id: CheckpointId) -> Result<(), CheckpointError> {
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

    async fn retain(&self, lease: &Lease, keep: usize) -> Result<usize, CheckpointError> {
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
