//! Source rows as the aggregate remembers them: a compact identity
//! ([`RowId`], the encoded values of the row's key columns) and the row's
//! contribution ([`Row`]: its group and its value).

use std::hash::{Hash, Hasher};

use cdc_core::Value;

use super::super::wire::{put_uvarint, take_uvarint, unzigzag, zigzag};

/// Keys up to this many encoded bytes live inside the [`RowId`] (a `bigint`
/// key takes at most 11, a `uuid` 18), longer ones on the heap.
const INLINE: usize = 22;

/// The identity of a source row: the values of its key columns, encoded as
/// one segment each (`uvarint(len) · tag · data`). Equal values have equal
/// bytes: integers of every width share one form (so widening a key column
/// keeps its rows), and restored keys must be in that exact form
/// ([`RowId::parse`]).
#[derive(Clone)]
pub(crate) enum RowId {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl RowId {
    fn from_vec(v: Vec<u8>) -> RowId {
        if v.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..v.len()].copy_from_slice(&v);
            RowId::Inline {
                len: v.len() as u8,
                bytes,
            }
        } else {
            RowId::Heap(v.into_boxed_slice())
        }
    }

    /// The encoded key.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            RowId::Inline { len, bytes } => &bytes[..usize::from(*len)],
            RowId::Heap(b) => b,
        }
    }

    /// The key of `values` (one per key column, in key order); `None` if
    /// one is unknown (an unchanged TOASTed value).
    pub(crate) fn encode<'v>(values: impl IntoIterator<Item = &'v Value<'v>>) -> Option<RowId> {
        let mut out = Vec::with_capacity(16);
        let mut seg = Vec::with_capacity(16);
        for v in values {
            seg.clear();
            encode_value(v, &mut seg)?;
            put_uvarint(&mut out, seg.len() as u128);
            out.extend_from_slice(&seg);
        }
        Some(RowId::from_vec(out))
    }

    /// Checks restored bytes: exactly `columns` segments, each in the form
    /// [`encode`](Self::encode) writes.
    pub(crate) fn parse(bytes: &[u8], columns: usize) -> Option<RowId> {
        let mut n = 0;
        for seg in Segments(bytes) {
            if !canonical(seg.ok()?) {
                return None;
            }
            n += 1;
        }
        (n == columns).then(|| RowId::from_vec(bytes.to_vec()))
    }

    /// The key made of the segments at `positions` (indexes into this key's
    /// columns); `None` if the key is malformed or shorter.
    pub(crate) fn project(&self, positions: &[usize]) -> Option<RowId> {
        let segs = Segments(self.as_bytes())
            .map(|s| s.ok())
            .collect::<Option<Vec<&[u8]>>>()?;
        let mut out = Vec::with_capacity(self.as_bytes().len());
        for &p in positions {
            let seg = segs.get(p)?;
            put_uvarint(&mut out, seg.len() as u128);
            out.extend_from_slice(seg);
        }
        Some(RowId::from_vec(out))
    }
}

impl PartialEq for RowId {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for RowId {}

impl Hash for RowId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl std::fmt::Debug for RowId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RowId(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// The segments of an encoded key.
struct Segments<'a>(&'a [u8]);

impl<'a> Iterator for Segments<'a> {
    type Item = Result<&'a [u8], ()>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let seg = take_uvarint(&mut self.0)
            .ok()
            .and_then(|len| usize::try_from(len).ok())
            .filter(|&len| len <= self.0.len())
            .map(|len| {
                let (seg, rest) = self.0.split_at(len);
                self.0 = rest;
                seg
            });
        if seg.is_none() {
            self.0 = &[];
        }
        Some(seg.ok_or(()))
    }
}

const NULL: u8 = 0;
const BOOL: u8 = 1;
const INT: u8 = 2;
const TEXT: u8 = 3;
const NUMERIC: u8 = 4;
const UUID: u8 = 5;
const BYTEA: u8 = 6;
const CHAR: u8 = 7;
/// Any other type: its `Debug` rendering, a canonical text of the typed
/// value (as the snapshot merge's row keys use).
const OTHER: u8 = 255;

fn encode_value(v: &Value<'_>, out: &mut Vec<u8>) -> Option<()> {
    let int = |out: &mut Vec<u8>, i: i64| {
        out.push(INT);
        put_uvarint(out, zigzag(i128::from(i)));
    };
    match v {
        Value::UnchangedToast => return None,
        Value::Null => out.push(NULL),
        Value::Bool(b) => out.extend_from_slice(&[BOOL, u8::from(*b)]),
        Value::Int2(i) => int(out, i64::from(*i)),
        Value::Int4(i) => int(out, i64::from(*i)),
        Value::Int8(i) => int(out, *i),
        Value::Text(s) => {
            out.push(TEXT);
            out.extend_from_slice(s.as_bytes());
        }
        Value::Numeric(n) => {
            out.push(NUMERIC);
            out.extend_from_slice(n.as_str().as_bytes());
        }
        Value::Uuid(u) => {
            out.push(UUID);
            out.extend_from_slice(u.as_bytes());
        }
        Value::Bytea(b) => {
            out.push(BYTEA);
            out.extend_from_slice(b);
        }
        Value::Char(c) => out.extend_from_slice(&[CHAR, *c]),
        other => {
            out.push(OTHER);
            out.extend_from_slice(format!("{other:?}").as_bytes());
        }
    }
    Some(())
}

