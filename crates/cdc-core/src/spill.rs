//! Spilling streamed transactions out of memory: the sans-IO half.
//!
//! A streamed in-progress transaction (pgoutput v2+) is held by the
//! [`TxnAssembler`](crate::TxnAssembler) until it ends. When the caller wants
//! it out of memory it calls [`spill`](crate::TxnAssembler::spill); from then
//! on the assembler encodes that transaction's changes into records and hands
//! the bytes out through [`poll_spill`](crate::TxnAssembler::poll_spill), and
//! the caller appends them to a file (or anything else that keeps bytes in
//! order). At Stream Commit (or Stream Prepare) the assembler queues the
//! transaction's Begin, a [`SpillReplay`] and its Commit (or Prepare): the
//! caller reads its records back one at a time and turns each into an event
//! with [`SpillReplay::record`]. At Stream Abort it asks the caller to
//! [`Discard`](SpillOp::Discard) the file.
//!
//! ```text
//!  TxnAssembler::spill(xid) ──▶ poll_spill: Append{xid} (bytes) ──▶ caller appends to xid's file
//!  Stream Abort (top level)  ──▶ poll_spill: Discard{xid}        ──▶ caller deletes the file
//!  Stream Commit / Prepare   ──▶ poll_event: Begin
//!                                poll_replay: SpillReplay        ◀── caller reads records back
//!                                poll_event: Commit / Prepare
//! ```
//!
//! Replaying yields exactly the events the in-memory path would have: a
//! Stream Abort of a subtransaction records how many records the transaction
//! had at that point, and replay skips that subtransaction's earlier records.
//! Relation schemas stay in memory (one [`Arc`] per schema version the
//! transaction used); records refer to them by index.
//!
//! # Record format
//!
//! Each record is framed as a big-endian `u32` body length
//! ([`FRAME_HEADER_LEN`] bytes, see [`frame_len`]) followed by the body:
//!
//! ```text
//!  u32 subxid | u32 relation index (u32::MAX: none) | u8 flags | pgoutput message (tag first)
//! ```
//!
//! Flag bit 0 says the message carries an xid (written as inside a stream
//! block). The message is the change exactly as pgoutput sends it
//! (Insert, Update, Delete, Truncate or a transactional Message), parsed back
//! with the ordinary parser. The format is private to one process: it is
//! not meant to outlive the transaction.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::DecodeError;
use crate::pgoutput::{write, LogicalMessage, ParseContext, ProtocolVersion, Relation};
use crate::txn::{Change, TxnEvent};
use crate::{Oid, Xid};

/// Bytes of the length prefix before each record.
pub const FRAME_HEADER_LEN: usize = 4;

/// Bytes of a record body before the pgoutput message.
const RECORD_HEADER_LEN: usize = 9;

/// The largest record body accepted back: pgoutput messages stay below
/// 1 GiB (the server's allocation limit).
pub const MAX_RECORD_LEN: usize = (1 << 30) + RECORD_HEADER_LEN;

/// "No relation" in a record's relation index.
const NO_RELATION: u32 = u32::MAX;

/// What the caller must do with a spilled transaction's file, from
/// [`TxnAssembler::poll_spill`](crate::TxnAssembler::poll_spill).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpillOp {
    /// Append the bytes just placed in the caller's buffer to the file of
    /// `xid` (created when the caller called
    /// [`spill`](crate::TxnAssembler::spill)).
    Append {
        /// The streamed transaction.
        xid: Xid,
    },
    /// The transaction aborted: delete its file.
    Discard {
        /// The streamed transaction.
        xid: Xid,
    },
}

