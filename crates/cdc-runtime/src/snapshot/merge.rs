//! DBLog watermark merge of snapshot chunks with the change stream (sans-IO).
//!
//! A table is read in primary-key chunks. For each chunk a reader writes a
//! low watermark `LW(c)` into the WAL, waits until every transaction that may
//! have committed before it is visible, reads the chunk's rows, hands them to
//! the [`Merger`] and writes a high watermark `HW(c)`. The stream processor
//! feeds the [`Merger`] what it sees, in commit order: change events
//! ([`Merger::changed`]), `LW(c)` and `HW(c)`. At `HW(c)` the rows of `c`
//! whose key some stream event touched between `LW(c)` and `HW(c)` are
//! dropped; the others are emitted right there, after every stream event
//! before `HW(c)` and before any after it. Chunks may be in flight at once,
//! with overlapping windows, of the same or different tables.
//!
//! # Why the merged output is correct
//!
//! The read happens between `LW(c)` and `HW(c)` in commit order and sees
//! every commit before `LW(c)`. Claim: each write to the sink at stream
//! position `p` carries its key's committed value as of `p`. Stream events do
//! by definition. A row emitted at `HW(c)` has a key no event touched between
//! `LW(c)` and `HW(c)`, so its value at the read is its value at `HW(c)`.
//! Hence each key's last write is its final value. And every key that exists
//! at the end is written: by the stream if it ever touches the key, else by
//! its chunk, whose row for it is never dropped. Changes before `LW(c)` are
//! already in the read, so they drop nothing; only the window's changes do.
//!
//! Chunk ids must be unique across runs (a stale watermark from an earlier
//! run is ignored only if its id is not in flight again).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// Identifies one chunk read, as written into its watermarks.
pub type ChunkId = u64;

/// A call the merger cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// [`Merger::start`] with an id already in flight.
    #[error("chunk {0} is already in flight")]
    ChunkInUse(ChunkId),
    /// Rows for a chunk that is not in flight (never started, finished or abandoned).
    #[error("rows for chunk {0}, which is not in flight")]
    UnknownChunk(ChunkId),
    /// [`Merger::rows`] called twice for one chunk.
    #[error("rows for chunk {0} were already delivered")]
    RowsAlreadyDelivered(ChunkId),
    /// `HW(c)` before `LW(c)`: the window is unknown, so the chunk was
    /// dropped from the merger and must be read again.
    #[error("high watermark of chunk {0} came before its low watermark; read the chunk again")]
    HighBeforeLow(ChunkId),
}

/// What a low watermark did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Watermark {
    /// The chunk's window is now open.
    Opened,
    /// Not a chunk in flight, or its window is already open: nothing changed.
    Ignored,
}

/// What a high watermark did.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum HighWatermark<T, R> {
    /// The chunk is finished: emit `rows` (in delivery order) now, before
    /// any later stream event. `dropped` rows were superseded by the stream.
    Emit {
        /// The chunk's table.
        table: T,
        /// Its rows that the stream did not supersede.
        rows: Vec<R>,
        /// How many rows the stream superseded.
        dropped: usize,
    },
    /// The rows have not arrived: deliver them with [`Merger::rows`], then
    /// call [`Merger::high_watermark`] again before any later stream event.
    RowsPending,
    /// Not a chunk in flight (a stale watermark): nothing to do.
    Ignored,
}

#[derive(Debug)]
struct Chunk<T, R> {
    table: T,
    /// `LW` seen; the window lives in `Merger::windows`.
    open: bool,
    rows: Option<Vec<R>>,
}

/// The keys changed in one open window.
#[derive(Debug)]
struct Window<K> {
    chunk: ChunkId,
    changed: HashSet<K>,
    /// The table was truncated inside the window: every row read is gone.
    truncated: bool,
}

/// Merges chunk rows into the stream at their high watermarks.
///
/// `T` names a table, `K` is a primary key, `R` a row payload.
#[derive(Debug)]
pub struct Merger<T, K, R> {
    chunks: HashMap<ChunkId, Chunk<T, R>>,
    /// Open windows by table; a table without open windows has no entry, so
    /// [`Merger::changed`] is one failed lookup for it.
    windows: HashMap<T, Vec<Window<K>>>,
}

impl<T: Eq + Hash + Clone, K: Eq + Hash + Clone, R> Default for Merger<T, K, R> {
    fn default() -> Self {
        Self {
            chunks: HashMap::new(),
            windows: HashMap::new(),
        }
    }
}

impl<T: Eq + Hash + Clone, K: Eq + Hash + Clone, R> Merger<T, K, R> {
    /// A merger with no chunk in flight.
    pub fn new() -> Self {
        Self::default()
    }

