//! [`TxnAssembler`]: groups pgoutput messages into transactions and checks
//! their order. Sans-IO, in quinn's shape: [`TxnAssembler::handle_message`]
//! takes input, [`TxnAssembler::poll_event`] hands out output; no clock.
//!
//! ```text
//!  Begin ─ changes ─ Commit                 ──▶ Begin, Change.., Commit          (as they arrive)
//!  Stream Start ─ changes ─ Stream Stop  ┐
//!  ... more blocks, other transactions   ├─▶ held per xid (owned copies)
//!  Stream Abort (subxact)                ┘   drops that subtransaction's changes
//!  Stream Commit                           ──▶ Begin, Change.., Commit          (all at once)
//!  Stream Abort (top level)                ──▶ drops what is held, no events
//!  Begin Prepare ─ changes ─ Prepare       ──▶ held per xid, no events
//!  (or a streamed one's Stream Prepare)        ... other transactions go on ...
//!  Commit Prepared                         ──▶ Begin, Change.., Commit          (all at once, at
//!                                              the Commit Prepared's LSN and time)
//!  Rollback Prepared                       ──▶ drops what is held; one event
//! ```
//!
//! Two-phase transactions are held until they are decided, so a consumer
//! sees each prepared transaction once, as a committed one, and never a
//! rolled-back one; see the `two_phase` module for what that means for
//! confirming positions ([`TxnAssembler::oldest_undecided_prepare`]).
//!
//! A held (streamed or prepared) transaction can be moved out of memory with
//! [`TxnAssembler::spill`]: its changes then go to the caller as encoded
//! records ([`TxnAssembler::poll_spill`]) and come back at Stream Commit
//! through a [`SpillReplay`] ([`TxnAssembler::poll_replay`]); see
//! [`crate::spill`].
//!
//! The common, non-streamed path copies nothing: when no events are queued,
//! `handle_message` returns the event for the message directly, borrowing
//! from the input buffer. Only held transactions (which must outlive many
//! input buffers) are copied into owned messages.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::error::ProtocolError;
use crate::pgoutput::{LogicalMessage, Relation};
use crate::relcache::RelationCache;
use crate::spill::SpillReplay;

mod event;
mod held;
mod spilling;
mod two_phase;

pub use event::{Change, TxnBegin, TxnCommit, TxnEvent, TxnKind};

use crate::{Lsn, Oid, Xid};
use held::{HeldTxn, Phase};
use spilling::PendingSpill;

#[derive(Debug, Clone)]
struct OpenTxn {
    xid: Xid,
    final_lsn: Lsn,
    /// `Some(gid)` for Begin Prepare.
    gid: Option<String>,
}

