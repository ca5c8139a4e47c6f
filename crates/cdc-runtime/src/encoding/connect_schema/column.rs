//! The Connect schema of one column, as Debezium 2.7's PostgreSQL connector
//! declares it (`PostgresValueConverter.schemaBuilder`, falling back to
//! `JdbcValueConverters.schemaBuilder` for the types the JDBC driver knows),
//! in each `*.handling.mode` and `time.precision.mode`.
//!
//! The values of `encoding/value.rs` must have the types declared here.
//!
//! Where Debezium declares no schema (the type is unknown to it, so with
//! its default `include.unknown.datatypes=false` it leaves the column out of
//! its events), pgcdc keeps the column and declares what it writes: see
//! [`column_schema`].

use cdc_core::types::*;
use cdc_core::Oid;

use super::node::{Field, Kind, Schema};
use crate::encoding::{
    BinaryHandlingMode, DebeziumOptions, DecimalHandlingMode, HstoreHandlingMode,
    IntervalHandlingMode, TimePrecisionMode,
};
use crate::event::{ColumnFacts, ColumnSchema};

// Builtin type OIDs cdc-core does not name (pg_type.dat).
const XML: Oid = 142;
const XML_ARRAY: Oid = 143;
const POINT: Oid = 600;
const LSEG: Oid = 601;
const PATH: Oid = 602;
const BOX: Oid = 603;
const POLYGON: Oid = 604;
const LINE: Oid = 628;
const CIRCLE: Oid = 718;
const MONEY: Oid = 790;
const MONEY_ARRAY: Oid = 791;
const POINT_ARRAY: Oid = 1017;
const BIT: Oid = 1560;
const BIT_ARRAY: Oid = 1561;
const VARBIT: Oid = 1562;
const VARBIT_ARRAY: Oid = 1563;
const REFCURSOR_ARRAY: Oid = 2201;
const INT4RANGE: Oid = 3904;
const INT4RANGE_ARRAY: Oid = 3905;
const NUMRANGE: Oid = 3906;
const NUMRANGE_ARRAY: Oid = 3907;
const TSRANGE: Oid = 3908;
const TSRANGE_ARRAY: Oid = 3909;
const TSTZRANGE: Oid = 3910;
const TSTZRANGE_ARRAY: Oid = 3911;
const DATERANGE: Oid = 3912;
const DATERANGE_ARRAY: Oid = 3913;
const INT8RANGE: Oid = 3926;
const INT8RANGE_ARRAY: Oid = 3927;

/// Debezium's `money.fraction.digits` default.
const MONEY_FRACTION_DIGITS: i32 = 2;

/// The schema of column `col` (`facts`: what the catalog says about it).
///
/// `optional` is `!not_null` (every column is optional without facts). A
/// domain is declared as its base type, as Debezium resolves it.
///
/// **Deviation:** for a type Debezium 2.7 does not map (`pg_lsn`,
/// `tsvector`, the geometric types but `point`, arrays of `bytea`, `name`,
/// `interval`, `money`, `xml`, `point`, `varbit`, extension types it does
/// not know), Debezium drops the column from its events; pgcdc keeps it and
/// declares the type its value has: a string (the server's text), a number
/// for `pg_lsn`, an array of the element's schema for arrays.
///
/// **Deviation:** an array of enums is an array of optional strings, not
/// Debezium's array of `Enum`: the facts carry no element labels.
pub(crate) fn column_schema(
    col: &ColumnSchema,
    facts: Option<&ColumnFacts>,
    opts: &DebeziumOptions,
) -> Schema {
    let not_null = facts.is_some_and(|f| f.not_null);
    let oid = facts
        .and_then(|f| f.domain_base_oid)
        .unwrap_or(col.type_oid);
    let ty = Column {
        oid,
        typmod: col.type_modifier,
        type_name: facts.and_then(|f| f.type_name.as_deref()),
        enum_labels: facts.and_then(|f| f.enum_labels.as_deref()),
    };
    ty.schema(opts).optional_if(!not_null)
}

/// What the mapping looks at.
#[derive(Debug, Clone, Copy)]
struct Column<'a> {
    oid: Oid,
    typmod: i32,
    type_name: Option<&'a str>,
    enum_labels: Option<&'a [std::sync::Arc<str>]>,
}

