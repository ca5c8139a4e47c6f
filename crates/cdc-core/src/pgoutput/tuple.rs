//! pgoutput TupleData: the column values of a row.

use std::borrow::Cow;
use std::fmt;
use std::iter::FusedIterator;

use crate::error::DecodeError;
use crate::reader::Reader;

/// One column value of a [`TupleData`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TupleValue<'a> {
    /// `n`: SQL NULL.
    Null,
    /// `u`: an unchanged TOASTed value; the server did not send it.
    UnchangedToast,
    /// `t`: the value in the type's text format.
    Text(&'a [u8]),
    /// `b`: the value in the type's binary format (only with `binary = true`).
    Binary(&'a [u8]),
}

impl<'a> TupleValue<'a> {
    /// The value bytes of a text or binary column.
    #[inline]
    pub fn bytes(&self) -> Option<&'a [u8]> {
        match *self {
            TupleValue::Text(b) | TupleValue::Binary(b) => Some(b),
            TupleValue::Null | TupleValue::UnchangedToast => None,
        }
    }

    /// What a TupleData holds of this column before the value's bytes (which
    /// [`bytes`](Self::bytes) gives): its kind byte, and for a value its
    /// length. `None` for a value longer than `i32::MAX` bytes, which the
    /// protocol cannot carry.
    ///
    /// ```
    /// use cdc_core::pgoutput::TupleValue;
    ///
    /// assert_eq!(TupleValue::Null.header().unwrap().as_bytes(), b"n");
    /// assert_eq!(TupleValue::Binary(b"xy").header().unwrap().as_bytes(), b"b\0\0\0\x02");
    /// ```
    #[inline]
    pub fn header(&self) -> Option<ColumnHeader> {
        let (kind, value) = match *self {
            TupleValue::Null => (b'n', None),
            TupleValue::UnchangedToast => (b'u', None),
            TupleValue::Text(b) => (b't', Some(b)),
            TupleValue::Binary(b) => (b'b', Some(b)),
        };
        let mut bytes = [kind, 0, 0, 0, 0];
        let Some(value) = value else {
            return Some(ColumnHeader { bytes, len: 1 });
        };
        let [_, length @ ..] = &mut bytes;
        *length = i32::try_from(value.len()).ok()?.to_be_bytes();
        Some(ColumnHeader { bytes, len: 5 })
    }
}

/// The bytes of a TupleData column before its value (see
/// [`TupleValue::header`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnHeader {
    bytes: [u8; 5],
    len: u8,
}

impl ColumnHeader {
    /// The kind byte, then the value's length if there is a value.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }
}

/// The columns of one row, as a pgoutput message carries them.
///
/// Parsing validates every column kind and length up front (without
/// allocating), so iteration cannot fail. The bytes are borrowed from the
/// message unless [`into_owned`](TupleData::into_owned) copied them.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TupleData<'a> {
    /// The encoded columns (after the Int16 column count), already validated.
    raw: Cow<'a, [u8]>,
    count: u16,
}

impl<'a> TupleData<'a> {
    /// Reads a TupleData (column count and columns) at the reader's position.
    #[inline(always)]
    pub(crate) fn parse(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let count = r.count16()?;
        let start = r.pos();
        r.skip_tuple_columns(count)?;
        Ok(TupleData {
            raw: Cow::Borrowed(r.since(start)),
            count,
        })
    }

