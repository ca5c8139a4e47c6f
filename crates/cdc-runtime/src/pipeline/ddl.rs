//! Captured DDL (see [`crate::ddl`]) in the stream: schema-change events at
//! the statement's LSN, and tables to read again when a column was added
//! with a value per row.

use cdc_core::Lsn;

use super::requests::Asked;
use super::session::Source;
use super::PipelineError;
use crate::event::{ExistingRows, SchemaChangeItem};
use crate::source::TableRef;

impl Source<'_> {
    /// A DDL message at `lsn` in the open transaction. A message that does
    /// not parse is logged and skipped: the change is then inferred from
    /// the table's next Relation message, as without DDL capture.
    pub(super) fn on_ddl(&mut self, content: &[u8], lsn: Lsn) -> Result<usize, PipelineError> {
        let ddl = match crate::ddl::parse(content) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(%lsn, error = %e, "captured DDL ignored");
                return Ok(0);
            }
        };
        tracing::debug!(%lsn, tag = %ddl.tag, tables = ddl.tables.len(), dropped = ddl.dropped.len(), "captured DDL");
        let start = self.pending.events.len();
        let n = self.converter.captured_ddl(
            &ddl,
            &self.options.publications,
            lsn,
            &mut self.pending.events,
        )?;
        self.note_new_tables(start, lsn);
        // The events of this statement: the new ones, or one a change at the
        // same LSN announced first (see `EventConverter::captured_ddl`).
        let from = start.min(self.pending.committed);
        for ev in &self.pending.events[from..] {
            let (Some(table), Some(change)) = (&ev.table, &ev.schema_change) else {
                continue;
            };
            if ev.source.lsn != lsn || change.ddl.is_none() {
                continue;
            }
            for item in &change.items {
                if let SchemaChangeItem::AddColumn {
                    column,
                    existing_rows: ExistingRows::PerRow,
                } = item
                {
                    self.asked.push(Asked::Rewritten {
                        oid: table.oid,
                        name: TableRef::new(&*table.schema, &*table.table),
                        column: column.name.to_string(),
                        lsn,
                        xid: self.converter.open_transaction(),
                    });
                }
            }
        }
        Ok(n)
    }
}
