//! Reading checkpoints back: `latest`, `load` and `list`, each in one consistent read,
//! with chunk lengths checked against the metadata row and the envelope verified.

use checkpoint_api::{
    verify_decoded, Checkpoint, CheckpointError, CheckpointId, CheckpointMeta, ChunkedDecoder,
    CorruptKind, JobName, Latest, LatestScan, LatestStep, NotFound, StoredCheckpoint,
};
use futures_util::{pin_mut, stream, StreamExt, TryStreamExt};
use tokio_postgres::IsolationLevel;

use super::rows::{db_id, meta_row, MetaRow, Storage};
use super::{PgCheckpointStore, PIPELINE_DEPTH};
use crate::error::pg;

impl PgCheckpointStore {
    /// The newest readable checkpoint of `job` ([`CheckpointStore::latest`]).
    ///
    /// [`CheckpointStore::latest`]: checkpoint_api::CheckpointStore::latest
    pub(super) async fn find_latest(&self, job: &JobName) -> Result<Latest, CheckpointError> {
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
        let mut scan = LatestScan::new();
        for r in &rows {
            let row = meta_row(job, r)?;
            let inline: Option<&[u8]> = r.try_get(8).map_err(|e| pg("latest: data", e))?;
            let read = self.read(&tx, &row, inline).await;
            match scan.offer(row.meta, read)? {
                LatestStep::Found => break,
                LatestStep::Skipped(skipped) => tracing::warn!(
                    job = %job, checkpoint = %skipped.meta.id, error = %skipped.reason,
                    "skipping corrupt checkpoint; falling back to an older one"
                ),
            }
        }
        tx.commit().await.map_err(|e| pg("latest: end", e))?;
        Ok(scan.finish())
    }

    /// Checkpoint `id` of `job` ([`CheckpointStore::load`]).
    ///
    /// [`CheckpointStore::load`]: checkpoint_api::CheckpointStore::load
    pub(super) async fn load_one(
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

    /// Metadata of every checkpoint of `job`, oldest first ([`CheckpointStore::list`]).
    ///
    /// [`CheckpointStore::list`]: checkpoint_api::CheckpointStore::list
    pub(super) async fn list_metas(
        &self,
        job: &JobName,
    ) -> Result<Vec<CheckpointMeta>, CheckpointError> {
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
