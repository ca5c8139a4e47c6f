//! Rows to values and back: metadata rows, lease rows, ids as `bigint`.

use cdc_core::Lsn;
use checkpoint_api::{
    CheckpointError, CheckpointId, CheckpointMeta, JobName, StorageKind, Timestamp,
};
use tokio_postgres::types::PgLsn;
use tokio_postgres::Row;

use crate::error::{definite, pg};

/// How a stored checkpoint's bytes are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Storage {
    Inline,
    ChunkRows,
    LargeObject(u32),
}

/// A metadata row.
#[derive(Debug)]
pub(super) struct MetaRow {
    pub(super) meta: CheckpointMeta,
    pub(super) storage: Storage,
    pub(super) chunk_size: u64,
    pub(super) chunk_count: u64,
}

/// A checkpoint id as the value of a `bigint` column.
pub(super) fn db_id(id: CheckpointId) -> Result<i64, CheckpointError> {
    i64::try_from(id.get())
        .map_err(|_| definite(format!("checkpoint id {id} does not fit a bigint")))
}

/// `(epoch, highest id, newest LSN)` of a job, each `None` when unknown.
pub(super) type LeaseState = (Option<i64>, Option<i64>, Option<PgLsn>);

/// The [`LeaseState`] of a lease_state / lock_for_save row.
pub(super) fn lease_row(r: &Row) -> Result<LeaseState, CheckpointError> {
    let get = |e| pg("save: lease row", e);
    Ok((
        r.try_get(0).map_err(get)?,
        r.try_get(1).map_err(get)?,
        r.try_get(2).map_err(get)?,
    ))
}

/// A metadata row (columns [`crate::sql::META_COLUMNS`]).
pub(super) fn meta_row(job: &JobName, r: &Row) -> Result<MetaRow, CheckpointError> {
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
pub(super) fn lease_and_count(r: &Row) -> Result<(Option<i64>, i64), CheckpointError> {
    let get = |e| pg("reading result", e);
    Ok((r.try_get(0).map_err(get)?, r.try_get(1).map_err(get)?))
}
