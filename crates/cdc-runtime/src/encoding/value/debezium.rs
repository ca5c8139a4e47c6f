//! One column value as the Debezium PostgreSQL connector (2.7) writes it
//! with the Kafka Connect JSON converter, per [`DebeziumOptions`].
//!
//! | PostgreSQL | Debezium JSON |
//! |---|---|
//! | `bool` | `true`/`false` |
//! | `int2`, `int4`, `int8`, `oid` | number |
//! | `float4`, `float8` | number as Java writes it (`1.0`, `1.0E10`); `"NaN"`, `"Infinity"` |
//! | `numeric`, `money` | see [`decimal`](super::decimal) |
//! | `text`, `varchar`, `bpchar` (padded), `"char"`, `name`, `citext`, `ltree`, `xml`, `tsvector` | string |
//! | `json`, `jsonb` (`io.debezium.data.Json`) | the JSON text in a string |
//! | `uuid`, `inet`, `cidr`, `macaddr`, `macaddr8` | string |
//! | enums (`io.debezium.data.Enum`) | the label |
//! | ranges (`int4range`, `tstzrange`, …) | the server's text |
//! | `bytea` | per `binary.handling.mode`, see [`binary`](super::binary) |
//! | `bit(1)`, `varbit(1)` / `bit(n)`, `varbit` | boolean / `Bits`, see [`bits`](super::bits) |
//! | dates and times, `interval` | see [`temporal`](super::temporal) |
//! | `point` | `{"x":…,"y":…,"wkb":…,"srid":null}` |
//! | `hstore` | see [`hstore`](super::hstore) |
//! | domains | as their base type |
//! | arrays | JSON arrays of the elements as above |
//!
//! Deliberate differences from Debezium 2.7 (a table for the README):
//!
//! | type | Debezium | pgcdc |
//! |---|---|---|
//! | `pg_lsn`, `tsquery`, `txid_snapshot`, `box`, `circle`, `line`, `lseg`, `path`, `polygon`, arrays of `money`, `interval`, `varbit`, `xml`, `point`, `name`, `bytea` | left out of the record (no converter unless `include.unknown.datatypes`) | `pg_lsn` a number; the others their text (arrays as JSON arrays where pgcdc decodes them) |
//! | `numeric` `NaN`/`±Infinity`, `decimal.handling.mode=precise` | the connector stops | `null` |
//! | `interval` `±infinity` (PostgreSQL 17) | cannot be read | `"infinity"`/`"-infinity"` |
//! | `money` whose text cannot be parsed | the connector stops | `null` |
//! | NOT NULL column missing from a `before` | the column's `DEFAULT` if Debezium could parse it, else the type's default | always the type's default |
//! | multi-dimensional arrays | flattened by the JDBC driver | nested JSON arrays |
//! | PostGIS `geometry`/`geography` | `{"wkb":…,"srid":…}` | the server's text (hex EWKB) |
//! | pgvector `vector`, `halfvec`, `sparsevec` | arrays / a struct (newer connectors) | the server's text |
//! | a domain with a type modifier (`numeric(8,2)` domain) | the domain's precision and scale | the column's `atttypmod` (-1 for a domain column: `numeric` domains are `VariableScaleDecimal`) |
//! | `money` under `decimal.handling.mode=string` | `toPlainString` of the parsed amount | the same; older connectors went through a `double` |

use std::sync::Arc;

use cdc_core::types;
use cdc_core::{Oid, Value};

use super::super::json::{write_base64, write_display_str, write_int, write_str};
use super::plain::{write_array, write_char, DebugText};
use super::{binary, bits, decimal, hstore, java, point, temporal, toast};
use crate::encoding::DebeziumOptions;
use crate::event::ColumnFacts;

/// `money`.
pub(crate) const MONEY: Oid = 790;
/// `bit`.
pub(crate) const BIT: Oid = 1560;
/// `varbit`.
pub(crate) const VARBIT: Oid = 1562;
/// `point`.
pub(crate) const POINT: Oid = 600;

