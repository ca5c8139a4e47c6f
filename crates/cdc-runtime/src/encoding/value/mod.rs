//! Column values as JSON, in the plain format or as the Debezium connector
//! writes them ([`ValueStyle`]).
//!
//! Every Debezium row goes through [`write_debezium_row`]; the per-type
//! rules are in [`debezium`] and the modules it uses (one per type family,
//! each with the Debezium behaviour it follows and its deliberate
//! differences in its docs).

mod binary;
mod bits;
mod debezium;
mod decimal;
mod defaults;
mod hstore;
mod java;
mod plain;
mod point;
mod small_decimal;
mod temporal;
mod toast;

pub(crate) use bits::is_boolean as is_bits_boolean;

use super::json::{write_escaped_utf8, write_str};
use crate::encoding::DebeziumOptions;
use crate::event::{decode_cell, Cell, ColumnFacts, ColumnSchema, Row, TableSchema};

/// Debezium's placeholder for a TOASTed column the server did not send.
pub const UNAVAILABLE_VALUE: &str = "__debezium_unavailable_value";

/// How values are written.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ValueStyle<'a> {
    /// pgcdc's plain format (see [`plain`]).
    Plain,
    /// As the Debezium connector writes them with these settings.
    Debezium(&'a DebeziumOptions),
}

/// How [`write_cell_as`] writes a column the server sent as text, decided
/// once from the column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextKind {
    /// `int2`/`int4`/`int8`/`oid`: the text as it is, when canonical.
    Integer,
    /// `text`/`varchar`/`bpchar`/`name`/`json`/`jsonb`: the text, escaped.
    Text,
    /// `timestamptz`: in the Debezium style, the text's digits when the
    /// server wrote it in UTC.
    TimestampTz,
    /// `numeric`: in the Debezium style's `precise` mode, from the text's
    /// digits when its unscaled integer fits an `i128`.
    Numeric,
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
            TIMESTAMPTZ => TextKind::TimestampTz,
            NUMERIC => TextKind::Numeric,
            _ => TextKind::Other,
        }
    }
}

/// Writes one column of a row in `style` (`facts`: the column's catalog
/// facts, which the Debezium style uses): as its decoded value, but copying
/// the text of the commonest types (integers, text, json; in the Debezium
/// style a `timestamptz` in UTC, and a `numeric` in `precise` mode read
/// from its digits) as the server sent it where that gives the same JSON,
/// without decoding.
pub(crate) fn write_cell(
    out: &mut Vec<u8>,
    col: &ColumnSchema,
    facts: Option<&ColumnFacts>,
    cell: Cell<'_>,
    style: ValueStyle<'_>,
) {
    write_cell_as(out, col, TextKind::of(col.type_oid), facts, cell, style);
}

/// [`write_cell`] with the column's [`TextKind`] known: the copied cases
/// inline, everything else out of line.
#[inline(always)]
pub(crate) fn write_cell_as(
    out: &mut Vec<u8>,
    col: &ColumnSchema,
    kind: TextKind,
    facts: Option<&ColumnFacts>,
    cell: Cell<'_>,
    style: ValueStyle<'_>,
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
        (Cell::Wire(TupleValue::Text(raw)), TextKind::TimestampTz)
            if matches!(style, ValueStyle::Debezium(_)) =>
        {
            if !temporal::copy_utc_timestamptz(out, raw, col.type_modifier) {
                write_cell_decoded(out, col, facts, cell, style);
            }
        }
        // The row was validated when it was converted, so `raw` is
        // `numeric_out`'s text, which decoding would only borrow.
        (Cell::Wire(TupleValue::Text(raw)), TextKind::Numeric)
            if matches!(style, ValueStyle::Debezium(o)
                if o.decimal_handling_mode == crate::encoding::DecimalHandlingMode::Precise) =>
        {
            if !decimal::write_small_precise(out, raw, col.type_modifier) {
                write_cell_decoded(out, col, facts, cell, style);
            }
        }
        (Cell::Wire(TupleValue::Null), _) => out.extend_from_slice(b"null"),
        _ => write_cell_decoded(out, col, facts, cell, style),
    }
}

