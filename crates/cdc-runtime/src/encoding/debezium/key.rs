//! Record keys and headers: the key is the table's
//! [`key_columns`](crate::event::TableSchema::key_columns) as an object
//! (`null` when it has none), taken from the row the record is about.

use super::super::json::write_str;
use super::{write_cell, RecordPart};
use crate::encoding::DebeziumOptions;
use crate::event::{decode_cell, Cell, ChangeEvent, Row, TableSchema};

/// Writes the key of `row` of `table`: `{"<key column>":<value>,…}`, or
/// `null` when the table has no key columns or there is no row. Returns
/// whether it wrote an object.
pub(super) fn write_row_key(
    out: &mut Vec<u8>,
    table: &TableSchema,
    row: Option<&Row>,
    opts: &DebeziumOptions,
) -> bool {
    let Some(row) = row else {
        out.extend_from_slice(b"null");
        return false;
    };
    let mut keys = table.key_columns().map(|(i, _)| i).peekable();
    if keys.peek().is_none() {
        out.extend_from_slice(b"null");
        return false;
    }
    let mut next = keys.next();
    out.push(b'{');
    let mut first = true;
    for (i, (col, cell)) in table.columns.iter().zip(row.cells()).enumerate() {
        if next != Some(i) {
            continue;
        }
        next = keys.next();
        if !first {
            out.push(b',');
        }
        first = false;
        write_str(out, &col.name);
        out.push(b':');
        write_cell(out, col, table.column_facts(i), cell, opts);
    }
    out.push(b'}');
    true
}

/// The row a record's key is taken from: the old row for a delete, its
/// tombstone and the first record of a key change, else the new row.
pub(super) fn key_row(ev: &ChangeEvent, part: RecordPart) -> Option<&Row> {
    match part {
        RecordPart::KeyChangeDelete | RecordPart::Tombstone => ev.before.as_ref(),
        RecordPart::KeyChangeCreate => ev.after.as_ref(),
        RecordPart::Change => ev.after.as_ref().or(ev.before.as_ref()),
    }
}

/// Whether an update changed its row's key: some key column differs
/// between the old row (when the server sent one) and the new row.
pub(crate) fn key_changed(ev: &ChangeEvent) -> bool {
    let (Some(table), Some(before), Some(after)) =
        (ev.table.as_deref(), ev.before.as_ref(), ev.after.as_ref())
    else {
        return false;
    };
    let mut keys = table.key_columns().map(|(i, _)| i).peekable();
    if keys.peek().is_none() {
        return false;
    }
    let mut next = keys.next();
    for (i, ((col, old), new)) in table
        .columns
        .iter()
        .zip(before.cells())
        .zip(after.cells())
        .enumerate()
    {
        if next != Some(i) {
            continue;
        }
        next = keys.next();
        if !same_cell(old, new, col.type_oid) {
            return true;
        }
    }
    false
}

/// Whether two cells of a column hold the same value (an unchanged TOAST
/// value in the new row is the old one).
fn same_cell(old: Cell<'_>, new: Cell<'_>, type_oid: cdc_core::Oid) -> bool {
    use cdc_core::{TupleValue, Value};
    match (old, new) {
        (Cell::Wire(a), Cell::Wire(b)) if a == b => true,
        (_, Cell::Wire(TupleValue::UnchangedToast) | Cell::Value(Value::UnchangedToast)) => true,
        (a, b) => decoded(a, type_oid) == decoded(b, type_oid),
    }
}

fn decoded(cell: Cell<'_>, type_oid: cdc_core::Oid) -> cdc_core::Value<'_> {
    match cell {
        Cell::Value(v) => v.clone(),
        Cell::Wire(tv) => decode_cell(tv, type_oid),
    }
}

/// The headers of a record, if it has any: a key change's first record
/// carries the new key (`__debezium.newkey`), its last the old one
/// (`__debezium.oldkey`). Returns whether it wrote them.
pub(super) fn write_headers(
    out: &mut Vec<u8>,
    ev: &ChangeEvent,
    part: RecordPart,
    opts: &DebeziumOptions,
) -> bool {
    let (name, row) = match part {
        RecordPart::KeyChangeDelete => ("__debezium.newkey", ev.after.as_ref()),
        RecordPart::KeyChangeCreate => ("__debezium.oldkey", ev.before.as_ref()),
        RecordPart::Change | RecordPart::Tombstone => return false,
    };
    let Some(table) = ev.table.as_deref() else {
        return false;
    };
    out.push(b'{');
    write_str(out, name);
    out.push(b':');
    write_row_key(out, table, row, opts);
    out.push(b'}');
    true
}
