//! What the assembler holds between messages: streamed transactions until
//! they end, and two-phase transactions from Begin Prepare (or Stream
//! Prepare) until Commit Prepared or Rollback Prepared.

use std::borrow::Cow;

use super::spilling::SpillWriter;
use super::Change;
use crate::pgoutput::Origin;
use crate::{Lsn, Xid};

/// The prepare of a two-phase transaction, as Begin Prepare or Stream
/// Prepare announced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PrepareInfo {
    /// The user-defined GID.
    pub(super) gid: String,
    /// The LSN of the PREPARE record: the server sends the transaction
    /// again after a restart only if the slot's confirmed position is not
    /// past it.
    pub(super) prepare_lsn: Lsn,
}

/// Where a held transaction is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    /// Streamed in blocks and not ended yet (Stream Start .. Stream Commit,
    /// Stream Prepare or Stream Abort).
    Streaming,
    /// Between Begin Prepare and Prepare: its changes are arriving.
    Preparing(PrepareInfo),
    /// Prepared: waiting for Commit Prepared or Rollback Prepared, however
    /// long that takes.
    Prepared {
        /// Its prepare.
        info: PrepareInfo,
        /// Whether it was streamed (ended by Stream Prepare).
        streamed: bool,
    },
}

impl Phase {
    /// The prepare, for a transaction that is (being) prepared.
    pub(super) fn prepare(&self) -> Option<&PrepareInfo> {
        match self {
            Phase::Streaming => None,
            Phase::Preparing(info) | Phase::Prepared { info, .. } => Some(info),
        }
    }
}

/// The changes of one held transaction, each tagged with the
/// (sub)transaction xid the server sent with it.
#[derive(Debug)]
pub(super) struct HeldTxn {
    pub(super) phase: Phase,
    pub(super) changes: Vec<(Xid, Change<'static>)>,
    /// Approximate heap and inline bytes held by `changes`.
    pub(super) bytes: usize,
    /// Set once the transaction is spilled; `changes` is then empty.
    pub(super) spill: Option<Box<SpillWriter>>,
    /// The Origin message of a prepared transaction, handed out after its
    /// Begin when it is released.
    pub(super) origin: Option<Origin<'static>>,
}

impl HeldTxn {
    /// An empty transaction in `phase`.
    pub(super) fn new(phase: Phase) -> Self {
        HeldTxn {
            phase,
            changes: Vec::new(),
            bytes: 0,
            spill: None,
            origin: None,
        }
    }

    /// Bytes of changes held in memory (buffered, or waiting to be encoded).
    pub(super) fn memory(&self) -> usize {
        self.bytes + self.spill.as_ref().map_or(0, |w| w.backlog_bytes)
    }

    /// Adds `change` of (sub)transaction `subxid`: to the spill writer if
    /// the transaction is spilled, else to memory.
    pub(super) fn push(&mut self, subxid: Xid, change: Change<'_>) {
        if let Some(w) = self.spill.as_mut() {
            w.state.assign();
            if w.backlog.is_empty() {
                w.state.encode(subxid, &change, &mut w.out);
            } else {
                let change = change.into_owned();
                w.backlog_bytes += change.approx_size();
                w.backlog.push_back((subxid, change));
            }
            return;
        }
        let change = change.into_owned();
        self.bytes += change.approx_size();
        self.changes.push((subxid, change));
    }
}

/// An owned copy of `o`.
pub(super) fn owned_origin(o: Origin<'_>) -> Origin<'static> {
    Origin {
        commit_lsn: o.commit_lsn,
        name: Cow::Owned(o.name.into_owned()),
    }
}
