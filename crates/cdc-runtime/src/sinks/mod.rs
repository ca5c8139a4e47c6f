//! Sinks: where change events go.
//!
//! A [`Sink`] takes batches of [`ChangeEvent`]s. The contract a pipeline can
//! rely on:
//!
//! * [`write`](Sink::write) accepts a batch (it may buffer it). Batches are
//!   written in call order and events in batch order.
//! * [`flush`](Sink::flush) returns `Ok` only when everything written before
//!   it is durable (fsynced, committed, or handed to the OS for stdout). Only
//!   then may the source confirm the LSNs of those events to the server.
//! * [`close`](Sink::close) flushes and releases resources; a closed sink
//!   rejects further writes with [`SinkError::Closed`].
//! * After an error the sink's state is unknown: drop it, open a new one and
//!   replay from the last flushed position. Every sink here tolerates replays
//!   (files get duplicate lines that `(commit_lsn, index)` identifies; the
//!   PostgreSQL sink is idempotent).
//! * [`reset`](Sink::reset) does the same in place: it discards what was not
//!   flushed (for a sink that [commits checkpoints](Sink::commits_checkpoints),
//!   what no committed checkpoint covers) and reconnects or reopens, and the
//!   caller replays from the last flushed position. A sink that cannot
//!   (the default) returns [`SinkError::ResetUnsupported`].
//!
//! # Errors: transient or permanent
//!
//! [`SinkError::fault`] sorts every error by the one fault policy of
//! [`cdc_core::fault`]: a transient error (a lost connection, the target
//! restarting, a deadlock, an IO error) is retried by the pipeline's sink
//! task with backoff, [`reset`](Sink::reset) and a replay, without stopping
//! replication; a permanent one (bad data, a missing table or key, a
//! constraint violation) stops the job, and says which table, commit LSN
//! and event failed where the sink knows it ([`SinkError::Event`]).
//!
//! Sinks are `Send`, so a pipeline can own one in a tokio task:
//!
//! ```
//! use cdc_runtime::sinks::{NullSink, Sink};
//! # async fn run(batches: Vec<Vec<cdc_runtime::event::ChangeEvent>>) -> Result<(), cdc_runtime::sinks::SinkError> {
//! let mut sink: Box<dyn Sink> = Box::new(NullSink::new());
//! let task = tokio::spawn(async move {
//!     for batch in batches {
//!         sink.write(&batch).await?;
//!         sink.flush().await?;
//!     }
//!     sink.close().await
//! });
//! # task.await.ok(); Ok(()) }
//! ```

mod file;
mod lines;
pub mod nats;
mod null;
mod open;
mod postgres;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use checkpoint_api::{Checkpoint, CheckpointError, CheckpointMeta, Lease};

use crate::event::ChangeEvent;

pub use file::{FileSink, FileSinkOptions, DEFAULT_PAGE_CACHE_BYTES};
pub use lines::{JsonLinesSink, StdoutSink};
pub use nats::{NatsSink, NatsSinkOptions};
pub use null::NullSink;
pub use open::{open_sink, PostgresSinkOptions, SinkOptions};
pub use postgres::{DroppedColumns, PgTableSink, PgTableSinkOptions, TableName};

/// A destination for change events. See the [module docs](self) for the contract.
#[async_trait::async_trait]
pub trait Sink: Send {
    /// Accepts a batch of events (possibly buffering them).
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError>;

    /// Returns once everything written so far is durable.
    async fn flush(&mut self) -> Result<(), SinkError>;

    /// Flushes and releases the sink.
    async fn close(&mut self) -> Result<(), SinkError>;

    /// Whether this sink commits checkpoints in the same transaction as its
    /// writes ([`commit_checkpoint`](Self::commit_checkpoint)). A pipeline
    /// with checkpoints then hands every checkpoint to it instead of saving
    /// through the store; its writes become durable only with a checkpoint,
    /// and [`close`](Self::close) discards what no checkpoint covers.
    fn commits_checkpoints(&self) -> bool {
        false
    }

    /// Commits `checkpoint` (retaining the newest `keep`) together with
    /// everything written since the last one, in one transaction: both or
    /// neither. On an error both are rolled back. Only called when
    /// [`commits_checkpoints`](Self::commits_checkpoints) is true.
    async fn commit_checkpoint(
        &mut self,
        checkpoint: &Checkpoint,
        lease: &Lease,
        keep: usize,
    ) -> Result<CheckpointMeta, CheckpointError> {
        let _ = (checkpoint, lease, keep);
        Err(CheckpointError::Backend {
            message: "this sink does not commit checkpoints".into(),
            source: None,
        })
    }

    /// Whether [`reset`](Self::reset) can work. A sink that cannot reset
    /// is not retried (its task keeps no batches for a replay): it stops on
    /// its first error.
    fn can_reset(&self) -> bool {
        false
    }

