//! The stream's side of the snapshot: watermark messages (a low one opens
//! a chunk's window, a high one closes it and hands over the chunk's
//! remaining rows), changes to tables being read (they replace the chunk's
//! rows with the same key, and with checkpoints changes to keyless tables
//! are held back), and commits, at which emitted chunks are done.

use std::sync::Arc;

use super::super::catalog::SnapshotTable;
use super::super::key::RowKey;
use super::super::merge::{ChunkId, HighWatermark};
use super::super::{SnapshotError, WATERMARK_PREFIX};
use super::{Fallback, MergedChunk, Snapshot};
use crate::event::{ChangeEvent, ChunkMarks, Operation, Row, TableSchema};

/// A table of the stream, as the snapshot sees it.
#[derive(Debug, Clone)]
pub(super) enum StreamTable {
    /// A keyed table (index into `tables`) and its key columns in the
    /// stream's column order.
    Keyed(usize, Vec<usize>),
    /// A table without a key whose consistent read has not been emitted.
    Keyless,
    /// Not read by the snapshot.
    Other,
}

/// What a watermark message meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Low(ChunkId),
    High(ChunkId),
}

impl Snapshot {
    /// A watermark of this run, from a message's prefix and content.
    fn parse_mark(&self, prefix: &str, content: &[u8]) -> Option<Mark> {
        if prefix != WATERMARK_PREFIX {
            return None;
        }
        let text = std::str::from_utf8(content).ok()?;
        let mut parts = text.split(' ');
        if parts.next()? != &*self.token {
            return None;
        }
        let kind = parts.next()?;
        let chunk = parts.next()?.parse().ok()?;
        match kind {
            "lw" => Some(Mark::Low(chunk)),
            "hw" => Some(Mark::High(chunk)),
            _ => None,
        }
    }

    /// A watermark read from the stream inside its transaction: at a high
    /// watermark the chunk's remaining rows are returned, to be emitted now
    /// (within the watermark's transaction).
    pub(crate) fn on_watermark(
        &mut self,
        prefix: &str,
        content: &[u8],
    ) -> Result<Option<MergedChunk>, SnapshotError> {
        self.drain()?;
        match self.parse_mark(prefix, content) {
            None => Ok(None),
            Some(Mark::Low(chunk)) => {
                let _ = self.merger.low_watermark(chunk);
                Ok(None)
            }
            Some(Mark::High(chunk)) => {
                let tables = &self.tables;
                let key_of = |row: &Row| {
                    let table = tables.get(self.chunks.get(&chunk)?.table)?;
                    RowKey::of_row(row, &table.key, &table.event_schema)
                };
                let merged = self
                    .merger
                    .high_watermark(chunk, key_of)
                    .map_err(|e| SnapshotError::Merge(e.to_string()))?;
                match merged {
                    HighWatermark::Ignored => Ok(None),
                    // The rows are sent before the high watermark is written.
                    HighWatermark::RowsPending => Err(SnapshotError::Merge(format!(
                        "high watermark of chunk {chunk} before its rows"
                    ))),
                    HighWatermark::Emit {
                        table,
                        rows,
                        dropped,
                    } => {
                        tracing::debug!(chunk, rows = rows.len(), dropped, "snapshot chunk merged");
                        let marks = self.marks(chunk, table, rows.len());
                        self.emitted.push(chunk);
                        let schema = self
                            .tables
                            .get(table)
                            .map(|t| t.event_schema.clone())
                            .ok_or_else(|| SnapshotError::Merge(format!("no table #{table}")))?;
                        Ok(Some((schema, rows, marks)))
                    }
                }
            }
        }
    }

