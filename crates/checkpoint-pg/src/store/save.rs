//! The entry points of a save: on a pooled connection or in a caller's transaction, and
//! the inline save, one statement.

use bytes::{Bytes, BytesMut};
use checkpoint_api::{
    Checkpoint, CheckpointError, CheckpointMeta, ChunkManifest, ChunkedEncoder, Lease, Rejection,
    StorageKind,
};
use deadpool_postgres::{Object, StatementCache};
use tokio_postgres::types::PgLsn;
use tokio_postgres::Statement;

use super::rows::db_id;
use super::PgCheckpointStore;
use crate::config::LargeLayout;
use crate::error::{definite, pg};

/// The connection a save runs on: a pooled one (statements cached per
/// connection) or a caller's, inside the caller's transaction.
#[derive(Clone, Copy)]
pub(super) struct Db<'a> {
    pub(super) client: &'a tokio_postgres::Client,
    cache: Option<&'a StatementCache>,
}

impl<'a> Db<'a> {
    pub(super) fn pooled(client: &'a Object) -> Self {
        Db {
            client,
            cache: Some(&client.statement_cache),
        }
    }

    pub(super) fn pooled_tx(tx: &'a deadpool_postgres::Transaction<'_>) -> Self {
        Db {
            client: tx.client(),
            cache: Some(&tx.statement_cache),
        }
    }

    pub(super) async fn prepare(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        match self.cache {
            Some(cache) => cache.prepare(self.client, sql).await,
            None => self.client.prepare(sql).await,
        }
    }
}

impl PgCheckpointStore {
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
    /// [`CheckpointStore::save`](checkpoint_api::CheckpointStore::save); on any error the
    /// caller must roll back.
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

    /// Saves `checkpoint` on a pooled connection ([`CheckpointStore::save`]).
    ///
    /// [`CheckpointStore::save`]: checkpoint_api::CheckpointStore::save
    pub(super) async fn save_pooled(
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
            // Retention runs after the save returns (`retain_after_save`).
            self.save_inline(Db::pooled(&client), lease, checkpoint, encoder, None)
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
        if result.is_ok() {
            self.retain_after_save(lease);
        }
        if matches!(&result, Err(e) if e.is_retryable()) {
            // The connection may have died mid-save (server restart, terminated backend)
            // before the pool can tell: never hand it out again.
            drop(Object::take(client));
        }
        result
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
        // With retention in the statement ($12: rows to keep besides the new one), or the
        // leaner statement without it.
        let sql = match keep_others {
            Some(_) => &self.sql().save_inline,
            None => &self.sql().save_inline_keep_all,
        };
        let stmt = db.prepare(sql).await.map_err(|e| pg("save: prepare", e))?;
        let data: &[u8] = &envelope;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 12] = [
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
        ];
        let params = if keep_others.is_some() {
            &params[..]
        } else {
            &params[..11]
        };
        let row = db
            .client
            .query_one(&stmt, params)
            .await
            .map_err(|e| pg("save", e))?;
        let inserted: bool = row.try_get(0).map_err(|e| pg("save: result", e))?;
        if !inserted {
            return Err(self.why_refused(db, lease, checkpoint).await);
        }
        Ok(p.meta(checkpoint, StorageKind::Inline))
    }
}

/// The bind parameters of a save.
pub(super) struct SaveParams<'a> {
    pub(super) job: &'a str,
    pub(super) id: i64,
    pub(super) epoch: i64,
    pub(super) lsn: PgLsn,
    pub(super) created: i64,
    pub(super) format: i32,
    pub(super) stored: i64,
    pub(super) crc: i64,
    pub(super) chunk_size: i64,
    pub(super) chunk_count: i64,
}

impl<'a> SaveParams<'a> {
    pub(super) fn new(
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

    pub(super) fn meta(&self, checkpoint: &Checkpoint, storage: StorageKind) -> CheckpointMeta {
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

fn finished(encoder: &ChunkedEncoder) -> Result<ChunkManifest, CheckpointError> {
    encoder
        .manifest()
        .ok_or_else(|| definite("save: encoder did not finish"))
}