    /// After an error: discards everything not yet flushed (with
    /// [`commits_checkpoints`](Self::commits_checkpoints), everything no
    /// committed checkpoint covers) and reconnects or reopens, so that the
    /// caller can replay from the last flushed position (or the last
    /// committed checkpoint) and go on with the same sink. Returns an error
    /// if the sink cannot be used again yet (a transient one: try later).
    ///
    /// The default cannot reset ([`can_reset`](Self::can_reset) is false) and returns
    /// [`SinkError::ResetUnsupported`]: the pipeline then stops on the error
    /// and the job resumes from its last checkpoint, as before.
    async fn reset(&mut self) -> Result<(), SinkError> {
        Err(SinkError::ResetUnsupported)
    }

    /// Records the destination dropped as repeats of ones it already held
    /// (a replay after a restart or an error), since the sink was opened;
    /// 0 for a sink that cannot tell. Exported as
    /// `pgcdc_sink_duplicates_dropped_total`.
    fn duplicates_dropped(&self) -> u64 {
        0
    }
}

#[async_trait::async_trait]
impl<S: Sink + ?Sized> Sink for Box<S> {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        (**self).write(batch).await
    }
    async fn flush(&mut self) -> Result<(), SinkError> {
        (**self).flush().await
    }
    async fn close(&mut self) -> Result<(), SinkError> {
        (**self).close().await
    }
    fn commits_checkpoints(&self) -> bool {
        (**self).commits_checkpoints()
    }
    async fn commit_checkpoint(
        &mut self,
        checkpoint: &Checkpoint,
        lease: &Lease,
        keep: usize,
    ) -> Result<CheckpointMeta, CheckpointError> {
        (**self).commit_checkpoint(checkpoint, lease, keep).await
    }
    fn can_reset(&self) -> bool {
        (**self).can_reset()
    }
    async fn reset(&mut self) -> Result<(), SinkError> {
        (**self).reset().await
    }
    fn duplicates_dropped(&self) -> u64 {
        (**self).duplicates_dropped()
    }
}

