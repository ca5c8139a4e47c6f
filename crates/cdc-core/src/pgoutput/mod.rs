//! pgoutput, PostgreSQL's logical replication output plugin: protocol
//! versions 1 to 4 (PostgreSQL 10+, 14+, 15+, 16+).
//!
//! A message's layout depends on the negotiated `proto_version` and, for
//! Relation, Type, Insert, Update, Delete, Truncate and Message, on whether it
//! sits inside a Stream Start .. Stream Stop block (then it carries a leading
//! xid). [`LogicalMessage::parse`] takes that as a [`ParseContext`];
//! [`Decoder`] tracks the stream blocks for you.

mod message;
mod tuple;
pub(crate) mod write;

use crate::error::{DecodeError, UnsupportedProtocolVersion};

pub use message::{
    Begin, BeginPrepare, Column, Commit, CommitPrepared, Delete, Insert, LogicalDecodingMessage,
    LogicalMessage, OldTuple, Origin, OwnedLogicalMessage, Prepare, Relation, ReplicaIdentity,
    RollbackPrepared, StreamAbort, StreamAbortInfo, StreamCommit, StreamStart, Truncate, Type,
    Update,
};
pub use tuple::{ColumnHeader, TupleData, TupleIter, TupleValue};

/// A pgoutput `proto_version`, checked to be one this crate decodes (1..=4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtocolVersion(u32);

impl ProtocolVersion {
    /// Version 1 (PostgreSQL 10+).
    pub const V1: ProtocolVersion = ProtocolVersion(1);
    /// Version 2 (PostgreSQL 14+): streaming of in-progress transactions.
    pub const V2: ProtocolVersion = ProtocolVersion(2);
    /// Version 3 (PostgreSQL 15+): two-phase commit.
    pub const V3: ProtocolVersion = ProtocolVersion(3);
    /// Version 4 (PostgreSQL 16+): parallel apply of streamed transactions.
    pub const V4: ProtocolVersion = ProtocolVersion(4);
    /// Every supported version, oldest first.
    pub const ALL: [ProtocolVersion; 4] = [Self::V1, Self::V2, Self::V3, Self::V4];

    /// The version `v`, if supported.
    pub const fn new(v: u32) -> Result<Self, UnsupportedProtocolVersion> {
        match v {
            1..=4 => Ok(ProtocolVersion(v)),
            other => Err(UnsupportedProtocolVersion(other)),
        }
    }

    /// The version number.
    #[inline]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// Whether in-progress transactions can be streamed (v2+).
    pub const fn supports_streaming(self) -> bool {
        self.0 >= 2
    }

    /// Whether the `two_phase` option may be requested (v3+).
    ///
    /// This is about asking for two-phase decoding, not about decoding it:
    /// a slot created with `two_phase = true` makes the server send Begin
    /// Prepare, Prepare, Commit Prepared and Rollback Prepared under every
    /// version, and [`LogicalMessage::parse`] accepts them under every
    /// version (Stream Prepare from v2, with streaming).
    pub const fn supports_two_phase(self) -> bool {
        self.0 >= 3
    }
}

impl TryFrom<u32> for ProtocolVersion {
    type Error = UnsupportedProtocolVersion;

    fn try_from(v: u32) -> Result<Self, Self::Error> {
        Self::new(v)
    }
}

/// What the parser must know beyond the bytes of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParseContext {
    /// The negotiated protocol version.
    pub version: ProtocolVersion,
    /// Whether the message is inside a Stream Start .. Stream Stop block,
    /// where data messages carry a leading xid.
    pub in_stream: bool,
    /// Whether the slot was started with `streaming 'parallel'` (v4 only):
    /// then Stream Abort carries the abort LSN and timestamp. Ignored below v4.
    pub parallel_streaming: bool,
}

impl ParseContext {
    /// Outside any stream block, without parallel streaming.
    pub const fn new(version: ProtocolVersion) -> Self {
        ParseContext {
            version,
            in_stream: false,
            parallel_streaming: false,
        }
    }

    /// The same context inside (or outside) a stream block.
    pub const fn with_in_stream(self, in_stream: bool) -> Self {
        ParseContext { in_stream, ..self }
    }

    /// The same context with `streaming 'parallel'` on or off.
    pub const fn with_parallel_streaming(self, parallel_streaming: bool) -> Self {
        ParseContext {
            parallel_streaming,
            ..self
        }
    }

    /// Whether a Stream Abort carries abort LSN and timestamp.
    #[inline]
    pub const fn stream_abort_has_info(self) -> bool {
        self.parallel_streaming && self.version.0 >= 4
    }
}

/// A stateful parser that follows Stream Start / Stream Stop so each message
/// is parsed in the right [`ParseContext`].
#[derive(Debug, Clone)]
pub struct Decoder {
    ctx: ParseContext,
}

impl Decoder {
    /// A decoder for `version`, outside any stream block.
    pub fn new(version: ProtocolVersion) -> Self {
        Decoder {
            ctx: ParseContext::new(version),
        }
    }

    /// A decoder for a slot started with `streaming 'parallel'` (v4).
    pub fn with_parallel_streaming(mut self, on: bool) -> Self {
        self.ctx.parallel_streaming = on;
        self
    }

    /// The context the next message will be parsed in.
    #[inline]
    pub fn context(&self) -> ParseContext {
        self.ctx
    }

    /// Whether the decoder is inside a stream block.
    #[inline]
    pub fn in_stream(&self) -> bool {
        self.ctx.in_stream
    }

    /// Parses the next message; Stream Start and Stream Stop switch the
    /// context for the messages after them. On error the state is unchanged.
    #[inline(always)]
    pub fn decode<'a>(&mut self, buf: &'a [u8]) -> Result<LogicalMessage<'a>, DecodeError> {
        let msg = LogicalMessage::parse(buf, self.ctx)?;
        match msg {
            LogicalMessage::StreamStart(_) => self.ctx.in_stream = true,
            LogicalMessage::StreamStop => self.ctx.in_stream = false,
            _ => {}
        }
        Ok(msg)
    }

    /// Forgets any open stream block (after a reconnect).
    pub fn reset(&mut self) {
        self.ctx.in_stream = false;
    }
}
