//! [`MemoryStore`]: a [`CheckpointStore`] in process memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::codec::{decode_chunks, ChunkManifest, ChunkedEncoder, DecodeOptions, EncodeOptions};
use crate::error::{CheckpointError, CorruptKind, NotFound, Rejection};
use crate::model::{Checkpoint, CheckpointId, JobName};
use crate::store::{
    verify_decoded, CheckpointMeta, CheckpointStore, Epoch, Latest, Lease, OwnerId, StorageKind,
    StoredCheckpoint,
};
use crate::{fencing, latest};

/// Default chunk size of the memory store (1 MiB).
pub const DEFAULT_CHUNK_SIZE: usize = 1 << 20;

/// A [`CheckpointStore`] in process memory, for tests and examples.
///
/// It stores each checkpoint the way a chunking backend would: as the chunks of a
/// [`ChunkedEncoder`] plus their [`ChunkManifest`], and it checks both on every read. Clones
/// share the same storage, like two connections to one database. It passes the conformance
/// suite, and offers the two hooks the suite needs: [`MemoryStore::corrupt`] and
/// [`MemoryStore::fail_next_save`].
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    chunk_size: usize,
    encode: EncodeOptions,
    decode: DecodeOptions,
}

#[derive(Debug, Default)]
struct Inner {
    jobs: HashMap<JobName, Job>,
}

#[derive(Debug, Default)]
struct Job {
    epoch: u64,
    highest_id: Option<CheckpointId>,
    checkpoints: BTreeMap<CheckpointId, Stored>,
    fail_next_save: bool,
}

#[derive(Debug, Clone)]
struct Stored {
    meta: CheckpointMeta,
    chunks: Vec<Bytes>,
    manifest: ChunkManifest,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store with [`DEFAULT_CHUNK_SIZE`] chunks and default codec options.
    pub fn new() -> Self {
        MemoryStore {
            inner: Arc::default(),
            chunk_size: DEFAULT_CHUNK_SIZE,
            encode: EncodeOptions::default(),
            decode: DecodeOptions::default(),
        }
    }

    /// Uses chunks of `chunk_size` bytes (at least 1).
    pub fn with_chunk_size(mut self, chunk_size: usize) -> Self {
        self.chunk_size = chunk_size.max(1);
        self
    }

    /// Uses `encode` and `decode` options.
    pub fn with_codec_options(mut self, encode: EncodeOptions, decode: DecodeOptions) -> Self {
        self.encode = encode;
        self.decode = decode;
        self
    }

    /// Flips one bit in the middle of checkpoint `id`'s stored bytes; `false` if absent.
    pub fn corrupt(&self, job: &JobName, id: CheckpointId) -> bool {
        let mut inner = self.lock();
        let Some(stored) = inner
            .jobs
            .get_mut(job)
            .and_then(|j| j.checkpoints.get_mut(&id))
        else {
            return false;
        };
        let middle = stored.chunks.len() / 2;
        let Some(chunk) = stored.chunks.get_mut(middle) else {
            return false;
        };
        let mut bytes = chunk.to_vec();
        let at = bytes.len() / 2;
        if let Some(b) = bytes.get_mut(at) {
            *b ^= 0x10;
        }
        *chunk = Bytes::from(bytes);
        true
    }

    /// Makes the next save of `job` fail after encoding, before it is stored.
    pub fn fail_next_save(&self, job: &JobName) {
        self.lock()
            .jobs
            .entry(job.clone())
            .or_default()
            .fail_next_save = true;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave `Inner` half-updated: every update is
        // one insert or remove. So a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self, stored: &Stored) -> Result<Checkpoint, CheckpointError> {
        let meta = &stored.meta;
        stored
            .manifest
            .check_chunk_lens(stored.chunks.iter().map(|c| c.len() as u64))
            .map_err(|e| CheckpointError::Corrupt {
                job: meta.job.clone(),
                id: meta.id,
                source: CorruptKind::Manifest(e),
            })?;
        verify_decoded(meta, decode_chunks(&stored.chunks, &self.decode))
    }
}

impl Job {
    /// The current epoch, if a lease was ever acquired.
    fn epoch(&self) -> Option<Epoch> {
        (self.epoch > 0).then_some(Epoch(self.epoch))
    }

    /// The commit end LSN of the newest stored checkpoint.
    fn newest_lsn(&self) -> Option<cdc_core::Lsn> {
        self.checkpoints
            .last_key_value()
            .map(|(_, newest)| newest.meta.commit_end_lsn)
    }
}

fn check_lease(job: Option<&Job>, lease: &Lease) -> Result<(), CheckpointError> {
    fencing::check_lease(lease, job.and_then(Job::epoch))
}

fn check_progress(job: &Job, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
    fencing::check_progress(checkpoint, job.highest_id, job.newest_lsn())
}

