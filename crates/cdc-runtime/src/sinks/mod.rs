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
mod null;
mod open;
mod postgres;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use checkpoint_api::{Checkpoint, CheckpointError, CheckpointMeta, Lease};

use crate::event::ChangeEvent;

pub use file::{FileSink, FileSinkOptions};
pub use lines::{JsonLinesSink, StdoutSink};
pub use null::NullSink;
pub use open::{open_sink, PostgresSinkOptions, SinkOptions};
pub use postgres::{PgTableSink, PgTableSinkOptions, TableName};

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
}

impl SinkError {
    /// Whether retrying with a fresh sink may succeed (IO and connection
    /// failures, serialization failures and deadlocks) as opposed to errors
    /// that will recur (bad data, missing keys, schema mismatches).
    pub fn is_retryable(&self) -> bool {
        match self {
            SinkError::Io { .. } => true,
            SinkError::Postgres(e) => match e.code() {
                None => true,
                Some(code) => {
                    let c = code.code();
                    // 08: connection exception; 40: transaction rollback
                    // (serialization failure, deadlock); 53: insufficient
                    // resources; 57P01..03: admin shutdown, crash, cannot connect now.
                    c.starts_with("08")
                        || c.starts_with("40")
                        || c.starts_with("53")
                        || c.starts_with("57P")
                }
            },
            _ => false,
        }
    }

    pub(crate) fn io(what: &'static str, path: Option<PathBuf>, source: io::Error) -> Self {
        SinkError::Io { what, path, source }
    }
}
