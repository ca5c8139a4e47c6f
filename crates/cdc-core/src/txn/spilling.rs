//! The spilling side of [`TxnAssembler`]: moving a held (streamed or
//! prepared) transaction's
//! changes out to the caller as encoded records and handing back its
//! [`SpillReplay`] when it ends (see [`crate::spill`]).

use std::collections::VecDeque;

use super::{Change, Queued, TxnAssembler};
use crate::spill::{SpillOp, SpillReplay, SpillState};
use crate::Xid;

/// The write side of a spilled transaction.
#[derive(Debug, Default)]
pub(super) struct SpillWriter {
    pub(super) state: SpillState,
    /// Changes buffered before the spill, not yet encoded (encoded a chunk
    /// at a time by `poll_spill`, so the encoded copy never doubles memory).
    pub(super) backlog: VecDeque<(Xid, Change<'static>)>,
    /// Approximate bytes held by `backlog`.
    pub(super) backlog_bytes: usize,
    /// Encoded records not yet handed to the caller.
    pub(super) out: Vec<u8>,
}

impl SpillWriter {
    pub(super) fn has_output(&self) -> bool {
        !self.out.is_empty() || !self.backlog.is_empty()
    }

    /// Encodes backlog changes until `out` holds at least `chunk` bytes.
    pub(super) fn encode_backlog(&mut self, chunk: usize) {
        while self.out.len() < chunk {
            let Some((subxid, change)) = self.backlog.pop_front() else {
                break;
            };
            self.backlog_bytes = self.backlog_bytes.saturating_sub(change.approx_size());
            self.state.encode(subxid, &change, &mut self.out);
        }
    }
}

/// Encoded bytes handed out per [`TxnAssembler::poll_spill`] call while a
/// backlog is encoded.
const SPILL_CHUNK: usize = 256 * 1024;

/// Spill work for the caller that no longer belongs to a transaction in
/// progress.
#[derive(Debug)]
pub(super) enum PendingSpill {
    /// The last records of a transaction that committed.
    Tail(Xid, Vec<u8>),
    Discard(Xid),
}

impl TxnAssembler {
    /// The number of held (streamed or prepared) transactions that are
    /// spilled.
    pub fn spilled_in_progress(&self) -> usize {
        self.spilled
    }

    /// Whether held (streamed or prepared) transaction `xid` is spilled.
    pub fn is_spilled(&self, xid: Xid) -> bool {
        self.held.get(&xid).is_some_and(|t| t.spill.is_some())
    }

    /// The held (streamed or prepared) transaction, not spilled, that holds
    /// the most memory, with its [`buffered_bytes`](Self::buffered_bytes)
    /// share.
    pub fn largest_unspilled(&self) -> Option<(Xid, usize)> {
        self.held
            .iter()
            .filter(|(_, t)| t.spill.is_none() && !t.changes.is_empty())
            .map(|(&xid, t)| (xid, t.bytes))
            .max_by_key(|&(xid, bytes)| (bytes, std::cmp::Reverse(xid)))
    }

    /// Moves held transaction `xid` (streamed, or prepared) out of memory:
    /// its buffered changes and every later change of it are handed out as
    /// encoded records through [`poll_spill`](Self::poll_spill), to be
    /// appended to a file the caller creates now; at Stream Commit or Commit
    /// Prepared they come back through [`poll_replay`](Self::poll_replay).
    /// Returns `false` (and does nothing) if `xid` is not held or is already
    /// spilled.
    pub fn spill(&mut self, xid: Xid) -> bool {
        let Some(txn) = self.held.get_mut(&xid) else {
            return false;
        };
        if txn.spill.is_some() {
            return false;
        }
        let mut writer = SpillWriter {
            backlog: VecDeque::from(std::mem::take(&mut txn.changes)),
            backlog_bytes: std::mem::take(&mut txn.bytes),
            ..SpillWriter::default()
        };
        writer.state.assign_many(writer.backlog.len());
        txn.spill = Some(Box::new(writer));
        self.spilled += 1;
        true
    }

    /// Whether [`poll_spill`](Self::poll_spill) may have work: when false it
    /// returns `None`. A test cheap enough for every message.
    pub fn spill_pending(&self) -> bool {
        !self.pending_spill.is_empty() || self.spilled != 0
    }

    /// Spill work for the caller, in order: [`SpillOp::Append`] after
    /// appending the bytes to `out` (which should be empty: the assembler
    /// then swaps its buffer in instead of copying), or [`SpillOp::Discard`].
    /// Drain it after every message, before [`poll_event`](Self::poll_event):
    /// a replay only starts once its file is complete.
    pub fn poll_spill(&mut self, out: &mut Vec<u8>) -> Option<SpillOp> {
        if let Some(pending) = self.pending_spill.pop_front() {
            return Some(match pending {
                PendingSpill::Tail(xid, mut bytes) => {
                    give(&mut bytes, out);
                    SpillOp::Append { xid }
                }
                PendingSpill::Discard(xid) => SpillOp::Discard { xid },
            });
        }
        if self.spilled == 0 {
            return None;
        }
        let (&xid, writer) = self.held.iter_mut().find_map(|(xid, t)| {
            t.spill
                .as_mut()
                .filter(|w| w.has_output())
                .map(|w| (xid, w))
        })?;
        writer.encode_backlog(SPILL_CHUNK);
        give(&mut writer.out, out);
        Some(SpillOp::Append { xid })
    }

    /// The replay of a spilled transaction that committed (or whose
    /// prepare was committed), when it is next in line: after its Begin was
    /// polled and before its Commit. `None` while the file still has spill output to take from
    /// [`poll_spill`](Self::poll_spill).
    pub fn poll_replay(&mut self) -> Option<SpillReplay> {
        let Some(Queued::Replay(replay)) = self.queue.front() else {
            return None;
        };
        let xid = replay.xid();
        let unwritten = self
            .pending_spill
            .iter()
            .any(|p| matches!(p, PendingSpill::Tail(x, _) if *x == xid));
        if unwritten {
            return None;
        }
        match self.queue.pop_front() {
            Some(Queued::Replay(replay)) => Some(*replay),
            _ => None,
        }
    }
}

/// Hands `from`'s bytes to `to`: swapped when `to` is empty, else appended;
/// `from` is left empty.
fn give(from: &mut Vec<u8>, to: &mut Vec<u8>) {
    if to.is_empty() {
        std::mem::swap(from, to);
    } else {
        to.append(from);
    }
}
