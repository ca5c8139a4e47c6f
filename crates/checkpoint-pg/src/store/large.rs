//! A big save: its chunks, encoded on a blocking thread a few ahead of the network,
//! go to chunk rows (binary `COPY`) or one large object (pipelined `lo_put`), then the
//! metadata row and the lease's highest id, all in one transaction (with retention too in
//! a caller's transaction, `save_in`; a pooled save's retention runs after it returns).

use bytes::Bytes;
use checkpoint_api::{
    Checkpoint, CheckpointError, CheckpointMeta, ChunkedEncoder, Lease, StorageKind,
};
use deadpool_postgres::Object;
use futures_util::{pin_mut, stream, StreamExt, TryStreamExt};
use tokio::sync::mpsc;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;

use super::fencing::refusal;
use super::rows::{db_id, lease_row};
use super::save::{Db, SaveParams};
use super::{PgCheckpointStore, PIPELINE_DEPTH};
use crate::config::LargeLayout;
use crate::error::{definite, pg};

impl PgCheckpointStore {
    /// A big save on a pooled connection: its own transaction.
    pub(super) async fn save_large(
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
                // Retention runs after the save returns (`retain_after_save`).
                None,
            )
            .await?;
        tx.commit().await.map_err(|e| pg("save: commit", e))?;
        Ok(meta)
    }

    /// Writes a big checkpoint inside the transaction open on `db`, without
    /// committing it.
    pub(super) async fn write_large(
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
}
