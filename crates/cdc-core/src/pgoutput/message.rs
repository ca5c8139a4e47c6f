//! The pgoutput messages (PostgreSQL docs, "Logical Replication Message
//! Formats") and their parser.

use std::borrow::Cow;

use super::tuple::TupleData;
use super::ProtocolVersion;
use crate::{Lsn, Oid, PgTimestamp, Xid};

mod owned;
mod parse;

/// `B`: the start of a (non-streamed) transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Begin {
    /// The final LSN of the transaction (its commit LSN).
    pub final_lsn: Lsn,
    /// Commit timestamp of the transaction.
    pub commit_time: PgTimestamp,
    /// Xid of the transaction.
    pub xid: Xid,
}

/// `M`: a logical decoding message (`pg_logical_emit_message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalDecodingMessage<'a> {
    /// Xid of the streamed transaction (present only inside a stream block).
    pub xid: Option<Xid>,
    /// Whether the message is transactional (flag bit 1).
    pub transactional: bool,
    /// The LSN of the message.
    pub lsn: Lsn,
    /// The prefix given by the emitter.
    pub prefix: Cow<'a, str>,
    /// The content.
    pub content: Cow<'a, [u8]>,
}

/// `C`: the commit of a (non-streamed) transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// Flags; currently unused (0).
    pub flags: u8,
    /// The LSN of the commit.
    pub commit_lsn: Lsn,
    /// The end LSN of the transaction.
    pub end_lsn: Lsn,
    /// Commit timestamp of the transaction.
    pub commit_time: PgTimestamp,
}

/// `O`: the origin of the transaction's changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin<'a> {
    /// The commit LSN on the origin server.
    pub commit_lsn: Lsn,
    /// The origin name.
    pub name: Cow<'a, str>,
}

/// A relation's replica identity setting (`pg_class.relreplident`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplicaIdentity {
    /// `d`: the primary key, if any.
    Default,
    /// `n`: nothing.
    Nothing,
    /// `f`: all columns.
    Full,
    /// `i`: a chosen unique index.
    Index,
    /// A setting this decoder does not know, kept as sent.
    Other(u8),
}

impl ReplicaIdentity {
    /// From the wire byte.
    pub fn from_byte(b: u8) -> Self {
        match b {
            b'd' => ReplicaIdentity::Default,
            b'n' => ReplicaIdentity::Nothing,
            b'f' => ReplicaIdentity::Full,
            b'i' => ReplicaIdentity::Index,
            other => ReplicaIdentity::Other(other),
        }
    }

    /// The wire byte.
    pub fn as_byte(self) -> u8 {
        match self {
            ReplicaIdentity::Default => b'd',
            ReplicaIdentity::Nothing => b'n',
            ReplicaIdentity::Full => b'f',
            ReplicaIdentity::Index => b'i',
            ReplicaIdentity::Other(b) => b,
        }
    }
}

/// One column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column<'a> {
    /// Flags: 0, or 1 if the column is part of the key.
    pub flags: u8,
    /// The column name.
    pub name: Cow<'a, str>,
    /// The column's data type oid.
    pub type_oid: Oid,
    /// The type modifier (`atttypmod`).
    pub type_modifier: i32,
}

impl Column<'_> {
    /// Whether the column is part of the replica identity key.
    #[inline]
    pub fn is_key(&self) -> bool {
        self.flags & 1 != 0
    }

    /// A copy that owns its strings.
    pub fn into_owned(self) -> Column<'static> {
        Column {
            flags: self.flags,
            name: own_str(self.name),
            type_oid: self.type_oid,
            type_modifier: self.type_modifier,
        }
    }
}

/// `R`: a relation's schema, sent before the first change to it (and again
/// after it changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation<'a> {
    /// Xid of the streamed transaction (present only inside a stream block).
    pub xid: Option<Xid>,
    /// The relation oid.
    pub oid: Oid,
    /// The namespace (empty for `pg_catalog`).
    pub namespace: Cow<'a, str>,
    /// The relation name.
    pub name: Cow<'a, str>,
    /// Replica identity setting.
    pub replica_identity: ReplicaIdentity,
    /// The columns, in the order tuples carry them.
    pub columns: Vec<Column<'a>>,
}

