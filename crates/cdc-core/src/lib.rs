//! Sans-IO decoding of PostgreSQL logical replication.
//!
//! `cdc-core` turns the bytes of a replication connection into typed values.
//! It does **not** open sockets, read a clock or spawn tasks, and it has no
//! async runtime: callers hand it bytes (and, where time matters, the current
//! time) and get back borrowed, typed messages. Everything that does IO lives
//! in `cdc-runtime`.
//!
//! ```
//! use cdc_core::Lsn;
//!
//! let lsn: Lsn = "16/B374D848".parse()?;
//! assert_eq!(lsn.to_string(), "16/B374D848");
//! assert_eq!(lsn.checked_add(8).map(|l| l.bytes_since(lsn)), Some(Some(8)));
//! # Ok::<(), cdc_core::ParseLsnError>(())
//! ```
#![forbid(unsafe_code)]

#[cfg(any(test, feature = "test-util"))]
pub mod encode;
mod error;
mod lsn;
pub mod pgoutput;
mod reader;
mod relcache;
mod replication;
mod txn;

pub use error::{DecodeError, ProtocolError, UnsupportedProtocolVersion};
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

/// A PostgreSQL object identifier (relation, type, ...), as the protocol sends it.
pub type Oid = u32;

/// A PostgreSQL transaction id, as the protocol sends it.
pub type Xid = u32;