/// An entry of the output queue.
#[derive(Debug)]
enum Queued {
    Event(TxnEvent<'static>),
    /// The changes of a streamed transaction released from memory, handed
    /// out one by one (no second copy of the buffer).
    Changes(std::vec::IntoIter<(Xid, Change<'static>)>),
    /// A spilled transaction to replay before the events behind it.
    Replay(Box<SpillReplay>),
}

/// Groups pgoutput messages into transactions and enforces their order.
///
/// Feed every decoded message to [`handle_message`](Self::handle_message),
/// deliver the event it returns (if any), then drain the outputs before the
/// next message:
///
/// ```text
/// loop {
///     while let Some(op) = poll_spill(&mut buf) { append `buf` to / delete the file; buf.clear() }
///     while let Some(event) = poll_event() { deliver event }
///     let Some(replay) = poll_replay() else { break };
///     read the file of replay.xid(), deliver replay.record(..) for each record, replay.finish()
/// }
/// ```
///
/// `poll_spill` and `poll_replay` only have work once the caller spilled a
/// transaction. Relation and Type messages update the [`RelationCache`] it
/// holds; row changes for relations it has not seen are a
/// [`ProtocolError::UnknownRelation`].
///
/// On any error the state is unchanged; the caller should treat the stream as
/// broken and reconnect (then call [`reset`](Self::reset)).
///
/// Known simplifications:
///
/// * Relation and Type messages update the cache when they arrive, also
///   inside stream blocks and prepared transactions; a transaction that is
///   later aborted or rolled back can leave its relation definition in the
///   cache (the server sends a fresh Relation before the next change that
///   needs one).
/// * Streamed transactions are held in memory until Stream Commit or Stream
///   Abort, and prepared ones until Commit Prepared or Rollback Prepared,
///   unless the caller [spills](Self::spill) them; see
///   [`buffered_bytes`](Self::buffered_bytes).
/// * A Commit Prepared for a transaction the assembler holds nothing of is
///   handed out as [`TxnEvent::CommitPrepared`]: its changes were not
///   received (prepared before where streaming started).
/// * Subtransaction aborts drop the changes tagged with that subxid, as the
///   docs describe; the xid tag comes from the change messages themselves.
#[derive(Debug, Default)]
pub struct TxnAssembler {
    relations: RelationCache,
    open: Option<OpenTxn>,
    /// The top-level xid of the open Stream Start .. Stream Stop block.
    stream: Option<Xid>,
    /// Streamed transactions in progress and two-phase transactions not yet
    /// decided.
    held: HashMap<Xid, HeldTxn>,
    queue: VecDeque<Queued>,
    /// Spill work of transactions that ended, in order.
    pending_spill: VecDeque<PendingSpill>,
    /// Held transactions that are spilled.
    spilled: usize,
}

impl TxnAssembler {
    /// An assembler with an empty relation cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The relations and types seen so far.
    pub fn relations(&self) -> &RelationCache {
        &self.relations
    }

    /// The xid of the open (non-streamed) transaction.
    pub fn open_transaction(&self) -> Option<Xid> {
        self.open.as_ref().map(|o| o.xid)
    }

    /// The xid of the open stream block.
    pub fn open_stream(&self) -> Option<Xid> {
        self.stream
    }

    /// The number of streamed transactions still in progress.
    pub fn streamed_in_progress(&self) -> usize {
        self.held
            .values()
            .filter(|t| t.phase == Phase::Streaming)
            .count()
    }

    /// The number of changes held in memory for streamed and prepared
    /// transactions (buffered, or of spilled ones waiting to be encoded).
    pub fn buffered_changes(&self) -> usize {
        self.held
            .values()
            .map(|t| t.changes.len() + t.spill.as_ref().map_or(0, |w| w.backlog.len()))
            .sum()
    }

    /// Approximately how many bytes the held changes in memory take (see
    /// [`buffered_changes`](Self::buffered_changes)).
    ///
    /// Streamed transactions are the ones too big for the server's
    /// `logical_decoding_work_mem`, and prepared ones wait for their decision
    /// for as long as it takes; they are held in memory until they end, so
    /// callers should watch this and [`spill`](Self::spill) past their own
    /// limit. Encoded spill output not yet taken with
    /// [`poll_spill`](Self::poll_spill) is not counted.
    pub fn buffered_bytes(&self) -> usize {
        self.held.values().map(HeldTxn::memory).sum()
    }

    /// Forgets open transactions, stream blocks, streamed transactions,
    /// pending spill work and queued events (after a reconnect: the server
    /// sends them again); keeps the relation cache and the prepared
    /// transactions waiting for their decision (the server may not send
    /// those again). The caller deletes its spill files except those of
    /// transactions [`is_spilled`](Self::is_spilled) still reports.
    pub fn reset(&mut self) {
        self.open = None;
        self.stream = None;
        self.held
            .retain(|_, t| matches!(t.phase, Phase::Prepared { .. }));
        self.queue.clear();
        self.pending_spill.clear();
        self.spilled = self.held.values().filter(|t| t.spill.is_some()).count();
    }

    /// The next queued event (from a streamed transaction, or events queued
    /// because the previous ones were not drained yet). `None` also when a
    /// [`poll_replay`](Self::poll_replay) must come first.
    #[inline]
    pub fn poll_event(&mut self) -> Option<TxnEvent<'static>> {
        loop {
            match self.queue.front_mut()? {
                Queued::Event(_) => match self.queue.pop_front() {
                    Some(Queued::Event(event)) => return Some(event),
                    _ => return None,
                },
                Queued::Changes(changes) => match changes.next() {
                    Some((_, change)) => return Some(TxnEvent::Change(change)),
                    None => {
                        self.queue.pop_front();
                    }
                },
                Queued::Replay(_) => return None,
            }
        }
    }

    /// Emits `event`: directly when nothing is queued, else behind the queue.
    #[inline]
    fn emit<'a>(&mut self, event: TxnEvent<'a>) -> Option<TxnEvent<'a>> {
        if self.queue.is_empty() {
            Some(event)
        } else {
            self.queue.push_back(Queued::Event(event.into_owned()));
            None
        }
    }

