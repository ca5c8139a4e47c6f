//! Builtin type OIDs (as in PostgreSQL's `pg_type.dat`) and the array table.
//!
//! Only the types that [`decode_text`](crate::decode_text) and
//! [`decode_binary`](crate::decode_binary) understand are listed. Any other OID
//! (enums, domains over unknown types, extension types, ...) is still decoded,
//! as [`Value::Other`](crate::Value::Other) or
//! [`Value::OtherBinary`](crate::Value::OtherBinary).

use crate::Oid;

/// `bool`
pub const BOOL: Oid = 16;
/// `bytea`
pub const BYTEA: Oid = 17;
/// `"char"`: the single-byte internal type.
pub const CHAR: Oid = 18;
/// `name`
pub const NAME: Oid = 19;
/// `int8` / `bigint`
pub const INT8: Oid = 20;
/// `int2` / `smallint`
pub const INT2: Oid = 21;
/// `int4` / `integer`
pub const INT4: Oid = 23;
/// `text`
pub const TEXT: Oid = 25;
/// `oid`
pub const OID: Oid = 26;
/// `json`
pub const JSON: Oid = 114;
/// `cidr`
pub const CIDR: Oid = 650;
/// `float4` / `real`
pub const FLOAT4: Oid = 700;
/// `float8` / `double precision`
pub const FLOAT8: Oid = 701;
/// `macaddr8`
pub const MACADDR8: Oid = 774;
/// `macaddr`
pub const MACADDR: Oid = 829;
/// `inet`
pub const INET: Oid = 869;
/// `bpchar` / `character(n)`
pub const BPCHAR: Oid = 1042;
/// `varchar` / `character varying(n)`
pub const VARCHAR: Oid = 1043;
/// `date`
pub const DATE: Oid = 1082;
/// `time` / `time without time zone`
pub const TIME: Oid = 1083;
/// `timestamp` / `timestamp without time zone`
pub const TIMESTAMP: Oid = 1114;
/// `timestamptz` / `timestamp with time zone`
pub const TIMESTAMPTZ: Oid = 1184;
/// `interval`
pub const INTERVAL: Oid = 1186;
/// `timetz` / `time with time zone`
pub const TIMETZ: Oid = 1266;
/// `numeric` / `decimal`
pub const NUMERIC: Oid = 1700;
/// `uuid`
pub const UUID: Oid = 2950;
/// `pg_lsn`
pub const PG_LSN: Oid = 3220;
/// `jsonb`
pub const JSONB: Oid = 3802;

/// `bool[]`
pub const BOOL_ARRAY: Oid = 1000;
/// `bytea[]`
pub const BYTEA_ARRAY: Oid = 1001;
/// `"char"[]`
pub const CHAR_ARRAY: Oid = 1002;
/// `name[]`
pub const NAME_ARRAY: Oid = 1003;
/// `int2[]`
pub const INT2_ARRAY: Oid = 1005;
/// `int4[]`
pub const INT4_ARRAY: Oid = 1007;
/// `text[]`
pub const TEXT_ARRAY: Oid = 1009;
/// `bpchar[]`
pub const BPCHAR_ARRAY: Oid = 1014;
/// `varchar[]`
pub const VARCHAR_ARRAY: Oid = 1015;
/// `int8[]`
pub const INT8_ARRAY: Oid = 1016;
/// `float4[]`
pub const FLOAT4_ARRAY: Oid = 1021;
/// `float8[]`
pub const FLOAT8_ARRAY: Oid = 1022;
/// `oid[]`
pub const OID_ARRAY: Oid = 1028;
/// `macaddr[]`
pub const MACADDR_ARRAY: Oid = 1040;
/// `inet[]`
pub const INET_ARRAY: Oid = 1041;
/// `cidr[]`
pub const CIDR_ARRAY: Oid = 651;
/// `macaddr8[]`
pub const MACADDR8_ARRAY: Oid = 775;
/// `json[]`
pub const JSON_ARRAY: Oid = 199;
/// `jsonb[]`
pub const JSONB_ARRAY: Oid = 3807;
/// `uuid[]`
pub const UUID_ARRAY: Oid = 2951;
/// `date[]`
pub const DATE_ARRAY: Oid = 1182;
/// `time[]`
pub const TIME_ARRAY: Oid = 1183;
/// `timestamp[]`
pub const TIMESTAMP_ARRAY: Oid = 1115;
/// `timestamptz[]`
pub const TIMESTAMPTZ_ARRAY: Oid = 1185;
/// `interval[]`
pub const INTERVAL_ARRAY: Oid = 1187;
/// `timetz[]`
pub const TIMETZ_ARRAY: Oid = 1270;
/// `numeric[]`
pub const NUMERIC_ARRAY: Oid = 1231;
/// `pg_lsn[]`
pub const PG_LSN_ARRAY: Oid = 3221;

