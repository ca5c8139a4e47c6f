//! Which tables the snapshot reads, and their columns and keys, from the
//! source's catalog.

use std::sync::Arc;

use cdc_core::sql::{quote_ident as quote_identifier, quote_literal};
use cdc_core::Oid;
use tokio_postgres::Client;

use crate::event::{ColumnSchema, TableSchema};

use super::SnapshotError;

/// One column the snapshot reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// Type OID.
    pub type_oid: Oid,
    /// `atttypmod`.
    pub type_modifier: i32,
    /// The type as SQL (`format_type`), for casts of key literals.
    pub type_sql: String,
}

/// Why a table is read while the job runs, and which rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRequest {
    /// The request's id (a signal's id, or one pgcdc made).
    pub id: String,
    /// An SQL condition the read adds (`--where`), validated before use.
    pub filter: Option<String>,
    /// LSN of the signal that asked (invalid: pgcdc asked itself).
    pub lsn: cdc_core::Lsn,
}

/// A published table as the snapshot reads it.
#[derive(Debug, Clone)]
pub struct SnapshotTable {
    /// The table's oid.
    pub oid: Oid,
    /// Schema (namespace).
    pub schema: String,
    /// Table name.
    pub name: String,
    /// Published columns, in the order pgoutput sends them.
    pub columns: Vec<Column>,
    /// Indexes into `columns` of the primary key (or the replica identity
    /// index); empty when the table has neither.
    pub key: Vec<usize>,
    /// The publication's row filter (PostgreSQL 15+), if any.
    pub row_filter: Option<String>,
    /// The planner's row estimate (`reltuples`), for progress; `None` if unknown.
    pub estimated_rows: Option<u64>,
    /// A partitioned table (its rows live in its partitions).
    pub partitioned: bool,
    /// The shared schema of the snapshot's events.
    pub event_schema: Arc<TableSchema>,
    /// Set when the read was asked for while the job runs (on-demand, or a
    /// table that appeared); `None` for the initial snapshot.
    pub request: Option<TableRequest>,
}

impl SnapshotTable {
    /// `"schema"."name"`, quoted.
    pub fn quoted(&self) -> String {
        format!(
            "{}.{}",
            quote_identifier(&self.schema),
            quote_identifier(&self.name)
        )
    }

