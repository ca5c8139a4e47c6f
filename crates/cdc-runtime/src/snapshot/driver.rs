//! The pipeline's side of the snapshot: feeds watermarks and changes to the
//! [`Merger`], turns merged chunks into `r` events, and keeps the progress
//! that checkpoints record.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use checkpoint_api::{SnapshotProgress, SnapshotRequest, TableCursor, TableDone, TableRef};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};
use tokio::task::JoinSet;

use super::catalog::SnapshotTable;
use super::key::RowKey;
use super::merge::{ChunkId, Merger};
use super::progress::{Display, TableProgress};
use super::reader::{self, KeyRange, PlanCursor, Start, ToSource};
use super::{OnUnreadable, SnapshotError, SnapshotOptions};
use crate::event::{ChunkMarks, Row, TableSchema};
use crate::replication::ReplicationConfig;
use crate::tls_connect::PgClientSettings;

mod consistent_read;
mod requests;
mod resume;
mod stream;

use consistent_read::Fallback;
use stream::StreamTable;

/// A merged chunk: its table's event schema, the rows to emit and how to
/// mark them.
pub(crate) type MergedChunk = (Arc<TableSchema>, Vec<Row>, ChunkMarks);

/// A chunk started and not yet emitted (or emitted in the open transaction).
struct Chunk {
    table: usize,
    range: KeyRange,
    _permit: OwnedSemaphorePermit,
    rows: u64,
    /// Rows emitted (after the merge), once it was.
    emitted_rows: u64,
}

/// The snapshot as the pipeline runs it.
pub(crate) struct Snapshot {
    /// Whether a table that appears while the job runs is read.
    pub(crate) read_new_tables: bool,
    /// What to do with a table that cannot be read.
    pub(crate) on_unreadable: OnUnreadable,
    /// Every published table the snapshot knows of (requests name these).
    catalog: Vec<SnapshotTable>,
    /// The oids of `catalog`.
    known: std::collections::HashSet<cdc_core::Oid>,
    /// The keyed tables to read, in order: those of the initial snapshot
    /// not read yet, then the requests.
    tables: Arc<Vec<SnapshotTable>>,
    /// `tables.len()` when the readers were started: they read up to here,
    /// and readers for tables added later start when they are done.
    generation_end: usize,
    /// Tables without a key, not done yet.
    fallback_tables: Arc<Vec<SnapshotTable>>,
    fallback: Fallback,
    replication: ReplicationConfig,
    settings: PgClientSettings,
    options: SnapshotOptions,
    merger: Merger<usize, RowKey, Row>,
    tx: mpsc::UnboundedSender<ToSource>,
    rx: mpsc::UnboundedReceiver<ToSource>,
    readers: JoinSet<Result<(), SnapshotError>>,
    token: Arc<str>,
    next_chunk: ChunkId,
    chunks: HashMap<ChunkId, Chunk>,
    /// Chunks emitted in the open transaction: done at its commit.
    emitted: Vec<ChunkId>,
    /// Ranges to read again that no reader has started yet.
    redo: Vec<KeyRange>,
    /// The first table not done (tables without a key are skipped).
    table: usize,
    cursor: PlanCursor,
    planned_all: bool,
    chunks_done: u64,
    rows_done: u64,
    tables_done: Vec<TableDone>,
    /// The newest answered requests (at most [`REQUESTS_KEPT`]).
    requests_done: Vec<TableDone>,
    done_tx: watch::Sender<usize>,
    /// Per stream schema: which snapshot table it is.
    stream_keys: HashMap<usize, (Arc<TableSchema>, usize, StreamTable)>,
    started_at: Instant,
    display: Display,
    rows_total: u64,
    /// Metrics, when monitored.
    pub(crate) monitor: Option<crate::monitor::Monitor>,
    /// `tables[..initial]` is the initial snapshot (less its requests);
    /// tables after it are read on demand.
    initial: usize,
    /// Whether the initial snapshot starts from the beginning (no
    /// checkpoint recorded progress), so its first row is the first read.
    fresh: bool,
    /// What identifies the initial snapshot across restarts (its reads'
    /// [`Position::read_epoch`](crate::event::Position::read_epoch)): the
    /// one the resumed checkpoint recorded, else that checkpoint's
    /// position, else where the slot stood at the start (see
    /// [`set_epoch`](Self::set_epoch)).
    epoch: cdc_core::Lsn,
    /// Rows of the current table emitted in committed transactions.
    table_emitted: u64,
    /// `rows_done` as last counted in the metrics.
    rows_reported: u64,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("table", &self.table)
            .field("chunks_in_flight", &self.chunks.len())
            .field("tables_done", &self.tables_done.len())
            .finish()
    }
}

/// Answered requests a checkpoint keeps, for status output.
const REQUESTS_KEPT: usize = 20;

fn table_ref(t: &SnapshotTable) -> TableRef {
    TableRef {
        schema: t.schema.clone(),
        name: t.name.clone(),
    }
}

