//! The record schemas around the columns: the `Value` and `Key` structs of
//! a table, the `source` block (`PostgresSourceInfoStructMaker` on
//! `SchemaFactory.sourceInfoSchemaBuilder`), the `transaction` block, the
//! `Envelope` (`SchemaFactory.datatypeEnvelopeSchema`, as
//! `TableSchemaBuilder` fills it), and the BEGIN/END transaction records.

use super::column::{binary, column_schema};
use super::node::{Field, Kind, Schema};
use crate::encoding::DebeziumOptions;
use crate::event::TableSchema;

/// The envelope schema's version (2 since Debezium 2.6 added `ts_us` and
/// `ts_ns`).
const ENVELOPE_VERSION: u32 = 2;

/// `<topic.prefix>.<schema>.<table>`: the data topic's name, from which
/// Debezium names the record schemas (`SchemaTopicNamingStrategy`, whose
/// `recordSchemaPrefix` is the topic name).
///
/// As a topic name it is sanitised: every character but `[A-Za-z0-9._-]`
/// becomes `_` (one per UTF-16 unit, as Java counts characters), it is cut
/// to 249 characters, and `.` or `..` alone become underscores. Debezium
/// 2.x's default `schema.name.adjustment.mode=none` changes nothing more.
pub(crate) fn record_name(opts: &DebeziumOptions, table: &TableSchema) -> String {
    const MAX_TOPIC_NAME: usize = 249;
    let raw = format!("{}.{}.{}", opts.name, table.schema, table.table);
    let mut name = String::with_capacity(raw.len());
    for c in raw.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            name.push(c);
        } else {
            for _ in 0..c.len_utf16() {
                name.push('_');
            }
        }
    }
    // Only ASCII is left, so bytes are characters.
    name.truncate(MAX_TOPIC_NAME);
    match name.as_str() {
        "." => "_".to_owned(),
        ".." => "__".to_owned(),
        _ => name,
    }
}

/// The `<record>.Value` struct: every column, optional (`before` and
/// `after` may be null).
fn value_struct(opts: &DebeziumOptions, table: &TableSchema, record: &str) -> Schema {
    let fields = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, col)| {
            Field::new(
                col.name.to_string(),
                column_schema(col, table.column_facts(i), opts),
            )
        })
        .collect();
    Schema::structure(fields)
        .named(format!("{record}.Value"))
        .optional()
}

/// The `<record>.Key` struct of the key columns, or `None` when the table
/// has none (the record key is then null).
pub(super) fn key_schema(opts: &DebeziumOptions, table: &TableSchema) -> Option<Schema> {
    let fields: Vec<Field> = table
        .key_columns()
        .map(|(i, col)| {
            Field::new(
                col.name.to_string(),
                column_schema(col, table.column_facts(i), opts),
            )
        })
        .collect();
    if fields.is_empty() {
        return None;
    }
    let record = record_name(opts, table);
    Some(Schema::structure(fields).named(format!("{record}.Key")))
}

/// `io.debezium.connector.postgresql.Source`.
fn source_struct() -> Schema {
    let string = Schema::string;
    let opt_i64 = || Schema::int64().optional();
    // `SnapshotRecord`'s values, as an Enum defaulting to "false".
    let snapshot = Schema::logical(Kind::String, "io.debezium.data.Enum")
        .param("allowed", "true,last,false,incremental")
        .default_str("false")
        .optional();
    Schema::structure(vec![
        Field::new("version", string()),
        Field::new("connector", string()),
        Field::new("name", string()),
        Field::new("ts_ms", Schema::int64()),
        Field::new("snapshot", snapshot),
        Field::new("db", string()),
        Field::new("sequence", string().optional()),
        Field::new("ts_us", opt_i64()),
        Field::new("ts_ns", opt_i64()),
        Field::new("schema", string()),
        Field::new("table", string()),
        Field::new("txId", opt_i64()),
        Field::new("lsn", opt_i64()),
        Field::new("xmin", opt_i64()),
    ])
    .named("io.debezium.connector.postgresql.Source")
}

/// The `transaction` block (`event.block`), null unless
/// `provide.transaction.metadata` is on.
fn transaction_block() -> Schema {
    Schema::structure(vec![
        Field::new("id", Schema::string()),
        Field::new("total_order", Schema::int64()),
        Field::new("data_collection_order", Schema::int64()),
    ])
    .named("event.block")
    .version(1)
    .optional()
}

/// The whole value schema of a change event of `table`:
/// `before`, `after`, `source`, `transaction`, `op`, `ts_ms`, `ts_us`,
/// `ts_ns`, named `<record>.Envelope`, version 2.
pub(super) fn envelope(opts: &DebeziumOptions, table: &TableSchema) -> Schema {
    let record = record_name(opts, table);
    let row = value_struct(opts, table, &record);
    Schema::structure(vec![
        Field::new("before", row.clone()),
        Field::new("after", row),
        Field::new("source", source_struct()),
        Field::new("transaction", transaction_block()),
        Field::new("op", Schema::string()),
        Field::new("ts_ms", Schema::int64().optional()),
        Field::new("ts_us", Schema::int64().optional()),
        Field::new("ts_ns", Schema::int64().optional()),
    ])
    .named(format!("{record}.Envelope"))
    .version(ENVELOPE_VERSION)
}

/// The value schema of a BEGIN/END transaction record
/// (`io.debezium.connector.common.TransactionMetadataValue`).
pub(super) fn transaction_value() -> Schema {
    let per_table = Schema::structure(vec![
        Field::new("data_collection", Schema::string()),
        Field::new("event_count", Schema::int64()),
    ])
    .named("event.collection")
    .version(1)
    .optional();
    Schema::structure(vec![
        Field::new("status", Schema::string()),
        Field::new("id", Schema::string()),
        Field::new("event_count", Schema::int64().optional()),
        Field::new("data_collections", Schema::array(per_table).optional()),
        Field::new("ts_ms", Schema::int64()),
    ])
    .named("io.debezium.connector.common.TransactionMetadataValue")
    .version(1)
}

/// The key schema of a BEGIN/END transaction record
/// (`io.debezium.connector.common.TransactionMetadataKey`).
pub(super) fn transaction_key() -> Schema {
    Schema::structure(vec![Field::new("id", Schema::string())])
        .named("io.debezium.connector.common.TransactionMetadataKey")
        .version(1)
}

/// The value schema of a logical decoding message's record
/// (`io.debezium.connector.postgresql.MessageValue`: `op`, `ts_ms`,
/// `source`, and the `message` block, whose `content` follows
/// `binary.handling.mode`).
pub(super) fn message_value(opts: &DebeziumOptions) -> Schema {
    let content = binary(opts.binary_handling_mode);
    let message = Schema::structure(vec![
        Field::new("prefix", Schema::string().optional()),
        Field::new("content", content.optional()),
    ])
    .named("io.debezium.connector.postgresql.Message")
    .version(1);
    Schema::structure(vec![
        Field::new("op", Schema::string()),
        Field::new("ts_ms", Schema::int64().optional()),
        Field::new("source", source_struct()),
        Field::new("message", message),
    ])
    .named("io.debezium.connector.postgresql.MessageValue")
    .version(1)
}

/// The key schema of a logical decoding message's record
/// (`io.debezium.connector.postgresql.MessageKey`: the prefix).
pub(super) fn message_key() -> Schema {
    Schema::structure(vec![Field::new("prefix", Schema::string().optional())])
        .named("io.debezium.connector.postgresql.MessageKey")
        .version(1)
}
