//! Typed column values: [`decode_text`] and [`decode_binary`] turn one pgoutput
//! column into a [`Value`], chosen by the column's type OID.
//!
//! pgoutput sends a column as text (what the type's output function prints,
//! i.e. `SELECT col::text`) or, with `binary 'true'`, in the type's binary send
//! format. Both decoders accept every input without panicking: a value that
//! does not match its type's format is a [`ValueError`].
//!
//! Values borrow from the column bytes where they can (text, json, numeric
//! digits, enum labels, bytea in binary form) and allocate only where the
//! representation differs (hex-encoded bytea, binary numeric, unescaped array
//! elements). [`Value::into_owned`] detaches a value from the buffer.
//!
//! `NULL` and unchanged TOAST columns are not values a decoder sees; the tuple
//! layer maps them to [`Value::Null`] and [`Value::UnchangedToast`].

mod array;
mod datetime;
mod digits;
mod error;
mod interval;
mod network;
mod numeric;
mod scalar;
pub mod types;

use std::borrow::Cow;

pub use array::{decode_binary_array, decode_text_array, Array, ArrayDim, MAX_DIMS};
pub use datetime::{
    Date, Infinitable, JsonText, Time, TimeTz, Timestamp, TimestampTz, UtcTimestampText,
};
pub use digits::leading_digits;
pub use error::ValueError;
pub use interval::{Interval, Iso8601Interval};
pub use network::{Inet, MacAddr, MacAddr8};
pub use numeric::Numeric;
pub use scalar::Uuid;

use crate::{Lsn, Oid};