/// What a value is written by: its column's type and what the catalog
/// says about it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column<'a> {
    /// The type OID (an array's element type for its elements).
    pub(crate) oid: Oid,
    /// The type modifier.
    pub(crate) typmod: i32,
    /// The catalog facts, when known.
    pub(crate) facts: Option<&'a ColumnFacts>,
}

impl Column<'_> {
    /// Whether the type is the `hstore` extension's.
    pub(crate) fn is_hstore(&self) -> bool {
        self.type_name() == Some("hstore")
    }

    /// `pg_type.typname`, when known.
    pub(crate) fn type_name(&self) -> Option<&str> {
        self.facts.and_then(|f| f.type_name.as_deref())
    }

    /// The base type of a domain.
    fn domain_base(&self) -> Option<Oid> {
        self.facts
            .and_then(|f| f.domain_base_oid)
            .filter(|b| *b != self.oid)
    }

    /// The column of the domain's base type.
    pub(crate) fn base(&self) -> Option<Column<'static>> {
        self.domain_base().map(|oid| Column {
            oid,
            typmod: self.typmod,
            facts: None,
        })
    }

    /// The column of an element of this array column.
    fn element(&self, oid: Oid) -> Column<'static> {
        Column {
            oid,
            typmod: self.typmod,
            facts: None,
        }
    }
}

/// Writes `value` of column `c`.
pub(crate) fn write_value(
    out: &mut Vec<u8>,
    c: Column<'_>,
    value: &Value<'_>,
    o: &DebeziumOptions,
) {
    let time_mode = o.time_precision_mode;
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::UnchangedToast => toast::write_placeholder(out, c, o),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Int2(v) => write_int(out, *v),
        Value::Int4(v) => write_int(out, *v),
        Value::Int8(v) => write_int(out, *v),
        Value::Oid(v) => write_int(out, *v),
        Value::Float4(v) => java::write_float(out, *v),
        Value::Float8(v) => java::write_double(out, *v),
        Value::Numeric(n) => decimal::write_numeric(out, n, c.typmod, o.decimal_handling_mode),
        Value::Text(s) | Value::Json(s) | Value::Jsonb(s) => write_str(out, s),
        Value::Char(ch) => write_char(out, *ch),
        Value::Bytea(b) => binary::write_binary(out, b, o.binary_handling_mode),
        Value::Uuid(u) => write_display_str(out, u),
        Value::Inet(v) => write_display_str(out, v),
        Value::MacAddr(v) => write_display_str(out, v),
        Value::MacAddr8(v) => write_display_str(out, v),
        Value::PgLsn(lsn) => write_int(out, lsn.as_u64()),
        Value::Date(d) => temporal::write_date(out, d, time_mode),
        Value::Time(t) => temporal::write_time(out, *t, c.typmod, time_mode),
        Value::TimeTz(t) => temporal::write_timetz(out, *t),
        Value::Timestamp(ts) => temporal::write_timestamp(out, ts, c.typmod, time_mode),
        Value::TimestampTz(ts) => temporal::write_timestamptz(out, ts, c.typmod),
        Value::Interval(iv) => temporal::write_interval(out, *iv, o.interval_handling_mode),
        Value::Array(a) => {
            let element = c.element(a.element_type());
            write_array(out, a, &mut |out, v| write_value(out, element, v, o));
        }
        Value::Other { type_oid, text } => write_other_text(out, c, *type_oid, text, o),
        Value::OtherBinary { type_oid, bytes } => write_other_binary(out, c, *type_oid, bytes, o),
        // `Value` is non-exhaustive: a variant added later is written as text.
        #[allow(unreachable_patterns)]
        other => write_display_str(out, DebugText(other)),
    }
}

