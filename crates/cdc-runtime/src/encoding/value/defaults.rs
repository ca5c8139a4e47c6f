//! What Debezium writes for a `NOT NULL` column whose value an event does
//! not carry: the non-key columns of a delete's (or key-changing update's)
//! `before` under `REPLICA IDENTITY DEFAULT` or `USING INDEX`. Kafka
//! Connect rejects a null in a required field, so Debezium's converters
//! fall back to a default of the field's type (`convertValue`'s
//! `fallback`); nullable columns stay null.
//!
//! **Deviation:** Debezium first uses the column's `DEFAULT` when it could
//! parse it into the schema; pgcdc does not read defaults and always writes
//! the type's.

use cdc_core::types;

use super::super::json::write_str;
use super::debezium::{is_array, Column, BIT, MONEY, POINT, VARBIT};
use super::{bits, decimal, hstore, point};
use crate::encoding::{DebeziumOptions, DecimalHandlingMode, IntervalHandlingMode};

/// Writes the default of column `c`'s type.
pub(crate) fn write_required_default(out: &mut Vec<u8>, c: Column<'_>, o: &DebeziumOptions) {
    if let Some(base) = c.base() {
        return write_required_default(out, base, o);
    }
    let decimal_mode = o.decimal_handling_mode;
    let zero = decimal::Decimal::from_unscaled(0, 0);
    match c.oid {
        types::BOOL => out.extend_from_slice(b"false"),
        types::INT2 | types::INT4 | types::INT8 | types::OID | types::PG_LSN => out.push(b'0'),
        types::DATE | types::TIME | types::TIMESTAMP => out.push(b'0'),
        types::FLOAT4 | types::FLOAT8 => out.extend_from_slice(b"0.0"),
        types::NUMERIC => match decimal::numeric_scale(c.typmod) {
            Some(scale) => decimal::write_decimal(out, &zero.with_scale(scale), decimal_mode),
            None if decimal_mode == DecimalHandlingMode::Precise => {
                decimal::write_variable_scale(out, &zero)
            }
            None => decimal::write_decimal(out, &zero, decimal_mode),
        },
        MONEY => decimal::write_money(out, &zero.with_scale(decimal::MONEY_SCALE), decimal_mode),
        types::TIMESTAMPTZ => write_str(out, "1970-01-01T00:00:00Z"),
        types::TIMETZ => write_str(out, "00:00:00Z"),
        types::INTERVAL => match o.interval_handling_mode {
            IntervalHandlingMode::Numeric => out.push(b'0'),
            IntervalHandlingMode::String => write_str(out, "P0Y0M0DT0H0M0S"),
        },
        BIT | VARBIT if bits::is_boolean(c.typmod) => out.extend_from_slice(b"false"),
        BIT | VARBIT => write_str(out, ""),
        POINT => point::write_point(out, 0.0, 0.0),
        _ if c.is_hstore() => hstore::write_pairs(out, Vec::new(), o.hstore_handling_mode),
        _ if is_array(&c) => out.extend_from_slice(b"[]"),
        // Strings (text, json, uuid, enums, ...) and bytea in every binary
        // mode: empty.
        _ => write_str(out, ""),
    }
}
