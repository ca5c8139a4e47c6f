//! Catalog facts ([`TableFacts`]) for the table schemas of a batch, looked
//! up once per new schema on an ordinary connection to the source before
//! the batch reaches the sinks.
//!
//! The facts come from the catalog as it is when the lookup runs, which
//! may be later than the WAL position of the events (Debezium reads its
//! schema the same way). A column the catalog no longer has gets default
//! facts (nullable, not in the key). When the lookup fails the batch ships
//! without them and the next batch tries again; the Debezium format then
//! treats every column as nullable.

use std::sync::Arc;
use std::time::Duration;

use cdc_core::Oid;
use tokio_postgres::Client;

use crate::event::{ChangeEvent, ColumnFacts, TableFacts, TableSchema};
use crate::replication::ReplicationConfig;
use crate::tls_connect::PgClientSettings;

/// How long one lookup (connect and query) may take at most; a shorter
/// receive timeout shortens it (see [`FactsLookup::new`]).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Columns of a table with their catalog facts.
const FACTS_SQL: &str = "\
SELECT a.attname::text, a.attnotnull, \
       COALESCE(a.attnum = ANY (i.indkey::int2[]), false), \
       t.typname::text, \
       CASE WHEN t.typtype = 'e' THEN ARRAY(SELECT e.enumlabel::text FROM pg_catalog.pg_enum e \
                                            WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder) END, \
       CASE WHEN t.typtype = 'd' THEN t.typbasetype END \
FROM pg_catalog.pg_attribute a \
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
LEFT JOIN pg_catalog.pg_index i ON i.indrelid = a.attrelid AND i.indisprimary \
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped";

/// Looks facts up for the pipeline; keeps its connection between batches.
pub(super) struct FactsLookup {
    settings: Option<PgClientSettings>,
    client: Option<Client>,
    /// The bound on one lookup.
    timeout: Duration,
    /// Whether a failure was logged since the last success (one warning
    /// per outage, not one per batch).
    warned: bool,
}

impl FactsLookup {
    /// A lookup runs inside a ship, where the receive timeout cannot fire:
    /// it is bounded by `receive_timeout` too, so a source that stops
    /// answering is noticed within about twice that, not after
    /// [`LOOKUP_TIMEOUT`] on top.
    pub(super) fn new(source: &ReplicationConfig, receive_timeout: Option<Duration>) -> Self {
        FactsLookup {
            settings: PgClientSettings::new(source).ok(),
            client: None,
            timeout: receive_timeout.map_or(LOOKUP_TIMEOUT, |t| t.min(LOOKUP_TIMEOUT)),
            warned: false,
        }
    }

    /// Sets the facts of every table schema in `events` that has none yet.
    pub(super) async fn fill(&mut self, events: &[ChangeEvent]) {
        let mut missing: Vec<Arc<TableSchema>> = Vec::new();
        let mut last: *const TableSchema = std::ptr::null();
        for table in events.iter().filter_map(|e| e.table.as_ref()) {
            // Consecutive events are mostly of one table.
            if std::ptr::eq(Arc::as_ptr(table), last) {
                continue;
            }
            last = Arc::as_ptr(table);
            if table.facts.get().is_none() && !missing.iter().any(|m| Arc::ptr_eq(m, table)) {
                missing.push(table.clone());
            }
        }
        for table in missing {
            match tokio::time::timeout(self.timeout, self.lookup(table.oid)).await {
                Ok(Ok(rows)) => {
                    let _ = table.facts.set(align(&table, rows));
                    self.warned = false;
                }
                Ok(Err(e)) => return self.failed(&table, &e),
                Err(_) => return self.failed(&table, &"timed out"),
            }
        }
    }

    fn failed(&mut self, table: &TableSchema, error: &dyn std::fmt::Display) {
        self.client = None;
        if !self.warned {
            self.warned = true;
            tracing::warn!(
                table = %format_args!("{}.{}", table.schema, table.table),
                %error,
                "could not read the table's column facts (NOT NULL, primary key, type names) from the catalog; \
                 events go out without them (every column counts as nullable) and the next batch tries again"
            );
        }
    }

    async fn lookup(&mut self, oid: Oid) -> Result<Vec<(String, ColumnFacts)>, String> {
        if self.client.is_none() {
            let settings = self
                .settings
                .as_ref()
                .ok_or("the source's TLS settings could not be loaded")?;
            let client = settings
                .connect("pgcdc catalog")
                .await
                .map_err(|e| e.to_string())?;
            self.client = Some(client);
        }
        let client = self.client.as_ref().ok_or("no connection")?;
        let rows = client
            .query(FACTS_SQL, &[&oid])
            .await
            .map_err(|e| crate::pg_error::describe(&e))?;
        rows.iter()
            .map(|r| {
                let labels: Option<Vec<String>> = r.try_get(4).map_err(|e| e.to_string())?;
                let base: Option<Oid> = r.try_get(5).map_err(|e| e.to_string())?;
                Ok((
                    r.try_get::<_, String>(0).map_err(|e| e.to_string())?,
                    ColumnFacts {
                        not_null: r.try_get(1).map_err(|e| e.to_string())?,
                        primary_key: r.try_get(2).map_err(|e| e.to_string())?,
                        type_name: Some(Arc::from(
                            r.try_get::<_, String>(3)
                                .map_err(|e| e.to_string())?
                                .as_str(),
                        )),
                        enum_labels: labels
                            .map(|l| l.iter().map(|s| Arc::from(s.as_str())).collect()),
                        domain_base_oid: base,
                    },
                ))
            })
            .collect()
    }
}

/// The facts in the order of `table`'s columns, matched by name.
fn align(table: &TableSchema, mut rows: Vec<(String, ColumnFacts)>) -> TableFacts {
    TableFacts {
        columns: table
            .columns
            .iter()
            .map(|c| {
                rows.iter()
                    .position(|(name, _)| *name == *c.name)
                    .map(|i| rows.swap_remove(i).1)
                    .unwrap_or_default()
            })
            .collect(),
    }
}
