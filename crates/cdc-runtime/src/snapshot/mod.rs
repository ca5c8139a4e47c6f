//! The initial snapshot: every existing row of the published tables, read
//! while the stream runs and merged into it without a gap or a stale row.
//!
//! # Tables with a key: watermarks (DBLog)
//!
//! A table with a primary key (or a replica identity index) is read in key
//! ranges of `chunk_size` rows by `readers` ordinary connections, without
//! locks. For each chunk a reader
//!
//! 1. writes a low watermark (`pg_logical_emit_message`, in a transaction of
//!    its own, so it arrives in the stream at its commit),
//! 2. waits until every transaction that was open at that moment has ended
//!    (so every transaction the stream delivers before the watermark is
//!    visible to the read),
//! 3. reads the chunk (`COPY (SELECT … WHERE key > lo AND key <= hi)`, one
//!    statement, one snapshot),
//! 4. writes a high watermark.
//!
//! The pipeline merges in stream order (see [`merge`]): rows of the chunk
//! whose key the stream changed between the two watermarks are dropped (the
//! stream carries a newer version); the rest are emitted as `r` events at
//! the high watermark, inside its transaction. Rows committed before the low
//! watermark are in the read; rows changed after the read are dropped from
//! it and arrive from the stream; changes after the high watermark follow
//! the chunk's rows. The result is the table's state, whatever the readers
//! and writers interleave.
//!
//! Snapshot progress (tables done, chunks and rows done, where the next
//! chunk starts, and the chunks being read) is part of every checkpoint:
//! after a crash only the chunks not emitted yet are read again. Meanwhile
//! the slot keeps advancing with the checkpoints.
//!
//! # Tables without a key
//!
//! Their rows cannot be matched to the stream's changes, so they are read in
//! one consistent read through the exported snapshot of a temporary slot
//! (`SET TRANSACTION SNAPSHOT`) and emitted at that slot's consistent
//! point: every transaction that committed before it precedes the rows,
//! every later one follows. Such a read is not resumable: after a crash it
//! starts over (its rows are delivered again).

mod catalog;
mod copy;
mod driver;
mod fallback;
mod key;
pub mod merge;
mod progress;
mod reader;

use std::time::Duration;

pub use catalog::{published_tables, Column, SnapshotTable, TableRequest};
pub(crate) use driver::Snapshot;
pub(crate) use fallback::FromFallback;
pub use key::RowKey;
pub use reader::connect;

/// The prefix of the watermark messages pgcdc writes into the WAL.
pub const WATERMARK_PREFIX: &str = "pgcdc.snapshot";

/// Defaults of [`SnapshotOptions`]: rows per chunk. Up to three chunks per
/// reader are held in memory (one read, one prepared, one on its way to the
/// merge); per-chunk work (watermarks, their trip through the stream, the
/// merge) made 8,192-row chunks reach 0.60 of COPY's throughput where
/// 32,768-row ones reached 0.71-0.72 (5M rows, 2 readers, load 3.5-3.8).
pub const DEFAULT_CHUNK_SIZE: u64 = 32768;
/// Default number of chunk readers.
pub const DEFAULT_READERS: usize = 2;

/// How a job starts when no checkpoint says where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartupMode {
    /// Snapshot the published tables, then stream (the default).
    #[default]
    Initial,
    /// Stream from the slot's position, without a snapshot.
    Latest,
    /// Snapshot, then stop; a slot pgcdc created for it is dropped.
    SnapshotOnly,
    /// Stream from `source.start_lsn`, without a snapshot.
    FromLsn,
}

impl StartupMode {
    /// Whether the mode takes a snapshot.
    pub fn snapshots(self) -> bool {
        matches!(self, StartupMode::Initial | StartupMode::SnapshotOnly)
    }
}

/// Settings of the initial snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Rows per chunk.
    pub chunk_size: u64,
    /// Chunks read at once, each on its own connection.
    pub readers: usize,
    /// How often progress is logged.
    pub log_interval: Duration,
    /// What to do with a table that cannot be read.
    pub on_unreadable: OnUnreadable,
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        SnapshotOptions {
            chunk_size: DEFAULT_CHUNK_SIZE,
            readers: DEFAULT_READERS,
            log_interval: Duration::from_secs(5),
            on_unreadable: OnUnreadable::Stop,
        }
    }
}