impl Column<'_> {
    fn schema(&self, opts: &DebeziumOptions) -> Schema {
        let (oid, typmod) = (self.oid, self.typmod);
        match oid {
            BOOL => Schema::boolean(),
            INT2 => Schema::int16(),
            INT4 => Schema::int32(),
            // `oid` is unsigned 32-bit: Debezium widens it.
            INT8 | OID => Schema::int64(),
            FLOAT4 => Schema::float32(),
            FLOAT8 => Schema::float64(),
            TEXT | VARCHAR | BPCHAR | NAME | CHAR => Schema::string(),
            INET | CIDR | MACADDR | MACADDR8 => Schema::string(),
            INT4RANGE | NUMRANGE | TSRANGE | TSTZRANGE | DATERANGE | INT8RANGE => Schema::string(),
            BIT | VARBIT | BIT_ARRAY => bits(typmod),
            BYTEA => binary(opts.binary_handling_mode),
            JSON | JSONB => json(),
            XML => Schema::logical(Kind::String, "io.debezium.data.Xml"),
            UUID => uuid(),
            POINT => point(),
            MONEY => money(opts.decimal_handling_mode),
            NUMERIC => numeric(typmod, opts.decimal_handling_mode),
            DATE => date(opts.time_precision_mode),
            TIME => time(typmod, opts.time_precision_mode),
            TIMESTAMP => timestamp(typmod, opts.time_precision_mode),
            TIMESTAMPTZ => zoned_timestamp(),
            TIMETZ => zoned_time(),
            INTERVAL => match opts.interval_handling_mode {
                IntervalHandlingMode::Numeric => {
                    Schema::logical(Kind::Int64, "io.debezium.time.MicroDuration")
                }
                IntervalHandlingMode::String => {
                    Schema::logical(Kind::String, "io.debezium.time.Interval")
                }
            },
            // Not mapped by Debezium (see `column_schema`): what pgcdc writes.
            PG_LSN => Schema::int64(),
            LSEG | PATH | BOX | POLYGON | LINE | CIRCLE => Schema::string(),
            _ => self.array_or_extension(opts),
        }
    }

    /// Arrays, enums and extension types (known by name, not OID).
    fn array_or_extension(&self, opts: &DebeziumOptions) -> Schema {
        let (oid, typmod) = (self.oid, self.typmod);
        let items = match oid {
            INT2_ARRAY => Schema::int16().optional(),
            INT4_ARRAY => Schema::int32().optional(),
            INT8_ARRAY | OID_ARRAY => Schema::int64().optional(),
            CHAR_ARRAY | VARCHAR_ARRAY | TEXT_ARRAY | BPCHAR_ARRAY | INET_ARRAY | CIDR_ARRAY
            | MACADDR_ARRAY | MACADDR8_ARRAY | TSRANGE_ARRAY | TSTZRANGE_ARRAY
            | DATERANGE_ARRAY | INT4RANGE_ARRAY | NUMRANGE_ARRAY | INT8RANGE_ARRAY => {
                Schema::string().optional()
            }
            NUMERIC_ARRAY => numeric(typmod, opts.decimal_handling_mode).optional(),
            FLOAT4_ARRAY => Schema::float32().optional(),
            FLOAT8_ARRAY => Schema::float64().optional(),
            BOOL_ARRAY => Schema::boolean().optional(),
            DATE_ARRAY => date(opts.time_precision_mode).optional(),
            UUID_ARRAY => uuid().optional(),
            JSON_ARRAY | JSONB_ARRAY => json().optional(),
            // Debezium 2.7 declares `time[]` as MicroTime in every mode.
            TIME_ARRAY => micro_time().optional(),
            TIMETZ_ARRAY => zoned_time().optional(),
            TIMESTAMP_ARRAY => timestamp(typmod, opts.time_precision_mode).optional(),
            TIMESTAMPTZ_ARRAY => zoned_timestamp().optional(),
            // Not mapped by Debezium 2.7 (see `column_schema`).
            BYTEA_ARRAY => binary(opts.binary_handling_mode).optional(),
            NAME_ARRAY | MONEY_ARRAY | XML_ARRAY | POINT_ARRAY | VARBIT_ARRAY | REFCURSOR_ARRAY => {
                Schema::string().optional()
            }
            INTERVAL_ARRAY => Column {
                oid: INTERVAL,
                ..*self
            }
            .schema(opts)
            .optional(),
            PG_LSN_ARRAY => Schema::int64().optional(),
            _ => return self.by_name(opts),
        };
        Schema::array(items)
    }

    /// Types that have no fixed OID: enums and extension types, recognised
    /// by the catalog's type name (`_name` for an array of `name`).
    fn by_name(&self, opts: &DebeziumOptions) -> Schema {
        // Labels are the facts of an enum column (the catalog lookup gives
        // them for `typtype = 'e'` only, so never for an array of enums,
        // which Debezium would declare as an array of required Enums).
        if let Some(labels) = self.enum_labels {
            let joined = labels.iter().map(|l| &**l).collect::<Vec<&str>>().join(",");
            return Schema::logical(Kind::String, "io.debezium.data.Enum").param("allowed", joined);
        }
        let name = self.type_name.unwrap_or("");
        let (element, is_array) = match name.strip_prefix('_') {
            Some(element) => (element, true),
            None => (name, false),
        };
        let scalar = match element {
            "hstore" => hstore(opts.hstore_handling_mode),
            "ltree" => Schema::logical(Kind::String, "io.debezium.data.Ltree"),
            "citext" | "isbn" => Schema::string(),
            "geometry" => geometry("io.debezium.data.geometry.Geometry", "Geometry"),
            "geography" => geometry("io.debezium.data.geometry.Geography", "Geography"),
            // Not mapped by Debezium (see `column_schema`): the text.
            _ => Schema::string(),
        };
        if is_array {
            Schema::array(scalar.optional())
        } else {
            scalar
        }
    }
}

