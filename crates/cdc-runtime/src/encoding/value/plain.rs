//! Values in pgcdc's plain format: JSON numbers, strings and arrays, dates
//! and times as ISO 8601 strings (`2024-01-15`, `04:05:06.5`,
//! `2024-01-15T04:05:06.5`, `…+00:00`, intervals as `P1Y2M3DT4H5M6S`),
//! `numeric` as a string with every digit, `pg_lsn` as `X/Y`.

use std::fmt;

use cdc_core::{Array, Infinitable, Value};

use super::super::json::{
    write_base64, write_display_str, write_f32, write_f64, write_int, write_str,
};
use super::UNAVAILABLE_VALUE;

/// Writes `value`.
pub(crate) fn write_value(out: &mut Vec<u8>, value: &Value<'_>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::UnchangedToast => write_str(out, UNAVAILABLE_VALUE),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Int2(v) => write_int(out, *v),
        Value::Int4(v) => write_int(out, *v),
        Value::Int8(v) => write_int(out, *v),
        Value::Oid(v) => write_int(out, *v),
        Value::Float4(v) => write_f32(out, *v),
        Value::Float8(v) => write_f64(out, *v),
        Value::Numeric(n) => write_str(out, n.as_str()),
        Value::Text(s) | Value::Json(s) | Value::Jsonb(s) => write_str(out, s),
        Value::Other { text, .. } => write_str(out, text),
        Value::Char(c) => write_char(out, *c),
        Value::Bytea(b) => write_base64(out, b),
        Value::OtherBinary { bytes, .. } => write_base64(out, bytes),
        Value::Uuid(u) => write_display_str(out, u),
        Value::Inet(v) => write_display_str(out, v),
        Value::MacAddr(v) => write_display_str(out, v),
        Value::MacAddr8(v) => write_display_str(out, v),
        Value::PgLsn(lsn) => write_display_str(out, lsn),
        Value::Date(d) => write_infinitable(out, d, write_display_str),
        Value::Time(t) => write_display_str(out, t),
        Value::TimeTz(t) => write_display_str(out, t),
        Value::Timestamp(ts) => {
            write_infinitable(out, ts, |out, ts| write_display_str(out, ts.json_text()))
        }
        Value::TimestampTz(ts) => {
            write_infinitable(out, ts, |out, ts| write_display_str(out, ts.json_text()))
        }
        Value::Interval(iv) => write_display_str(out, iv.iso8601()),
        Value::Array(a) => write_array(out, a, &mut write_value),
        // `Value` is non-exhaustive: a variant added later is written as text.
        #[allow(unreachable_patterns)]
        other => write_display_str(out, DebugText(other)),
    }
}

/// `"char"`: its one byte as a string.
pub(crate) fn write_char(out: &mut Vec<u8>, c: u8) {
    let mut buf = [0u8; 4];
    write_str(out, char::from(c).encode_utf8(&mut buf));
}

fn write_infinitable<T: Copy>(
    out: &mut Vec<u8>,
    v: &Infinitable<T>,
    finite: impl FnOnce(&mut Vec<u8>, T),
) {
    match v {
        Infinitable::Finite(t) => finite(out, *t),
        Infinitable::Infinity => write_str(out, "infinity"),
        Infinitable::NegInfinity => write_str(out, "-infinity"),
    }
}

/// Writes an array as JSON arrays (nested for several dimensions, `[]`
/// when empty), each element through `element`.
pub(crate) fn write_array(
    out: &mut Vec<u8>,
    a: &Array<'_>,
    element: &mut dyn FnMut(&mut Vec<u8>, &Value<'_>),
) {
    let dims: Vec<usize> = a
        .dims()
        .iter()
        .map(|d| usize::try_from(d.len).unwrap_or(0))
        .collect();
    let mut elements = a.elements().iter();
    write_dim(out, &dims, &mut elements, element);
}

fn write_dim<'v>(
    out: &mut Vec<u8>,
    dims: &[usize],
    elements: &mut impl Iterator<Item = &'v Value<'v>>,
    element: &mut dyn FnMut(&mut Vec<u8>, &Value<'_>),
) {
    out.push(b'[');
    if let Some((&len, inner)) = dims.split_first() {
        for i in 0..len {
            if i > 0 {
                out.push(b',');
            }
            if inner.is_empty() {
                match elements.next() {
                    Some(v) => element(out, v),
                    None => out.extend_from_slice(b"null"),
                }
            } else {
                write_dim(out, inner, elements, element);
            }
        }
    }
    out.push(b']');
}

/// A value of a variant this module does not know, as its debug text.
pub(crate) struct DebugText<'a, 'v>(pub(crate) &'a Value<'v>);

impl fmt::Display for DebugText<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}