    fn not_in_stream(&self, what: &'static str) -> Result<(), ProtocolError> {
        match self.stream {
            Some(_) => Err(ProtocolError::InsideStreamBlock { what }),
            None => Ok(()),
        }
    }

    fn not_in_txn(&self, what: &'static str) -> Result<(), ProtocolError> {
        match &self.open {
            Some(open) => Err(ProtocolError::InsideTransaction {
                what,
                open_xid: open.xid,
            }),
            None => Ok(()),
        }
    }

    #[inline]
    fn relation(&self, oid: Oid) -> Result<Arc<Relation<'static>>, ProtocolError> {
        self.relations
            .relation(oid)
            .cloned()
            .ok_or(ProtocolError::UnknownRelation { oid })
    }

    /// Takes one decoded message. Returns the event to deliver now, if there
    /// is one and nothing is queued ahead of it; more events may be waiting
    /// in [`poll_event`](Self::poll_event).
    // Inlined so that row changes, the hot path, are built in the caller's
    // frame; everything else goes through `handle_other`.
    #[inline(always)]
    pub fn handle_message<'a>(
        &mut self,
        msg: LogicalMessage<'a>,
    ) -> Result<Option<TxnEvent<'a>>, ProtocolError> {
        match msg {
            LogicalMessage::Insert(m) => {
                let rel = self.relation(m.relation)?;
                let xid = m.xid;
                self.change(xid, Change::Insert(rel, m), "Insert")
            }
            LogicalMessage::Update(m) => {
                let rel = self.relation(m.relation)?;
                let xid = m.xid;
                self.change(xid, Change::Update(rel, m), "Update")
            }
            LogicalMessage::Delete(m) => {
                let rel = self.relation(m.relation)?;
                let xid = m.xid;
                self.change(xid, Change::Delete(rel, m), "Delete")
            }
            other => self.handle_other(other),
        }
    }

    #[inline(never)]
    fn handle_other<'a>(
        &mut self,
        msg: LogicalMessage<'a>,
    ) -> Result<Option<TxnEvent<'a>>, ProtocolError> {
        match msg {
            LogicalMessage::Insert(_) | LogicalMessage::Update(_) | LogicalMessage::Delete(_) => {
                self.handle_message(msg)
            }
            LogicalMessage::Truncate(m) => {
                for &oid in &m.relations {
                    self.relation(oid)?;
                }
                let xid = m.xid;
                self.change(xid, Change::Truncate(m), "Truncate")
            }
            LogicalMessage::Message(m) if m.transactional => {
                let xid = m.xid;
                self.change(xid, Change::Message(m), "transactional Message")
            }
            LogicalMessage::Message(m) => Ok(self.emit(TxnEvent::Message(m))),
            LogicalMessage::Relation(_) | LogicalMessage::Type(_) => {
                self.relations.apply(&msg);
                Ok(None)
            }
            LogicalMessage::Begin(b) => {
                self.begin(b.xid, "Begin")?;
                self.open = Some(OpenTxn {
                    xid: b.xid,
                    final_lsn: b.final_lsn,
                    gid: None,
                });
                Ok(self.emit(TxnEvent::Begin(TxnBegin {
                    xid: b.xid,
                    final_lsn: b.final_lsn,
                    timestamp: b.commit_time,
                    kind: TxnKind::Plain,
                })))
            }
            LogicalMessage::BeginPrepare(b) => {
                self.begin_prepare(b)?;
                Ok(None)
            }
            LogicalMessage::Origin(o) => {
                self.not_in_stream("Origin")?;
                match &self.open {
                    None => Err(ProtocolError::ChangeOutsideTransaction { what: "Origin" }),
                    Some(open) if open.gid.is_some() => {
                        let xid = open.xid;
                        self.hold_origin(xid, o)?;
                        Ok(None)
                    }
                    Some(_) => Ok(self.emit(TxnEvent::Origin(o))),
                }
            }
            LogicalMessage::Commit(c) => {
                self.not_in_stream("Commit")?;
                let open = self
                    .open
                    .as_ref()
                    .ok_or(ProtocolError::EndWithoutBegin { what: "Commit" })?;
                if open.gid.is_some() {
                    return Err(ProtocolError::MismatchedEnd {
                        what: "Commit",
                        opened_by: "Begin Prepare",
                    });
                }
                if c.commit_lsn != open.final_lsn {
                    return Err(ProtocolError::CommitLsnMismatch {
                        xid: open.xid,
                        expected: open.final_lsn,
                        actual: c.commit_lsn,
                    });
                }
                let xid = open.xid;
                self.open = None;
                Ok(self.emit(TxnEvent::Commit(TxnCommit {
                    xid,
                    commit_lsn: c.commit_lsn,
                    end_lsn: c.end_lsn,
                    commit_time: c.commit_time,
                })))
            }
            LogicalMessage::Prepare(p) => {
                self.prepare(p)?;
                Ok(None)
            }
            LogicalMessage::CommitPrepared(c) => self.commit_prepared(c),
            LogicalMessage::RollbackPrepared(r) => self.rollback_prepared(r),
            LogicalMessage::StreamStart(s) => {
                if let Some(open_xid) = self.stream {
                    return Err(ProtocolError::NestedStream {
                        xid: s.xid,
                        open_xid,
                    });
                }
                if let Some(open) = &self.open {
                    return Err(ProtocolError::NestedBegin {
                        xid: s.xid,
                        open_xid: open.xid,
                    });
                }
                match (self.held.get(&s.xid).map(|t| &t.phase), s.first_segment) {
                    (None, true) => {
                        self.held.insert(s.xid, HeldTxn::new(Phase::Streaming));
                    }
                    (Some(Phase::Streaming), false) => {}
                    // A prepared transaction sent again after a reconnect:
                    // the new copy replaces the old.
                    (Some(Phase::Prepared { .. }), true) => {
                        self.drop_held(s.xid);
                        self.held.insert(s.xid, HeldTxn::new(Phase::Streaming));
                    }
                    (None, false) => {
                        return Err(ProtocolError::UnknownStreamedTransaction { xid: s.xid })
                    }
                    (Some(_), _) => {
                        return Err(ProtocolError::DuplicateStreamedTransaction { xid: s.xid })
                    }
                }
                self.stream = Some(s.xid);
                Ok(None)
            }
            LogicalMessage::StreamStop => {
                self.stream
                    .take()
                    .ok_or(ProtocolError::StreamStopWithoutStart)?;
                Ok(None)
            }
            LogicalMessage::StreamAbort(a) => {
                self.not_in_stream("Stream Abort")?;
                self.not_in_txn("Stream Abort")?;
                let txn = self
                    .held
                    .get_mut(&a.xid)
                    .filter(|t| t.phase == Phase::Streaming)
                    .ok_or(ProtocolError::UnknownStreamedTransaction { xid: a.xid })?;
                if a.xid == a.subxid {
                    self.drop_held(a.xid);
                } else {
                    txn.changes.retain(|(sub, _)| *sub != a.subxid);
                    txn.bytes = txn.changes.iter().map(|(_, c)| c.approx_size()).sum();
                    if let Some(w) = txn.spill.as_mut() {
                        // Records keep their numbers: the backlog is written
                        // whole and the replay skips the subtransaction.
                        w.state.abort_subtransaction(a.subxid);
                    }
                }
                Ok(None)
            }
            LogicalMessage::StreamCommit(c) => {
                self.not_in_stream("Stream Commit")?;
                self.not_in_txn("Stream Commit")?;
                if self.held.get(&c.xid).map(|t| &t.phase) != Some(&Phase::Streaming) {
                    return Err(ProtocolError::UnknownStreamedTransaction { xid: c.xid });
                }
                let Some(txn) = self.held.remove(&c.xid) else {
                    return Err(ProtocolError::UnknownStreamedTransaction { xid: c.xid });
                };
                self.release(
                    TxnBegin {
                        xid: c.xid,
                        final_lsn: c.commit_lsn,
                        timestamp: c.commit_time,
                        kind: TxnKind::Streamed,
                    },
                    txn,
                    TxnEvent::Commit(TxnCommit {
                        xid: c.xid,
                        commit_lsn: c.commit_lsn,
                        end_lsn: c.end_lsn,
                        commit_time: c.commit_time,
                    }),
                );
                Ok(None)
            }
            LogicalMessage::StreamPrepare(p) => {
                self.stream_prepare(p)?;
                Ok(None)
            }
        }
    }

    fn begin(&self, xid: Xid, what: &'static str) -> Result<(), ProtocolError> {
        self.not_in_stream(what)?;
        match &self.open {
            Some(open) => Err(ProtocolError::NestedBegin {
                xid,
                open_xid: open.xid,
            }),
            None => Ok(()),
        }
    }

    /// A change: buffered inside a stream block, emitted inside a transaction.
    #[inline(always)]
    fn change<'a>(
        &mut self,
        xid: Option<Xid>,
        change: Change<'a>,
        what: &'static str,
    ) -> Result<Option<TxnEvent<'a>>, ProtocolError> {
        if self.stream.is_none()
            && self.queue.is_empty()
            && self.open.as_ref().is_some_and(|o| o.gid.is_none())
        {
            return Ok(Some(TxnEvent::Change(change)));
        }
        self.change_slow(xid, change, what)
    }

    #[inline(never)]
    fn change_slow<'a>(
        &mut self,
        xid: Option<Xid>,
        change: Change<'a>,
        what: &'static str,
    ) -> Result<Option<TxnEvent<'a>>, ProtocolError> {
        if let Some(top) = self.stream {
            let txn = self
                .held
                .get_mut(&top)
                .ok_or(ProtocolError::UnknownStreamedTransaction { xid: top })?;
            txn.push(xid.unwrap_or(top), change);
            return Ok(None);
        }
        match &self.open {
            None => Err(ProtocolError::ChangeOutsideTransaction { what }),
            // Between Begin Prepare and Prepare: held until decided.
            Some(open) if open.gid.is_some() => {
                let top = open.xid;
                let txn = self
                    .held
                    .get_mut(&top)
                    .ok_or(ProtocolError::ChangeOutsideTransaction { what })?;
                txn.push(top, change);
                Ok(None)
            }
            Some(_) => Ok(self.emit(TxnEvent::Change(change))),
        }
    }

    /// Queues a held transaction that committed (a streamed one at Stream
    /// Commit, a prepared one at Commit Prepared): its Begin and Origin, its
    /// buffered changes or the replay of its spill file, and `end`.
    fn release(&mut self, begin: TxnBegin, txn: HeldTxn, end: TxnEvent<'static>) {
        let HeldTxn {
            changes,
            spill,
            origin,
            ..
        } = txn;
        self.queue.push_back(Queued::Event(TxnEvent::Begin(begin)));
        if let Some(o) = origin {
            self.queue.push_back(Queued::Event(TxnEvent::Origin(o)));
        }
        if let Some(mut writer) = spill {
            self.spilled = self.spilled.saturating_sub(1);
            writer.encode_backlog(usize::MAX);
            if !writer.out.is_empty() {
                self.pending_spill
                    .push_back(PendingSpill::Tail(begin.xid, writer.out));
            }
            self.queue.push_back(Queued::Replay(Box::new(
                writer.state.into_replay(begin.xid),
            )));
        }
        if !changes.is_empty() {
            self.queue.push_back(Queued::Changes(changes.into_iter()));
        }
        self.queue.push_back(Queued::Event(end));
    }
}