#[async_trait]
impl CheckpointStore for MemoryStore {
    async fn acquire_lease(
        &self,
        job: &JobName,
        owner: &OwnerId,
    ) -> Result<Lease, CheckpointError> {
        let mut inner = self.lock();
        let state = inner.jobs.entry(job.clone()).or_default();
        state.epoch += 1;
        Ok(Lease::new(job.clone(), owner.clone(), Epoch(state.epoch)))
    }

    async fn save(
        &self,
        lease: &Lease,
        checkpoint: &Checkpoint,
    ) -> Result<CheckpointMeta, CheckpointError> {
        lease.check_job(checkpoint)?;
        {
            let inner = self.lock();
            let job = inner.jobs.get(lease.job());
            check_lease(job, lease)?;
            if let Some(job) = job {
                check_progress(job, checkpoint)?;
            }
        }
        // Encode without holding the lock: large state takes a while.
        let mut encoder =
            ChunkedEncoder::new(checkpoint, &self.encode, self.chunk_size).map_err(|e| {
                CheckpointError::Rejected {
                    reason: Rejection::Encode(e),
                }
            })?;
        let chunks: Vec<Bytes> = encoder.by_ref().collect();
        let manifest = encoder.manifest().ok_or_else(|| CheckpointError::Backend {
            message: "encoder did not finish".into(),
            source: None,
        })?;
        let meta = CheckpointMeta {
            job: checkpoint.job.clone(),
            id: checkpoint.id,
            commit_end_lsn: checkpoint.source.commit_end_lsn,
            created_at: checkpoint.created_at,
            stored_bytes: manifest.total_len,
            storage: StorageKind::Memory,
        };
        let mut inner = self.lock();
        let job = inner.jobs.get_mut(lease.job());
        check_lease(job.as_deref(), lease)?;
        let Some(job) = job else {
            return Err(CheckpointError::NotFound {
                job: lease.job().clone(),
                what: NotFound::Lease,
            });
        };
        check_progress(job, checkpoint)?;
        if std::mem::take(&mut job.fail_next_save) {
            return Err(CheckpointError::Unavailable {
                message: format!(
                    "injected failure after writing {} of {} chunks",
                    chunks.len() / 2,
                    chunks.len()
                ),
                source: None,
            });
        }
        job.highest_id = Some(checkpoint.id);
        job.checkpoints.insert(
            checkpoint.id,
            Stored {
                meta: meta.clone(),
                chunks,
                manifest,
            },
        );
        Ok(meta)
    }

    async fn latest(&self, job: &JobName) -> Result<Latest, CheckpointError> {
        let candidates: Vec<Stored> = {
            let inner = self.lock();
            match inner.jobs.get(job) {
                Some(j) => j.checkpoints.values().rev().cloned().collect(),
                None => Vec::new(),
            }
        };
        latest::first_valid(candidates, |stored| {
            let read = self.read(&stored);
            (stored.meta, read)
        })
    }

    async fn load(
        &self,
        job: &JobName,
        id: CheckpointId,
    ) -> Result<StoredCheckpoint, CheckpointError> {
        let stored = self
            .lock()
            .jobs
            .get(job)
            .and_then(|j| j.checkpoints.get(&id))
            .cloned()
            .ok_or_else(|| CheckpointError::NotFound {
                job: job.clone(),
                what: NotFound::Checkpoint(id),
            })?;
        let checkpoint = self.read(&stored)?;
        Ok(StoredCheckpoint {
            meta: stored.meta,
            checkpoint,
        })
    }

    async fn list(&self, job: &JobName) -> Result<Vec<CheckpointMeta>, CheckpointError> {
        Ok(self
            .lock()
            .jobs
            .get(job)
            .map(|j| j.checkpoints.values().map(|s| s.meta.clone()).collect())
            .unwrap_or_default())
    }

    async fn delete(&self, lease: &Lease, id: CheckpointId) -> Result<(), CheckpointError> {
        let mut inner = self.lock();
        let job = inner.jobs.get_mut(lease.job());
        check_lease(job.as_deref(), lease)?;
        match job.and_then(|j| j.checkpoints.remove(&id)) {
            Some(_) => Ok(()),
            None => Err(CheckpointError::NotFound {
                job: lease.job().clone(),
                what: NotFound::Checkpoint(id),
            }),
        }
    }

    async fn retain(&self, lease: &Lease, keep: usize) -> Result<usize, CheckpointError> {
        let mut inner = self.lock();
        let job = inner.jobs.get_mut(lease.job());
        check_lease(job.as_deref(), lease)?;
        let Some(job) = job else { return Ok(0) };
        let mut deleted = 0;
        while job.checkpoints.len() > keep {
            if job.checkpoints.pop_first().is_none() {
                break;
            }
            deleted += 1;
        }
        Ok(deleted)
    }
}
