//! The consistent read of the tables without a key: started once the keyed
//! tables are done, read by a task of its own (see
//! [`crate::snapshot::fallback`]), and emitted by the pipeline as one unit
//! before the first transaction at or after its consistent point.

use std::sync::Arc;

use cdc_core::Lsn;
use checkpoint_api::TableDone;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::super::fallback::{self, FromFallback};
use super::super::SnapshotError;
use super::{random_u64, table_ref, Snapshot};
use crate::event::TableSchema;

/// The consistent read of the tables without a key.
pub(super) enum Fallback {
    /// Not started (it starts once the keyed tables are done).
    Idle,
    Running {
        rx: mpsc::Receiver<FromFallback>,
        task: Option<JoinHandle<Result<(), SnapshotError>>>,
        point: Option<Lsn>,
    },
    Done,
}

impl Snapshot {
    /// Starts the consistent read of the tables without a key once the
    /// keyed tables are done.
    pub(super) fn maybe_start_fallback(&mut self) {
        if !self.keyed_complete() || !matches!(self.fallback, Fallback::Idle) {
            return;
        }
        let (tx, rx) = mpsc::channel(4);
        let task = tokio::spawn(fallback::run(
            self.replication.clone(),
            self.settings.clone(),
            self.fallback_tables.clone(),
            Arc::from(format!("{:016x}", random_u64())),
            tx,
        ));
        self.fallback = Fallback::Running {
            rx,
            task: Some(task),
            point: None,
        };
    }

    /// Whether the rows of the tables without a key are being read (and
    /// must be emitted at the consistent point).
    pub(crate) fn fallback_running(&self) -> bool {
        matches!(self.fallback, Fallback::Running { .. })
    }

    /// The next message of the fallback reader.
    pub(crate) async fn fallback_next(&mut self) -> Result<FromFallback, SnapshotError> {
        let Fallback::Running { rx, task, point } = &mut self.fallback else {
            return Err(SnapshotError::Merge("no consistent read is running".into()));
        };
        match rx.recv().await {
            Some(msg) => {
                if let FromFallback::Point(p) = &msg {
                    *point = Some(*p);
                }
                Ok(msg)
            }
            None => Err(match task.take() {
                Some(t) => match t.await {
                    Ok(Err(e)) => e,
                    _ => SnapshotError::ReadersStopped,
                },
                None => SnapshotError::ReadersStopped,
            }),
        }
    }

    /// The consistent point, once the fallback reader reported it.
    pub(crate) fn fallback_point(&self) -> Option<Lsn> {
        match &self.fallback {
            Fallback::Running { point, .. } => *point,
            _ => None,
        }
    }

    /// The event schema of fallback table `i`.
    pub(crate) fn fallback_schema(&self, i: usize) -> Result<Arc<TableSchema>, SnapshotError> {
        self.fallback_tables
            .get(i)
            .map(|t| t.event_schema.clone())
            .ok_or_else(|| SnapshotError::Merge(format!("no table without a key #{i}")))
    }

    /// Fallback table `i` has been emitted completely.
    pub(crate) fn fallback_table_done(&mut self, i: usize, rows: u64) {
        if let Some(t) = self.fallback_tables.get(i) {
            tracing::info!(table = %t.display_name(), rows, "snapshot: table read (consistent read)");
            self.rows_total += rows;
            self.tables_done.push(TableDone {
                table: table_ref(t),
                chunks: 1,
                rows,
                oid: t.oid,
                ..TableDone::default()
            });
        }
    }

    /// Every fallback table has been emitted.
    pub(crate) fn fallback_finished(&mut self) {
        self.fallback = Fallback::Done;
        if self.is_complete() {
            self.log_complete();
        }
    }
}