    /// How the `n` rows of `chunk` of table #`table`, merged now, are
    /// marked: whether they are the first of the table to be emitted, the
    /// last (the table is fully planned and no other chunk of it is still
    /// to come), of the initial snapshot's first or last table, or read on
    /// demand. Counts the rows as emitted.
    fn marks(&mut self, chunk: ChunkId, table: usize, n: usize) -> ChunkMarks {
        let of_table = |c: &&super::Chunk| c.table == table;
        let earlier: u64 = self
            .emitted
            .iter()
            .filter_map(|id| self.chunks.get(id))
            .filter(of_table)
            .map(|c| c.emitted_rows)
            .sum();
        let first_in_table =
            self.table_emitted + earlier == 0 && self.rows_done == 0 && self.chunks_done == 0;
        // Every chunk of the table was planned (the planning cursor ran
        // out, or the readers said so) and none but those emitted now is
        // still to come.
        let last_in_table = (self.planned_all || self.cursor.exhausted)
            && self.redo.is_empty()
            && self
                .chunks
                .iter()
                .all(|(id, c)| c.table != table || *id == chunk || self.emitted.contains(id));
        if let Some(c) = self.chunks.get_mut(&chunk) {
            c.emitted_rows = n as u64;
        }
        let on_demand = |t: &SnapshotTable| t.request.is_some();
        let incremental = table >= self.initial || self.tables.get(table).is_none_or(on_demand);
        let initial = self.tables.get(..self.initial).unwrap_or_default();
        // What identifies the read across restarts: the initial
        // snapshot's epoch, or the signal that asked (none when pgcdc
        // asked itself).
        let read_epoch = match self.tables.get(table).and_then(|t| t.request.as_ref()) {
            Some(r) => r.lsn,
            None => self.epoch,
        };
        ChunkMarks {
            read_epoch,
            incremental,
            first_table: self.fresh
                && initial
                    .get(..table)
                    .is_some_and(|t| t.iter().all(on_demand)),
            last_table: initial
                .get(table + 1..)
                .is_some_and(|t| t.iter().all(on_demand))
                && self.fallback_tables.is_empty(),
            first_in_table,
            last_in_table,
        }
    }

    /// Whether the stream's changes to tables without a key may be held
    /// back: until their consistent read is emitted, it covers them (the
    /// pipeline holds them only when checkpoints restart an interrupted read).
    pub(crate) fn holds_keyless(&self) -> bool {
        !matches!(self.fallback, Fallback::Done)
    }

    /// How the snapshot sees the table of a stream event (cached by schema
    /// and by the table being read: chunks in flight are all of that one,
    /// and a table read again for a request appears twice in `tables`).
    fn stream_table(&mut self, schema: &Arc<TableSchema>) -> StreamTable {
        let ptr = Arc::as_ptr(schema) as usize;
        let current = self.table;
        if let Some((_, at, kind)) = self.stream_keys.get(&ptr) {
            if *at == current {
                return kind.clone();
            }
        }
        let same = |t: &SnapshotTable| *t.schema == *schema.schema && *t.name == *schema.table;
        let kind = match self.tables.get(current).filter(|t| same(t)) {
            Some(t) => {
                let idx: Option<Vec<usize>> = t
                    .key
                    .iter()
                    .map(|&k| t.columns.get(k).and_then(|c| schema.column_index(&c.name)))
                    .collect();
                idx.map_or(StreamTable::Other, |idx| StreamTable::Keyed(current, idx))
            }
            None if self.fallback_tables.iter().any(same) => StreamTable::Keyless,
            None => StreamTable::Other,
        };
        // Keep the schema alive so its address is not reused.
        self.stream_keys
            .insert(ptr, (schema.clone(), current, kind.clone()));
        kind
    }

    /// Whether a stream event is held back: a change to a table without a
    /// key before its consistent read is emitted (the read contains it).
    pub(crate) fn holds(&mut self, ev: &ChangeEvent) -> bool {
        if !self.holds_keyless() {
            return false;
        }
        match ev.table.as_ref() {
            Some(schema) => matches!(self.stream_table(schema), StreamTable::Keyless),
            None => false,
        }
    }

    /// A change event of the stream: its keys close the window of any
    /// chunk of its table being read.
    pub(crate) fn on_change(&mut self, ev: &ChangeEvent) {
        if self.merger.in_flight() == 0 {
            return;
        }
        let Some(schema) = ev.table.as_ref() else {
            return;
        };
        let StreamTable::Keyed(table, key) = self.stream_table(schema) else {
            return;
        };
        if ev.op == Operation::Truncate {
            self.merger.truncated(&table);
            return;
        }
        for row in [ev.before_values(), ev.after_values()]
            .into_iter()
            .flatten()
        {
            if let Some(k) = RowKey::of(&row, &key) {
                self.merger.changed(&table, &k);
            }
        }
    }

    /// The open transaction committed: chunks emitted in it are done.
    pub(crate) fn on_commit(&mut self) {
        if self.emitted.is_empty() {
            return;
        }
        for chunk in std::mem::take(&mut self.emitted) {
            if let Some(c) = self.chunks.remove(&chunk) {
                if c.table == self.table {
                    self.table_emitted += c.emitted_rows;
                }
                self.chunks_done += 1;
                self.rows_done += c.rows;
                self.rows_total += c.rows;
            }
        }
        self.log_progress(false);
        self.finish_tables();
    }
}
