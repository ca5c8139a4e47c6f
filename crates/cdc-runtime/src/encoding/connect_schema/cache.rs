//! The rendered schemas of the tables an encoder has seen, so that a
//! table's schema JSON is built once per [`TableSchema`], not per event.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::{write_key_schema, write_message_value_schema, write_value_schema};
use crate::encoding::DebeziumOptions;
use crate::event::TableSchema;

/// How many table schemas are kept (the most recently used); a job with
/// more tables renders some again now and then.
const CAPACITY: usize = 64;

/// The schema JSON of one table's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableSchemas {
    /// The envelope's schema (see [`write_value_schema`]).
    pub(crate) value: Box<[u8]>,
    /// The key's schema, or `null` (see [`write_key_schema`]), for the
    /// records with keys (`key = true`).
    pub(crate) key: Box<[u8]>,
}

/// Rendered schemas by table schema (the `Arc`'s pointer: every event of a
/// table version shares it). One cache serves one set of options: it
/// belongs to one encoder.
///
/// Schemas rendered before the table's catalog facts were known are
/// rendered again once they are (they decide `optional` and enums).
#[derive(Debug, Default)]
pub(crate) struct SchemaCache {
    entries: Mutex<Vec<Entry>>,
    /// The schema of logical decoding messages' records.
    message: OnceLock<Box<[u8]>>,
}

#[derive(Debug)]
struct Entry {
    table: Arc<TableSchema>,
    with_facts: bool,
    schemas: Arc<TableSchemas>,
}

impl Clone for SchemaCache {
    /// A clone starts empty (it may serve other options).
    fn clone(&self) -> Self {
        SchemaCache::default()
    }
}

impl SchemaCache {
    /// The schemas of `table`'s records under `opts`, rendered at most once
    /// per table schema while it stays in the cache.
    pub(crate) fn get(
        &self,
        table: &Arc<TableSchema>,
        opts: &DebeziumOptions,
    ) -> Arc<TableSchemas> {
        let with_facts = table.facts.get().is_some();
        // A panic elsewhere while holding the lock leaves a usable list.
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = entries.iter().rposition(|e| Arc::ptr_eq(&e.table, table)) {
            let entry = entries.remove(at);
            if entry.with_facts == with_facts {
                let schemas = entry.schemas.clone();
                // Most recently used last.
                entries.push(entry);
                return schemas;
            }
        }
        let mut value = Vec::new();
        write_value_schema(&mut value, table, opts);
        let mut key = Vec::new();
        write_key_schema(&mut key, table, opts);
        let schemas = Arc::new(TableSchemas {
            value: value.into_boxed_slice(),
            key: key.into_boxed_slice(),
        });
        if entries.len() >= CAPACITY {
            entries.remove(0);
        }
        entries.push(Entry {
            table: table.clone(),
            with_facts,
            schemas: schemas.clone(),
        });
        schemas
    }

    /// The schema of a logical decoding message's record under `opts`,
    /// rendered once.
    pub(crate) fn message(&self, opts: &DebeziumOptions) -> &[u8] {
        self.message.get_or_init(|| {
            let mut out = Vec::new();
            write_message_value_schema(&mut out, opts);
            out.into_boxed_slice()
        })
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