/// A spill record that cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpillRecordError {
    /// A record body shorter than its fixed header.
    #[error(
        "spill record {index} has {len} bytes, fewer than its {RECORD_HEADER_LEN}-byte header"
    )]
    TooShort {
        /// The record's position in the file.
        index: u64,
        /// Its length.
        len: usize,
    },
    /// A length prefix larger than [`MAX_RECORD_LEN`].
    #[error("spill record length {len} exceeds the maximum of {MAX_RECORD_LEN}")]
    TooLong {
        /// The length read.
        len: usize,
    },
    /// The pgoutput message inside a record does not parse.
    #[error("spill record {index}: {source}")]
    Decode {
        /// The record's position in the file.
        index: u64,
        /// The parse error.
        #[source]
        source: DecodeError,
    },
    /// A record holds a message that is not a change.
    #[error("spill record {index} holds a {what} message, not a change")]
    NotAChange {
        /// The record's position in the file.
        index: u64,
        /// The message name.
        what: &'static str,
    },
    /// A row change names a relation version that was never recorded, or
    /// one of another oid.
    #[error("spill record {index} refers to relation version {relation}, which does not describe relation {oid}")]
    UnknownRelation {
        /// The record's position in the file.
        index: u64,
        /// The relation index in the record.
        relation: u32,
        /// The relation oid in the message.
        oid: Oid,
    },
    /// The file holds more records than were written for the transaction.
    #[error("the spill file of transaction {xid} holds more than the {expected} records written")]
    ExtraRecords {
        /// The transaction.
        xid: Xid,
        /// Records written.
        expected: u64,
    },
    /// The file ended before every record written was read back.
    #[error("the spill file of transaction {xid} ended after {got} of {expected} records")]
    MissingRecords {
        /// The transaction.
        xid: Xid,
        /// Records written.
        expected: u64,
        /// Records read.
        got: u64,
    },
}

/// The body length from a record's [`FRAME_HEADER_LEN`]-byte prefix, checked
/// against [`MAX_RECORD_LEN`].
pub fn frame_len(header: [u8; FRAME_HEADER_LEN]) -> Result<usize, SpillRecordError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_RECORD_LEN {
        return Err(SpillRecordError::TooLong { len });
    }
    Ok(len)
}

/// The bookkeeping of one spilled transaction, kept in memory while its
/// changes are on the caller's side.
#[derive(Debug, Default)]
pub(crate) struct SpillState {
    /// Every relation schema version a record refers to, by index.
    relations: Vec<Arc<Relation<'static>>>,
    /// The index of the latest version of each relation in `relations`.
    latest: HashMap<Oid, u32>,
    /// Aborted subtransactions: their records before this position are dropped.
    aborted: HashMap<Xid, u64>,
    /// Records assigned so far (written or still waiting to be encoded).
    records: u64,
}

impl SpillState {
    /// Counts one more record (encoded now or later, in order).
    pub(crate) fn assign(&mut self) {
        self.records += 1;
    }

    /// Counts records already waiting to be encoded.
    pub(crate) fn assign_many(&mut self, n: usize) {
        self.records += n as u64;
    }

    /// A subtransaction aborted: every record of it assigned so far is dropped.
    pub(crate) fn abort_subtransaction(&mut self, subxid: Xid) {
        self.aborted.insert(subxid, self.records);
    }

    fn relation_index(&mut self, rel: &Arc<Relation<'static>>) -> u32 {
        if let Some(&i) = self.latest.get(&rel.oid) {
            if self
                .relations
                .get(i as usize)
                .is_some_and(|known| Arc::ptr_eq(known, rel))
            {
                return i;
            }
        }
        // At most one entry per Relation message the server sent inside the
        // transaction: far below u32::MAX.
        let i = u32::try_from(self.relations.len()).unwrap_or(NO_RELATION - 1);
        self.relations.push(Arc::clone(rel));
        self.latest.insert(rel.oid, i);
        i
    }

    /// Appends one framed record for `change` of (sub)transaction `subxid`.
    pub(crate) fn encode(&mut self, subxid: Xid, change: &Change<'_>, out: &mut Vec<u8>) {
        let frame = out.len();
        out.extend_from_slice(&[0; FRAME_HEADER_LEN]);
        write::u32(out, subxid);
        let (relation, has_xid) = match change {
            Change::Insert(rel, m) => (self.relation_index(rel), m.xid.is_some()),
            Change::Update(rel, m) => (self.relation_index(rel), m.xid.is_some()),
            Change::Delete(rel, m) => (self.relation_index(rel), m.xid.is_some()),
            Change::Truncate(m) => (NO_RELATION, m.xid.is_some()),
            Change::Message(m) => (NO_RELATION, m.xid.is_some()),
        };
        write::u32(out, relation);
        out.push(u8::from(has_xid));
        match change {
            Change::Insert(_, m) => {
                out.push(b'I');
                write::insert(out, m);
            }
            Change::Update(_, m) => {
                out.push(b'U');
                write::update(out, m);
            }
            Change::Delete(_, m) => {
                out.push(b'D');
                write::delete(out, m);
            }
            Change::Truncate(m) => {
                out.push(b'T');
                write::truncate(out, m);
            }
            Change::Message(m) => {
                out.push(b'M');
                write::message(out, m);
            }
        }
        // A length beyond u32 cannot come from a server; saturating makes the
        // reader reject it as too long instead of misreading the file.
        let len = u32::try_from(out.len() - frame - FRAME_HEADER_LEN).unwrap_or(u32::MAX);
        out[frame..frame + FRAME_HEADER_LEN].copy_from_slice(&len.to_be_bytes());
    }