/// `(array type, element type, element type name)` for every supported builtin.
const ARRAYS: &[(Oid, Oid, &str)] = &[
    (BOOL_ARRAY, BOOL, "bool"),
    (BYTEA_ARRAY, BYTEA, "bytea"),
    (CHAR_ARRAY, CHAR, "char"),
    (NAME_ARRAY, NAME, "name"),
    (INT2_ARRAY, INT2, "int2"),
    (INT4_ARRAY, INT4, "int4"),
    (TEXT_ARRAY, TEXT, "text"),
    (BPCHAR_ARRAY, BPCHAR, "bpchar"),
    (VARCHAR_ARRAY, VARCHAR, "varchar"),
    (INT8_ARRAY, INT8, "int8"),
    (FLOAT4_ARRAY, FLOAT4, "float4"),
    (FLOAT8_ARRAY, FLOAT8, "float8"),
    (OID_ARRAY, OID, "oid"),
    (MACADDR_ARRAY, MACADDR, "macaddr"),
    (INET_ARRAY, INET, "inet"),
    (CIDR_ARRAY, CIDR, "cidr"),
    (MACADDR8_ARRAY, MACADDR8, "macaddr8"),
    (JSON_ARRAY, JSON, "json"),
    (JSONB_ARRAY, JSONB, "jsonb"),
    (UUID_ARRAY, UUID, "uuid"),
    (DATE_ARRAY, DATE, "date"),
    (TIME_ARRAY, TIME, "time"),
    (TIMESTAMP_ARRAY, TIMESTAMP, "timestamp"),
    (TIMESTAMPTZ_ARRAY, TIMESTAMPTZ, "timestamptz"),
    (INTERVAL_ARRAY, INTERVAL, "interval"),
    (TIMETZ_ARRAY, TIMETZ, "timetz"),
    (NUMERIC_ARRAY, NUMERIC, "numeric"),
    (PG_LSN_ARRAY, PG_LSN, "pg_lsn"),
];

/// Every scalar OID this module decodes to a dedicated [`Value`](crate::Value) variant.
pub const SCALARS: &[Oid] = &[
    BOOL,
    BYTEA,
    CHAR,
    NAME,
    INT8,
    INT2,
    INT4,
    TEXT,
    OID,
    JSON,
    CIDR,
    FLOAT4,
    FLOAT8,
    MACADDR8,
    MACADDR,
    INET,
    BPCHAR,
    VARCHAR,
    DATE,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    INTERVAL,
    TIMETZ,
    NUMERIC,
    UUID,
    PG_LSN,
    JSONB,
];

/// The element type of a supported builtin array type (`1007` `int4[]` -> `23`).
///
/// `None` for scalars and for array types this crate does not know (arrays of
/// enums or extension types arrive as [`Value::Other`](crate::Value::Other)).
pub fn element_type(array_oid: Oid) -> Option<Oid> {
    ARRAYS
        .iter()
        .find(|(a, _, _)| *a == array_oid)
        .map(|(_, e, _)| *e)
}

/// The array type whose elements are `element_oid` (`23` -> `1007`), for the supported builtins.
pub fn array_type(element_oid: Oid) -> Option<Oid> {
    ARRAYS
        .iter()
        .find(|(_, e, _)| *e == element_oid)
        .map(|(a, _, _)| *a)
}