    /// The read of `chunk` of `table` was started; call before its `LW` can
    /// reach the stream processor.
    pub fn start(&mut self, chunk: ChunkId, table: T) -> Result<(), MergeError> {
        if self.chunks.contains_key(&chunk) {
            return Err(MergeError::ChunkInUse(chunk));
        }
        self.chunks.insert(
            chunk,
            Chunk {
                table,
                open: false,
                rows: None,
            },
        );
        Ok(())
    }

    /// `LW(chunk)` seen in the stream. Unknown ids (stale watermarks of an
    /// earlier run or a replay) and repeated `LW`s are ignored.
    pub fn low_watermark(&mut self, chunk: ChunkId) -> Watermark {
        match self.chunks.get_mut(&chunk) {
            Some(state) if !state.open => {
                state.open = true;
                let window = Window {
                    chunk,
                    changed: HashSet::new(),
                    truncated: false,
                };
                self.windows
                    .entry(state.table.clone())
                    .or_default()
                    .push(window);
                Watermark::Opened
            }
            _ => Watermark::Ignored,
        }
    }

    /// The rows of `chunk` arrived, at any time after [`Merger::start`].
    pub fn rows(&mut self, chunk: ChunkId, rows: Vec<R>) -> Result<(), MergeError> {
        let state = self
            .chunks
            .get_mut(&chunk)
            .ok_or(MergeError::UnknownChunk(chunk))?;
        if state.rows.is_some() {
            return Err(MergeError::RowsAlreadyDelivered(chunk));
        }
        state.rows = Some(rows);
        Ok(())
    }

    /// A stream event touched `key` of `table`. Call once per key touched: a
    /// key-changing update touches the old and the new key. Without an open
    /// window on `table` this is a single hash lookup.
    pub fn changed(&mut self, table: &T, key: &K) {
        if let Some(windows) = self.windows.get_mut(table) {
            for window in windows {
                if !window.changed.contains(key) {
                    window.changed.insert(key.clone());
                }
            }
        }
    }

    /// A stream event truncated `table`: the rows of every chunk of it with
    /// an open window are dropped at their high watermarks (rows inserted
    /// after the truncate arrive from the stream).
    pub fn truncated(&mut self, table: &T) {
        if let Some(windows) = self.windows.get_mut(table) {
            for window in windows {
                window.truncated = true;
            }
        }
    }

    /// `HW(chunk)` seen in the stream. `key_of` gives a row's key; it is
    /// called only when the window saw changes of the chunk's table (`None`:
    /// the row has no key and is kept).
    pub fn high_watermark(
        &mut self,
        chunk: ChunkId,
        key_of: impl Fn(&R) -> Option<K>,
    ) -> Result<HighWatermark<T, R>, MergeError> {
        let Some(state) = self.chunks.get(&chunk) else {
            return Ok(HighWatermark::Ignored);
        };
        if !state.open {
            self.chunks.remove(&chunk);
            return Err(MergeError::HighBeforeLow(chunk));
        }
        if state.rows.is_none() {
            return Ok(HighWatermark::RowsPending);
        }
        let Some(Chunk { table, rows, .. }) = self.chunks.remove(&chunk) else {
            return Ok(HighWatermark::Ignored);
        };
        let (changed, truncated) = self.close_window(&table, chunk);
        let mut rows = rows.unwrap_or_default();
        let before = rows.len();
        if truncated {
            rows.clear();
        }
        if !changed.is_empty() {
            rows.retain(|row| key_of(row).is_none_or(|key| !changed.contains(&key)));
        }
        Ok(HighWatermark::Emit {
            dropped: before - rows.len(),
            table,
            rows,
        })
    }

    /// The stream restarted: every chunk in flight is abandoned. Returns
    /// their ids, ascending, so the caller reads them again (under new ids).
    pub fn abandon_all(&mut self) -> Vec<ChunkId> {
        self.windows.clear();
        let mut ids: Vec<ChunkId> = self.chunks.drain().map(|(id, _)| id).collect();
        ids.sort_unstable();
        ids
    }

    /// Chunks started and not yet finished or abandoned.
    pub fn in_flight(&self) -> usize {
        self.chunks.len()
    }

    fn close_window(&mut self, table: &T, chunk: ChunkId) -> (HashSet<K>, bool) {
        let Some(windows) = self.windows.get_mut(table) else {
            return (HashSet::new(), false);
        };
        let closed = match windows.iter().position(|w| w.chunk == chunk) {
            Some(i) => {
                let w = windows.swap_remove(i);
                (w.changed, w.truncated)
            }
            None => (HashSet::new(), false),
        };
        if windows.is_empty() {
            self.windows.remove(table);
        }
        closed
    }
}

#[cfg(test)]
mod tests;