/// A column as its decoded value (the cases [`write_cell_as`] does not copy).
#[inline(never)]
fn write_cell_decoded(
    out: &mut Vec<u8>,
    col: &ColumnSchema,
    facts: Option<&ColumnFacts>,
    cell: Cell<'_>,
    style: ValueStyle<'_>,
) {
    let decoded;
    let value = match cell {
        Cell::Value(v) => v,
        Cell::Wire(tv) => {
            decoded = decode_cell(tv, col.type_oid);
            &decoded
        }
    };
    match style {
        ValueStyle::Plain => plain::write_value(out, value),
        ValueStyle::Debezium(opts) => {
            let column = debezium::Column {
                oid: col.type_oid,
                typmod: col.type_modifier,
                facts,
            };
            debezium::write_value(out, column, value, opts)
        }
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

/// Which image of a change a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowRole {
    /// The row before the change (an update's or delete's old row).
    Before,
    /// The row after the change (or read by a snapshot).
    After,
}

/// The `{"<column>":` / `,"<column>":` prefixes of a table's columns and
/// how each column's text is written, rendered once per table.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowKeys {
    /// The prefixes one after the other; `ends[i]` is where column `i`'s ends.
    keys: Vec<u8>,
    ends: Vec<usize>,
    kinds: Vec<TextKind>,
}

impl RowKeys {
    /// The keys of `table`'s columns.
    pub(crate) fn new(table: &TableSchema) -> RowKeys {
        let mut k = RowKeys::default();
        for (i, col) in table.columns.iter().enumerate() {
            k.keys.push(if i == 0 { b'{' } else { b',' });
            write_str(&mut k.keys, &col.name);
            k.keys.push(b':');
            k.ends.push(k.keys.len());
            k.kinds.push(TextKind::of(col.type_oid));
        }
        k
    }
}

/// Writes a Debezium row object `{"col":value,…}` of `table` (or `null`
/// without a row), every value as the Debezium connector writes it with
/// `opts`. `keys`, when given, are `table`'s (see [`RowKeys::new`]).
///
/// In a `before` row of a table whose replica identity is not `FULL`, a
/// non-key column the old row does not carry but which is `NOT NULL` in
/// the catalog gets its type's default (see [`defaults`]), as Debezium's
/// required fields do; without catalog facts every column is nullable.
pub(crate) fn write_debezium_row(
    out: &mut Vec<u8>,
    table: &TableSchema,
    row: Option<&Row>,
    role: RowRole,
    opts: &DebeziumOptions,
    keys: Option<&RowKeys>,
) {
    let Some(row) = row else {
        out.extend_from_slice(b"null");
        return;
    };
    let partial = role == RowRole::Before && !table.identity_is_full();
    let style = ValueStyle::Debezium(opts);
    let mut start = 0;
    let mut any = false;
    for (i, (col, cell)) in table.columns.iter().zip(row.cells()).enumerate() {
        any = true;
        let kind = match keys {
            Some(k) => {
                let end = k.ends.get(i).copied().unwrap_or(start);
                out.extend_from_slice(k.keys.get(start..end).unwrap_or_default());
                start = end;
                k.kinds.get(i).copied().unwrap_or(TextKind::Other)
            }
            None => {
                out.push(if i == 0 { b'{' } else { b',' });
                write_str(out, &col.name);
                out.push(b':');
                TextKind::of(col.type_oid)
            }
        };
        let facts = table.column_facts(i);
        if partial && !col.is_key && is_null(cell) && facts.is_some_and(|f| f.not_null) {
            let column = debezium::Column {
                oid: col.type_oid,
                typmod: col.type_modifier,
                facts,
            };
            defaults::write_required_default(out, column, opts);
            continue;
        }
        write_cell_as(out, col, kind, facts, cell, style);
    }
    if !any {
        // No column: the `{` of the first key was not written.
        out.push(b'{');
    }
    out.push(b'}');
}

fn is_null(cell: Cell<'_>) -> bool {
    matches!(
        cell,
        Cell::Value(cdc_core::Value::Null) | Cell::Wire(cdc_core::TupleValue::Null)
    )
}

#[cfg(test)]
mod tests;
