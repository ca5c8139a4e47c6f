//! [`recover`]: take the job's lease, choose the checkpoint to resume from
//! and check it against the replication slot.

use cdc_core::sql::quote_literal;
use cdc_core::Lsn;
use checkpoint_api::{
    CheckpointError, CheckpointId, CheckpointMeta, CheckpointStore, JobName, Lease, OwnerId,
    SkippedCheckpoint, StoredCheckpoint,
};

use crate::replication::{ReplicationConnection, ReplicationError};

/// What the server says about the job's replication slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotState {
    /// The slot's name.
    pub name: String,
    /// `confirmed_flush_lsn`: the server keeps WAL for everything after it.
    pub confirmed_flush: Lsn,
    /// `restart_lsn`: the oldest WAL the slot holds.
    pub restart_lsn: Lsn,
    /// The server's current WAL insert position.
    pub current_wal: Lsn,
    /// The backend streaming from the slot, if one is.
    pub active_pid: Option<i32>,
    /// `wal_status` (PostgreSQL 13+): `reserved`, `extended`, `unreserved`
    /// (WAL will soon be removed) or `lost`.
    pub wal_status: Option<String>,
    /// Why the server invalidated the slot (`None`: it is usable).
    pub invalidated: Option<String>,
}

impl SlotState {
    /// WAL the server keeps for this slot beyond its confirmed position, in bytes.
    pub fn lag_bytes(&self) -> u64 {
        self.current_wal
            .as_u64()
            .saturating_sub(self.confirmed_flush.as_u64())
    }
}

/// Reads the state of slot `slot` through `conn` (`None` if it does not exist).
pub async fn slot_state(
    conn: &mut ReplicationConnection,
    slot: &str,
) -> Result<Option<SlotState>, ReplicationError> {
    // Columns that only newer servers have are read through to_jsonb, so
    // one query serves every version (absent ones read as NULL).
    let sql = format!(
        "SELECT confirmed_flush_lsn, restart_lsn, pg_catalog.pg_current_wal_lsn(), active_pid, \
         pg_catalog.to_jsonb(s) ->> 'wal_status', pg_catalog.to_jsonb(s) ->> 'conflicting', \
         pg_catalog.to_jsonb(s) ->> 'invalidation_reason' \
         FROM pg_catalog.pg_replication_slots s WHERE slot_name = {}",
        quote_literal(slot)
    );
    let mut results = conn.simple_query(&sql).await?;
    let Some(result) = results.pop() else {
        return Ok(None);
    };
    let Some(row) = result.rows().first() else {
        return Ok(None);
    };
    let lsn = |i: usize| -> Lsn {
        row.get(i)
            .cloned()
            .flatten()
            .and_then(|s| s.parse().ok())
            .unwrap_or(Lsn::INVALID)
    };
    let text = |i: usize| row.get(i).cloned().flatten();
    let wal_status = text(4);
    let invalidated = super::slot_lost::invalidation(
        wal_status.as_deref(),
        text(5).as_deref(),
        text(6).as_deref(),
    );
    Ok(Some(SlotState {
        wal_status,
        invalidated,
        name: slot.to_owned(),
        confirmed_flush: lsn(0),
        restart_lsn: lsn(1),
        current_wal: lsn(2),
        active_pid: row.get(3).cloned().flatten().and_then(|s| s.parse().ok()),
    }))
}

/// How [`recover`] chooses.
#[derive(Debug, Clone)]
pub struct RecoveryOptions {
    /// The job.
    pub job: JobName,
    /// Who takes the lease (shown in the store).
    pub owner: OwnerId,
    /// Resume from this checkpoint instead of the newest readable one; newer
    /// checkpoints are deleted.
    pub from_checkpoint: Option<CheckpointId>,
    /// Resume even when the slot has been confirmed past the checkpoint
    /// (transactions in between are not replayed: operator state misses
    /// them).
    pub trust_slot: bool,
}