/// Whether `seg` is a segment [`encode_value`] could have written.
fn canonical(seg: &[u8]) -> bool {
    let Some((&tag, data)) = seg.split_first() else {
        return false;
    };
    match tag {
        NULL => data.is_empty(),
        BOOL => matches!(data, [0 | 1]),
        CHAR => data.len() == 1,
        INT => {
            let mut rest = data;
            take_uvarint(&mut rest)
                .is_ok_and(|z| rest.is_empty() && i64::try_from(unzigzag(z)).is_ok())
        }
        TEXT | NUMERIC | OTHER => std::str::from_utf8(data).is_ok(),
        UUID => data.len() == 16,
        BYTEA => true,
        _ => false,
    }
}

/// What one source row adds to the aggregate: one row to its group's count
/// and its value (unless NULL) to the group's sum. 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row {
    value_lo: u64,
    value_hi: i64,
    group: u32,
    has_value: bool,
}

impl Row {
    pub(crate) fn new(group: u32, value: Option<i128>) -> Row {
        let v = value.unwrap_or(0);
        Row {
            value_lo: v as u64,
            value_hi: (v >> 64) as i64,
            group,
            has_value: value.is_some(),
        }
    }

    /// The row's group (an id of the aggregate's group table).
    pub(crate) fn group(&self) -> u32 {
        self.group
    }

    /// The summed column's value; `None` for NULL.
    pub(crate) fn value(&self) -> Option<i128> {
        self.has_value
            .then(|| (i128::from(self.value_hi) << 64) | i128::from(self.value_lo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_core::{Numeric, Uuid};

    #[test]
    fn keys_encode_compactly_and_integers_of_every_width_match() {
        let id = |v| RowId::encode([&v]).unwrap();
        assert_eq!(id(Value::Int2(7)), id(Value::Int8(7)));
        assert_eq!(id(Value::Int4(-7)), id(Value::Int8(-7)));
        assert_ne!(id(Value::Int8(7)), id(Value::Int8(8)));
        assert_ne!(id(Value::Int8(7)), id(Value::Text("7".into())));
        assert_ne!(id(Value::Null), id(Value::Text("".into())));
        assert!(matches!(
            id(Value::Int8(i64::MAX)),
            RowId::Inline { len: 12, .. }
        ));
        assert!(matches!(
            id(Value::Uuid(Uuid([9; 16]))),
            RowId::Inline { .. }
        ));
        assert!(matches!(
            id(Value::Text("x".repeat(40).into())),
            RowId::Heap(_)
        ));
        assert_eq!(RowId::encode([&Value::UnchangedToast]), None);
        // Two columns are not one column with the bytes of both.
        let ab = RowId::encode([&Value::Text("a".into()), &Value::Text("b".into())]);
        let a_b = RowId::encode([&Value::Text("ab".into()), &Value::Text("".into())]);
        assert_ne!(ab, a_b);
        assert_eq!(std::mem::size_of::<RowId>(), 24);
        assert_eq!(std::mem::size_of::<Row>(), 24);
    }

    #[test]
    fn projection_and_parse_keep_the_canonical_form() {
        let n = Numeric::parse("12.50").unwrap().into_owned();
        let row = [
            Value::Int8(1),
            Value::Text("long text ".repeat(5).into()),
            Value::Numeric(n),
            Value::Bool(true),
            Value::Float8(1.5),
        ];
        let whole = RowId::encode(&row).unwrap();
        assert_eq!(whole.project(&[0, 3]), RowId::encode([&row[0], &row[3]]));
        assert_eq!(whole.project(&[5]), None);
        assert_eq!(RowId::parse(whole.as_bytes(), 5), Some(whole.clone()));
        assert_eq!(RowId::parse(whole.as_bytes(), 4), None);
        let bytes = whole.as_bytes();
        for cut in 0..bytes.len() {
            assert_eq!(RowId::parse(&bytes[..cut], 5), None, "cut {cut}");
        }
        // Non-canonical forms of valid values are refused.
        for bad in [
            &[2, 2, 0x80][..],       // truncated integer
            &[3, 2, 0x80, 0x00][..], // integer 0 in two bytes
            &[2, 1, 2][..],          // bool 2
            &[1, 9][..],             // unknown tag
            &[2, 3, 0xff][..],       // invalid UTF-8 text
            &[0x81, 0x00, 0][..],    // length in two bytes
        ] {
            assert_eq!(RowId::parse(bad, 1), None, "{bad:?}");
        }
    }

    #[test]
    fn rows_hold_any_i128() {
        for v in [
            None,
            Some(0),
            Some(-1),
            Some(i128::MAX),
            Some(i128::MIN),
            Some(1 << 70),
        ] {
            let r = Row::new(3, v);
            assert_eq!((r.group(), r.value()), (3, v));
        }
    }
}