/// A type cdc-core keeps as text: domains by their base type, then the
/// types Debezium gives a shape of their own; strings otherwise (enums,
/// ranges, `xml`, `citext`, `ltree`, `tsvector`, …).
fn write_other_text(out: &mut Vec<u8>, c: Column<'_>, oid: Oid, text: &str, o: &DebeziumOptions) {
    if let Some(base) = c.base() {
        if let Ok(v) = cdc_core::decode_text(base.oid, text.as_bytes()) {
            return write_value(out, base, &v, o);
        }
    }
    if write_unknown_array(out, c, oid, text, o) {
        return;
    }
    let written = match oid {
        MONEY => match decimal::parse_money(text) {
            Some(m) => {
                decimal::write_money(out, &m, o.decimal_handling_mode);
                true
            }
            None => {
                out.extend_from_slice(b"null");
                true
            }
        },
        BIT | VARBIT => bits::write_bits_text(out, text.as_bytes(), c.typmod),
        POINT => point::parse_text(text)
            .map(|(x, y)| point::write_point(out, x, y))
            .is_some(),
        _ if c.is_hstore() => hstore::parse_text(text)
            .map(|pairs| hstore::write_pairs(out, pairs, o.hstore_handling_mode))
            .is_some(),
        _ => false,
    };
    if !written {
        write_str(out, text);
    }
}

/// An array cdc-core keeps as text (of enums, extension types, `money`,
/// bits, points): its elements as values of the element type, known by the
/// catalog's type name (`_mood` holds `mood`) or by OID for the builtins.
fn write_unknown_array(
    out: &mut Vec<u8>,
    c: Column<'_>,
    oid: Oid,
    text: &str,
    o: &DebeziumOptions,
) -> bool {
    let element_oid = match oid {
        791 => MONEY,
        1561 => BIT,
        1563 => VARBIT,
        1017 => POINT,
        _ => 0,
    };
    let element_name = c.type_name().and_then(|n| n.strip_prefix('_'));
    if element_oid == 0 && element_name.is_none() {
        return false;
    }
    let Ok(array) = cdc_core::decode_text_array(oid, element_oid, text.as_bytes()) else {
        return false;
    };
    let facts = ColumnFacts {
        type_name: element_name.map(Arc::from),
        ..ColumnFacts::default()
    };
    let element = Column {
        oid: element_oid,
        typmod: c.typmod,
        facts: Some(&facts),
    };
    write_array(out, &array, &mut |out, v| write_value(out, element, v, o));
    true
}

/// A type cdc-core keeps as bytes (the binary protocol): as
/// [`write_other_text`] where the send format is known, else base64.
fn write_other_binary(
    out: &mut Vec<u8>,
    c: Column<'_>,
    oid: Oid,
    bytes: &[u8],
    o: &DebeziumOptions,
) {
    if let Some(base) = c.base() {
        if let Ok(v) = cdc_core::decode_binary(base.oid, bytes) {
            return write_value(out, base, &v, o);
        }
    }
    let written = match oid {
        MONEY => match <[u8; 8]>::try_from(bytes) {
            Ok(b) => {
                let m =
                    decimal::Decimal::from_unscaled(i64::from_be_bytes(b), decimal::MONEY_SCALE);
                decimal::write_money(out, &m, o.decimal_handling_mode);
                true
            }
            Err(_) => false,
        },
        BIT | VARBIT => bits::write_bits_binary(out, bytes, c.typmod),
        POINT => point::parse_binary(bytes)
            .map(|(x, y)| point::write_point(out, x, y))
            .is_some(),
        _ if c.is_hstore() => hstore::parse_binary(bytes)
            .map(|pairs| hstore::write_pairs(out, pairs, o.hstore_handling_mode))
            .is_some(),
        // Enums, citext and other text-like types send their text.
        _ if c.facts.is_some_and(|f| f.enum_labels.is_some())
            || matches!(c.type_name(), Some("citext")) =>
        {
            match std::str::from_utf8(bytes) {
                Ok(text) => {
                    write_str(out, text);
                    true
                }
                Err(_) => false,
            }
        }
        _ => false,
    };
    if !written {
        write_base64(out, bytes);
    }
}

/// Whether `oid` is an array type (a builtin, or `_name` in the catalog).
pub(crate) fn is_array(c: &Column<'_>) -> bool {
    types::element_type(c.oid).is_some()
        || matches!(c.oid, 791 | 1561 | 1563 | 1017 | 143)
        || c.type_name().is_some_and(|n| n.starts_with('_'))
}