/// `bit(n)`/`varbit(n)`: Debezium's `Bits` when longer than one bit, else a
/// boolean. (Debezium declares `bit(n)[]` the same way, not as an array.)
/// A `varbit` without a length is `Bits` too, as its value is (see
/// `value/bits.rs`), with the largest length.
fn bits(typmod: i32) -> Schema {
    if crate::encoding::value::is_bits_boolean(typmod) {
        Schema::boolean()
    } else {
        let length = if typmod > 1 { typmod } else { i32::MAX };
        Schema::logical(Kind::Bytes, "io.debezium.data.Bits").param("length", length.to_string())
    }
}

/// `binary.handling.mode`: bytes, or a string in the other modes.
pub(super) fn binary(mode: BinaryHandlingMode) -> Schema {
    match mode {
        BinaryHandlingMode::Bytes => Schema::bytes(),
        BinaryHandlingMode::Base64
        | BinaryHandlingMode::Base64UrlSafe
        | BinaryHandlingMode::Hex => Schema::string(),
    }
}

fn json() -> Schema {
    Schema::logical(Kind::String, "io.debezium.data.Json")
}

fn uuid() -> Schema {
    Schema::logical(Kind::String, "io.debezium.data.Uuid")
}

fn point() -> Schema {
    Schema::structure(vec![
        Field::new("x", Schema::float64()),
        Field::new("y", Schema::float64()),
        Field::new("wkb", Schema::bytes().optional()),
        Field::new("srid", Schema::int32().optional()),
    ])
    .named("io.debezium.data.geometry.Point")
    .version(1)
    .doc("Geometry (POINT)")
}

fn geometry(name: &'static str, doc: &'static str) -> Schema {
    Schema::structure(vec![
        Field::new("wkb", Schema::bytes()),
        Field::new("srid", Schema::int32().optional()),
    ])
    .named(name)
    .version(1)
    .doc(doc)
}

fn hstore(mode: HstoreHandlingMode) -> Schema {
    match mode {
        HstoreHandlingMode::Json => json(),
        // Keys cannot be null, values can.
        HstoreHandlingMode::Map => Schema::map(Schema::string(), Schema::string().optional()),
    }
}

/// Connect's `Decimal` of `scale`.
fn decimal(scale: i32) -> Schema {
    Schema::logical(Kind::Bytes, "org.apache.kafka.connect.data.Decimal")
        .param("scale", scale.to_string())
}

/// `money`: `Decimal` with Debezium's `money.fraction.digits` (no precision
/// parameter), or a string or double.
fn money(mode: DecimalHandlingMode) -> Schema {
    match mode {
        DecimalHandlingMode::Precise => decimal(MONEY_FRACTION_DIGITS),
        DecimalHandlingMode::String => Schema::string(),
        DecimalHandlingMode::Double => Schema::float64(),
    }
}

