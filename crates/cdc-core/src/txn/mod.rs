//! [`TxnAssembler`]: groups pgoutput messages into transactions and checks
//! their order. Sans-IO, in quinn's shape: [`TxnAssembler::handle_message`]
//! takes input, [`TxnAssembler::poll_event`] hands out output; no clock.
//!
//! ```text
//!  Begin ─ changes ─ Commit                 ──▶ Begin, Change.., Commit          (as they arrive)
//!  Begin Prepare ─ changes ─ Prepare        ──▶ Begin, Change.., Prepare         (as they arrive)
//!  Stream Start ─ changes ─ Stream Stop  ┐
//!  ... more blocks, other transactions   ├─▶ buffered per xid (owned copies)
//!  Stream Abort (subxact)                ┘   drops that subtransaction's changes
//!  Stream Commit / Stream Prepare          ──▶ Begin, Change.., Commit / Prepare (all at once)
//!  Stream Abort (top level)                ──▶ drops the buffer, no events
//!  Commit Prepared / Rollback Prepared     ──▶ one event each
//! ```
//!
//! A streamed transaction can be moved out of memory with
//! [`TxnAssembler::spill`]: its changes then go to the caller as encoded
//! records ([`TxnAssembler::poll_spill`]) and come back at Stream Commit
//! through a [`SpillReplay`] ([`TxnAssembler::poll_replay`]); see
//! [`crate::spill`].
//!
//! The common, non-streamed path copies nothing: when no events are queued,
//! `handle_message` returns the event for the message directly, borrowing
//! from the input buffer. Only streamed transactions (which must outlive many
//! input buffers) are copied into owned messages.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::error::ProtocolError;
use crate::pgoutput::{LogicalMessage, Relation};
use crate::relcache::RelationCache;
use crate::spill::SpillReplay;

mod event;
mod spilling;

pub use event::{Change, TxnBegin, TxnCommit, TxnEvent, TxnKind};

use crate::{Lsn, Oid, Xid};
use spilling::{PendingSpill, SpillWriter};

#[derive(Debug, Clone)]
struct OpenTxn {
    xid: Xid,
    final_lsn: Lsn,
    /// `Some(gid)` for Begin Prepare.
    gid: Option<String>,
}

/// The buffered changes of one streamed transaction, each tagged with the
/// (sub)transaction xid the server sent with it.
#[derive(Debug, Default)]
struct StreamedTxn {
    changes: Vec<(Xid, Change<'static>)>,
    /// Approximate heap and inline bytes held by `changes`.
    bytes: usize,
    /// Set once the transaction is spilled; `changes` is then empty.
    spill: Option<Box<SpillWriter>>,
}

impl StreamedTxn {
    /// Bytes of changes held in memory (buffered, or waiting to be encoded).
    fn memory(&self) -> usize {
        self.bytes + self.spill.as_ref().map_or(0, |w| w.backlog_bytes)
    }
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
///   inside stream blocks; a streamed transaction that is later aborted can
///   leave its relation definition in the cache (the server sends a fresh
///   Relation before the next change that needs one).
/// * Prepared transactions are not tracked between Prepare and Commit /
///   Rollback Prepared (those may arrive after a restart); they are passed
///   through as events.
/// * Streamed transactions are buffered in memory until Stream Commit, Stream
///   Prepare or Stream Abort, unless the caller [spills](Self::spill) them;
///   see [`buffered_bytes`](Self::buffered_bytes).
/// * Subtransaction aborts drop the changes tagged with that subxid, as the
///   docs describe; the xid tag comes from the change messages themselves.
#[derive(Debug, Default)]
pub struct TxnAssembler {
    relations: RelationCache,
    open: Option<OpenTxn>,
    /// The top-level xid of the open Stream Start .. Stream Stop block.
    stream: Option<Xid>,
    streamed: HashMap<Xid, StreamedTxn>,
    queue: VecDeque<Queued>,
    /// Spill work of transactions that ended, in order.
    pending_spill: VecDeque<PendingSpill>,
    /// Spilled transactions in progress.
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
        self.streamed.len()
    }

    /// The number of changes held in memory for streamed transactions
    /// (buffered, or of spilled ones waiting to be encoded).
    pub fn buffered_changes(&self) -> usize {
        self.streamed
            .values()
            .map(|t| t.changes.len() + t.spill.as_ref().map_or(0, |w| w.backlog.len()))
            .sum()
    }

    /// Approximately how many bytes the streamed changes held in memory
    /// take (see [`buffered_changes`](Self::buffered_changes)).
    ///
    /// Streamed transactions are the ones too big for the server's
    /// `logical_decoding_work_mem`; they are held in memory until they end, so
    /// callers should watch this and [`spill`](Self::spill) past their own
    /// limit. Encoded spill output not yet taken with
    /// [`poll_spill`](Self::poll_spill) is not counted.
    pub fn buffered_bytes(&self) -> usize {
        self.streamed.values().map(StreamedTxn::memory).sum()
    }

