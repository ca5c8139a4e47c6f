//! Tables the snapshot takes on while the stream runs: requests (on demand,
//! attached partitions), tables that appeared, and tables recorded without
//! a read, and new columns of tables still to read.

use std::sync::Arc;
use std::time::Instant;

use checkpoint_api::TableDone;

use super::super::catalog::SnapshotTable;
use super::{table_ref, Snapshot};
use crate::tls_connect::PgClientSettings;

impl Snapshot {
    /// Whether `oid` is still to be read (in whole or in part).
    pub(crate) fn reads_pending(&self, oid: cdc_core::Oid) -> bool {
        self.tables.iter().skip(self.table).any(|t| t.oid == oid)
    }

    /// Takes the published tables' current names and columns (after a
    /// schema change) for the reads still to come. When any changed, the
    /// chunks being read are read again with them, by new readers: a chunk
    /// read with the old columns would come after the schema change in the
    /// stream. Returns whether anything changed.
    pub(crate) fn refresh(&mut self, current: &[SnapshotTable]) -> bool {
        let mut tables = (*self.tables).clone();
        let mut changed = false;
        for t in tables.iter_mut().skip(self.table) {
            let Some(c) = current.iter().find(|c| c.oid == t.oid) else {
                continue;
            };
            if c.event_schema != t.event_schema || c.row_filter != t.row_filter {
                tracing::info!(table = %c.display_name(), "snapshot: the table's schema changed; its reads go on with the new columns");
                let request = t.request.take();
                *t = c.clone();
                t.request = request;
                changed = true;
            }
        }
        for t in &mut self.catalog {
            if let Some(c) = current.iter().find(|c| c.oid == t.oid) {
                t.clone_from(c);
            }
        }
        if changed {
            self.tables = Arc::new(tables);
            self.stream_keys.clear();
            self.restart();
        }
        changed
    }

    /// The published partitioned tables (their partitions are watched).
    pub(crate) fn partitioned_tables(&self) -> Vec<cdc_core::Oid> {
        self.catalog
            .iter()
            .filter(|t| t.partitioned)
            .map(|t| t.oid)
            .collect()
    }

    /// How the readers connect (ordinary connections).
    pub(crate) fn client_settings(&self) -> &PgClientSettings {
        &self.settings
    }

    /// Whether `oid` is a table the snapshot knows: published when the job
    /// started, read before, or asked for since.
    /// Every change of the stream asks this: a set lookup.
    pub(crate) fn knows(&self, oid: cdc_core::Oid) -> bool {
        self.known.contains(&oid)
    }

    /// Whether a request with this id is pending or was answered recently
    /// (a signal replayed after a restart is not read twice).
    pub(crate) fn has_request(&self, id: &str) -> bool {
        self.tables[self.table.min(self.tables.len())..]
            .iter()
            .any(|t| t.request.as_ref().is_some_and(|r| r.id == id))
            || self
                .requests_done
                .iter()
                .any(|d| d.request_id.as_deref() == Some(id))
    }

    /// Reads `table` (with a key) after the tables before it, while the
    /// stream runs. Call between transactions.
    pub(crate) fn add(&mut self, table: SnapshotTable) {
        tracing::info!(table = %table.display_name(),
            request = table.request.as_ref().map(|r| r.id.as_str()).unwrap_or(""),
            filter = table.request.as_ref().and_then(|r| r.filter.as_deref()).unwrap_or(""),
            "snapshot: table queued for reading");
        self.defer(&table);
        let idle = self.keyed_complete();
        Arc::make_mut(&mut self.tables).push(table);
        if idle {
            self.started_at = Instant::now();
            self.rows_total = 0;
            self.spawn_readers();
        }
    }

    /// Records `table` as skipped: not read (it cannot be, and the job
    /// goes on without it).
    pub(crate) fn skip(&mut self, table: &SnapshotTable) {
        self.record(table, true);
    }

    /// Records `table` as taken as it is: not read, by choice.
    pub(crate) fn skip_as_is(&mut self, table: &SnapshotTable) {
        self.record(table, false);
    }

    fn record(&mut self, table: &SnapshotTable, skipped: bool) {
        self.tables_done.push(TableDone {
            table: table_ref(table),
            oid: table.oid,
            skipped,
            ..TableDone::default()
        });
        self.defer(table);
    }

    /// Knows `table` without reading it or recording it as read: the next
    /// start reads it.
    pub(crate) fn defer(&mut self, table: &SnapshotTable) {
        if self.known.insert(table.oid) {
            let mut known = table.clone();
            known.request = None;
            self.catalog.push(known);
        }
    }
}