/// Why a sink failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// An IO error on a file or stream.
    #[error("{what} {}: {source}", path.as_ref().map_or(String::new(), |p| p.display().to_string()))]
    Io {
        /// What the sink was doing.
        what: &'static str,
        /// The file, if any.
        path: Option<PathBuf>,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A sink operation did not finish in time (a target that stopped
    /// answering without closing the connection, a stalled disk).
    #[error("{what} did not finish within {} s; retrying (pipeline.sink_timeout_secs sets the limit)", after.as_secs_f64())]
    Timeout {
        /// What the sink was doing.
        what: &'static str,
        /// The limit.
        after: std::time::Duration,
    },
    /// The target database failed.
    #[error("target database: {}", crate::pg_error::describe(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// A table has no key columns (replica identity), so changes cannot be
    /// applied by key. Configure key columns for it.
    #[error("{schema}.{table} has no key columns to apply changes by")]
    NoKey {
        /// Source schema.
        schema: Arc<str>,
        /// Source table.
        table: Arc<str>,
    },
    /// A value cannot be sent to the target (a binary value of an unknown type).
    #[error("{schema}.{table}.{column}: cannot write a {type_name} value to the target")]
    Unrepresentable {
        /// Source schema.
        schema: Arc<str>,
        /// Source table.
        table: Arc<str>,
        /// Column.
        column: Arc<str>,
        /// Type name of the value.
        type_name: &'static str,
    },
    /// An event the sink cannot apply (e.g. a row change with no row).
    #[error("malformed event: {0}")]
    Malformed(&'static str),
    /// The sink was closed.
    #[error("the sink is closed")]
    Closed,
    /// A checkpoint could not be committed with the sink's writes; both
    /// were rolled back, so the job must resume from the previous checkpoint.
    #[error("committing a checkpoint with the writes since the last one: {0}")]
    Checkpoint(String),
    /// The sink cannot commit checkpoints with its writes.
    #[error("cannot commit checkpoints with the sink's writes: {0}")]
    NotCommitting(String),
    /// The target connection string cannot be used.
    #[error("target connection settings: {0}")]
    Config(#[from] crate::replication::ConfigError),
    /// The TLS settings of the target connection cannot be used.
    #[error("target connection: {0}")]
    Tls(#[from] crate::replication::TlsError),
    /// Applying one event failed: which table, transaction and event.
    #[error("applying {op} of {table} (commit LSN {commit_lsn}, event {index} of the transaction): {source}")]
    Event {
        /// `schema.table` of the source.
        table: String,
        /// The commit LSN of the event's transaction.
        commit_lsn: cdc_core::Lsn,
        /// The event's index within its transaction.
        index: u32,
        /// The operation (`insert`, `update`, ...).
        op: &'static str,
        /// What failed.
        #[source]
        source: Box<SinkError>,
    },
    /// The target cannot follow a schema change of the source: which
    /// table and change, why, and what to do.
    #[error("cannot apply {change} of {table} to the target: {reason}. Fix: {fix}")]
    SchemaChange {
        /// `schema.table` of the target.
        table: String,
        /// The change (`add_column "c"`, ...).
        change: String,
        /// Why it cannot be applied.
        reason: String,
        /// What to do.
        fix: String,
    },
    /// The NATS sink failed.
    #[error(transparent)]
    Nats(#[from] nats::NatsError),
    /// The sink cannot [`reset`](Sink::reset) after an error.
    #[error("the sink cannot reset after an error")]
    ResetUnsupported,
    /// Transient errors persisted through every retry.
    #[error("giving up after {attempts} consecutive transient failures: {last}")]
    RetriesExhausted {
        /// Consecutive failures.
        attempts: u32,
        /// The last error.
        #[source]
        last: Box<SinkError>,
    },
}

impl SinkError {
    /// The error under the one fault policy ([`cdc_core::fault`]): IO
    /// errors and lost connections are transient, target errors by their
    /// SQLSTATE (a deadlock or serialization failure, the server shutting
    /// down or overloaded: transient; bad data, constraints, missing tables
    /// or privileges: permanent); everything else (no key, a value that
    /// cannot be written, a malformed event, settings, a closed sink) is
    /// permanent. A failed checkpoint commit is judged by the sink task
    /// from its [`CheckpointError`] before it becomes
    /// [`SinkError::Checkpoint`], which is permanent.
    pub fn fault(&self) -> cdc_core::Fault {
        use cdc_core::Fault;
        match self {
            SinkError::Io { .. } | SinkError::Timeout { .. } => Fault::Transient,
            SinkError::Postgres(e) => crate::pg_error::fault(e),
            SinkError::Nats(e) if e.transient => Fault::Transient,
            SinkError::Nats(_) => Fault::Permanent,
            SinkError::Event { source, .. } => source.fault(),
            SinkError::NoKey { .. }
            | SinkError::Unrepresentable { .. }
            | SinkError::Malformed(_)
            | SinkError::Closed
            | SinkError::Checkpoint(_)
            | SinkError::NotCommitting(_)
            | SinkError::Config(_)
            | SinkError::Tls(_)
            | SinkError::ResetUnsupported
            | SinkError::SchemaChange { .. }
            | SinkError::RetriesExhausted { .. } => Fault::Permanent,
        }
    }

    /// Whether a file system is full (`ENOSPC`, `EDQUOT`): transient, and
    /// retried for as long as it lasts, since freeing space is up to the
    /// operator.
    pub fn is_disk_full(&self) -> bool {
        match self {
            SinkError::Io { source, .. } => crate::disk_full::is_disk_full(source),
            SinkError::Event { source, .. } => source.is_disk_full(),
            _ => false,
        }
    }

    /// Whether retrying (after [`Sink::reset`], or with a fresh sink) may
    /// succeed: [`fault`](Self::fault) is transient.
    pub fn is_retryable(&self) -> bool {
        self.fault().is_transient()
    }

    /// `self`, saying that it happened while applying `ev`.
    pub(crate) fn at(self, ev: &ChangeEvent) -> Self {
        SinkError::Event {
            table: match &ev.table {
                Some(t) => format!("{}.{}", t.schema, t.table),
                None => "a message".to_owned(),
            },
            commit_lsn: ev.source.commit_lsn,
            index: ev.index,
            op: ev.op.name(),
            source: Box::new(self),
        }
    }

    pub(crate) fn io(what: &'static str, path: Option<PathBuf>, source: io::Error) -> Self {
        SinkError::Io { what, path, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ColumnSchema, Operation, SourceInfo, TableSchema};

    #[test]
    fn an_event_error_names_the_table_position_and_operation_and_keeps_the_fault() {
        let table = TableSchema {
            facts: Default::default(),
            oid: 1,
            schema: "public".into(),
            table: "orders".into(),
            columns: Vec::<ColumnSchema>::new(),
        };
        let ev = ChangeEvent {
            op: Operation::Update,
            table: Some(Arc::new(table)),
            before: None,
            after: None,
            message: None,
            schema_change: None,
            source: SourceInfo {
                commit_lsn: "0/16B3748".parse().unwrap(),
                lsn: cdc_core::Lsn::from_u64(1),
                xid: 7,
                commit_time: None,
                database: "d".into(),
                slot: "s".into(),
            },
            index: 3,
            position: Default::default(),
            boundary: None,
        };
        let e = SinkError::Malformed("upsert without a row").at(&ev);
        let text = e.to_string();
        assert!(text.contains("public.orders"), "{text}");
        assert!(text.contains("0/16B3748"), "{text}");
        assert!(text.contains("event 3"), "{text}");
        assert!(text.contains(Operation::Update.name()), "{text}");
        assert!(!e.is_retryable());
        let io = SinkError::io("writing", None, io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(io.at(&ev).is_retryable());
    }
}
