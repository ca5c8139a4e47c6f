//! The events a change becomes: a row event from decoded rows, a schema
//! change, a logical message; and the row decoding and TOAST completion
//! they use.

use std::borrow::Cow;
use std::sync::Arc;

use cdc_core::{validate_binary, validate_text, TupleData, TupleValue};

use super::super::row::RowArena;
use super::super::{
    ChangeEvent, MessagePayload, Operation, Row, SchemaChange, SourceInfo, TableSchema,
};
use super::ConvertError;

/// A schema-change event (index 0; numbered by the caller).
pub(super) fn schema_change_event(
    table: Arc<TableSchema>,
    change: SchemaChange,
    source: SourceInfo,
) -> ChangeEvent {
    ChangeEvent {
        op: Operation::SchemaChange,
        table: Some(table),
        before: None,
        after: None,
        message: None,
        schema_change: Some(Arc::new(change)),
        source,
        index: 0,
        position: Default::default(),
        boundary: None,
    }
}

pub(super) fn row_event(
    op: Operation,
    table: Arc<TableSchema>,
    before: Option<Row>,
    after: Option<Row>,
    source: SourceInfo,
) -> ChangeEvent {
    ChangeEvent {
        op,
        table: Some(table),
        before,
        after,
        message: None,
        schema_change: None,
        source,
        index: 0,
        position: Default::default(),
        boundary: None,
    }
}

/// The new row of an update under `REPLICA IDENTITY FULL`, with each
/// unchanged TOASTed column (which the server leaves out of the new row)
/// taken from the old row, which carries it: every format and sink then
/// has the real value instead of "unavailable".
pub(super) fn with_old_toast<'a>(
    new: &'a TupleData<'a>,
    old: &'a TupleData<'a>,
) -> Cow<'a, TupleData<'a>> {
    let unchanged = |v: &TupleValue<'_>| matches!(v, TupleValue::UnchangedToast);
    if !new.iter().any(|v| unchanged(&v)) || new.len() != old.len() {
        return Cow::Borrowed(new);
    }
    let merged: Vec<TupleValue<'_>> = new
        .iter()
        .zip(old.iter())
        .map(|(n, o)| if unchanged(&n) { o } else { n })
        .collect();
    match TupleData::from_values(&merged) {
        Some(t) => Cow::Owned(t),
        None => Cow::Borrowed(new),
    }
}

/// Decodes every column of `tuple` by the type of its column in `table`,
/// so that a value that does not decode stops the stream here, and keeps
/// the columns as sent in `arena` (sinks decode them again, borrowing).
pub(crate) fn decode_row(
    arena: &mut RowArena,
    table: &TableSchema,
    tuple: &TupleData<'_>,
) -> Result<Row, ConvertError> {
    if tuple.len() != table.columns.len() {
        return Err(ConvertError::ColumnCount {
            schema: table.schema.clone(),
            table: table.table.clone(),
            expected: table.columns.len(),
            got: tuple.len(),
        });
    }
    for (col, tv) in table.columns.iter().zip(tuple.iter()) {
        // The value itself is not kept: validating builds none for the
        // commonest types, with the errors decoding would give.
        let decoded = match tv {
            TupleValue::Null | TupleValue::UnchangedToast => Ok(()),
            TupleValue::Text(raw) => validate_text(col.type_oid, raw),
            TupleValue::Binary(raw) => validate_binary(col.type_oid, raw),
        };
        decoded.map_err(|source| ConvertError::Value {
            schema: table.schema.clone(),
            table: table.table.clone(),
            column: col.name.clone(),
            source,
        })?;
    }
    Ok(arena.row(tuple))
}

/// A logical decoding message as an event (index 0; numbered by the caller).
pub(super) fn message_event(
    m: &cdc_core::pgoutput::LogicalDecodingMessage<'_>,
    source: SourceInfo,
) -> ChangeEvent {
    ChangeEvent {
        op: Operation::Message,
        table: None,
        before: None,
        after: None,
        message: Some(MessagePayload {
            transactional: m.transactional,
            prefix: m.prefix.to_string(),
            content: m.content.to_vec(),
        }),
        schema_change: None,
        source,
        index: 0,
        position: Default::default(),
        boundary: None,
    }
}
