//! [`Row`]: the values of one row, decoded or as the server sent them.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;

use bytes::{Bytes, BytesMut};
use cdc_core::pgoutput::TupleIter;
use cdc_core::{decode_binary, decode_text, TupleData, TupleValue, Value};

use super::TableSchema;

/// One row: values in the order of [`TableSchema::columns`].
///
/// A row of a streamed change keeps the columns as pgoutput sent them, in a
/// slice of a buffer shared by many rows, and decodes them when asked
/// ([`values`](Self::values)): building and dropping such a row allocates
/// nothing per value. The converter decoded every column once already, so
/// decoding again cannot fail. Rows read by a snapshot or derived by an
/// operator hold decoded values ([`Row::from_values`]).
///
/// A TOASTed column the server did not send stays [`Value::UnchangedToast`]:
/// its value is unknown, not `NULL`.
#[derive(Clone, PartialEq)]
pub struct Row(Repr);

#[derive(Clone, PartialEq)]
enum Repr {
    Values(Vec<Value<'static>>),
    /// The encoded columns of a pgoutput TupleData (validated, and every
    /// column decoded once by its type without error).
    Wire {
        columns: Bytes,
        count: u16,
    },
}

/// One column of a [`Row`]: a decoded value or the column as sent.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cell<'r> {
    Value(&'r Value<'static>),
    Wire(TupleValue<'r>),
}

impl Row {
    /// A row of decoded values.
    pub fn from_values(values: Vec<Value<'static>>) -> Self {
        Row(Repr::Values(values))
    }

    /// A row of pgoutput columns (see [`RowArena`]).
    fn wire(columns: Bytes, count: u16) -> Self {
        Row(Repr::Wire { columns, count })
    }

    /// The number of columns.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Values(v) => v.len(),
            Repr::Wire { count, .. } => usize::from(*count),
        }
    }

    /// Approximate heap memory the row holds: its share of the arena for
    /// pgoutput columns, the values and their text or bytes for decoded ones
    /// (other owned parts, such as a numeric's digits or array elements, are
    /// not counted).
    pub fn heap_size(&self) -> usize {
        match &self.0 {
            Repr::Values(v) => {
                v.capacity() * std::mem::size_of::<Value<'static>>()
                    + v.iter()
                        .map(|value| match value {
                            Value::Text(t) | Value::Json(t) | Value::Jsonb(t) => t.len(),
                            Value::Bytea(b) => b.len(),
                            _ => 0,
                        })
                        .sum::<usize>()
            }
            Repr::Wire { columns, .. } => columns.len(),
        }
    }

    /// Whether the row has no columns.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The decoded values, if the row holds them (see [`values`](Self::values)).
    pub fn as_values(&self) -> Option<&[Value<'static>]> {
        match &self.0 {
            Repr::Values(v) => Some(v),
            Repr::Wire { .. } => None,
        }
    }

    /// The values, decoded by the column types of `table` (the table of the
    /// event the row belongs to), borrowing text from the row.
    pub fn values<'r>(&'r self, table: &TableSchema) -> Cow<'r, [Value<'r>]> {
        match &self.0 {
            Repr::Values(v) => Cow::Borrowed(v.as_slice()),
            Repr::Wire { .. } => Cow::Owned(
                self.cells()
                    .zip(&table.columns)
                    .map(|(cell, col)| match cell {
                        Cell::Value(v) => v.clone(),
                        Cell::Wire(tv) => decode_cell(tv, col.type_oid),
                    })
                    .collect(),
            ),
        }
    }

    /// The columns in order, decoded or as sent.
    pub(crate) fn cells(&self) -> Cells<'_> {
        match &self.0 {
            Repr::Values(v) => Cells::Values(v.iter()),
            // Only built by `RowArena::row` from a parsed (so validated)
            // tuple: the columns are not validated again.
            Repr::Wire { columns, count } => {
                Cells::Wire(TupleData::iter_validated_raw_columns(columns, *count))
            }
        }
    }
}

impl From<Vec<Value<'static>>> for Row {
    fn from(values: Vec<Value<'static>>) -> Self {
        Row::from_values(values)
    }
}

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        for cell in self.cells() {
            match cell {
                Cell::Value(v) => list.entry(v),
                Cell::Wire(tv) => list.entry(&tv),
            };
        }
        list.finish()
    }
}

/// Iterator over the columns of a [`Row`].
pub(crate) enum Cells<'r> {
    Values(std::slice::Iter<'r, Value<'static>>),
    Wire(TupleIter<'r>),
}

impl<'r> Iterator for Cells<'r> {
    type Item = Cell<'r>;

    #[inline]
    fn next(&mut self) -> Option<Cell<'r>> {
        match self {
            Cells::Values(it) => it.next().map(Cell::Value),
            Cells::Wire(it) => it.next().map(Cell::Wire),
        }
    }
}

/// Where the rows of streamed changes keep their columns: one buffer that
/// many rows share slices of (each a reference count, no allocation), the
/// next one taken once the last is full.
///
/// Full buffers are kept (up to [`RETIRED_MAX`]) and reused once no row
/// points into them any more: in a steady stream the same memory carries
/// row after row, where fresh buffers would each be faulted in page by
/// page (the allocator hands freed memory back to the system within
/// milliseconds).
#[derive(Debug, Default)]
pub(crate) struct RowArena {
    buf: BytesMut,
    /// Whether `buf` is a standard [`ARENA_CHUNK`] (not one sized for a
    /// larger row, which is not kept).
    standard: bool,
    /// Full standard buffers, oldest first.
    retired: VecDeque<BytesMut>,
}

