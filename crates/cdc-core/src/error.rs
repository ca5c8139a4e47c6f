//! Errors of the decoding layer.
//!
//! [`DecodeError`] says why a byte sequence is not a well-formed message; every
//! variant carries the byte offset (from the start of the buffer handed to the
//! parser) where decoding stopped. [`ProtocolError`] says why a sequence of
//! well-formed messages is not a valid transaction stream; the
//! [`TxnAssembler`](crate::TxnAssembler) returns it.

use crate::{Lsn, Oid, Xid};

/// A message could not be decoded from its bytes.
///
/// Offsets count from the first byte of the buffer given to the parser (for a
/// pgoutput message: its tag byte).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The buffer ended inside a field (or is empty, or a string has no NUL
    /// terminator before the end).
    #[error("unexpected end of message at byte {offset}: {needed} more byte(s) needed")]
    UnexpectedEnd {
        /// Where the incomplete field starts.
        offset: usize,
        /// How many bytes past the end of the buffer the field needs.
        needed: usize,
    },
    /// The message type byte is not one this parser knows.
    #[error("unknown message tag {tag:#04x} at byte {offset}")]
    UnknownTag {
        /// The tag byte.
        tag: u8,
        /// Where the tag is.
        offset: usize,
    },
    /// The message was complete but bytes were left over.
    #[error("{remaining} trailing byte(s) after the message, starting at byte {offset}")]
    TrailingBytes {
        /// Where the first extra byte is.
        offset: usize,
        /// How many extra bytes there are.
        remaining: usize,
    },
    /// A string field is not valid UTF-8.
    #[error("string at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Where the string starts.
        offset: usize,
    },
    /// A tuple column has a kind byte other than `n`, `u`, `t` or `b`.
    #[error("invalid tuple column kind {kind:#04x} at byte {offset}")]
    InvalidColumnKind {
        /// The kind byte.
        kind: u8,
        /// Where it is.
        offset: usize,
    },
    /// A tuple marker is not one the message allows (`N`, `K` or `O`).
    #[error("invalid tuple marker {marker:#04x} at byte {offset}")]
    InvalidTupleMarker {
        /// The marker byte.
        marker: u8,
        /// Where it is.
        offset: usize,
    },
    /// A length or count field is negative.
    #[error("negative length or count {value} at byte {offset}")]
    NegativeLength {
        /// The value read.
        value: i64,
        /// Where the field is.
        offset: usize,
    },
    /// The message type does not exist in the negotiated protocol version.
    #[error("message tag {tag:#04x} at byte {offset} is not part of pgoutput protocol version {version}")]
    NotInProtocolVersion {
        /// The tag byte.
        tag: u8,
        /// The protocol version in use.
        version: u32,
        /// Where the tag is.
        offset: usize,
    },
}

/// A pgoutput protocol version outside `1..=4` was requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unsupported pgoutput protocol version {0}: supported versions are 1 to 4")]
pub struct UnsupportedProtocolVersion(pub u32);

/// Well-formed messages arrived in an order the logical replication protocol
/// does not allow.
///
/// The assembler's state is unchanged when it returns one of these, except
/// where the variant says otherwise, but the stream should be treated as
/// broken: reconnect from the last confirmed position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A Begin (or Begin Prepare, or Stream Start) arrived while a transaction
    /// was open.
    #[error("transaction {xid} begins while transaction {open_xid} is still open")]
    NestedBegin {
        /// The xid of the new transaction.
        xid: Xid,
        /// The xid of the open transaction.
        open_xid: Xid,
    },
    /// A Commit (or Prepare) arrived with no open transaction.
    #[error("{what} without an open transaction")]
    EndWithoutBegin {
        /// The message name, e.g. `"Commit"`.
        what: &'static str,
    },
    /// A Commit or Prepare arrived for an open transaction of another kind
    /// (Commit for a Begin Prepare, Prepare for a Begin).
    #[error("{what} does not end a transaction opened by {opened_by}")]
    MismatchedEnd {
        /// The ending message name.
        what: &'static str,
        /// The opening message name.
        opened_by: &'static str,
    },
    /// The commit (or prepare) LSN differs from the final LSN announced by Begin.
    #[error(
        "transaction {xid}: end LSN {actual} does not match the LSN {expected} announced at begin"
    )]
    CommitLsnMismatch {
        /// The transaction.
        xid: Xid,
        /// The LSN from Begin / Begin Prepare.
        expected: Lsn,
        /// The LSN from Commit / Prepare.
        actual: Lsn,
    },
    /// A Prepare names another xid or gid than its Begin Prepare.
    #[error("prepare of transaction {xid} does not match its Begin Prepare")]
    PrepareMismatch {
        /// The xid from Begin Prepare.
        xid: Xid,
    },
    /// A change refers to a relation that no Relation message has described.
    #[error("change for relation {oid} which no Relation message described")]
    UnknownRelation {
        /// The relation oid.
        oid: Oid,
    },
    /// A change (or Origin, or transactional logical message) arrived outside a
    /// transaction.
    #[error("{what} outside a transaction")]
    ChangeOutsideTransaction {
        /// The message name.
        what: &'static str,
    },
    /// A message that must arrive outside transactions arrived inside one.
    #[error("{what} inside transaction {open_xid}")]
    InsideTransaction {
        /// The message name.
        what: &'static str,
        /// The xid of the open transaction.
        open_xid: Xid,
    },
    /// A Stream Start arrived inside a Stream Start .. Stream Stop block.
    #[error(
        "stream start for transaction {xid} inside the stream block of transaction {open_xid}"
    )]
    NestedStream {
        /// The xid of the new stream block.
        xid: Xid,
        /// The xid of the open block.
        open_xid: Xid,
    },
    /// A Stream Stop arrived outside a stream block.
    #[error("stream stop outside a stream block")]
    StreamStopWithoutStart,
    /// A message that must arrive outside stream blocks arrived inside one.
    #[error("{what} inside a stream block")]
    InsideStreamBlock {
        /// The message name.
        what: &'static str,
    },
    /// A stream message refers to a streamed transaction that never had a
    /// first segment (or that already ended).
    #[error("unknown streamed transaction {xid}")]
    UnknownStreamedTransaction {
        /// The xid.
        xid: Xid,
    },
    /// A Commit Prepared or Rollback Prepared names a transaction that is
    /// held but not prepared (still streaming), or prepared under another
    /// gid.
    #[error("{what} for transaction {xid} that is not prepared under that gid")]
    NotPrepared {
        /// The message name.
        what: &'static str,
        /// The xid it names.
        xid: Xid,
    },
    /// A Stream Start with the first-segment flag for a transaction that
    /// already has segments.
    #[error("streamed transaction {xid} started twice")]
    DuplicateStreamedTransaction {
        /// The xid.
        xid: Xid,
    },
}