    /// Forgets open transactions, stream blocks, buffered and spilled
    /// streamed transactions, pending spill work and queued events (after a
    /// reconnect); keeps the relation cache. The caller deletes any spill
    /// files it holds.
    pub fn reset(&mut self) {
        self.open = None;
        self.stream = None;
        self.streamed.clear();
        self.queue.clear();
        self.pending_spill.clear();
        self.spilled = 0;
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
                self.begin(b.xid, "Begin Prepare")?;
                self.open = Some(OpenTxn {
                    xid: b.xid,
                    final_lsn: b.prepare_lsn,
                    gid: Some(b.gid.into_owned()),
                });
                Ok(self.emit(TxnEvent::Begin(TxnBegin {
                    xid: b.xid,
                    final_lsn: b.prepare_lsn,
                    timestamp: b.prepare_time,
                    kind: TxnKind::Prepared,
                })))
            }
            LogicalMessage::Origin(o) => {
                self.not_in_stream("Origin")?;
                if self.open.is_none() {
                    return Err(ProtocolError::ChangeOutsideTransaction { what: "Origin" });
                }
                Ok(self.emit(TxnEvent::Origin(o)))
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
                self.not_in_stream("Prepare")?;
                let open = self
                    .open
                    .as_ref()
                    .ok_or(ProtocolError::EndWithoutBegin { what: "Prepare" })?;
                let Some(gid) = &open.gid else {
                    return Err(ProtocolError::MismatchedEnd {
                        what: "Prepare",
                        opened_by: "Begin",
                    });
                };
                if p.xid != open.xid || *gid != p.gid {
                    return Err(ProtocolError::PrepareMismatch { xid: open.xid });
                }
                if p.prepare_lsn != open.final_lsn {
                    return Err(ProtocolError::CommitLsnMismatch {
                        xid: open.xid,
                        expected: open.final_lsn,
                        actual: p.prepare_lsn,
                    });
                }
                self.open = None;
                Ok(self.emit(TxnEvent::Prepare(p)))
            }
            LogicalMessage::CommitPrepared(c) => {
                self.not_in_stream("Commit Prepared")?;
                self.not_in_txn("Commit Prepared")?;
                Ok(self.emit(TxnEvent::CommitPrepared(c)))
            }
            LogicalMessage::RollbackPrepared(r) => {
                self.not_in_stream("Rollback Prepared")?;
                self.not_in_txn("Rollback Prepared")?;
                Ok(self.emit(TxnEvent::RollbackPrepared(r)))
            }
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
                let known = self.streamed.contains_key(&s.xid);
                if s.first_segment && known {
                    return Err(ProtocolError::DuplicateStreamedTransaction { xid: s.xid });
                }
                if !s.first_segment && !known {
                    return Err(ProtocolError::UnknownStreamedTransaction { xid: s.xid });
                }
                self.streamed.entry(s.xid).or_default();
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
                if a.xid == a.subxid {
                    let txn = self
                        .streamed
                        .remove(&a.xid)
                        .ok_or(ProtocolError::UnknownStreamedTransaction { xid: a.xid })?;
                    if txn.spill.is_some() {
                        self.spilled = self.spilled.saturating_sub(1);
                        self.pending_spill.push_back(PendingSpill::Discard(a.xid));
                    }
                } else {
                    let txn = self
                        .streamed
                        .get_mut(&a.xid)
                        .ok_or(ProtocolError::UnknownStreamedTransaction { xid: a.xid })?;
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
                let txn = self
                    .streamed
                    .remove(&c.xid)
                    .ok_or(ProtocolError::UnknownStreamedTransaction { xid: c.xid })?;
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
                self.not_in_stream("Stream Prepare")?;
                self.not_in_txn("Stream Prepare")?;
                let txn = self
                    .streamed
                    .remove(&p.xid)
                    .ok_or(ProtocolError::UnknownStreamedTransaction { xid: p.xid })?;
                self.release(
                    TxnBegin {
                        xid: p.xid,
                        final_lsn: p.prepare_lsn,
                        timestamp: p.prepare_time,
                        kind: TxnKind::StreamedPrepared,
                    },
                    txn,
                    TxnEvent::Prepare(p.into_owned()),
                );
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
        if self.stream.is_none() && self.open.is_some() && self.queue.is_empty() {
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
                .streamed
                .get_mut(&top)
                .ok_or(ProtocolError::UnknownStreamedTransaction { xid: top })?;
            let subxid = xid.unwrap_or(top);
            if let Some(w) = txn.spill.as_mut() {
                w.state.assign();
                if w.backlog.is_empty() {
                    w.state.encode(subxid, &change, &mut w.out);
                } else {
                    let change = change.into_owned();
                    w.backlog_bytes += change.approx_size();
                    w.backlog.push_back((subxid, change));
                }
                return Ok(None);
            }
            let change = change.into_owned();
            txn.bytes += change.approx_size();
            txn.changes.push((subxid, change));
            return Ok(None);
        }
        if self.open.is_none() {
            return Err(ProtocolError::ChangeOutsideTransaction { what });
        }
        Ok(self.emit(TxnEvent::Change(change)))
    }

    /// Queues a streamed transaction that committed or prepared: its
    /// buffered changes, or the replay of its spill file.
    fn release(&mut self, begin: TxnBegin, txn: StreamedTxn, end: TxnEvent<'static>) {
        let StreamedTxn { changes, spill, .. } = txn;
        self.queue.push_back(Queued::Event(TxnEvent::Begin(begin)));
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
