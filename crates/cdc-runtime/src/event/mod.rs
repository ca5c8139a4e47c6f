//! Change events: owned, typed rows with their source metadata.
//!
//! A [`ChangeEvent`] is what sinks consume. It owns its data (`'static`), so it
//! can cross tokio tasks and channels. Column names are shared: every event of
//! a table points at the same [`TableSchema`] (`Arc`), built once per relation
//! message, so an event carries only its values.
//!
//! [`EventConverter`] turns the [`TxnEvent`](cdc_core::TxnEvent)s of cdc-core's
//! [`TxnAssembler`](cdc_core::TxnAssembler) into change events, decoding each
//! column by its type OID (text or binary form).
//!
//! # Positions
//!
//! * `commit_lsn`: the LSN of the transaction's commit record (pgoutput's
//!   `final_lsn` in Begin, equal to the Commit's `commit_lsn`).
//! * `lsn`: where the change itself is in the WAL (the `wal_start` of the
//!   XLogData that carried it), if the caller knows it; otherwise the commit LSN.
//! * `index`: the 0-based position of the event within its transaction. The
//!   pair `(commit_lsn, index)` identifies an event, so a consumer can drop
//!   events replayed after a restart (transaction boundaries, when asked
//!   for, share the index of the event after them).
//! * [`position`](ChangeEvent::position): the event's position among the
//!   transaction's events of its table, the commit before its transaction,
//!   and for a snapshot read where it stands in the snapshot (see
//!   [`Position`]).

mod convert;
mod facts;
mod position;
mod row;
mod schema_change;

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use cdc_core::{Lsn, Oid, PgTimestamp, Value, Xid};

#[cfg(test)]
pub(crate) use convert::decode_row;
pub(crate) use convert::ChunkMarks;
pub use convert::{ConvertError, EventConverter};
pub use facts::{ColumnFacts, TableFacts};
pub use position::{
    Position, SnapshotMark, TransactionBoundary, TransactionStatus, MESSAGE_COLLECTION,
};
pub use row::Row;
pub(crate) use row::{decode_cell, Cell, RowArena};
pub use schema_change::{ExistingRows, SchemaChange, SchemaChangeItem};

/// What happened to the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A row was read by a snapshot (not a change).
    Read,
    /// `INSERT`
    Create,
    /// `UPDATE`
    Update,
    /// `DELETE`
    Delete,
    /// `TRUNCATE` of one table.
    Truncate,
    /// A logical decoding message (`pg_logical_emit_message`).
    Message,
    /// The table's schema changed: the event's `table` is the new schema,
    /// [`ChangeEvent::schema_change`] says what changed.
    SchemaChange,
    /// A transaction's BEGIN or END ([`ChangeEvent::boundary`]), emitted
    /// only when the pipeline is asked to (for Debezium's transaction
    /// metadata). No table, no rows: sinks that apply rows and operators
    /// pass over it, and it is not counted as an event.
    Transaction,
}

impl Operation {
    /// Debezium's one-letter `op` code: `r`, `c`, `u`, `d`, `t`, `m`
    /// (and `s` for a schema change, which Debezium's PostgreSQL connector
    /// does not emit; `""` for a transaction boundary, which is no change).
    pub const fn debezium_code(self) -> &'static str {
        match self {
            Operation::Read => "r",
            Operation::Create => "c",
            Operation::Update => "u",
            Operation::Delete => "d",
            Operation::Truncate => "t",
            Operation::Message => "m",
            Operation::SchemaChange => "s",
            Operation::Transaction => "",
        }
    }

    /// A lower-case word: `read`, `insert`, `update`, `delete`, `truncate`,
    /// `message`, `schema_change`, `transaction`.
    pub const fn name(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Create => "insert",
            Operation::Update => "update",
            Operation::Delete => "delete",
            Operation::Truncate => "truncate",
            Operation::Message => "message",
            Operation::SchemaChange => "schema_change",
            Operation::Transaction => "transaction",
        }
    }
}