/// Every supported builtin array OID.
pub fn array_types() -> impl Iterator<Item = Oid> {
    ARRAYS.iter().map(|(a, _, _)| *a)
}

/// The text delimiter between array elements of this element type: `;` for `box`, `,` otherwise.
pub fn array_delimiter(element_oid: Oid) -> u8 {
    // `box` (603) is the only builtin with a different typdelim.
    if element_oid == 603 {
        b';'
    } else {
        b','
    }
}

/// PostgreSQL's name for a supported builtin type (`"int4"`, `"timestamptz"`, `"_int4"`...),
/// or `None` for an OID this crate does not know.
pub fn type_name(oid: Oid) -> Option<&'static str> {
    let name = match oid {
        BOOL => "bool",
        BYTEA => "bytea",
        CHAR => "char",
        NAME => "name",
        INT8 => "int8",
        INT2 => "int2",
        INT4 => "int4",
        TEXT => "text",
        OID => "oid",
        JSON => "json",
        CIDR => "cidr",
        FLOAT4 => "float4",
        FLOAT8 => "float8",
        MACADDR8 => "macaddr8",
        MACADDR => "macaddr",
        INET => "inet",
        BPCHAR => "bpchar",
        VARCHAR => "varchar",
        DATE => "date",
        TIME => "time",
        TIMESTAMP => "timestamp",
        TIMESTAMPTZ => "timestamptz",
        INTERVAL => "interval",
        TIMETZ => "timetz",
        NUMERIC => "numeric",
        UUID => "uuid",
        PG_LSN => "pg_lsn",
        JSONB => "jsonb",
        _ => {
            return ARRAYS
                .iter()
                .find(|(a, _, _)| *a == oid)
                .map(|(_, _, n)| array_name(n));
        }
    };
    Some(name)
}

/// A human label for messages: the type name, or `type <oid>` for unknown OIDs.
pub(crate) fn type_label(oid: Oid) -> TypeLabel {
    TypeLabel(oid)
}

/// [`Display`](std::fmt::Display)s a type name or `type <oid>`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TypeLabel(Oid);

impl std::fmt::Display for TypeLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match type_name(self.0) {
            Some(name) => f.write_str(name),
            None => write!(f, "type {}", self.0),
        }
    }
}

/// `_int4` style names for the array types, spelled out so they stay `&'static str`.
fn array_name(element: &str) -> &'static str {
    match element {
        "bool" => "_bool",
        "bytea" => "_bytea",
        "char" => "_char",
        "name" => "_name",
        "int2" => "_int2",
        "int4" => "_int4",
        "text" => "_text",
        "bpchar" => "_bpchar",
        "varchar" => "_varchar",
        "int8" => "_int8",
        "float4" => "_float4",
        "float8" => "_float8",
        "oid" => "_oid",
        "macaddr" => "_macaddr",
        "inet" => "_inet",
        "cidr" => "_cidr",
        "macaddr8" => "_macaddr8",
        "json" => "_json",
        "jsonb" => "_jsonb",
        "uuid" => "_uuid",
        "date" => "_date",
        "time" => "_time",
        "timestamp" => "_timestamp",
        "timestamptz" => "_timestamptz",
        "interval" => "_interval",
        "timetz" => "_timetz",
        "numeric" => "_numeric",
        "pg_lsn" => "_pg_lsn",
        _ => "array",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_table_is_a_bijection_over_the_scalars() {
        for &a in ARRAYS.iter().map(|(a, _, _)| a) {
            let e = element_type(a).unwrap();
            assert!(SCALARS.contains(&e), "{a} -> {e}");
            assert_eq!(array_type(e), Some(a));
            assert_eq!(type_name(a).unwrap(), format!("_{}", type_name(e).unwrap()));
        }
        for &s in SCALARS {
            assert!(array_type(s).is_some(), "no array for {s}");
            assert_eq!(element_type(s), None);
        }
        assert_eq!(element_type(INT4_ARRAY), Some(INT4));
        assert_eq!(element_type(1007), Some(23));
    }
}
