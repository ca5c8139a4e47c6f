//! Schema-change events in JSON: the plain form's `changes` and `columns`,
//! and the optional Debezium-style schema-change value.

use cdc_core::types::type_name;

use super::debezium::{write_op, write_times, Debezium, ProcessingTime};
use super::json::{write_int, write_str};
use super::opt_str;
use crate::event::{
    ChangeEvent, ColumnSchema, ExistingRows, SchemaChange, SchemaChangeItem, TableSchema,
};

/// `,"changes":[…],"columns":[…]` of a plain schema-change event.
pub(super) fn plain_schema_change(
    out: &mut Vec<u8>,
    table: Option<&TableSchema>,
    change: &SchemaChange,
) {
    out.extend_from_slice(b",\"changes\":");
    write_changes(out, change);
    if let Some(ddl) = &change.ddl {
        out.extend_from_slice(b",\"ddl\":");
        write_str(out, ddl);
    }
    out.extend_from_slice(b",\"columns\":");
    write_columns(out, table.map_or(&[][..], |t| &t.columns));
}

fn write_type(out: &mut Vec<u8>, prefix: &str, oid: cdc_core::Oid, modifier: i32) {
    out.push(b'"');
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(b"type\":");
    opt_str(out, type_name(oid));
    out.extend_from_slice(b",\"");
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(b"type_oid\":");
    write_int(out, oid);
    out.extend_from_slice(b",\"");
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(b"type_modifier\":");
    write_int(out, modifier);
}

fn write_column(out: &mut Vec<u8>, c: &ColumnSchema) {
    out.extend_from_slice(b"{\"name\":");
    write_str(out, &c.name);
    out.push(b',');
    write_type(out, "", c.type_oid, c.type_modifier);
    out.extend_from_slice(b",\"key\":");
    out.extend_from_slice(if c.is_key { b"true" } else { b"false" });
    out.push(b'}');
}

fn write_columns(out: &mut Vec<u8>, columns: &[ColumnSchema]) {
    out.push(b'[');
    for (i, c) in columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_column(out, c);
    }
    out.push(b']');
}

/// `[{"kind":…,…},…]`.
fn write_changes(out: &mut Vec<u8>, change: &SchemaChange) {
    out.push(b'[');
    for (i, item) in change.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"kind\":");
        write_str(out, item.kind());
        match item {
            SchemaChangeItem::RenameTable { schema, table } => {
                out.extend_from_slice(b",\"from_schema\":");
                write_str(out, schema);
                out.extend_from_slice(b",\"from_table\":");
                write_str(out, table);
            }
            SchemaChangeItem::AddColumn {
                column,
                existing_rows,
            } => {
                out.extend_from_slice(b",\"column\":");
                write_column(out, column);
                out.extend_from_slice(b",\"existing_rows\":");
                match existing_rows {
                    ExistingRows::Unknown => write_str(out, "unknown"),
                    ExistingRows::Null => write_str(out, "null"),
                    ExistingRows::PerRow => write_str(out, "per_row"),
                    ExistingRows::Value(v) => {
                        write_str(out, "value");
                        out.extend_from_slice(b",\"existing_value\":");
                        write_str(out, v);
                    }
                }
            }
            SchemaChangeItem::DropColumn { column } => {
                out.extend_from_slice(b",\"column\":");
                write_column(out, column);
            }
            SchemaChangeItem::RenameColumn { from, to } => {
                out.extend_from_slice(b",\"from\":");
                write_str(out, from);
                out.extend_from_slice(b",\"to\":");
                write_str(out, to);
            }
            SchemaChangeItem::AlterColumnType {
                column,
                from_type_oid,
                from_type_modifier,
                to_type_oid,
                to_type_modifier,
            } => {
                out.extend_from_slice(b",\"column\":");
                write_str(out, column);
                out.push(b',');
                write_type(out, "from_", *from_type_oid, *from_type_modifier);
                out.push(b',');
                write_type(out, "to_", *to_type_oid, *to_type_modifier);
            }
            SchemaChangeItem::DropTable => {}
        }
        out.push(b'}');
    }
    out.push(b']');
}

/// A schema-change event in the Debezium format (written only with
/// `DebeziumOptions::schema_changes`): the `source` block of a change event,
/// `op` `"s"`, then the fields of Debezium's schema-change value
/// (`databaseName`, `schemaName`, `ddl`, `tableChanges` with the table's
/// columns) and pgcdc's `changes`.
pub(super) fn debezium_schema_change(
    d: &Debezium,
    ev: &ChangeEvent,
    now: ProcessingTime,
    out: &mut Vec<u8>,
) {
    let table = ev.table.as_deref();
    let s = &ev.source;
    out.push(b'{');
    d.write_source(
        ev,
        table.map_or("", |t| &t.schema),
        table.map_or("", |t| &t.table),
        now,
        out,
    );
    write_op(out, ev.op.debezium_code());
    write_times(out, now);
    out.extend_from_slice(b",\"databaseName\":");
    write_str(out, &s.database);
    out.extend_from_slice(b",\"schemaName\":");
    opt_str(out, table.map(|t| &*t.schema));
    out.extend_from_slice(b",\"ddl\":");
    opt_str(
        out,
        ev.schema_change.as_ref().and_then(|c| c.ddl.as_deref()),
    );
    out.extend_from_slice(b",\"tableChanges\":[");
    if let Some(t) = table {
        let dropped = ev
            .schema_change
            .as_ref()
            .is_some_and(|c| c.items.contains(&SchemaChangeItem::DropTable));
        out.extend_from_slice(b"{\"type\":");
        write_str(out, if dropped { "DROP" } else { "ALTER" });
        out.extend_from_slice(b",\"id\":");
        write_str(
            out,
            &format!(
                "{}.{}",
                cdc_core::sql::quote_ident(&t.schema),
                cdc_core::sql::quote_ident(&t.table)
            ),
        );
        out.extend_from_slice(b",\"table\":{\"primaryKeyColumnNames\":[");
        let mut first = true;
        for c in t.columns.iter().filter(|c| c.is_key) {
            if !first {
                out.push(b',');
            }
            first = false;
            write_str(out, &c.name);
        }
        out.extend_from_slice(b"],\"columns\":[");
        for (i, c) in t.columns.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"name\":");
            write_str(out, &c.name);
            out.extend_from_slice(b",\"typeName\":");
            opt_str(out, type_name(c.type_oid));
            out.extend_from_slice(b",\"position\":");
            write_int(out, i as u64 + 1);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}}");
    }
    out.push(b']');
    if let Some(change) = &ev.schema_change {
        out.extend_from_slice(b",\"changes\":");
        write_changes(out, change);
    }
    d.write_transaction(ev, out);
    out.push(b'}');
}
