//! What the assembler hands out: [`TxnEvent`]s (a transaction's begin, its
//! [`Change`]s, its commit or prepare, and non-transactional messages) and
//! the owned copies that outlive the input buffer.

use std::sync::Arc;

use crate::pgoutput::{
    CommitPrepared, Delete, Insert, LogicalDecodingMessage, Origin, Relation, RollbackPrepared,
    Truncate, Update,
};
use crate::{Lsn, Oid, PgTimestamp, Xid};

/// How a transaction reached the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnKind {
    /// Begin .. Commit.
    Plain,
    /// Streamed in blocks, released at Stream Commit.
    Streamed,
    /// Begin Prepare .. Prepare (two-phase), held and released at Commit
    /// Prepared: its Begin and Commit carry the Commit Prepared's LSN and
    /// time.
    Prepared,
    /// Streamed in blocks up to Stream Prepare, held and released at Commit
    /// Prepared like [`Prepared`](Self::Prepared).
    StreamedPrepared,
}

/// The start of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnBegin {
    /// The transaction id.
    pub xid: Xid,
    /// The commit LSN (of the Commit Prepared, for prepared transactions).
    pub final_lsn: Lsn,
    /// Commit time, as the server reported it.
    pub timestamp: PgTimestamp,
    /// How the transaction was sent.
    pub kind: TxnKind,
}

/// The commit of a transaction (for a prepared one: its Commit Prepared).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnCommit {
    /// The transaction id.
    pub xid: Xid,
    /// The LSN of the commit record.
    pub commit_lsn: Lsn,
    /// The end LSN of the transaction: the position to confirm once it is
    /// processed.
    pub end_lsn: Lsn,
    /// Commit time.
    pub commit_time: PgTimestamp,
}

/// One change inside a transaction. Row changes carry the relation schema
/// they were decoded against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<'a> {
    /// A row was inserted.
    Insert(Arc<Relation<'static>>, Insert<'a>),
    /// A row was updated.
    Update(Arc<Relation<'static>>, Update<'a>),
    /// A row was deleted.
    Delete(Arc<Relation<'static>>, Delete<'a>),
    /// Relations were truncated.
    Truncate(Truncate),
    /// A transactional logical decoding message.
    Message(LogicalDecodingMessage<'a>),
}

impl Change<'_> {
    /// Approximate memory taken by the change (inline size plus owned data).
    pub(super) fn approx_size(&self) -> usize {
        let data = match self {
            Change::Insert(_, m) => m.new.raw_columns().len(),
            Change::Update(_, m) => {
                m.new.raw_columns().len()
                    + m.old.as_ref().map_or(0, |o| o.tuple().raw_columns().len())
            }
            Change::Delete(_, m) => m.old.tuple().raw_columns().len(),
            Change::Truncate(m) => m.relations.len() * std::mem::size_of::<Oid>(),
            Change::Message(m) => m.prefix.len() + m.content.len(),
        };
        std::mem::size_of::<(Xid, Change<'static>)>() + data
    }

    /// A copy that owns its data.
    pub fn into_owned(self) -> Change<'static> {
        match self {
            Change::Insert(r, m) => Change::Insert(r, m.into_owned()),
            Change::Update(r, m) => Change::Update(r, m.into_owned()),
            Change::Delete(r, m) => Change::Delete(r, m.into_owned()),
            Change::Truncate(m) => Change::Truncate(m),
            Change::Message(m) => Change::Message(m.into_owned()),
        }
    }
}

/// Output of the [`TxnAssembler`](super::TxnAssembler), in protocol order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnEvent<'a> {
    /// A transaction starts; its changes follow.
    Begin(TxnBegin),
    /// The origin of the open transaction's changes.
    Origin(Origin<'a>),
    /// A change of the open transaction.
    Change(Change<'a>),
    /// The open transaction committed.
    Commit(TxnCommit),
    /// A prepared transaction the assembler holds nothing of committed: its
    /// changes were never received (it was prepared before the position
    /// streaming started from). A prepared transaction the assembler holds
    /// comes out as Begin, changes and [`Commit`](Self::Commit) instead.
    CommitPrepared(CommitPrepared<'a>),
    /// A prepared transaction was rolled back; whatever the assembler held
    /// of it was dropped.
    RollbackPrepared(RollbackPrepared<'a>),
    /// A non-transactional logical decoding message.
    Message(LogicalDecodingMessage<'a>),
}

impl TxnEvent<'_> {
    /// A copy that owns its data.
    pub fn into_owned(self) -> TxnEvent<'static> {
        match self {
            TxnEvent::Begin(b) => TxnEvent::Begin(b),
            TxnEvent::Origin(o) => TxnEvent::Origin(Origin {
                commit_lsn: o.commit_lsn,
                name: o.name.into_owned().into(),
            }),
            TxnEvent::Change(c) => TxnEvent::Change(c.into_owned()),
            TxnEvent::Commit(c) => TxnEvent::Commit(c),
            TxnEvent::CommitPrepared(c) => TxnEvent::CommitPrepared(CommitPrepared {
                gid: c.gid.into_owned().into(),
                ..c
            }),
            TxnEvent::RollbackPrepared(r) => TxnEvent::RollbackPrepared(RollbackPrepared {
                gid: r.gid.into_owned().into(),
                ..r
            }),
            TxnEvent::Message(m) => TxnEvent::Message(m.into_owned()),
        }
    }
}
