//! Captured DDL (see [`crate::ddl`]): a table's new schema known at the
//! statement's own LSN, and dropped tables.

use std::sync::Arc;

use cdc_core::Lsn;

use super::{schema_change_event, ConvertError, EventConverter, Known};
use crate::ddl::{CapturedDdl, CapturedTable};
use crate::event::{ChangeEvent, SchemaChange, SchemaChangeItem, SourceInfo, TableSchema};

impl EventConverter {
    /// Applies one captured DDL statement (a [`crate::ddl::DDL_PREFIX`]
    /// message at `lsn` in the open transaction), appending a schema-change
    /// event for each known table it changed or dropped. Returns how many.
    ///
    /// Only tables the converter already knows are followed: a table's first
    /// schema is the one its first change carries. Tables that a publication
    /// of `publications` publishes with a column list are left to the next
    /// Relation message, which holds the listed columns only. The Relation
    /// the server sends before the table's next change then matches the
    /// schema taken here, so the change is reported once.
    pub fn captured_ddl(
        &mut self,
        ddl: &CapturedDdl,
        publications: &[String],
        lsn: Lsn,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<usize, ConvertError> {
        let Some(open) = self.open else {
            return Err(ConvertError::NoTransaction {
                what: "DDL message",
            });
        };
        let source = SourceInfo {
            commit_lsn: open.commit_lsn,
            lsn,
            xid: open.xid,
            commit_time: Some(open.commit_time),
            database: self.database.clone(),
            slot: self.slot.clone(),
        };
        let start = out.len();
        for t in &ddl.tables {
            if t.column_lists.iter().any(|p| publications.contains(p)) {
                continue;
            }
            let Some(previous) = self.known_schema(t.oid) else {
                tracing::debug!(table = %t.name, oid = t.oid, %lsn, "captured DDL of a table whose schema is not known yet");
                continue;
            };
            let schema = Arc::new(TableSchema {
                facts: Default::default(),
                oid: t.oid,
                schema: Arc::from(t.schema.as_str()),
                table: Arc::from(t.name.as_str()),
                columns: t.columns.iter().map(|c| c.schema.clone()).collect(),
            });
            let Some(mut change) = SchemaChange::between(&previous, &schema) else {
                // Logical decoding orders a message and a change of another
                // subtransaction at the same LSN either way: the change may
                // have announced the schema first. Its event, if not
                // shipped yet, gets what the message knows.
                complete_inferred(out, start, t, &ddl.ddl, lsn);
                continue;
            };
            fill_existing_rows(&mut change, t);
            change.ddl = Some(ddl.ddl.clone());
            out.push(schema_change_event(schema.clone(), change, source.clone()));
            self.open_schemas.insert(
                t.oid,
                Known {
                    relation: None,
                    schema,
                    since: lsn,
                },
            );
            self.last = None;
        }
        for d in &ddl.dropped {
            let Some(previous) = self.known_schema(d.oid) else {
                continue;
            };
            let change = SchemaChange {
                previous: previous.clone(),
                items: vec![SchemaChangeItem::DropTable],
                ddl: Some(ddl.ddl.clone()),
            };
            out.push(schema_change_event(previous, change, source.clone()));
            self.open_schemas.remove(&d.oid);
            self.open_dropped.push(d.oid);
            self.last = None;
        }
        self.number(open, start, out)
    }

    /// The schema the open transaction sees for `oid`, if known.
    fn known_schema(&self, oid: cdc_core::Oid) -> Option<Arc<TableSchema>> {
        if self.open_dropped.contains(&oid) {
            return None;
        }
        self.open_schemas
            .get(&oid)
            .or_else(|| self.schemas.get(&oid))
            .map(|k| k.schema.clone())
    }
}

/// Sets what rows that existed before hold in each added column of
/// `change`, from the captured table `t`.
fn fill_existing_rows(change: &mut SchemaChange, t: &CapturedTable) {
    for item in &mut change.items {
        if let SchemaChangeItem::AddColumn {
            column,
            existing_rows,
        } = item
        {
            if let Some(c) = t.columns.iter().find(|c| c.schema.name == column.name) {
                existing_rows.clone_from(&c.existing_rows);
            }
        }
    }
}

/// Completes the schema-change event of `t` inferred at `lsn` (before
/// `start` in `out`) with the captured statement.
fn complete_inferred(
    out: &mut [ChangeEvent],
    start: usize,
    t: &CapturedTable,
    ddl: &Arc<str>,
    lsn: Lsn,
) {
    let found = out[..start].iter_mut().rev().find(|e| {
        e.source.lsn == lsn
            && e.table.as_ref().is_some_and(|s| s.oid == t.oid)
            && e.schema_change.as_ref().is_some_and(|c| c.ddl.is_none())
    });
    if let Some(ev) = found {
        if let Some(inferred) = ev.schema_change.as_deref() {
            let mut change = inferred.clone();
            fill_existing_rows(&mut change, t);
            change.ddl = Some(ddl.clone());
            ev.schema_change = Some(Arc::new(change));
        }
    }
}