    /// Builds a tuple from values (encodes them as the server would).
    ///
    /// Returns `None` with more than `i16::MAX` columns or a value longer than
    /// `i32::MAX` bytes, which the protocol cannot carry.
    pub fn from_values(values: &[TupleValue<'_>]) -> Option<TupleData<'static>> {
        let count = u16::try_from(values.len())
            .ok()
            .filter(|&c| c <= i16::MAX as u16)?;
        let mut raw = Vec::new();
        for v in values {
            raw.extend_from_slice(v.header()?.as_bytes());
            raw.extend_from_slice(v.bytes().unwrap_or_default());
        }
        Some(TupleData {
            raw: Cow::Owned(raw),
            count,
        })
    }

    /// The number of columns.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// Whether the tuple has no columns.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The columns in order.
    #[inline]
    pub fn iter(&self) -> TupleIter<'_> {
        TupleIter {
            rest: &self.raw,
            left: self.count,
        }
    }

    /// The column at `index` (a linear scan), or `None` past the end.
    pub fn get(&self, index: usize) -> Option<TupleValue<'_>> {
        self.iter().nth(index)
    }

    /// The encoded columns, without the leading column count, as on the wire.
    #[inline]
    pub fn raw_columns(&self) -> &[u8] {
        &self.raw
    }

    /// The columns of a tuple of `count` columns whose encoding is `raw`
    /// (what [`raw_columns`](Self::raw_columns) returns), borrowing `raw`.
    /// Validates the columns as parsing does, without allocating; bytes after
    /// the last column are an error.
    pub fn iter_raw_columns(raw: &'a [u8], count: u16) -> Result<TupleIter<'a>, DecodeError> {
        let mut r = Reader::new(raw);
        r.skip_tuple_columns(count)?;
        r.finish()?;
        Ok(TupleIter {
            rest: raw,
            left: count,
        })
    }

    /// The columns of `raw` as [`iter_raw_columns`](Self::iter_raw_columns)
    /// returns them, without validating again: for bytes that were validated
    /// before (taken from [`raw_columns`](Self::raw_columns) of a parsed
    /// tuple). Should `raw` not hold `count` well-formed columns after all,
    /// the iterator ends at the first malformed one; it never panics.
    #[inline]
    pub fn iter_validated_raw_columns(raw: &'a [u8], count: u16) -> TupleIter<'a> {
        TupleIter {
            rest: raw,
            left: count,
        }
    }

    /// A copy that owns its bytes.
    pub fn into_owned(self) -> TupleData<'static> {
        TupleData {
            raw: Cow::Owned(self.raw.into_owned()),
            count: self.count,
        }
    }
}

impl fmt::Debug for TupleData<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'t> IntoIterator for &'t TupleData<'_> {
    type Item = TupleValue<'t>;
    type IntoIter = TupleIter<'t>;

    #[inline]
    fn into_iter(self) -> TupleIter<'t> {
        self.iter()
    }
}

/// Iterator over the columns of a [`TupleData`].
#[derive(Debug, Clone)]
pub struct TupleIter<'t> {
    rest: &'t [u8],
    left: u16,
}

impl<'t> Iterator for TupleIter<'t> {
    type Item = TupleValue<'t>;

    #[inline]
    fn next(&mut self) -> Option<TupleValue<'t>> {
        // The columns were validated when the tuple was parsed or built, so
        // `rest` holds exactly `left` well-formed columns and the `?`s below
        // never trigger; they only keep this free of panics. (If one did, the
        // iterator would end early: `rest` is emptied.)
        let (&kind, tail) = self.rest.split_first()?;
        self.left = self.left.wrapping_sub(1);
        if kind == b'n' || kind == b'u' {
            self.rest = tail;
            return Some(if kind == b'n' {
                TupleValue::Null
            } else {
                TupleValue::UnchangedToast
            });
        }
        let Some((len, tail)) = tail.split_first_chunk::<4>() else {
            self.rest = &[];
            return None;
        };
        let len = u32::from_be_bytes(*len) as usize;
        let Some((value, tail)) = tail.split_at_checked(len) else {
            self.rest = &[];
            return None;
        };
        self.rest = tail;
        Some(if kind == b't' {
            TupleValue::Text(value)
        } else {
            TupleValue::Binary(value)
        })
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = if self.rest.is_empty() {
            0
        } else {
            usize::from(self.left)
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for TupleIter<'_> {}
impl FusedIterator for TupleIter<'_> {}