/// `Y`: a data type's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Type<'a> {
    /// Xid of the streamed transaction (present only inside a stream block).
    pub xid: Option<Xid>,
    /// The type oid.
    pub oid: Oid,
    /// The namespace (empty for `pg_catalog`).
    pub namespace: Cow<'a, str>,
    /// The type name.
    pub name: Cow<'a, str>,
}

/// `I`: an inserted row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert<'a> {
    /// Xid of the streamed transaction (present only inside a stream block).
    pub xid: Option<Xid>,
    /// The relation oid (described by an earlier [`Relation`]).
    pub relation: Oid,
    /// The new row.
    pub new: TupleData<'a>,
}

/// The old row of an [`Update`] or [`Delete`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldTuple<'a> {
    /// `K`: the replica identity key columns (others are null).
    Key(TupleData<'a>),
    /// `O`: the whole old row (replica identity full).
    Full(TupleData<'a>),
}

impl<'a> OldTuple<'a> {
    /// The tuple, whichever kind.
    #[inline]
    pub fn tuple(&self) -> &TupleData<'a> {
        match self {
            OldTuple::Key(t) | OldTuple::Full(t) => t,
        }
    }

    /// A copy that owns its bytes.
    pub fn into_owned(self) -> OldTuple<'static> {
        match self {
            OldTuple::Key(t) => OldTuple::Key(t.into_owned()),
            OldTuple::Full(t) => OldTuple::Full(t.into_owned()),
        }
    }
}

/// `U`: an updated row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update<'a> {
    /// Xid of the streamed transaction (present only inside a stream block).
    pub xid: Option<Xid>,
    /// The relation oid.
    pub relation: Oid,
    /// The old key or row, when the key changed or replica identity is full.
    pub old: Option<OldTuple<'a>>,
    /// The new row.
    pub new: TupleData<'a>,
}

/// `D`: a deleted row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete<'a> {
    /// Xid of the streamed transaction (present only inside a stream block).
    pub xid: Option<Xid>,
    /// The relation oid.
    pub relation: Oid,
    /// The old key or row.
    pub old: OldTuple<'a>,
}

/// `T`: truncated relations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    /// Xid of the streamed transaction (present only inside a stream block).
    pub xid: Option<Xid>,
    /// The option bits as sent: 1 = `CASCADE`, 2 = `RESTART IDENTITY`.
    pub options: u8,
    /// The truncated relations.
    pub relations: Vec<Oid>,
}

impl Truncate {
    /// `TRUNCATE ... CASCADE`.
    #[inline]
    pub fn cascade(&self) -> bool {
        self.options & 1 != 0
    }

    /// `TRUNCATE ... RESTART IDENTITY`.
    #[inline]
    pub fn restart_identity(&self) -> bool {
        self.options & 2 != 0
    }
}

/// `S`: the start of a block of a streamed transaction's changes (v2+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamStart {
    /// Xid of the (top-level) transaction.
    pub xid: Xid,
    /// Whether this is the transaction's first block.
    pub first_segment: bool,
}

/// `c`: the commit of a streamed transaction (v2+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCommit {
    /// Xid of the transaction.
    pub xid: Xid,
    /// Flags; currently unused (0).
    pub flags: u8,
    /// The LSN of the commit.
    pub commit_lsn: Lsn,
    /// The end LSN of the transaction.
    pub end_lsn: Lsn,
    /// Commit timestamp of the transaction.
    pub commit_time: PgTimestamp,
}

/// The abort position and time a Stream Abort carries with parallel
/// streaming (v4, `streaming = parallel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamAbortInfo {
    /// The LSN of the abort.
    pub abort_lsn: Lsn,
    /// Abort timestamp of the transaction.
    pub abort_time: PgTimestamp,
}

/// `A`: the abort of a streamed transaction or one of its subtransactions (v2+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamAbort {
    /// Xid of the top-level transaction.
    pub xid: Xid,
    /// Xid of the aborted subtransaction; equal to `xid` for the whole transaction.
    pub subxid: Xid,
    /// Present iff the context says parallel streaming is on (v4).
    pub abort_info: Option<StreamAbortInfo>,
}

