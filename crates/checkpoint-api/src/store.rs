//! The contract of checkpoint storage: [`CheckpointStore`] and its fencing [`Lease`].

use std::fmt;

use async_trait::async_trait;
use cdc_core::Lsn;

use crate::codec::DecodeError;
use crate::error::{CheckpointError, CorruptKind};
use crate::model::{
    check_name, Checkpoint, CheckpointId, InvalidCheckpoint, JobName, NameKind, Timestamp,
};

/// A fencing epoch: each lease on a job gets a greater one than every lease before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Who holds a lease (e.g. `hostname:pid:uuid`): non-empty, at most 255 bytes, no control
/// characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(String);

impl OwnerId {
    /// An owner id, if `owner` is a valid one.
    pub fn new(owner: impl Into<String>) -> Result<Self, InvalidCheckpoint> {
        let owner = owner.into();
        check_name(&owner, NameKind::Owner)?;
        Ok(OwnerId(owner))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The right to write a job's checkpoints, as of one epoch.
///
/// Stores hand leases out from [`CheckpointStore::acquire_lease`]; backends build them with
/// [`Lease::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    job: JobName,
    owner: OwnerId,
    epoch: Epoch,
}

impl Lease {
    /// A lease of `job` by `owner` at `epoch` (for store implementations).
    pub fn new(job: JobName, owner: OwnerId, epoch: Epoch) -> Self {
        Lease { job, owner, epoch }
    }

    /// The job.
    pub fn job(&self) -> &JobName {
        &self.job
    }

    /// The holder.
    pub fn owner(&self) -> &OwnerId {
        &self.owner
    }

    /// The epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Refuses a checkpoint of another job than this lease's: every store's
    /// `save` calls this first.
    pub fn check_job(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
        if checkpoint.job == self.job {
            return Ok(());
        }
        Err(CheckpointError::Rejected {
            reason: crate::error::Rejection::JobMismatch {
                lease: self.job.clone(),
                checkpoint: checkpoint.job.clone(),
            },
        })
    }
}

/// How a backend keeps a checkpoint's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StorageKind {
    /// In process memory (the testkit store).
    Memory,
    /// In one value (e.g. a `BYTEA` column).
    Inline,
    /// As a sequence of chunks (e.g. a large object or chunk rows).
    Chunked {
        /// Number of chunks.
        chunks: u64,
    },
}

/// What a store knows about a stored checkpoint without decoding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointMeta {
    /// Job.
    pub job: JobName,
    /// Checkpoint id.
    pub id: CheckpointId,
    /// The checkpoint's commit end LSN.
    pub commit_end_lsn: Lsn,
    /// The checkpoint's creation time.
    pub created_at: Timestamp,
    /// Bytes stored (the envelope's length).
    pub stored_bytes: u64,
    /// How they are stored.
    pub storage: StorageKind,
}

impl CheckpointMeta {
    /// Whether `checkpoint` is the one these metadata describe (job, id, LSN, time).
    pub fn describes(&self, checkpoint: &Checkpoint) -> bool {
        self.job == checkpoint.job
            && self.id == checkpoint.id
            && self.commit_end_lsn == checkpoint.source.commit_end_lsn
            && self.created_at == checkpoint.created_at
    }
}

/// A checkpoint with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    /// Metadata.
    pub meta: CheckpointMeta,
    /// The checkpoint.
    pub checkpoint: Checkpoint,
}

/// A checkpoint [`CheckpointStore::latest`] passed over because it is corrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedCheckpoint {
    /// Its metadata.
    pub meta: CheckpointMeta,
    /// Why it is corrupt.
    pub reason: CorruptKind,
}

/// The answer of [`CheckpointStore::latest`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Latest {
    /// The newest checkpoint that could be read, if any.
    pub checkpoint: Option<StoredCheckpoint>,
    /// Newer checkpoints that could not be read, newest first. Non-empty means data loss
    /// since the last good checkpoint: report it.
    pub skipped: Vec<SkippedCheckpoint>,
}