    /// The replay of the transaction once it committed or prepared.
    pub(crate) fn into_replay(self, xid: Xid) -> SpillReplay {
        SpillReplay {
            xid,
            relations: self.relations,
            aborted: self.aborted,
            records: self.records,
            next: 0,
        }
    }
}

/// Turns the records of a spilled transaction back into its change events,
/// from [`TxnAssembler::poll_replay`](crate::TxnAssembler::poll_replay).
///
/// Read the transaction's file from the start; for each record, read the
/// [`FRAME_HEADER_LEN`]-byte prefix, its body ([`frame_len`] bytes) and pass
/// the body to [`record`](Self::record). After [`records`](Self::records)
/// records the file must end; [`finish`](Self::finish) checks that all of them
/// were read. Only one record needs to be in memory at a time.
#[derive(Debug)]
pub struct SpillReplay {
    xid: Xid,
    relations: Vec<Arc<Relation<'static>>>,
    aborted: HashMap<Xid, u64>,
    records: u64,
    next: u64,
}

impl SpillReplay {
    /// The spilled transaction.
    pub fn xid(&self) -> Xid {
        self.xid
    }

    /// How many records were written for it.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// How many records are still to be read.
    pub fn remaining(&self) -> u64 {
        self.records - self.next
    }

    /// Turns the next record's body into its event: `None` when the change
    /// belongs to a subtransaction that was rolled back. The event borrows
    /// from `body`. A record that fails does not count as read.
    pub fn record<'b>(&mut self, body: &'b [u8]) -> Result<Option<TxnEvent<'b>>, SpillRecordError> {
        let index = self.next;
        if index >= self.records {
            return Err(SpillRecordError::ExtraRecords {
                xid: self.xid,
                expected: self.records,
            });
        }
        let (Some(subxid), Some(relation), Some(&flags), Some(msg)) = (
            body.get(0..4),
            body.get(4..8),
            body.get(8),
            body.get(RECORD_HEADER_LEN..),
        ) else {
            return Err(SpillRecordError::TooShort {
                index,
                len: body.len(),
            });
        };
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let (subxid, relation) = (be(subxid), be(relation));
        if self
            .aborted
            .get(&subxid)
            .is_some_and(|&until| index < until)
        {
            self.next += 1;
            return Ok(None);
        }
        let ctx = ParseContext::new(ProtocolVersion::V1).with_in_stream(flags & 1 != 0);
        let msg = LogicalMessage::parse(msg, ctx)
            .map_err(|source| SpillRecordError::Decode { index, source })?;
        let rel = |oid: Oid| {
            self.relations
                .get(relation as usize)
                .filter(|r| r.oid == oid)
                .cloned()
                .ok_or(SpillRecordError::UnknownRelation {
                    index,
                    relation,
                    oid,
                })
        };
        let change = match msg {
            LogicalMessage::Insert(m) => Change::Insert(rel(m.relation)?, m),
            LogicalMessage::Update(m) => Change::Update(rel(m.relation)?, m),
            LogicalMessage::Delete(m) => Change::Delete(rel(m.relation)?, m),
            LogicalMessage::Truncate(m) => Change::Truncate(m),
            LogicalMessage::Message(m) => Change::Message(m),
            other => {
                return Err(SpillRecordError::NotAChange {
                    index,
                    what: other.name(),
                })
            }
        };
        self.next += 1;
        Ok(Some(TxnEvent::Change(change)))
    }

    /// Checks that every record written was read back.
    pub fn finish(self) -> Result<(), SpillRecordError> {
        if self.next == self.records {
            Ok(())
        } else {
            Err(SpillRecordError::MissingRecords {
                xid: self.xid,
                expected: self.records,
                got: self.next,
            })
        }
    }
}