impl Snapshot {
    fn log_start(&self) {
        let names: Vec<_> = self
            .tables
            .iter()
            .map(SnapshotTable::display_name)
            .collect();
        tracing::info!(tables = ?names, done = self.tables_done.len(), chunk_size = self.options.chunk_size,
            readers = self.options.readers, resumed_chunks = self.chunks_done, "initial snapshot");
    }

    /// Whether every table has been emitted.
    pub(crate) fn is_complete(&self) -> bool {
        self.keyed_complete() && matches!(self.fallback, Fallback::Done)
    }

    /// Whether the snapshot knows what identifies it across restarts (see
    /// [`Position::read_epoch`](crate::event::Position::read_epoch)).
    pub(crate) fn has_epoch(&self) -> bool {
        self.epoch != cdc_core::Lsn::INVALID
    }

    /// Sets what identifies the snapshot across restarts, unless a
    /// checkpoint did: where the slot stood when the job started without
    /// one (it stays there until the first checkpoint).
    pub(crate) fn set_epoch(&mut self, at: cdc_core::Lsn) {
        if self.epoch == cdc_core::Lsn::INVALID {
            self.epoch = at;
        }
    }

    /// Whether every table with a key has been emitted.
    fn keyed_complete(&self) -> bool {
        self.table >= self.tables.len()
    }

    fn log_complete(&self) {
        tracing::info!(
            tables = self.tables_done.len(),
            rows = self.rows_total,
            seconds = self.started_at.elapsed().as_secs_f64(),
            "snapshot complete"
        );
    }

    fn spawn_readers(&mut self) {
        self.generation_end = self.tables.len();
        self.token = Arc::from(format!("{:016x}", random_u64()));
        let start = Start {
            table: self.table,
            cursor: PlanCursor {
                next: self.cursor.next.clone(),
                exhausted: self.cursor.exhausted,
                redo: self.redo.clone(),
            },
            token: self.token.clone(),
            first_chunk: self.next_chunk,
        };
        self.planned_all = false;
        self.readers = reader::spawn(
            self.replication.clone(),
            self.settings.clone(),
            self.tables.clone(),
            start,
            &self.options,
            self.tx.clone(),
            self.done_tx.subscribe(),
        );
    }