/// What [`recover`] found.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// The job's write lease.
    pub lease: Lease,
    /// The checkpoint to resume from (`None`: a fresh job).
    pub checkpoint: Option<StoredCheckpoint>,
    /// Newer checkpoints that were unreadable (now deleted).
    pub skipped: Vec<SkippedCheckpoint>,
    /// Checkpoints deleted because they were newer than the one chosen.
    pub discarded: Vec<CheckpointId>,
    /// The id for the next checkpoint.
    pub next_id: CheckpointId,
    /// Checkpoints left in the store.
    pub retained: Vec<CheckpointMeta>,
    /// Where replication starts (`None`: the slot's confirmed position).
    pub start_lsn: Option<Lsn>,
}

/// Why a job cannot resume.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// The checkpoint store failed.
    #[error("checkpoint store: {0}")]
    Store(#[from] CheckpointError),
    /// `--from-checkpoint` named a checkpoint that is not stored.
    #[error("job {job} has no checkpoint {id}; `pgcdc checkpoints list --job {job}` shows the stored ones")]
    NoSuchCheckpoint {
        /// The job.
        job: JobName,
        /// The id asked for.
        id: CheckpointId,
    },
    /// The job has a checkpoint but its slot is gone.
    #[error(
        "replication slot {slot:?} does not exist, but job {job} has checkpoint {id} at {lsn}: \
             the changes after {lsn} cannot be replayed from a new slot. To start over, delete the \
             job's checkpoints (`pgcdc checkpoints prune --job {job} --keep 0`) and run again; \
             pgcdc then creates the slot (source.create_slot = true) and streams from now on. \
             Or set source.on_slot_lost = \"resnapshot\": pgcdc then creates the slot and reads \
             every published table again"
    )]
    SlotMissing {
        /// The slot.
        slot: String,
        /// The job.
        job: JobName,
        /// The checkpoint.
        id: CheckpointId,
        /// Its position.
        lsn: Lsn,
    },
    /// The slot was confirmed past the checkpoint.
    #[error("replication slot {slot:?} is confirmed up to {slot_lsn}, past checkpoint {id} of job {job} at {lsn}: \
             the transactions in between are gone from the slot, so the restored state would miss them. \
             If that is acceptable, set checkpoint.trust_slot = true to resume from {slot_lsn}")]
    SlotAhead {
        /// The slot.
        slot: String,
        /// Its confirmed position.
        slot_lsn: Lsn,
        /// The job.
        job: JobName,
        /// The checkpoint.
        id: CheckpointId,
        /// Its position.
        lsn: Lsn,
    },
}

/// Starts `options.job` over after its slot was lost: takes the lease
/// (fencing any earlier writer) and deletes every checkpoint, since none of
/// their positions can be streamed from a new slot. The job then starts as
/// a first start does (no checkpoint, a new snapshot), and its checkpoint
/// ids go on after the highest one.
///
/// Deleting comes first: should the job stop before its new slot has a
/// checkpoint, the next start finds no checkpoint and takes the snapshot
/// again rather than resuming from a position of the old slot.
pub async fn start_over(
    store: &dyn CheckpointStore,
    options: &RecoveryOptions,
) -> Result<Recovered, RecoveryError> {
    let job = &options.job;
    let lease = store.acquire_lease(job, &options.owner).await?;
    let all = store.list(job).await?;
    let mut discarded = Vec::with_capacity(all.len());
    for meta in &all {
        store.delete(&lease, meta.id).await?;
        discarded.push(meta.id);
    }
    let next_id = all
        .iter()
        .map(|m| m.id)
        .max()
        .and_then(CheckpointId::next)
        .unwrap_or(CheckpointId::FIRST);
    if !discarded.is_empty() {
        tracing::warn!(job = %job, ?discarded, "deleted the checkpoints of the lost slot");
    }
    Ok(Recovered {
        lease,
        checkpoint: None,
        skipped: Vec::new(),
        discarded,
        next_id,
        retained: Vec::new(),
        start_lsn: None,
    })
}

