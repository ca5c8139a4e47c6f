//! Checkpoints of a running pipeline: when they are taken, what they hold,
//! and how a pipeline resumes from one.
//!
//! # Taking checkpoints
//!
//! Every `interval` (and after `max_bytes` of WAL, if set) the pipeline
//! takes a checkpoint at the next transaction boundary:
//!
//! 1. It captures every operator's committed state and the position: the end
//!    LSN of the last transaction it handed to the sinks (or, when no
//!    transaction is open and the server's keepalive reports a newer
//!    position, that one, so quiet tables do not hold WAL back).
//! 2. It waits, without stopping the stream, until every sink has flushed
//!    that transaction.
//! 3. It saves the checkpoint through the [`CheckpointStore`] and applies
//!    retention (keep the newest `keep`).
//! 4. Only then may the slot move: by default to the position of the
//!    **oldest retained** checkpoint (so every retained checkpoint can still
//!    be restored), or to the newest with [`ConfirmPolicy::Newest`].
//!
//! A failed save is logged and retried at the next interval; streaming goes
//! on and the slot does not move. A save refused with
//! [`CheckpointError::Fenced`] stops the pipeline: another instance owns the
//! job.
//!
//! # Resuming
//!
//! [`recover`] takes the job's lease, loads the newest readable checkpoint
//! (or a chosen one) and checks it against the slot. The pipeline then
//! restores every operator's state and starts replication at the
//! checkpoint's position, skipping any transaction that ended at or before
//! it.
//!
//! A slot the server invalidated, or one gone while a checkpoint exists, is
//! *lost* ([`SlotLoss`]): the job stops with [`SlotLostError`], or with
//! `on_slot_lost = "resnapshot"` [`start_over`] deletes the checkpoints and
//! the job starts again like a first start, with a new slot and snapshot.

mod coordinator;
mod recovery;
mod slot_lost;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cdc_core::Lsn;
use checkpoint_api::{
    Checkpoint, CheckpointError, CheckpointId, CheckpointMeta, CheckpointStore, Lease,
};

pub(crate) use coordinator::{Coordinator, InSinkSave};
pub use recovery::{
    recover, slot_state, start_over, Recovered, RecoveryError, RecoveryOptions, SlotState,
};
pub(crate) use slot_lost::is_invalidated_refusal;
pub use slot_lost::{pipeline_slot_lost, refused_as_lost, SlotLoss, SlotLostError};

/// The default interval between checkpoints (30 s).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
/// The default number of checkpoints kept (5).
pub const DEFAULT_KEEP: usize = 5;

/// How far the slot may be confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConfirmPolicy {
    /// Up to the oldest retained checkpoint: any retained checkpoint can be
    /// restored (`pgcdc run --from-checkpoint`).
    #[default]
    OldestRetained,
    /// Up to the newest checkpoint: WAL is released sooner, but only the
    /// newest checkpoint is guaranteed restorable.
    Newest,
}

impl ConfirmPolicy {
    /// The position this policy allows, given the retained checkpoints'
    /// metadata (any order). `Lsn::INVALID` when there are none.
    pub fn position(self, retained: &[CheckpointMeta]) -> Lsn {
        let lsns = retained.iter().map(|m| m.commit_end_lsn);
        match self {
            ConfirmPolicy::OldestRetained => lsns.min(),
            ConfirmPolicy::Newest => lsns.max(),
        }
        .unwrap_or(Lsn::INVALID)
    }
}

/// Checkpointing settings of a pipeline, normally produced by [`recover`].
#[derive(Debug, Clone)]
pub struct CheckpointOptions {
    /// Where checkpoints go.
    pub store: Arc<dyn CheckpointStore>,
    /// The job's write lease.
    pub lease: Lease,
    /// Time between checkpoints.
    pub interval: Duration,
    /// Also checkpoint after this many bytes of WAL (`None`: time only).
    pub max_bytes: Option<u64>,
    /// Checkpoints kept.
    pub keep: usize,
    /// How far the slot may be confirmed.
    pub confirm: ConfirmPolicy,
    /// The checkpoint to resume from, if any: operators are restored from it
    /// and replication starts at its position.
    pub resume: Option<Checkpoint>,
    /// The id of the next checkpoint (greater than every stored one).
    pub next_id: CheckpointId,
    /// The job's stored checkpoints at start, oldest first (what recovery
    /// left); the slot may be confirmed as far as these allow.
    pub retained: Vec<CheckpointMeta>,
    /// Stored with every checkpoint (opaque; at most 1 KiB).
    pub config_fingerprint: Bytes,
}

impl CheckpointOptions {
    /// Options for a job with nothing stored yet, with the defaults.
    pub fn new(store: Arc<dyn CheckpointStore>, lease: Lease) -> Self {
        CheckpointOptions {
            store,
            lease,
            interval: DEFAULT_INTERVAL,
            max_bytes: None,
            keep: DEFAULT_KEEP,
            confirm: ConfirmPolicy::default(),
            resume: None,
            next_id: CheckpointId::FIRST,
            retained: Vec::new(),
            config_fingerprint: Bytes::new(),
        }
    }
}

/// Counters of the checkpoints a pipeline took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckpointStats {
    /// Checkpoints saved.
    pub saved: u64,
    /// Saves that failed (retried at the next interval).
    pub failed: u64,
    /// The newest saved checkpoint.
    pub last_id: Option<CheckpointId>,
    /// Its position.
    pub last_lsn: Lsn,
    /// When it was saved (wall clock of this process).
    pub last_saved_at: Option<std::time::SystemTime>,
}

/// A checkpoint could not be taken.
pub(crate) fn is_fatal(e: &CheckpointError) -> bool {
    matches!(e, CheckpointError::Fenced { .. })
}