/// Bytes allocated at a time for rows.
const ARENA_CHUNK: usize = 64 * 1024;

/// The most full buffers kept for reuse (8 MiB, a little more than a full
/// pipeline of 1 KB rows with the default batch size and channel
/// capacity): more rows than that in flight take fresh buffers, as
/// without reuse. Buffers kept beyond what the rows in flight need are
/// let go one per new buffer (see [`RowArena::renew`]).
const RETIRED_MAX: usize = 128;

impl RowArena {
    /// A row of the columns of `tuple` (which the caller has decoded once).
    pub(crate) fn row(&mut self, tuple: &TupleData<'_>) -> Row {
        let raw = tuple.raw_columns();
        if self.buf.capacity() - self.buf.len() < raw.len() {
            self.renew(raw.len());
        }
        self.buf.extend_from_slice(raw);
        let count = u16::try_from(tuple.len()).unwrap_or(u16::MAX);
        Row::wire(self.buf.split().freeze(), count)
    }

    /// Replaces the full buffer by the oldest kept one if no row points
    /// into it any more, else by a new one. The old buffer stays alive as
    /// long as rows point into it.
    fn renew(&mut self, need: usize) {
        // Only a buffer no row shares is reclaimed, in place.
        let reusable = need <= ARENA_CHUNK
            && self
                .retired
                .front_mut()
                .is_some_and(|oldest| oldest.try_reclaim(ARENA_CHUNK));
        let reused = if reusable {
            let reused = self.retired.pop_front();
            // Two free in a row: more are kept than the rows in flight
            // need (after a burst). Let one go, so that what is kept
            // shrinks back to the steady need.
            if self
                .retired
                .front_mut()
                .is_some_and(|next| next.try_reclaim(ARENA_CHUNK))
            {
                self.retired.pop_front();
            }
            reused
        } else {
            None
        };
        let standard = reused.is_some() || need <= ARENA_CHUNK;
        let next = reused.unwrap_or_else(|| BytesMut::with_capacity(need.max(ARENA_CHUNK)));
        let full = std::mem::replace(&mut self.buf, next);
        if std::mem::replace(&mut self.standard, standard) {
            if self.retired.len() == RETIRED_MAX {
                self.retired.pop_front();
            }
            self.retired.push_back(full);
        }
    }
}

/// Decodes a column the converter decoded before (so it cannot fail; if it
/// did, the bytes are kept as a value of an unknown type rather than lost).
pub(crate) fn decode_cell(tv: TupleValue<'_>, type_oid: cdc_core::Oid) -> Value<'_> {
    let decoded = match tv {
        TupleValue::Null => Ok(Value::Null),
        TupleValue::UnchangedToast => Ok(Value::UnchangedToast),
        TupleValue::Text(raw) => decode_text(type_oid, raw),
        TupleValue::Binary(raw) => decode_binary(type_oid, raw),
    };
    decoded.unwrap_or_else(|_| Value::OtherBinary {
        type_oid,
        bytes: Cow::Borrowed(tv.bytes().unwrap_or_default()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of one text column of `len` bytes of `fill`.
    fn row(arena: &mut RowArena, fill: u8, len: usize) -> Row {
        let text = vec![fill; len];
        let tuple = TupleData::from_values(&[TupleValue::Text(&text)]).unwrap();
        arena.row(&tuple)
    }

    fn text(row: &Row) -> Vec<u8> {
        match row.cells().next() {
            Some(Cell::Wire(TupleValue::Text(t))) => t.to_vec(),
            other => panic!("{other:?}"),
        }
    }

    /// Where a row's columns live.
    fn at(row: &Row) -> usize {
        match &row.0 {
            Repr::Wire { columns, .. } => columns.as_ptr() as usize,
            Repr::Values(_) => unreachable!(),
        }
    }

    #[test]
    fn buffers_are_reused_once_their_rows_are_dropped_and_never_before() {
        let mut arena = RowArena::default();
        // Rows kept alive: every buffer is new, and every row keeps its bytes.
        let kept: Vec<Row> = (0..1000u32)
            .map(|i| row(&mut arena, i as u8, 1000))
            .collect();
        let chunks: std::collections::HashSet<usize> =
            kept.iter().map(|r| at(r) / ARENA_CHUNK).collect();
        assert!(chunks.len() >= 3, "{} buffers", chunks.len());
        for (i, r) in kept.iter().enumerate() {
            assert_eq!(text(r), vec![i as u8; 1000]);
        }
        let burst = arena.retired.len();
        assert!(burst >= 10, "{burst} kept");
        let first = at(&kept[0]);
        drop(kept);
        // Dropped: the rows that follow go to the buffers of before.
        let mut reused = 0;
        for i in 0..1000u32 {
            let r = row(&mut arena, i as u8, 1000);
            assert_eq!(text(&r), vec![i as u8; 1000]);
            reused += usize::from(at(&r) == first);
        }
        assert!(reused > 0, "the first buffer was not reused");
        // What the burst left is let go again: one row in flight needs
        // one buffer.
        assert!(arena.retired.len() <= 2, "{} kept", arena.retired.len());
        // A row larger than a buffer gets a buffer of its own, not kept.
        let big = row(&mut arena, 7, 3 * ARENA_CHUNK);
        assert_eq!(text(&big), vec![7; 3 * ARENA_CHUNK]);
        assert!(arena.retired.len() <= RETIRED_MAX);
    }
}
