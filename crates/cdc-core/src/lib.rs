//! Sans-IO decoding of PostgreSQL logical replication.
//!
//! `cdc-core` turns the bytes of a replication connection into typed values:
//!
//! * [`ReplicationMessage`]: the CopyData framing of a walsender
//!   ([`XLogData`], [`PrimaryKeepalive`]) and the client's
//!   [`StandbyStatusUpdate`]; [`PgTimestamp`] for the protocol's clock values.
//! * [`pgoutput`]: every message of the pgoutput plugin, protocol versions 1
//!   to 4 ([`LogicalMessage::parse`], or the stateful [`Decoder`] that follows
//!   stream blocks). Messages borrow from the input; row columns come out of
//!   [`TupleData::iter`] without allocating.
//! * [`RelationCache`] and [`TxnAssembler`]: schemas from Relation/Type
//!   messages, and transactions (plain, streamed, two-phase) assembled from
//!   messages, with protocol-order violations as typed [`ProtocolError`]s.
//! * [`spill`]: the encoding that lets a caller keep a large streamed
//!   transaction in a file instead of memory and replay it at commit; the
//!   assembler produces and reads the bytes, the caller stores them.
//! * [`Lsn`]: WAL positions.
//! * [`fault`]: the one policy that sorts PostgreSQL errors into transient
//!   (retry) and permanent (stop and report).
//! * [`copy_text`]: rows of `COPY ... TO STDOUT` in text format, as the
//!   initial snapshot reads them.
//!
//! # What it does not do
//!
//! It does **not** open sockets, authenticate, negotiate TLS, read a clock,
//! spawn tasks or retry, and it has no async runtime: callers hand it bytes
//! (and, where time matters, the current time) and get back typed messages.
//! It does not convert column text into typed values (that is the value
//! layer) and does not decide what to confirm to the server. Everything that
//! does IO lives in `cdc-runtime`.
//!
//! # Example
//!
//! ```
//! use cdc_core::pgoutput::{LogicalMessage, ProtocolVersion, TupleValue};
//! use cdc_core::{Decoder, ReplicationMessage};
//!
//! // A CopyData payload as a walsender sends it: XLogData ('w') carrying an
//! // Insert ('I') into relation 16384 of the row (42, NULL).
//! let mut copy_data = vec![b'w'];
//! copy_data.extend_from_slice(&0x1_0000_0028u64.to_be_bytes()); // WAL start 1/28
//! copy_data.extend_from_slice(&0x1_0000_0080u64.to_be_bytes()); // WAL end
//! copy_data.extend_from_slice(&0i64.to_be_bytes()); // send time
//! copy_data.extend_from_slice(b"I\0\0\x40\x00N\0\x02t\0\0\0\x0242n");
//!
//! let ReplicationMessage::XLogData(xlog) = ReplicationMessage::parse(&copy_data)? else {
//!     unreachable!("this example holds XLogData");
//! };
//! assert_eq!(xlog.wal_start.to_string(), "1/28");
//!
//! let mut decoder = Decoder::new(ProtocolVersion::V4);
//! let LogicalMessage::Insert(insert) = decoder.decode(xlog.data)? else {
//!     unreachable!("this example holds an Insert");
//! };
//! assert_eq!(insert.relation, 16384);
//! let columns: Vec<TupleValue<'_>> = insert.new.iter().collect();
//! assert_eq!(columns, [TupleValue::Text(b"42"), TupleValue::Null]);
//! # Ok::<(), cdc_core::DecodeError>(())
//! ```
//!
//! # Feature flags
//!
//! * `test-util` (off by default): the `encode` module,
//!   encoders that write every message exactly as a server would, for tests,
//!   benchmarks and fuzz targets. Not for production use.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod copy_binary;
pub mod copy_text;
#[cfg(any(test, feature = "test-util"))]
pub mod encode;
mod error;
pub mod fault;
mod lsn;
pub mod pgoutput;
mod reader;
mod relcache;
mod replication;
pub mod spill;
pub mod sql;
mod txn;
mod value;

pub use error::{DecodeError, ProtocolError, UnsupportedProtocolVersion};
pub use fault::{classify, classify_sqlstate, Connection, Fault};
pub use lsn::{Lsn, ParseLsnError};
pub use pgoutput::{
    Decoder, LogicalMessage, OwnedLogicalMessage, ParseContext, ProtocolVersion, TupleData,
    TupleValue,
};
pub use relcache::RelationCache;
pub use replication::{
    PgTimestamp, PrimaryKeepalive, ReplicationMessage, StandbyStatusUpdate, XLogData,
};
pub use txn::{Change, TxnAssembler, TxnBegin, TxnCommit, TxnEvent, TxnKind};
pub use value::*;

/// A PostgreSQL object identifier (relation, type, ...), as the protocol sends it.
pub type Oid = u32;

/// A PostgreSQL transaction id, as the protocol sends it.
pub type Xid = u32;