/// Where a pipeline's checkpoints are kept.
///
/// # Invariants every implementation keeps
///
/// * **A save is atomic.** After [`save`](Self::save) returns `Err`, nothing of that
///   checkpoint is visible to any call, now or after a restart; after it returns `Ok`, all of
///   it is, durably.
/// * **Ids never go backward.** A save succeeds only if the checkpoint's id is greater than
///   every id ever saved for the job, including deleted ones, and its commit end LSN is not
///   before the newest stored checkpoint's; otherwise it fails with
///   [`CheckpointError::Regressed`] and changes nothing.
/// * **One writer per job.** [`acquire_lease`](Self::acquire_lease) returns a lease whose
///   epoch is greater than every earlier lease of the job, and from then on writes
///   ([`save`](Self::save), [`delete`](Self::delete), [`retain`](Self::retain)) carrying an
///   older epoch fail with [`CheckpointError::Fenced`] and change nothing. Taking a lease
///   is a takeover: it always succeeds, and the previous holder is fenced. Whether two
///   instances should *run* at once is the runtime's concern; the store guarantees that at
///   most one of them can write.
/// * **`latest` tolerates a corrupt newest checkpoint.** [`latest`](Self::latest) returns
///   the newest checkpoint that decodes and whose content matches its metadata, and lists
///   every newer one it skipped and why. Reads never fail because one checkpoint is corrupt;
///   only [`load`](Self::load) of that id reports [`CheckpointError::Corrupt`]. Any other
///   failure (e.g. the database is unreachable) is an error of `latest`, never a skip: a
///   checkpoint is skipped only when its bytes are known to be bad. A skipped checkpoint
///   still counts for the rules above: a runtime that resumes from an older checkpoint
///   deletes the skipped ones before it saves a position below theirs.
/// * **Listing is in id order**, oldest first, and includes corrupt checkpoints (their
///   metadata are intact).
///
/// The conformance suite (`testkit` feature) checks all of the above.
#[async_trait]
pub trait CheckpointStore: Send + Sync + fmt::Debug {
    /// Takes the write lease of `job` for `owner`, fencing every earlier holder.
    async fn acquire_lease(&self, job: &JobName, owner: &OwnerId)
        -> Result<Lease, CheckpointError>;

    /// Saves `checkpoint` (all or nothing) under `lease` and returns what was stored.
    async fn save(
        &self,
        lease: &Lease,
        checkpoint: &Checkpoint,
    ) -> Result<CheckpointMeta, CheckpointError>;

    /// The newest readable checkpoint of `job`, and the newer ones skipped.
    async fn latest(&self, job: &JobName) -> Result<Latest, CheckpointError>;

    /// Checkpoint `id` of `job`: [`CheckpointError::NotFound`] if absent,
    /// [`CheckpointError::Corrupt`] if unreadable.
    async fn load(
        &self,
        job: &JobName,
        id: CheckpointId,
    ) -> Result<StoredCheckpoint, CheckpointError>;

    /// Metadata of every stored checkpoint of `job`, oldest first.
    async fn list(&self, job: &JobName) -> Result<Vec<CheckpointMeta>, CheckpointError>;

    /// Deletes checkpoint `id` ([`CheckpointError::NotFound`] if absent).
    async fn delete(&self, lease: &Lease, id: CheckpointId) -> Result<(), CheckpointError>;

    /// Deletes all but the newest `keep` checkpoints; returns how many were deleted.
    async fn retain(&self, lease: &Lease, keep: usize) -> Result<usize, CheckpointError>;
}

/// Why a stored envelope is not the checkpoint its metadata describe, if it is not: the
/// check `latest` and `load` implementations run after decoding.
pub fn verify_decoded(
    meta: &CheckpointMeta,
    decoded: Result<Checkpoint, DecodeError>,
) -> Result<Checkpoint, CheckpointError> {
    let corrupt = |source| CheckpointError::Corrupt {
        job: meta.job.clone(),
        id: meta.id,
        source,
    };
    let checkpoint = decoded.map_err(|e| corrupt(e.into()))?;
    if !meta.describes(&checkpoint) {
        return Err(corrupt(CorruptKind::Mismatch {
            found_job: checkpoint.job.clone(),
            found_id: checkpoint.id,
        }));
    }
    Ok(checkpoint)
}