/// `b`: the start of a prepared transaction (sent under every protocol
/// version when the slot has `two_phase` enabled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginPrepare<'a> {
    /// The LSN of the prepare.
    pub prepare_lsn: Lsn,
    /// The end LSN of the prepared transaction.
    pub end_lsn: Lsn,
    /// Prepare timestamp of the transaction.
    pub prepare_time: PgTimestamp,
    /// Xid of the transaction.
    pub xid: Xid,
    /// The user-defined GID of the prepared transaction.
    pub gid: Cow<'a, str>,
}

/// `P` (Prepare) and `p` (Stream Prepare): a transaction was prepared (any
/// version on a two-phase slot; Stream Prepare needs streaming, v2+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepare<'a> {
    /// Flags; currently unused (0).
    pub flags: u8,
    /// The LSN of the prepare.
    pub prepare_lsn: Lsn,
    /// The end LSN of the prepared transaction.
    pub end_lsn: Lsn,
    /// Prepare timestamp of the transaction.
    pub prepare_time: PgTimestamp,
    /// Xid of the transaction.
    pub xid: Xid,
    /// The user-defined GID of the prepared transaction.
    pub gid: Cow<'a, str>,
}

/// `K`: a prepared transaction was committed (any version on a two-phase slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPrepared<'a> {
    /// Flags; currently unused (0).
    pub flags: u8,
    /// The LSN of the commit prepared.
    pub commit_lsn: Lsn,
    /// The end LSN of the commit prepared transaction.
    pub end_lsn: Lsn,
    /// Commit timestamp of the transaction.
    pub commit_time: PgTimestamp,
    /// Xid of the transaction.
    pub xid: Xid,
    /// The user-defined GID of the prepared transaction.
    pub gid: Cow<'a, str>,
}

/// `r`: a prepared transaction was rolled back (any version on a two-phase
/// slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackPrepared<'a> {
    /// Flags; currently unused (0).
    pub flags: u8,
    /// The end LSN of the prepared transaction.
    pub prepare_end_lsn: Lsn,
    /// The end LSN of the rollback prepared transaction.
    pub rollback_end_lsn: Lsn,
    /// Prepare timestamp of the transaction.
    pub prepare_time: PgTimestamp,
    /// Rollback timestamp of the transaction.
    pub rollback_time: PgTimestamp,
    /// Xid of the transaction.
    pub xid: Xid,
    /// The user-defined GID of the prepared transaction.
    pub gid: Cow<'a, str>,
}

