//! Column values as JSON.

use std::fmt;

use cdc_core::{Array, Date, Infinitable, Interval, TimeTz, TimestampTz, Value};

use super::json::{
    write_base64, write_display_str, write_escaped_utf8, write_f32, write_f64, write_int, write_str,
};
use crate::event::{decode_cell, Cell, ColumnSchema};

/// Debezium's placeholder for a TOASTed column the server did not send.
pub const UNAVAILABLE_VALUE: &str = "__debezium_unavailable_value";

const MICROS_PER_DAY: i64 = 86_400_000_000;
/// Debezium's average month for `MicroDuration` (365.25 / 12 days).
const DAYS_PER_MONTH_AVG: f64 = 365.25 / 12.0;

/// How dates and times are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Temporal {
    /// Debezium `time.precision.mode=adaptive` numbers (see the module docs).
    DebeziumAdaptive,
    /// ISO 8601 strings.
    Iso,
}

/// How [`write_cell_as`] writes a column the server sent as text, decided
/// once from the column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextKind {
    /// `int2`/`int4`/`int8`/`oid`: the text as it is, when canonical.
    Integer,
    /// `text`/`varchar`/`bpchar`/`name`/`json`/`jsonb`: the text, escaped.
    Text,
    /// Anything else: decoded, then written as its value.
    Other,
}

impl TextKind {
    /// The kind of a column of type `type_oid`.
    pub(crate) fn of(type_oid: cdc_core::Oid) -> Self {
        use cdc_core::types::*;
        match type_oid {
            INT2 | INT4 | INT8 | OID => TextKind::Integer,
            TEXT | VARCHAR | BPCHAR | NAME | JSON | JSONB => TextKind::Text,
            _ => TextKind::Other,
        }
    }
}

/// Writes one column of a row: as [`write_value`] writes its decoded value,
/// but copying the text of the commonest types (integers, text, json) as
/// the server sent it where that is the same JSON, without decoding.
pub(crate) fn write_cell(out: &mut Vec<u8>, col: &ColumnSchema, cell: Cell<'_>, mode: Temporal) {
    write_cell_as(out, col, TextKind::of(col.type_oid), cell, mode);
}

/// [`write_cell`] with the column's [`TextKind`] known: the copied cases
/// inline, everything else out of line.
#[inline(always)]
pub(crate) fn write_cell_as(
    out: &mut Vec<u8>,
    col: &ColumnSchema,
    kind: TextKind,
    cell: Cell<'_>,
    mode: Temporal,
) {
    use cdc_core::TupleValue;
    match (cell, kind) {
        (Cell::Wire(TupleValue::Text(raw)), TextKind::Integer) if is_canonical_integer(raw) => {
            out.extend_from_slice(raw);
        }
        // The row decoded as text when it was converted, so `raw` is UTF-8.
        (Cell::Wire(TupleValue::Text(raw)), TextKind::Text) => {
            out.push(b'"');
            write_escaped_utf8(out, raw);
            out.push(b'"');
        }
        (Cell::Wire(TupleValue::Null), _) => out.extend_from_slice(b"null"),
        _ => write_cell_decoded(out, col, cell, mode),
    }
}

/// A column as its decoded value (the cases [`write_cell_as`] does not copy).
#[inline(never)]
fn write_cell_decoded(out: &mut Vec<u8>, col: &ColumnSchema, cell: Cell<'_>, mode: Temporal) {
    use cdc_core::TupleValue;
    match cell {
        Cell::Value(v) => write_value(out, v, col.type_modifier, mode),
        Cell::Wire(TupleValue::Null) => out.extend_from_slice(b"null"),
        Cell::Wire(TupleValue::UnchangedToast) => write_str(out, UNAVAILABLE_VALUE),
        Cell::Wire(tv) => write_value(out, &decode_cell(tv, col.type_oid), col.type_modifier, mode),
    }
}

/// Whether `raw` is an integer exactly as its JSON number is written: an
/// optional `-`, then digits without a leading zero (or `0` alone).
fn is_canonical_integer(raw: &[u8]) -> bool {
    let digits = match raw {
        [b'-', rest @ ..] => rest,
        _ => raw,
    };
    match digits {
        [] => false,
        [b'0'] => raw.len() == 1,
        [first, ..] => *first != b'0' && digits.iter().all(u8::is_ascii_digit),
    }
}