/// Takes `options.job`'s lease (fencing any earlier writer), picks the
/// checkpoint to resume from and checks it against `slot` (the slot's state
/// before anything was created, `None` if it does not exist).
///
/// Checkpoints newer than the chosen one (unreadable ones, or all newer ones
/// with `from_checkpoint`) are deleted, since the job will save positions
/// below theirs.
pub async fn recover(
    store: &dyn CheckpointStore,
    slot_name: &str,
    slot: Option<&SlotState>,
    options: &RecoveryOptions,
) -> Result<Recovered, RecoveryError> {
    let job = &options.job;
    let lease = store.acquire_lease(job, &options.owner).await?;
    let (checkpoint, skipped) = match options.from_checkpoint {
        Some(id) => match store.load(job, id).await {
            Ok(c) => (Some(c), Vec::new()),
            Err(CheckpointError::NotFound { .. }) => {
                return Err(RecoveryError::NoSuchCheckpoint {
                    job: job.clone(),
                    id,
                })
            }
            Err(e) => return Err(e.into()),
        },
        None => {
            let latest = store.latest(job).await?;
            (latest.checkpoint, latest.skipped)
        }
    };
    for s in &skipped {
        tracing::warn!(job = %job, id = %s.meta.id, lsn = %s.meta.commit_end_lsn, reason = %s.reason,
            "checkpoint is corrupt; resuming from an older one and deleting it");
    }
    let all = store.list(job).await?;
    let chosen = checkpoint.as_ref().map(|c| c.meta.id);
    let mut discarded = Vec::new();
    let mut highest = None;
    for meta in &all {
        highest = highest.max(Some(meta.id));
        let newer = match chosen {
            Some(c) => meta.id > c,
            None => true,
        };
        if newer {
            store.delete(&lease, meta.id).await?;
            discarded.push(meta.id);
        }
    }
    if !discarded.is_empty() && options.from_checkpoint.is_some() {
        tracing::warn!(job = %job, ?discarded, "deleted checkpoints newer than the one resumed from");
    }
    let retained: Vec<CheckpointMeta> = all
        .into_iter()
        .filter(|m| !discarded.contains(&m.id))
        .collect();
    let next_id = highest
        .and_then(CheckpointId::next)
        .unwrap_or(CheckpointId::FIRST);

    let start_lsn = match (&checkpoint, slot) {
        (None, _) => None,
        (Some(c), None) => {
            return Err(RecoveryError::SlotMissing {
                slot: slot_name.to_owned(),
                job: job.clone(),
                id: c.meta.id,
                lsn: c.meta.commit_end_lsn,
            })
        }
        (Some(c), Some(s)) => {
            let lsn = c.meta.commit_end_lsn;
            if s.confirmed_flush > lsn {
                if !options.trust_slot {
                    return Err(RecoveryError::SlotAhead {
                        slot: slot_name.to_owned(),
                        slot_lsn: s.confirmed_flush,
                        job: job.clone(),
                        id: c.meta.id,
                        lsn,
                    });
                }
                tracing::warn!(job = %job, slot = slot_name, slot_lsn = %s.confirmed_flush, checkpoint_lsn = %lsn,
                    "the slot is past the checkpoint; resuming from the slot as checkpoint.trust_slot allows");
                Some(s.confirmed_flush)
            } else {
                Some(lsn)
            }
        }
    };
    if let Some(c) = &checkpoint {
        tracing::info!(job = %job, id = %c.meta.id, lsn = %c.meta.commit_end_lsn,
            operators = c.checkpoint.operators.len(), "resuming from checkpoint");
    }
    Ok(Recovered {
        lease,
        checkpoint,
        skipped,
        discarded,
        next_id,
        retained,
        start_lsn,
    })
}