/// Why the snapshot failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// A query of a chunk reader failed.
    #[error("snapshot query: {}", crate::pg_error::describe(.0))]
    Query(#[from] tokio_postgres::Error),
    /// The reader connection could not be set up.
    #[error("snapshot connection: {0}")]
    Connect(String),
    /// A row of a chunk could not be parsed.
    #[error("snapshot of {table}: {reason}")]
    Row {
        /// `schema.table`
        table: String,
        /// What was wrong.
        reason: String,
    },
    /// A stored snapshot cursor could not be read.
    #[error("the checkpoint's snapshot progress is not readable: {0}")]
    Cursor(String),
    /// The stream and the readers disagree (a bug, or a foreign watermark).
    #[error("snapshot merge: {0}")]
    Merge(String),
    /// The replication connection of the no-key fallback failed.
    #[error("snapshot of tables without a key: {0}")]
    Replication(#[from] crate::replication::ReplicationError),
    /// The readers stopped unexpectedly.
    #[error("the snapshot readers stopped")]
    ReadersStopped,
    /// A table to read cannot be read.
    #[error("cannot snapshot {table}: {reason}; {fix}, or set snapshot.on_unreadable_table = \"warn\" to go on without its existing rows")]
    Unreadable {
        /// `schema.table`
        table: String,
        /// Why.
        reason: String,
        /// What makes it readable.
        fix: String,
    },
}

impl SnapshotError {
    /// Whether starting the readers again may help: the connection was
    /// lost or could not be made (a server restart, a network failure), or
    /// the server reported a transient error (see [`cdc_core::fault`]).
    pub fn is_transient(&self) -> bool {
        match self {
            // The one fault policy: a lost connection, a server shutting
            // down or starting, overload, ... (see `cdc_core::fault`).
            SnapshotError::Query(e) => crate::pg_error::fault(e).is_transient(),
            SnapshotError::Replication(e) => e.is_transient(),
            _ => false,
        }
    }
}

/// Where the initial snapshot of a running pipeline stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SnapshotState {
    /// The pipeline takes no snapshot.
    #[default]
    None,
    /// Tables are being read.
    Running,
    /// Every table has been emitted.
    Complete,
}

/// What a pipeline needs to take the initial snapshot.
#[derive(Debug, Clone)]
pub struct SnapshotPlan {
    /// The published tables (from [`published_tables`]).
    pub tables: Vec<SnapshotTable>,
    /// How readers connect to the source (ordinary connections are made
    /// with the same host, credentials and TLS settings).
    pub replication: crate::replication::ReplicationConfig,
    /// Chunk size, readers.
    pub options: SnapshotOptions,
    /// Whether published tables that no checkpoint records as read are
    /// read (`false`: they are taken as they are, and recorded so).
    pub read_unrecorded: bool,
    /// Whether a table that appears in the publication while the job runs
    /// (a new table of a published schema) is read.
    pub read_new_tables: bool,
    /// Tables the job's role may not `SELECT` (by oid).
    pub unreadable: Vec<cdc_core::Oid>,
}

impl SnapshotPlan {
    /// A plan reading `tables` (those not recorded as read), new tables
    /// too, stopping at a table that cannot be read.
    pub fn new(
        tables: Vec<SnapshotTable>,
        replication: crate::replication::ReplicationConfig,
        options: SnapshotOptions,
    ) -> Self {
        SnapshotPlan {
            tables,
            replication,
            options,
            read_unrecorded: true,
            read_new_tables: true,
            unreadable: Vec::new(),
        }
    }
}

/// What the job does with a table it cannot snapshot (no `SELECT`
/// privilege; a table without a key that appeared while the job runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnUnreadable {
    /// Stop with an error that names the table and the fix (the default).
    #[default]
    Stop,
    /// Log a warning, record the table as skipped, and go on.
    Warn,
}