    /// Waits for a reader to fail (pending while they work or after they
    /// all finished).
    pub(crate) async fn failed(&mut self) -> SnapshotError {
        loop {
            let fallback = async {
                match &mut self.fallback {
                    Fallback::Running {
                        task: task @ Some(_),
                        ..
                    } => {
                        let joined = match task.as_mut() {
                            Some(t) => t.await,
                            None => return std::future::pending().await,
                        };
                        *task = None;
                        joined
                    }
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                joined = self.readers.join_next(), if !self.readers.is_empty() => match joined {
                    Some(Ok(Ok(()))) | None => continue,
                    Some(Ok(Err(e))) => return e,
                    Some(Err(_)) => return SnapshotError::ReadersStopped,
                },
                joined = fallback => match joined {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => return e,
                    Err(_) => return SnapshotError::ReadersStopped,
                },
            }
        }
    }

    /// Takes what the readers sent so far.
    fn drain(&mut self) -> Result<(), SnapshotError> {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                ToSource::Started {
                    chunk,
                    table,
                    range,
                    cursor,
                    permit,
                } => {
                    self.next_chunk = self.next_chunk.max(chunk + 1);
                    if table != self.table {
                        return Err(SnapshotError::Merge(format!(
                            "chunk {chunk} of table #{table} while table #{} is read",
                            self.table
                        )));
                    }
                    if self.redo.first() == Some(&range) {
                        self.redo.remove(0);
                    }
                    self.cursor.next = cursor.next;
                    self.cursor.exhausted = cursor.exhausted;
                    self.merger
                        .start(chunk, table)
                        .map_err(|e| SnapshotError::Merge(e.to_string()))?;
                    self.chunks.insert(
                        chunk,
                        Chunk {
                            table,
                            range,
                            _permit: permit,
                            rows: 0,
                            emitted_rows: 0,
                        },
                    );
                }
                ToSource::Rows { chunk, rows } => {
                    if let Some(c) = self.chunks.get_mut(&chunk) {
                        c.rows = rows.len() as u64;
                    }
                    self.merger
                        .rows(chunk, rows)
                        .map_err(|e| SnapshotError::Merge(e.to_string()))?;
                }
                ToSource::TablePlanned { table } => {
                    if table == self.table {
                        self.planned_all = true;
                    }
                }
            }
        }
        Ok(())
    }

    /// Moves on while the current table is fully planned and emitted.
    fn finish_tables(&mut self) {
        let _ = self.drain();
        while self.planned_all
            && self.redo.is_empty()
            && !self.chunks.values().any(|c| c.table == self.table)
        {
            let Some(t) = self.tables.get(self.table) else {
                break;
            };
            let done = TableDone {
                table: table_ref(t),
                chunks: self.chunks_done,
                rows: self.rows_done,
                oid: t.oid,
                request_id: t.request.as_ref().map(|r| r.id.clone()),
                skipped: false,
            };
            let name = t.display_name();
            self.log_progress(true);
            if done.request_id.is_some() {
                tracing::info!(table = %name, request = ?done.request_id, rows = done.rows, "snapshot request done");
                self.requests_done.push(done);
                let excess = self.requests_done.len().saturating_sub(REQUESTS_KEPT);
                self.requests_done.drain(..excess);
            } else {
                self.tables_done.push(done);
            }
            self.table += 1;
            self.table_emitted = 0;
            self.cursor = PlanCursor::default();
            self.planned_all = false;
            self.chunks_done = 0;
            self.rows_done = 0;
            self.rows_reported = 0;
            self.done_tx.send_replace(self.table);
            // Tables added after the readers started get readers of their own.
            if self.table == self.generation_end && self.table < self.tables.len() {
                self.spawn_readers();
            }
            if self.is_complete() {
                self.log_complete();
            } else if let Some(t) = self.tables.get(self.table) {
                tracing::info!(table = %t.display_name(), "snapshot: reading table");
            }
            let _ = self.drain();
        }
        self.maybe_start_fallback();
    }

    fn log_progress(&mut self, finished: bool) {
        let Some(t) = self.tables.get(self.table) else {
            return;
        };
        let secs = self.started_at.elapsed().as_secs_f64().max(1e-3);
        let name = t.display_name();
        let p = TableProgress {
            table: &name,
            rows: self.rows_done,
            chunks: self.chunks_done,
            estimate: t.estimated_rows,
            rate: self.rows_total as f64 / secs,
        };
        self.display.show(&p, finished);
        if let Some(m) = &self.monitor {
            let label = crate::monitor::TableLabel {
                table: name.clone(),
            };
            let counter = m.metrics.snapshot_rows.get_or_create(&label);
            counter.inc_by(self.rows_done.saturating_sub(self.rows_reported));
            self.rows_reported = self.rows_done;
            let ratio = match (finished, t.estimated_rows) {
                (true, _) => 1.0,
                (false, Some(e)) if e > 0 => (self.rows_done as f64 / e as f64).min(0.99),
                _ => 0.0,
            };
            m.metrics.snapshot_progress.get_or_create(&label).set(ratio);
            m.health.snapshot_table(crate::monitor::SnapshotEntry {
                table: name.clone(),
                rows: self.rows_done,
                ratio,
            });
        }
    }

    /// The stream restarted: the chunks being read are read again, by new
    /// readers (their old watermarks are ignored).
    pub(crate) fn restart(&mut self) {
        self.readers.abort_all();
        let _ = self.drain();
        let _ = self.merger.abandon_all();
        self.emitted.clear();
        let mut redo = self.in_flight_ranges();
        redo.append(&mut self.redo);
        self.redo = redo;
        self.chunks.clear();
        // Drop what the old readers had queued (and their permits).
        while self.rx.try_recv().is_ok() {}
        if !self.keyed_complete() {
            self.spawn_readers();
        }
        // A consistent read starts over from a new temporary slot.
        if let Fallback::Running { task, .. } = &mut self.fallback {
            if let Some(t) = task.take() {
                t.abort();
            }
            self.fallback = Fallback::Idle;
        }
        self.maybe_start_fallback();
    }

    /// The ranges of the chunks started and not done, in planning order.
    fn in_flight_ranges(&self) -> Vec<KeyRange> {
        let mut ids: Vec<_> = self.chunks.keys().copied().collect();
        ids.sort_unstable();
        ids.iter()
            .filter_map(|id| self.chunks.get(id))
            .map(|c| c.range.clone())
            .collect()
    }

    /// The progress a checkpoint records: what has been emitted in
    /// committed transactions, and the chunks to read again after a crash.
    pub(crate) fn progress(&self) -> SnapshotProgress {
        let in_progress = self.tables.get(self.table).map(|t| {
            let mut redo = self.in_flight_ranges();
            redo.extend(self.redo.iter().cloned());
            let cursor = PlanCursor {
                next: self.cursor.next.clone(),
                exhausted: self.cursor.exhausted,
                redo,
            };
            TableCursor {
                table: table_ref(t),
                chunks_done: self.chunks_done,
                rows_done: self.rows_done,
                cursor: Bytes::from(serde_json::to_vec(&cursor).unwrap_or_default()),
                request_id: t.request.as_ref().map(|r| r.id.clone()),
            }
        });
        let requests = self.tables[self.table.min(self.tables.len())..]
            .iter()
            .filter_map(|t| {
                let r = t.request.as_ref()?;
                Some(SnapshotRequest {
                    id: r.id.clone(),
                    table: table_ref(t),
                    filter: r.filter.clone(),
                    lsn: r.lsn,
                })
            })
            .collect();
        SnapshotProgress {
            // The chunked snapshot has no exported consistent point: the
            // field keeps the snapshot's epoch.
            consistent_point: self.epoch,
            tables_done: self.tables_done.clone(),
            in_progress,
            complete: self.is_complete(),
            requests,
            requests_done: self.requests_done.clone(),
        }
    }
}

/// A random number from std's randomly keyed hasher.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}