/// One column of a [`TableSchema`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnSchema {
    /// Column name.
    pub name: Arc<str>,
    /// Type OID.
    pub type_oid: Oid,
    /// Type modifier (`atttypmod`; -1 if none). For `time`/`timestamp` it is the
    /// fractional-seconds precision.
    pub type_modifier: i32,
    /// Whether the column is part of the replica identity (the key).
    pub is_key: bool,
}

/// The columns of a table as the last Relation message described them.
/// Shared by every event of that table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    /// Relation OID on the source.
    pub oid: Oid,
    /// Schema (namespace) name.
    pub schema: Arc<str>,
    /// Table name.
    pub table: Arc<str>,
    /// Columns, in the order of the row values.
    pub columns: Vec<ColumnSchema>,
    /// What the catalog says about the columns, once looked up (see
    /// [`TableFacts`]); empty until then, and in tests.
    pub facts: Arc<OnceLock<TableFacts>>,
}

impl TableSchema {
    /// Builds a schema from a pgoutput Relation message.
    pub fn from_relation(rel: &cdc_core::pgoutput::Relation<'_>) -> Self {
        TableSchema {
            facts: Default::default(),
            oid: rel.oid,
            schema: Arc::from(rel.namespace.as_ref()),
            table: Arc::from(rel.name.as_ref()),
            columns: rel
                .columns
                .iter()
                .map(|c| ColumnSchema {
                    name: Arc::from(c.name.as_ref()),
                    type_oid: c.type_oid,
                    type_modifier: c.type_modifier,
                    is_key: c.is_key(),
                })
                .collect(),
        }
    }

    /// Whether `relation` describes this schema (same names, columns, types
    /// and key flags).
    pub fn describes(&self, rel: &cdc_core::pgoutput::Relation<'_>) -> bool {
        self.oid == rel.oid
            && *self.schema == *rel.namespace
            && *self.table == *rel.name
            && self.columns.len() == rel.columns.len()
            && self.columns.iter().zip(&rel.columns).all(|(a, b)| {
                *a.name == *b.name
                    && a.type_oid == b.type_oid
                    && a.type_modifier == b.type_modifier
                    && a.is_key == b.is_key()
            })
    }

    /// The catalog facts of column `i`, if looked up.
    pub fn column_facts(&self, i: usize) -> Option<&ColumnFacts> {
        self.facts.get().and_then(|f| f.columns.get(i))
    }

    /// The columns of the record key: the primary key's when the catalog
    /// facts know one, else the replica identity's (every column under
    /// `REPLICA IDENTITY FULL` without a primary key).
    pub fn key_columns(&self) -> impl Iterator<Item = (usize, &ColumnSchema)> + '_ {
        let by_pk = self.facts.get().is_some_and(TableFacts::has_primary_key);
        self.columns.iter().enumerate().filter(move |(i, c)| {
            if by_pk {
                self.column_facts(*i).is_some_and(|f| f.primary_key)
            } else {
                c.is_key
            }
        })
    }

    /// Whether every column is in the replica identity (`REPLICA IDENTITY
    /// FULL`, or an identity covering all columns): the old row of an
    /// update or delete is then whole.
    pub fn identity_is_full(&self) -> bool {
        self.columns.iter().all(|c| c.is_key)
    }

    /// Index of the column called `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| &*c.name == name)
    }
}

/// Where and when a change happened on the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceInfo {
    /// LSN of the transaction's commit record.
    pub commit_lsn: Lsn,
    /// LSN of the change itself (the commit LSN if unknown).
    pub lsn: Lsn,
    /// Transaction id (0 for a non-transactional message).
    pub xid: Xid,
    /// Commit time of the transaction (`None` for a non-transactional message).
    pub commit_time: Option<PgTimestamp>,
    /// Source database name.
    pub database: Arc<str>,
    /// Replication slot name.
    pub slot: Arc<str>,
}

/// A logical decoding message (`pg_logical_emit_message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagePayload {
    /// Whether it was emitted inside the transaction (`transactional = true`).
    pub transactional: bool,
    /// Its prefix.
    pub prefix: String,
    /// Its content, raw bytes.
    pub content: Vec<u8>,
}