/// Writes `value` of a column with type modifier `typmod`.
pub(crate) fn write_value(out: &mut Vec<u8>, value: &Value<'_>, typmod: i32, mode: Temporal) {
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
        Value::Char(c) => {
            let mut buf = [0u8; 4];
            write_str(out, char::from(*c).encode_utf8(&mut buf));
        }
        Value::Bytea(b) => write_base64(out, b),
        Value::OtherBinary { bytes, .. } => write_base64(out, bytes),
        Value::Uuid(u) => write_display_str(out, u),
        Value::Inet(v) => write_display_str(out, v),
        Value::MacAddr(v) => write_display_str(out, v),
        Value::MacAddr8(v) => write_display_str(out, v),
        Value::PgLsn(lsn) => match mode {
            Temporal::DebeziumAdaptive => write_int(out, lsn.as_u64()),
            Temporal::Iso => write_display_str(out, lsn),
        },
        Value::Date(d) => write_infinitable(out, d, |out, d| match mode {
            Temporal::DebeziumAdaptive => write_int(out, d.days_since_unix_epoch()),
            Temporal::Iso => write_display_str(out, d),
        }),
        Value::Time(t) => match mode {
            Temporal::DebeziumAdaptive => write_int(out, scale_micros(t.micros(), typmod)),
            Temporal::Iso => write_display_str(out, t),
        },
        Value::TimeTz(t) => match mode {
            Temporal::DebeziumAdaptive => write_display_str(out, ZonedTime(*t)),
            Temporal::Iso => write_display_str(out, t),
        },
        Value::Timestamp(ts) => write_infinitable(out, ts, |out, ts| match mode {
            Temporal::DebeziumAdaptive => match ts.micros_since_unix_epoch() {
                Some(m) => write_int(out, scale_micros(m, typmod)),
                None => write_display_str(out, ts.json_text()),
            },
            Temporal::Iso => write_display_str(out, ts.json_text()),
        }),
        Value::TimestampTz(ts) => write_infinitable(out, ts, |out, ts| match mode {
            Temporal::DebeziumAdaptive => write_display_str(out, ZonedTimestamp(ts)),
            Temporal::Iso => write_display_str(out, ts.json_text()),
        }),
        Value::Interval(iv) => match mode {
            Temporal::DebeziumAdaptive if !is_infinite(iv) => write_int(out, micro_duration(*iv)),
            _ => write_display_str(out, iv.iso8601()),
        },
        Value::Array(a) => write_array(out, a, typmod, mode),
        // `Value` is non-exhaustive: a variant added later is written as text.
        #[allow(unreachable_patterns)]
        other => write_display_str(out, DebugText(other)),
    }
}

fn is_infinite(iv: &Interval) -> bool {
    *iv == Interval::INFINITY || *iv == Interval::NEG_INFINITY
}

/// Debezium `MicroDuration`: months count as 365.25/12 days.
fn micro_duration(iv: Interval) -> i64 {
    let month_micros = f64::from(iv.months) * DAYS_PER_MONTH_AVG * MICROS_PER_DAY as f64;
    let rest = i64::from(iv.days)
        .saturating_mul(MICROS_PER_DAY)
        .saturating_add(iv.micros);
    // `as` saturates for out-of-range floats.
    (month_micros as i64).saturating_add(rest)
}

/// Adaptive precision: `time(p)`/`timestamp(p)` with p <= 3 are milliseconds,
/// otherwise (including no modifier) microseconds.
fn scale_micros(micros: i64, typmod: i32) -> i64 {
    if (0..=3).contains(&typmod) {
        micros.div_euclid(1000)
    } else {
        micros
    }
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

fn write_array(out: &mut Vec<u8>, a: &Array<'_>, typmod: i32, mode: Temporal) {
    let dims: Vec<usize> = a
        .dims()
        .iter()
        .map(|d| usize::try_from(d.len).unwrap_or(0))
        .collect();
    let mut elements = a.elements().iter();
    write_dim(out, &dims, &mut elements, typmod, mode);
}

/// Nested JSON arrays for a multi-dimensional array (`[]` when empty).
fn write_dim<'v>(
    out: &mut Vec<u8>,
    dims: &[usize],
    elements: &mut impl Iterator<Item = &'v Value<'v>>,
    typmod: i32,
    mode: Temporal,
) {
    out.push(b'[');
    if let Some((&len, inner)) = dims.split_first() {
        for i in 0..len {
            if i > 0 {
                out.push(b',');
            }
            if inner.is_empty() {
                match elements.next() {
                    Some(v) => write_value(out, v, typmod, mode),
                    None => out.extend_from_slice(b"null"),
                }
            } else {
                write_dim(out, inner, elements, typmod, mode);
            }
        }
    }
    out.push(b']');
}

/// Debezium `ZonedTime`: the UTC time, `HH:MM:SS[.fraction]Z`.
struct ZonedTime(TimeTz);

impl fmt::Display for ZonedTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.0.time().micros() - i64::from(self.0.utc_offset_seconds()) * 1_000_000;
        write_hms_fraction(f, micros.rem_euclid(MICROS_PER_DAY))?;
        f.write_str("Z")
    }
}

/// Debezium `ZonedTimestamp`: ISO 8601 in UTC, `2024-01-15T04:05:06.123456Z`
/// (fraction digits trimmed of trailing zeros, none when whole seconds).
struct ZonedTimestamp(TimestampTz);

impl fmt::Display for ZonedTimestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ts = self.0.utc();
        let date: Date = ts.date();
        let (y, m, d) = date.ymd();
        if y < 0 {
            // ISO 8601 expanded year: 1 BC is year 0, 2 BC is -0001.
            write!(f, "{y:05}-{m:02}-{d:02}T")?;
        } else if y > 9999 {
            write!(f, "+{y}-{m:02}-{d:02}T")?;
        } else {
            write!(f, "{y:04}-{m:02}-{d:02}T")?;
        }
        write_hms_fraction(f, ts.time().micros())?;
        f.write_str("Z")
    }
}

fn write_hms_fraction(f: &mut fmt::Formatter<'_>, micros: i64) -> fmt::Result {
    let secs = micros / 1_000_000;
    let frac = micros % 1_000_000;
    write!(
        f,
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )?;
    if frac != 0 {
        let mut digits = format!("{frac:06}");
        while digits.ends_with('0') {
            digits.pop();
        }
        write!(f, ".{digits}")?;
    }
    Ok(())
}

struct DebugText<'a, 'v>(&'a Value<'v>);

impl fmt::Display for DebugText<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}
