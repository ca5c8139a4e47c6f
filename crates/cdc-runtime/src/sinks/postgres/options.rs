//! The PostgreSQL sink's settings: target table names, the mapping of
//! source tables to target tables and keys, exactly-once progress and what
//! a dropped source column does.

use std::collections::HashMap;

use super::quote_ident;

/// A table name on the target (unquoted; the sink quotes it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    /// Schema.
    pub schema: String,
    /// Table.
    pub table: String,
}

impl TableName {
    /// `schema.table`.
    pub fn new(schema: impl Into<String>, table: impl Into<String>) -> Self {
        TableName {
            schema: schema.into(),
            table: table.into(),
        }
    }

    /// The quoted, qualified name: `"schema"."table"`.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.table))
    }
}

/// How source tables map to target tables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgTableSinkOptions {
    /// Target of a source table; tables not listed go to the same
    /// `schema.table` on the target.
    pub tables: HashMap<TableName, TableName>,
    /// Key columns of a source table, overriding its replica identity
    /// (needed for `REPLICA IDENTITY FULL` tables, whose every column is
    /// flagged as key). The target needs a unique index on exactly these.
    pub key_columns: HashMap<TableName, Vec<String>>,
    /// Exactly-once: the name under which the sink records, in the same
    /// transaction as its writes, the `(commit LSN, index)` of the last event
    /// it applied (table `pgcdc.sink_progress` on the target). Events at or
    /// before it are skipped, so a replay after a crash applies nothing twice.
    pub progress: Option<String>,
    /// What a `DROP COLUMN` on the source does to the target column.
    pub dropped_columns: DroppedColumns,
}

/// What the PostgreSQL sink does with a target column whose source column
/// was dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DroppedColumns {
    /// Keep the column and its values; it loses its `NOT NULL` constraint,
    /// since new rows have no value for it.
    #[default]
    Keep,
    /// Drop the column on the target too.
    Drop,
}

impl PgTableSinkOptions {
    /// Sends changes of `source` to `target`.
    pub fn map_table(mut self, source: TableName, target: TableName) -> Self {
        self.tables.insert(source, target);
        self
    }

    /// Applies every event exactly once, recording progress under `name`
    /// (see [`progress`](Self::progress)).
    pub fn exactly_once(mut self, name: impl Into<String>) -> Self {
        self.progress = Some(name.into());
        self
    }

    /// Uses `columns` as the key of `source`.
    pub fn key(mut self, source: TableName, columns: Vec<String>) -> Self {
        self.key_columns.insert(source, columns);
        self
    }
}
