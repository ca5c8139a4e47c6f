//! What the catalog says about a table beyond pgoutput's Relation message:
//! which columns are `NOT NULL`, which form the primary key, and the names
//! of their types. The Debezium format needs them (a delete's `before`
//! under the default replica identity, the record key, the Connect
//! schema's `optional` flags, `hstore` and enum columns); the pipeline
//! looks them up once per new table schema, before the events that use it
//! reach a sink.

use std::sync::Arc;

use cdc_core::Oid;

/// Catalog facts of one column.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ColumnFacts {
    /// `pg_attribute.attnotnull`.
    pub not_null: bool,
    /// Part of the primary key.
    pub primary_key: bool,
    /// `pg_type.typname` of the column's type (`hstore`, `citext`, an
    /// enum's name; `_int4` for `int4[]`).
    pub type_name: Option<Arc<str>>,
    /// The labels of an enum type, in their order.
    pub enum_labels: Option<Arc<[Arc<str>]>>,
    /// The base type of a domain.
    pub domain_base_oid: Option<Oid>,
}

/// Catalog facts of a table, one entry per column of its [`TableSchema`]
/// (in the same order).
///
/// [`TableSchema`]: super::TableSchema
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableFacts {
    /// One per column.
    pub columns: Vec<ColumnFacts>,
}

impl TableFacts {
    /// Whether the table has a primary key.
    pub fn has_primary_key(&self) -> bool {
        self.columns.iter().any(|c| c.primary_key)
    }
}
