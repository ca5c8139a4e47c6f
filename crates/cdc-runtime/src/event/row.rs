//! [`Row`]: the values of one row, decoded or as the server sent them.

use std::borrow::Cow;
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
/// decoding again cannot fail. Rows a snapshot reads in binary are kept the
/// same way, as binary columns, validated when read. Rows a snapshot reads
/// as text, or an operator derives, hold decoded values
/// ([`Row::from_values`]).
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
/// many rows share slices of (each a reference count, no allocation), a new
/// one allocated once the last is full.
#[derive(Debug, Default)]
pub(crate) struct RowArena {
    buf: BytesMut,
    /// Bytes of streamed rows made so far ([`row`](Self::row), wrapping):
    /// the pipeline ends a batch when its rows reach
    /// `PipelineOptions::batch_bytes`. Snapshot rows (`binary_row`) are
    /// not counted: nothing reads that arena's count.
    copied: usize,
}

/// Bytes allocated at a time for rows.
const ARENA_CHUNK: usize = 64 * 1024;

impl RowArena {
    /// A row of the columns of `tuple` (which the caller has decoded once).
    pub(crate) fn row(&mut self, tuple: &TupleData<'_>) -> Row {
        let raw = tuple.raw_columns();
        self.reserve(raw.len());
        self.buf.extend_from_slice(raw);
        self.copied = self.copied.wrapping_add(raw.len());
        let count = u16::try_from(tuple.len()).unwrap_or(u16::MAX);
        Row::wire(self.buf.split().freeze(), count)
    }

    /// A row of the fields of a binary `COPY` row (`None`: NULL), kept in
    /// their send form as pgoutput's binary columns are. The caller has
    /// validated every field for its column's type. `size` bounds the
    /// columns' encoded length (the COPY message's length and one byte a
    /// field does). `None` with more than `i16::MAX` fields or a field over
    /// `i32::MAX` bytes, which a COPY row cannot hold.
    pub(crate) fn binary_row<'f>(
        &mut self,
        fields: impl Iterator<Item = Option<&'f [u8]>>,
        size: usize,
    ) -> Option<Row> {
        self.reserve(size);
        let mut count = 0u16;
        for field in fields {
            let column = field.map_or(TupleValue::Null, TupleValue::Binary);
            let (Some(header), Some(next)) = (column.header(), count.checked_add(1)) else {
                self.buf.clear();
                return None;
            };
            self.buf.extend_from_slice(header.as_bytes());
            self.buf.extend_from_slice(field.unwrap_or_default());
            count = next;
        }
        if count > i16::MAX as u16 {
            self.buf.clear();
            return None;
        }
        Some(Row::wire(self.buf.split().freeze(), count))
    }

    /// Bytes of the streamed rows made so far, wrapping: the difference of
    /// two readings is what was made between them.
    pub(crate) fn copied(&self) -> usize {
        self.copied
    }

    /// Room for `n` more bytes: a new buffer if the present one is short
    /// (the old one stays alive as long as rows point into it).
    fn reserve(&mut self, n: usize) {
        if self.buf.capacity() - self.buf.len() < n {
            self.buf = BytesMut::with_capacity(n.max(ARENA_CHUNK));
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