/// The decoded values of one row, in the order of [`TableSchema::columns`]
/// (what a snapshot reads; see [`Row`]).
///
/// A TOASTed column the server did not send stays [`Value::UnchangedToast`]:
/// its value is unknown, not `NULL`.
pub type RowValues = Vec<Value<'static>>;

/// One change, owned, ready for a sink.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeEvent {
    /// What happened.
    pub op: Operation,
    /// The table (`None` for [`Operation::Message`]).
    pub table: Option<Arc<TableSchema>>,
    /// The row before the change: the key columns (others `NULL`) or, with
    /// `REPLICA IDENTITY FULL`, the whole old row. `None` for inserts, for
    /// updates that changed no key column under the default identity,
    /// truncates and messages.
    pub before: Option<Row>,
    /// The row after an insert, update or snapshot read.
    pub after: Option<Row>,
    /// The message of an [`Operation::Message`] event.
    pub message: Option<MessagePayload>,
    /// What changed, for an [`Operation::SchemaChange`] event.
    pub schema_change: Option<Arc<SchemaChange>>,
    /// Source position and names.
    pub source: SourceInfo,
    /// Position of the event within its transaction, from 0.
    pub index: u32,
    /// Where the event stands in its transaction and snapshot (see
    /// [`Position`]).
    pub position: Position,
    /// What an [`Operation::Transaction`] event says.
    pub boundary: Option<Arc<TransactionBoundary>>,
}

/// A view of one column of a row: its schema and its value.
#[derive(Debug, Clone)]
pub struct ColumnRef<'a> {
    /// The column's schema.
    pub schema: &'a ColumnSchema,
    /// Its value.
    pub value: Value<'a>,
}

impl ChangeEvent {
    /// Approximate memory the event holds: its own size and its rows' and
    /// message's data (shared parts, such as the table schema, not counted).
    pub fn approx_size(&self) -> usize {
        std::mem::size_of::<ChangeEvent>()
            + self.before.as_ref().map_or(0, Row::heap_size)
            + self.after.as_ref().map_or(0, Row::heap_size)
            + self
                .message
                .as_ref()
                .map_or(0, |m| m.prefix.len() + m.content.len())
    }

    /// The schema name, if the event is about a table.
    pub fn schema_name(&self) -> Option<&str> {
        self.table.as_deref().map(|t| &*t.schema)
    }

    /// The table name, if the event is about a table.
    pub fn table_name(&self) -> Option<&str> {
        self.table.as_deref().map(|t| &*t.table)
    }

    /// The values of the row before the change (see [`Row::values`]).
    pub fn before_values(&self) -> Option<Cow<'_, [Value<'_>]>> {
        self.row_values(self.before.as_ref())
    }

    /// The values of the row after the change (see [`Row::values`]).
    pub fn after_values(&self) -> Option<Cow<'_, [Value<'_>]>> {
        self.row_values(self.after.as_ref())
    }

    fn row_values<'a>(&'a self, row: Option<&'a Row>) -> Option<Cow<'a, [Value<'a>]>> {
        let row = row?;
        Some(match self.table.as_deref() {
            Some(table) => row.values(table),
            None => Cow::Borrowed(row.as_values().unwrap_or_default()),
        })
    }

    /// The columns of the row before the change, with their names.
    pub fn before_columns(&self) -> impl Iterator<Item = ColumnRef<'_>> {
        self.columns(self.before_values())
    }

    /// The columns of the row after the change, with their names.
    pub fn after_columns(&self) -> impl Iterator<Item = ColumnRef<'_>> {
        self.columns(self.after_values())
    }

    fn columns<'a>(
        &'a self,
        row: Option<Cow<'a, [Value<'a>]>>,
    ) -> impl Iterator<Item = ColumnRef<'a>> + 'a {
        let cols = self.table.as_deref().map_or(&[][..], |t| &t.columns[..]);
        let values = match row {
            Some(Cow::Owned(v)) => v,
            Some(Cow::Borrowed(v)) => v.to_vec(),
            None => Vec::new(),
        };
        cols.iter()
            .zip(values)
            .map(|(schema, value)| ColumnRef { schema, value })
    }
}