/// `numeric(p,s)` / `numeric`: in `precise` mode, `Decimal` with its scale
/// and a `connect.decimal.precision` parameter, or Debezium's
/// `VariableScaleDecimal` struct when the column declares no precision.
fn numeric(typmod: i32, mode: DecimalHandlingMode) -> Schema {
    match (mode, numeric_precision_scale(typmod)) {
        (DecimalHandlingMode::Precise, None) => Schema::structure(vec![
            Field::new("scale", Schema::int32()),
            Field::new("value", Schema::bytes()),
        ])
        .named("io.debezium.data.VariableScaleDecimal")
        .version(1)
        .doc("Variable scaled decimal"),
        (DecimalHandlingMode::Precise, Some((precision, scale))) => {
            decimal(scale).param("connect.decimal.precision", precision.to_string())
        }
        (DecimalHandlingMode::String, _) => Schema::string(),
        (DecimalHandlingMode::Double, _) => Schema::float64(),
    }
}

/// The declared precision and scale of a `numeric` from its type modifier
/// (`((precision << 16) | (scale & 0x7ff)) + 4`; PostgreSQL 15 allows a
/// negative scale, stored in 11 bits), or `None` without one.
fn numeric_precision_scale(typmod: i32) -> Option<(i32, i32)> {
    let t = typmod.checked_sub(4).filter(|t| *t >= 0)?;
    let precision = (t >> 16) & 0xffff;
    let scale = ((t & 0x7ff) ^ 1024) - 1024;
    Some((precision, scale))
}

/// The fractional-seconds precision of `time(p)`/`timestamp(p)`: `p`, or 6
/// when none is declared.
fn precision(typmod: i32) -> i32 {
    if typmod >= 0 {
        typmod
    } else {
        6
    }
}

fn date(mode: TimePrecisionMode) -> Schema {
    match mode {
        TimePrecisionMode::Adaptive | TimePrecisionMode::AdaptiveTimeMicroseconds => {
            Schema::logical(Kind::Int32, "io.debezium.time.Date")
        }
        TimePrecisionMode::Connect => {
            Schema::logical(Kind::Int32, "org.apache.kafka.connect.data.Date")
        }
    }
}

fn micro_time() -> Schema {
    Schema::logical(Kind::Int64, "io.debezium.time.MicroTime")
}

fn time(typmod: i32, mode: TimePrecisionMode) -> Schema {
    match mode {
        TimePrecisionMode::Adaptive if precision(typmod) <= 3 => {
            Schema::logical(Kind::Int32, "io.debezium.time.Time")
        }
        TimePrecisionMode::Adaptive | TimePrecisionMode::AdaptiveTimeMicroseconds => micro_time(),
        TimePrecisionMode::Connect => {
            Schema::logical(Kind::Int32, "org.apache.kafka.connect.data.Time")
        }
    }
}

fn timestamp(typmod: i32, mode: TimePrecisionMode) -> Schema {
    match mode {
        TimePrecisionMode::Adaptive | TimePrecisionMode::AdaptiveTimeMicroseconds => {
            if precision(typmod) <= 3 {
                Schema::logical(Kind::Int64, "io.debezium.time.Timestamp")
            } else {
                Schema::logical(Kind::Int64, "io.debezium.time.MicroTimestamp")
            }
        }
        TimePrecisionMode::Connect => {
            Schema::logical(Kind::Int64, "org.apache.kafka.connect.data.Timestamp")
        }
    }
}

fn zoned_timestamp() -> Schema {
    Schema::logical(Kind::String, "io.debezium.time.ZonedTimestamp")
}

fn zoned_time() -> Schema {
    Schema::logical(Kind::String, "io.debezium.time.ZonedTime")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_type_modifiers_decode_like_the_server() {
        // numeric(10,2), numeric(5), numeric(5,-2), numeric(1000,999), numeric.
        let typmod = |p: i32, s: i32| ((p << 16) | (s & 0x7ff)) + 4;
        assert_eq!(numeric_precision_scale(typmod(10, 2)), Some((10, 2)));
        assert_eq!(numeric_precision_scale(typmod(5, 0)), Some((5, 0)));
        assert_eq!(numeric_precision_scale(typmod(5, -2)), Some((5, -2)));
        assert_eq!(
            numeric_precision_scale(typmod(1000, 999)),
            Some((1000, 999))
        );
        assert_eq!(numeric_precision_scale(-1), None);
        assert_eq!(numeric_precision_scale(i32::MIN), None);
    }
}