/// One decoded column value.
///
/// Dates and timestamps keep `infinity` / `-infinity` as explicit
/// [`Infinitable`] variants; `numeric` is an exact decimal string; types this
/// crate does not know (enums, domains of unknown types, extensions) are kept
/// as [`Value::Other`] text or [`Value::OtherBinary`] bytes with their OID.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value<'a> {
    /// SQL `NULL`.
    Null,
    /// A TOASTed column the server did not send because it did not change
    /// (pgoutput's `u`). Its value is unknown, and it is **not** `NULL`.
    UnchangedToast,
    /// `bool`
    Bool(bool),
    /// `int2`
    Int2(i16),
    /// `int4`
    Int4(i32),
    /// `int8`
    Int8(i64),
    /// `oid`
    Oid(Oid),
    /// `float4` (`NaN` and infinities included)
    Float4(f32),
    /// `float8` (`NaN` and infinities included)
    Float8(f64),
    /// `numeric`
    Numeric(Numeric<'a>),
    /// `text`, `varchar`, `bpchar` (with its padding), `name`
    Text(Cow<'a, str>),
    /// `"char"`: a single byte (0 for the empty string).
    Char(u8),
    /// `bytea`
    Bytea(Cow<'a, [u8]>),
    /// `json`, verbatim
    Json(Cow<'a, str>),
    /// `jsonb` as the server prints it (binary form: after the version byte)
    Jsonb(Cow<'a, str>),
    /// `uuid`
    Uuid(Uuid),
    /// `date`
    Date(Infinitable<Date>),
    /// `time`
    Time(Time),
    /// `timetz`
    TimeTz(TimeTz),
    /// `timestamp`
    Timestamp(Infinitable<Timestamp>),
    /// `timestamptz`
    TimestampTz(Infinitable<TimestampTz>),
    /// `interval`
    Interval(Interval),
    /// `inet` or `cidr` (see [`Inet::is_cidr`])
    Inet(Inet),
    /// `macaddr`
    MacAddr(MacAddr),
    /// `macaddr8`
    MacAddr8(MacAddr8),
    /// `pg_lsn`
    PgLsn(Lsn),
    /// An array of any of the above.
    Array(Array<'a>),
    /// A type this crate does not know, in text form (enum labels arrive this way).
    Other {
        /// The column's type OID.
        type_oid: Oid,
        /// The text the server sent.
        text: Cow<'a, str>,
    },
    /// A type this crate does not know, in binary form.
    OtherBinary {
        /// The column's type OID.
        type_oid: Oid,
        /// The bytes the server sent.
        bytes: Cow<'a, [u8]>,
    },
}

impl Value<'_> {
    /// The PostgreSQL type name of this value (`"int4"`, `"timestamptz"`, `"_text"` for a
    /// text array); `"null"`, `"unchanged_toast"`, `"unknown"` for the non-typed variants.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::UnchangedToast => "unchanged_toast",
            Value::Bool(_) => "bool",
            Value::Int2(_) => "int2",
            Value::Int4(_) => "int4",
            Value::Int8(_) => "int8",
            Value::Oid(_) => "oid",
            Value::Float4(_) => "float4",
            Value::Float8(_) => "float8",
            Value::Numeric(_) => "numeric",
            Value::Text(_) => "text",
            Value::Char(_) => "char",
            Value::Bytea(_) => "bytea",
            Value::Json(_) => "json",
            Value::Jsonb(_) => "jsonb",
            Value::Uuid(_) => "uuid",
            Value::Date(_) => "date",
            Value::Time(_) => "time",
            Value::TimeTz(_) => "timetz",
            Value::Timestamp(_) => "timestamp",
            Value::TimestampTz(_) => "timestamptz",
            Value::Interval(_) => "interval",
            Value::Inet(i) if i.is_cidr() => "cidr",
            Value::Inet(_) => "inet",
            Value::MacAddr(_) => "macaddr",
            Value::MacAddr8(_) => "macaddr8",
            Value::PgLsn(_) => "pg_lsn",
            Value::Array(a) => types::array_type(a.element_type())
                .and_then(types::type_name)
                .unwrap_or("array"),
            Value::Other { type_oid, .. } | Value::OtherBinary { type_oid, .. } => {
                types::type_name(*type_oid).unwrap_or("unknown")
            }
        }
    }

    /// Whether this is [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The same value with no borrow of the column bytes.
    pub fn into_owned(self) -> Value<'static> {
        fn own(s: Cow<'_, str>) -> Cow<'static, str> {
            Cow::Owned(s.into_owned())
        }
        match self {
            Value::Null => Value::Null,
            Value::UnchangedToast => Value::UnchangedToast,
            Value::Bool(v) => Value::Bool(v),
            Value::Int2(v) => Value::Int2(v),
            Value::Int4(v) => Value::Int4(v),
            Value::Int8(v) => Value::Int8(v),
            Value::Oid(v) => Value::Oid(v),
            Value::Float4(v) => Value::Float4(v),
            Value::Float8(v) => Value::Float8(v),
            Value::Numeric(v) => Value::Numeric(v.into_owned()),
            Value::Text(v) => Value::Text(own(v)),
            Value::Char(v) => Value::Char(v),
            Value::Bytea(v) => Value::Bytea(Cow::Owned(v.into_owned())),
            Value::Json(v) => Value::Json(own(v)),
            Value::Jsonb(v) => Value::Jsonb(own(v)),
            Value::Uuid(v) => Value::Uuid(v),
            Value::Date(v) => Value::Date(v),
            Value::Time(v) => Value::Time(v),
            Value::TimeTz(v) => Value::TimeTz(v),
            Value::Timestamp(v) => Value::Timestamp(v),
            Value::TimestampTz(v) => Value::TimestampTz(v),
            Value::Interval(v) => Value::Interval(v),
            Value::Inet(v) => Value::Inet(v),
            Value::MacAddr(v) => Value::MacAddr(v),
            Value::MacAddr8(v) => Value::MacAddr8(v),
            Value::PgLsn(v) => Value::PgLsn(v),
            Value::Array(v) => Value::Array(v.into_owned()),
            Value::Other { type_oid, text } => Value::Other {
                type_oid,
                text: own(text),
            },
            Value::OtherBinary { type_oid, bytes } => Value::OtherBinary {
                type_oid,
                bytes: Cow::Owned(bytes.into_owned()),
            },
        }
    }
}

/// Decode a column sent in text form (the type's output function).
///
/// # Server settings
///
/// The text of some types depends on the walsender session's settings; this
/// decoder expects the defaults, which the replication connection should pin in
/// its startup options (`-c datestyle=ISO -c intervalstyle=postgres -c extra_float_digits=3`):
///
/// * `DateStyle` `ISO` (either field order): other styles are rejected.
/// * `IntervalStyle` `postgres`: other styles are rejected.
/// * `extra_float_digits` >= 1 (the default since PostgreSQL 12): lower values
///   make the server round floats before sending them.
/// * `TimeZone`: any. `timestamptz` text carries its offset and decodes to the
///   same instant whatever the zone; `timetz` keeps its own offset.
/// * `bytea_output`: `hex` or `escape`, both accepted.
///
/// ```
/// use cdc_core::{decode_text, types, Value};
///
/// assert_eq!(decode_text(types::INT4, b"-42")?, Value::Int4(-42));
/// let ts = decode_text(types::TIMESTAMPTZ, b"2024-06-01 12:00:00+05:30")?;
/// let Value::TimestampTz(ts) = ts else { unreachable!() };
/// assert_eq!(ts.to_string(), "2024-06-01 06:30:00+00");
/// # Ok::<(), cdc_core::ValueError>(())
/// ```
pub fn decode_text(type_oid: Oid, raw: &[u8]) -> Result<Value<'_>, ValueError> {
    use types::*;
    let oid = type_oid;
    Ok(match type_oid {
        BOOL => Value::Bool(scalar::bool_text(oid, raw)?),
        INT2 => Value::Int2(scalar::int_text(oid, raw)?),
        INT4 => Value::Int4(scalar::int_text(oid, raw)?),
        INT8 => Value::Int8(scalar::int_text(oid, raw)?),
        OID => Value::Oid(scalar::int_text(oid, raw)?),
        FLOAT4 => Value::Float4(scalar::float_text(
            oid,
            raw,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        )?),
        FLOAT8 => Value::Float8(scalar::float_text(
            oid,
            raw,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        )?),
        NUMERIC => Value::Numeric(numeric::numeric_text(oid, raw)?),
        TEXT | VARCHAR | BPCHAR | NAME => Value::Text(scalar::text(oid, raw)?),
        CHAR => Value::Char(scalar::char_text(oid, raw)?),
        BYTEA => Value::Bytea(Cow::Owned(scalar::bytea_text(oid, raw)?)),
        JSON => Value::Json(scalar::text(oid, raw)?),
        JSONB => Value::Jsonb(scalar::text(oid, raw)?),
        UUID => Value::Uuid(scalar::uuid_text(oid, raw)?),
        DATE => Value::Date(datetime::date_text(oid, raw)?),
        TIME => Value::Time(datetime::time_text(oid, raw)?),
        TIMETZ => Value::TimeTz(datetime::timetz_text(oid, raw)?),
        TIMESTAMP => Value::Timestamp(datetime::timestamp_text(oid, raw)?),
        TIMESTAMPTZ => Value::TimestampTz(datetime::timestamptz_text(oid, raw)?),
        INTERVAL => Value::Interval(interval::interval_text(oid, raw)?),
        INET => Value::Inet(network::inet_text(oid, raw, false)?),
        CIDR => Value::Inet(network::inet_text(oid, raw, true)?),
        MACADDR => Value::MacAddr(MacAddr(network::mac_text(oid, raw)?)),
        MACADDR8 => Value::MacAddr8(MacAddr8(network::mac_text(oid, raw)?)),
        PG_LSN => Value::PgLsn(scalar::lsn_text(oid, raw)?),
        _ => match types::element_type(type_oid) {
            Some(element) => Value::Array(decode_text_array(type_oid, element, raw)?),
            None => Value::Other {
                type_oid,
                text: scalar::text(oid, raw)?,
            },
        },
    })
}

/// Whether `raw` decodes as text of type `type_oid`: exactly when
/// [`decode_text`] succeeds, with the same error when it does not, but
/// without building the value for the commonest types (integers, text,
/// `numeric`, and `timestamptz` in the server's UTC form).
///
/// ```
/// use cdc_core::{decode_text, types, validate_text};
///
/// assert!(validate_text(types::INT4, b"-42").is_ok());
/// assert_eq!(validate_text(types::INT2, b"40000").err(), decode_text(types::INT2, b"40000").err());
/// ```
#[inline]
pub fn validate_text(type_oid: Oid, raw: &[u8]) -> Result<(), ValueError> {
    use types::*;
    match type_oid {
        INT2 => scalar::int_text::<i16>(type_oid, raw).map(drop),
        INT4 => scalar::int_text::<i32>(type_oid, raw).map(drop),
        INT8 => scalar::int_text::<i64>(type_oid, raw).map(drop),
        OID => scalar::int_text::<u32>(type_oid, raw).map(drop),
        TEXT | VARCHAR | BPCHAR | NAME | JSON | JSONB => scalar::validate_utf8(type_oid, raw),
        NUMERIC => numeric::validate_numeric_text(type_oid, raw),
        // Text in the server's UTC form needs only its fields' ranges checked.
        TIMESTAMPTZ if UtcTimestampText::parse(raw).is_some() => Ok(()),
        _ => decode_text(type_oid, raw).map(drop),
    }
}

/// Whether `raw` decodes as the binary form of type `type_oid`: exactly
/// when [`decode_binary`] succeeds, with the same error when it does not,
/// without building the value for the commonest types.
#[inline]
pub fn validate_binary(type_oid: Oid, raw: &[u8]) -> Result<(), ValueError> {
    use types::*;
    match type_oid {
        TEXT | VARCHAR | BPCHAR | NAME => scalar::validate_utf8(type_oid, raw),
        NUMERIC => numeric::validate_numeric_binary(type_oid, raw),
        _ => decode_binary(type_oid, raw).map(drop),
    }
}

/// Decode a column sent in binary form (the type's send function).
///
/// ```
/// use cdc_core::{decode_binary, types, Value};
///
/// assert_eq!(decode_binary(types::INT8, &7i64.to_be_bytes())?, Value::Int8(7));
/// // numeric 12.50: 2 base-10000 digits [12, 5000], weight 0, positive, scale 2.
/// let raw = [0, 2, 0, 0, 0, 0, 0, 2, 0, 12, 0x13, 0x88];
/// let Value::Numeric(n) = decode_binary(types::NUMERIC, &raw)? else { unreachable!() };
/// assert_eq!(n.as_str(), "12.50");
/// # Ok::<(), cdc_core::ValueError>(())
/// ```
pub fn decode_binary(type_oid: Oid, raw: &[u8]) -> Result<Value<'_>, ValueError> {
    use scalar::fixed;
    use types::*;
    let oid = type_oid;
    Ok(match type_oid {
        BOOL => Value::Bool(scalar::bool_binary(oid, raw)?),
        INT2 => Value::Int2(i16::from_be_bytes(fixed(oid, raw)?)),
        INT4 => Value::Int4(i32::from_be_bytes(fixed(oid, raw)?)),
        INT8 => Value::Int8(i64::from_be_bytes(fixed(oid, raw)?)),
        OID => Value::Oid(u32::from_be_bytes(fixed(oid, raw)?)),
        FLOAT4 => Value::Float4(f32::from_be_bytes(fixed(oid, raw)?)),
        FLOAT8 => Value::Float8(f64::from_be_bytes(fixed(oid, raw)?)),
        NUMERIC => Value::Numeric(numeric::numeric_binary(oid, raw)?),
        TEXT | VARCHAR | BPCHAR | NAME => Value::Text(scalar::text(oid, raw)?),
        CHAR => Value::Char(u8::from_be_bytes(fixed(oid, raw)?)),
        BYTEA => Value::Bytea(Cow::Borrowed(raw)),
        JSON => Value::Json(scalar::text(oid, raw)?),
        JSONB => match raw.split_first() {
            Some((1, json)) => Value::Jsonb(scalar::text(oid, json)?),
            _ => return Err(ValueError::binary(oid, raw, "unsupported jsonb version")),
        },
        UUID => Value::Uuid(Uuid(fixed(oid, raw)?)),
        DATE => Value::Date(datetime::date_binary(oid, fixed(oid, raw)?)?),
        TIME => Value::Time(datetime::time_binary(oid, fixed(oid, raw)?)?),
        TIMETZ => Value::TimeTz(datetime::timetz_binary(oid, fixed(oid, raw)?)?),
        TIMESTAMP => Value::Timestamp(datetime::timestamp_binary(oid, fixed(oid, raw)?)?),
        TIMESTAMPTZ => Value::TimestampTz(datetime::timestamptz_binary(oid, fixed(oid, raw)?)?),
        INTERVAL => Value::Interval(interval::interval_binary(fixed(oid, raw)?)),
        INET => Value::Inet(network::inet_binary(oid, raw, false)?),
        CIDR => Value::Inet(network::inet_binary(oid, raw, true)?),
        MACADDR => Value::MacAddr(MacAddr(fixed(oid, raw)?)),
        MACADDR8 => Value::MacAddr8(MacAddr8(fixed(oid, raw)?)),
        PG_LSN => Value::PgLsn(Lsn::from_u64(u64::from_be_bytes(fixed(oid, raw)?))),
        _ => match types::element_type(type_oid) {
            Some(element) => Value::Array(decode_binary_array(type_oid, element, raw)?),
            None => Value::OtherBinary {
                type_oid,
                bytes: Cow::Borrowed(raw),
            },
        },
    })
}
