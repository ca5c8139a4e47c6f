//! The Kafka Connect schemas of Debezium's records, for `schemas.enable =
//! true`: Kafka Connect's `JsonConverter` then writes each key and value as
//! `{"schema":<schema>,"payload":<value>}`.
//!
//! The schemas are those of Debezium 2.7's PostgreSQL connector, written as
//! the converter writes them (same fields, same order, same attributes):
//!
//! * the value: a struct named `<topic.prefix>.<schema>.<table>.Envelope`,
//!   version 2, with `before` and `after` (the optional
//!   `<…>.Value` struct of every column), `source`
//!   (`io.debezium.connector.postgresql.Source`), `transaction`
//!   (`event.block`, optional), `op`, `ts_ms`, `ts_us`, `ts_ns`;
//! * the key: the `<…>.Key` struct of the key columns (see
//!   [`TableSchema::key_columns`]), or `null` for a table without one;
//! * each column's type by its PostgreSQL type and the `*.handling.mode`
//!   and `time.precision.mode` settings (see `column.rs`), `optional` unless
//!   the column is `NOT NULL`;
//! * logical decoding messages: `io.debezium.connector.postgresql.MessageValue`
//!   and `…MessageKey`;
//! * BEGIN/END transaction records: `TransactionMetadataKey` and `…Value`.
//!
//! Deviations from Debezium:
//! * columns of types Debezium does not map are kept and declared with the
//!   type of their value (see `column.rs`);
//! * no `default` is declared for a column with a `DEFAULT`: the catalog
//!   facts do not carry defaults (the `source.snapshot` default is
//!   declared);
//! * a table without a primary key has a key of its replica identity
//!   columns, as [`TableSchema::key_columns`] decides (Debezium's key is
//!   then null);
//! * an enum array is declared as an array of strings: the facts carry
//!   labels for enum columns only (Debezium: an array of `Enum`).
//!
//! [`SchemaCache`] keeps each table's rendered schemas, so an event copies
//! bytes instead of building them.

mod cache;
mod column;
mod envelope;
mod node;

pub(crate) use cache::SchemaCache;

use crate::encoding::DebeziumOptions;
use crate::event::{ChangeEvent, Operation, TableSchema};

/// Appends the schema of a change event's value (the whole envelope) for
/// rows of `table`.
pub(crate) fn write_value_schema(out: &mut Vec<u8>, table: &TableSchema, opts: &DebeziumOptions) {
    envelope::envelope(opts, table).write(out, None);
}

/// Appends the schema of the key of `table`'s change events, or `null`
/// when the table has no key columns (Debezium's key is then null).
pub(crate) fn write_key_schema(out: &mut Vec<u8>, table: &TableSchema, opts: &DebeziumOptions) {
    match envelope::key_schema(opts, table) {
        Some(key) => key.write(out, None),
        None => out.extend_from_slice(b"null"),
    }
}

/// Appends the schema of a BEGIN/END transaction record's value.
pub(crate) fn write_transaction_value_schema(out: &mut Vec<u8>) {
    envelope::transaction_value().write(out, None);
}

/// Appends the schema of a BEGIN/END transaction record's key.
pub(crate) fn write_transaction_key_schema(out: &mut Vec<u8>) {
    envelope::transaction_key().write(out, None);
}

/// Appends the schema of a logical decoding message's record.
pub(crate) fn write_message_value_schema(out: &mut Vec<u8>, opts: &DebeziumOptions) {
    envelope::message_value(opts).write(out, None);
}

/// Appends the schema of a logical decoding message's key.
pub(crate) fn write_message_key_schema(out: &mut Vec<u8>) {
    envelope::message_key().write(out, None);
}

/// Appends `event`'s record as the JSON converter writes it with
/// `schemas.enable = true`: `payload` appends the value, and the schema
/// is the envelope's of the event's table, the message record's for a
/// logical decoding message, and `null` for a schema change (which
/// Debezium's PostgreSQL connector does not emit).
pub(crate) fn write_event_wrapped(
    cache: &SchemaCache,
    event: &ChangeEvent,
    opts: &DebeziumOptions,
    out: &mut Vec<u8>,
    payload: impl FnOnce(&mut Vec<u8>),
) {
    match (event.op, event.table.as_ref()) {
        (Operation::Message, _) => write_wrapped(out, cache.message(opts), payload),
        (Operation::SchemaChange, _) | (_, None) => write_wrapped(out, b"null", payload),
        (_, Some(table)) => write_wrapped(out, &cache.get(table, opts).value, payload),
    }
}

/// Appends `{"schema":<schema>,"payload":<payload>}`: what the JSON
/// converter writes with `schemas.enable = true`. `schema` is the schema's
/// JSON (`null` for none); `payload` appends the value.
pub(crate) fn write_wrapped(out: &mut Vec<u8>, schema: &[u8], payload: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(b"{\"schema\":");
    out.extend_from_slice(schema);
    out.extend_from_slice(b",\"payload\":");
    payload(out);
    out.push(b'}');
}

#[cfg(test)]
mod tests;