/// One pgoutput message, borrowing strings and column bytes from its buffer.
///
/// [`into_owned`](LogicalMessage::into_owned) gives an
/// [`OwnedLogicalMessage`] that outlives the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogicalMessage<'a> {
    /// `B`
    Begin(Begin),
    /// `M`
    Message(LogicalDecodingMessage<'a>),
    /// `C`
    Commit(Commit),
    /// `O`
    Origin(Origin<'a>),
    /// `R`
    Relation(Relation<'a>),
    /// `Y`
    Type(Type<'a>),
    /// `I`
    Insert(Insert<'a>),
    /// `U`
    Update(Update<'a>),
    /// `D`
    Delete(Delete<'a>),
    /// `T`
    Truncate(Truncate),
    /// `S` (v2+)
    StreamStart(StreamStart),
    /// `E` (v2+)
    StreamStop,
    /// `c` (v2+)
    StreamCommit(StreamCommit),
    /// `A` (v2+)
    StreamAbort(StreamAbort),
    /// `b` (any version on a two-phase slot; v3+ documents it)
    BeginPrepare(BeginPrepare<'a>),
    /// `P` (any version on a two-phase slot)
    Prepare(Prepare<'a>),
    /// `K` (any version on a two-phase slot)
    CommitPrepared(CommitPrepared<'a>),
    /// `r` (any version on a two-phase slot)
    RollbackPrepared(RollbackPrepared<'a>),
    /// `p` (v2+, on a two-phase slot with streaming)
    StreamPrepare(Prepare<'a>),
}

/// A [`LogicalMessage`] that owns all its data.
pub type OwnedLogicalMessage = LogicalMessage<'static>;

#[inline]
fn own_str(s: Cow<'_, str>) -> Cow<'static, str> {
    Cow::Owned(s.into_owned())
}

#[inline]
fn own_bytes(s: Cow<'_, [u8]>) -> Cow<'static, [u8]> {
    Cow::Owned(s.into_owned())
}

/// The oldest protocol version under which the server may send a message
/// tag, or `None` if the tag is unknown.
///
/// Two-phase messages are not gated by the version that documents them (v3):
/// PostgreSQL decodes prepared transactions whenever the *slot* has
/// `two_phase` enabled (created with `two_phase = true` by another tool or by
/// hand), whatever `proto_version` and `two_phase` option the client asked
/// for, so Begin Prepare, Prepare, Commit Prepared and Rollback Prepared
/// arrive under v1 and v2 too. Stream Prepare ends a streamed transaction,
/// which needs v2.
fn since_version(tag: u8) -> Option<u32> {
    match tag {
        b'B' | b'M' | b'C' | b'O' | b'R' | b'Y' | b'I' | b'U' | b'D' | b'T' => Some(1),
        b'b' | b'P' | b'K' | b'r' => Some(1),
        b'S' | b'E' | b'c' | b'A' | b'p' => Some(2),
        _ => None,
    }
}

impl<'a> LogicalMessage<'a> {
    /// The message's tag byte.
    pub fn tag(&self) -> u8 {
        match self {
            LogicalMessage::Begin(_) => b'B',
            LogicalMessage::Message(_) => b'M',
            LogicalMessage::Commit(_) => b'C',
            LogicalMessage::Origin(_) => b'O',
            LogicalMessage::Relation(_) => b'R',
            LogicalMessage::Type(_) => b'Y',
            LogicalMessage::Insert(_) => b'I',
            LogicalMessage::Update(_) => b'U',
            LogicalMessage::Delete(_) => b'D',
            LogicalMessage::Truncate(_) => b'T',
            LogicalMessage::StreamStart(_) => b'S',
            LogicalMessage::StreamStop => b'E',
            LogicalMessage::StreamCommit(_) => b'c',
            LogicalMessage::StreamAbort(_) => b'A',
            LogicalMessage::BeginPrepare(_) => b'b',
            LogicalMessage::Prepare(_) => b'P',
            LogicalMessage::CommitPrepared(_) => b'K',
            LogicalMessage::RollbackPrepared(_) => b'r',
            LogicalMessage::StreamPrepare(_) => b'p',
        }
    }

    /// The message's name as the PostgreSQL docs spell it.
    pub fn name(&self) -> &'static str {
        match self {
            LogicalMessage::Begin(_) => "Begin",
            LogicalMessage::Message(_) => "Message",
            LogicalMessage::Commit(_) => "Commit",
            LogicalMessage::Origin(_) => "Origin",
            LogicalMessage::Relation(_) => "Relation",
            LogicalMessage::Type(_) => "Type",
            LogicalMessage::Insert(_) => "Insert",
            LogicalMessage::Update(_) => "Update",
            LogicalMessage::Delete(_) => "Delete",
            LogicalMessage::Truncate(_) => "Truncate",
            LogicalMessage::StreamStart(_) => "Stream Start",
            LogicalMessage::StreamStop => "Stream Stop",
            LogicalMessage::StreamCommit(_) => "Stream Commit",
            LogicalMessage::StreamAbort(_) => "Stream Abort",
            LogicalMessage::BeginPrepare(_) => "Begin Prepare",
            LogicalMessage::Prepare(_) => "Prepare",
            LogicalMessage::CommitPrepared(_) => "Commit Prepared",
            LogicalMessage::RollbackPrepared(_) => "Rollback Prepared",
            LogicalMessage::StreamPrepare(_) => "Stream Prepare",
        }
    }

    /// The oldest protocol version under which the server may send this
    /// message (and the parser accepts it). Two-phase messages are V1: a slot
    /// created with `two_phase` sends them under every version; Stream
    /// Prepare, like every streaming message, is V2.
    pub fn since_version(&self) -> ProtocolVersion {
        match since_version(self.tag()) {
            Some(2) => ProtocolVersion::V2,
            Some(3) => ProtocolVersion::V3,
            _ => ProtocolVersion::V1,
        }
    }
}