    /// `schema.name`, for logs.
    pub fn display_name(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// The conditions every read of the table adds: the publication's row
    /// filter (so the snapshot and the stream agree) and the request's.
    pub fn filters(&self) -> impl Iterator<Item = &str> {
        self.row_filter
            .as_deref()
            .into_iter()
            .chain(self.request.as_ref().and_then(|r| r.filter.as_deref()))
    }

    /// The same table, read again for `request`.
    pub fn for_request(&self, request: TableRequest) -> SnapshotTable {
        SnapshotTable {
            request: Some(request),
            ..self.clone()
        }
    }

    /// The quoted column list of `SELECT`.
    pub fn select_list(&self) -> String {
        self.columns
            .iter()
            .map(|c| quote_identifier(&c.name))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The quoted key columns as a row constructor: `("a", "b")`.
    pub fn key_row(&self) -> String {
        let cols: Vec<_> = self
            .key
            .iter()
            .filter_map(|&i| self.columns.get(i))
            .map(|c| quote_identifier(&c.name))
            .collect();
        format!("({})", cols.join(", "))
    }

    /// A key as a typed row literal: `('1'::integer, 'x'::text)`.
    pub fn key_literal(&self, key: &[String]) -> String {
        let parts: Vec<_> = self
            .key
            .iter()
            .zip(key)
            .filter_map(|(&i, v)| {
                self.columns
                    .get(i)
                    .map(|c| format!("{}::{}", quote_literal(v), c.type_sql))
            })
            .collect();
        format!("({})", parts.join(", "))
    }
}

/// The tables of `publications`, each with its published columns and key.
pub async fn published_tables(
    client: &Client,
    publications: &[String],
) -> Result<Vec<SnapshotTable>, SnapshotError> {
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await?
        .try_get(0)?;
    // Column lists and row filters exist from PostgreSQL 15.
    let extra = if version >= 150_000 {
        "pt.attnames::text[], pt.rowfilter"
    } else {
        "NULL::text[], NULL::text"
    };
    let rows = client
        .query(
            &format!(
                "SELECT DISTINCT pt.schemaname::text, pt.tablename::text, c.oid, \
                 GREATEST(c.reltuples, -1)::float8, {extra}, c.relkind = 'p' \
                 FROM pg_catalog.pg_publication_tables pt \
                 JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname \
                 JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename \
                 WHERE pt.pubname = ANY($1) ORDER BY 1, 2"
            ),
            &[&publications],
        )
        .await?;
    let mut tables = Vec::with_capacity(rows.len());
    for row in rows {
        let schema: String = row.try_get(0)?;
        let name: String = row.try_get(1)?;
        let oid: Oid = row.try_get(2)?;
        let reltuples: f64 = row.try_get(3)?;
        let attnames: Option<Vec<String>> = row.try_get(4)?;
        let row_filter: Option<String> = row.try_get(5)?;
        let partitioned: bool = row.try_get(6)?;
        let mut columns = columns(client, oid).await?;
        if let Some(names) = attnames {
            columns.retain(|c| names.contains(&c.name));
        }
        let key_names = key_columns(client, oid).await?;
        let key: Vec<usize> = key_names
            .iter()
            .filter_map(|k| columns.iter().position(|c| &c.name == k))
            .collect();
        // A key column left out of the publication's column list: no usable key.
        let key = if key.len() == key_names.len() {
            key
        } else {
            Vec::new()
        };
        let event_schema = Arc::new(TableSchema {
            facts: Default::default(),
            oid,
            schema: Arc::from(schema.as_str()),
            table: Arc::from(name.as_str()),
            columns: columns
                .iter()
                .enumerate()
                .map(|(i, c)| ColumnSchema {
                    name: Arc::from(c.name.as_str()),
                    type_oid: c.type_oid,
                    type_modifier: c.type_modifier,
                    is_key: key.contains(&i),
                })
                .collect(),
        });
        tables.push(SnapshotTable {
            oid,
            schema,
            name,
            columns,
            key,
            row_filter,
            estimated_rows: (reltuples >= 0.0).then_some(reltuples as u64),
            partitioned,
            event_schema,
            request: None,
        });
    }
    Ok(tables)
}

async fn columns(client: &Client, oid: Oid) -> Result<Vec<Column>, SnapshotError> {
    let rows = client
        .query(
            "SELECT a.attname::text, a.atttypid, a.atttypmod, \
             pg_catalog.format_type(a.atttypid, a.atttypmod) \
             FROM pg_catalog.pg_attribute a \
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' \
             ORDER BY a.attnum",
            &[&oid],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Column {
                name: r.try_get(0)?,
                type_oid: r.try_get(1)?,
                type_modifier: r.try_get(2)?,
                type_sql: r.try_get(3)?,
            })
        })
        .collect()
}

/// The primary key's columns in index order, else those of the replica
/// identity index; empty if the table has neither.
async fn key_columns(client: &Client, oid: Oid) -> Result<Vec<String>, SnapshotError> {
    let rows = client
        .query(
            "SELECT a.attname::text FROM ( \
               SELECT i.indrelid, i.indkey FROM pg_catalog.pg_index i \
               WHERE i.indrelid = $1 AND (i.indisprimary OR i.indisreplident) \
               ORDER BY i.indisprimary DESC LIMIT 1) i \
             CROSS JOIN LATERAL pg_catalog.generate_subscripts(i.indkey, 1) k \
             JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[k] \
             ORDER BY k",
            &[&oid],
        )
        .await?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}
