//! Where the aggregate's columns are in a table schema, and re-keying the
//! remembered rows when a table's key columns change.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use super::super::OperatorError;
use super::rows::{Row, RowId};
use super::{Group, KeyedAggregate, Open};
use crate::event::{SchemaChange, SchemaChangeItem, TableSchema};

/// Where the columns the aggregate reads are in one table schema.
#[derive(Debug)]
pub(super) struct Plan {
    /// The row key columns, in the order of `Committed::key_columns`.
    pub(super) key: Vec<usize>,
    pub(super) group: usize,
    pub(super) value: usize,
}

impl KeyedAggregate {
    /// Refuses a schema change of its table that takes away the table (a
    /// rename or drop), the grouping or summed column, or a row key column
    /// (dropped, renamed, or retyped: remembered keys would no longer
    /// match). Other changes need nothing: plans are per schema version.
    pub(super) fn check_schema_change(
        &self,
        change: &SchemaChange,
        table: &TableSchema,
    ) -> Result<(), OperatorError> {
        if !self.matches(&change.previous) {
            return Ok(());
        }
        let refuse = |what: String, fix: &str| OperatorError::SchemaChanged {
            operator: self.spec.id.clone(),
            table: self.table_name(),
            change: what,
            fix: fix.to_owned(),
        };
        let mut needed: Vec<(&str, &str)> = vec![
            (self.spec.key.as_str(), "grouping column"),
            (self.spec.value.as_str(), "summed column"),
        ];
        if let Some(cols) = &self.committed.key_columns {
            needed.extend(cols.iter().map(|c| (c.as_str(), "row key column")));
        }
        for item in &change.items {
            match item {
                SchemaChangeItem::RenameTable { .. } | SchemaChangeItem::DropTable => {
                    return Err(refuse(
                        format!("the table is now {}.{} ({})", table.schema, table.table, item.kind()),
                        "point the operator's schema and table at the new name and start it again from a snapshot",
                    ));
                }
                SchemaChangeItem::DropColumn { column } => {
                    if let Some((_, role)) = needed.iter().find(|(n, _)| *n == &*column.name) {
                        return Err(refuse(
                            format!("its {role} {:?} was dropped", &*column.name),
                            "configure the operator with a column the table still has and start it again from a snapshot",
                        ));
                    }
                }
                SchemaChangeItem::RenameColumn { from, to } => {
                    if let Some((_, role)) = needed.iter().find(|(n, _)| *n == &**from) {
                        return Err(refuse(
                            format!("its {role} {:?} was renamed to {:?}", &**from, &**to),
                            "configure the operator with the new column name and start it again from a snapshot",
                        ));
                    }
                }
                SchemaChangeItem::AlterColumnType { column, .. } => {
                    // The summed column may change between integer types;
                    // keys are remembered encoded by type.
                    let keyed = needed
                        .iter()
                        .find(|(n, role)| *n == &**column && *role != "summed column");
                    if let Some((_, role)) = keyed {
                        return Err(refuse(
                            format!("the type of its {role} {:?} changed", &**column),
                            "start the operator again from a snapshot (its remembered keys have the old type)",
                        ));
                    }
                }
                SchemaChangeItem::AddColumn { .. } => {}
            }
        }
        Ok(())
    }

    /// The column positions for `table`, re-keying the remembered rows if
    /// its key columns are fewer than the ones used so far.
    pub(super) fn plan(
        &mut self,
        table: &Arc<TableSchema>,
        op: &'static str,
    ) -> Result<Arc<Plan>, OperatorError> {
        if let Some((_, p)) = self.plans.iter().find(|(t, _)| Arc::ptr_eq(t, table)) {
            return Ok(p.clone());
        }
        let group = table
            .column_index(&self.spec.key)
            .ok_or_else(|| self.missing(op, &self.spec.key))?;
        let value = table
            .column_index(&self.spec.value)
            .ok_or_else(|| self.missing(op, &self.spec.value))?;
        // The event's key columns; a table without a key is keyed by all.
        let mut marked: Vec<&str> = table
            .columns
            .iter()
            .filter(|c| c.is_key)
            .map(|c| &*c.name)
            .collect();
        if marked.is_empty() {
            marked = table.columns.iter().map(|c| &*c.name).collect();
        }
        let current = match self.committed.key_columns.clone() {
            None => marked.iter().map(|&n| n.to_owned()).collect(),
            Some(cols) if cols.iter().all(|c| marked.contains(&c.as_str())) => cols,
            Some(cols) if marked.iter().all(|&m| cols.iter().any(|c| c == m)) => {
                // Fewer key columns: keep those, in the current order.
                let positions: Vec<usize> = cols
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| marked.contains(&c.as_str()))
                    .map(|(i, _)| i)
                    .collect();
                self.rekey(&positions);
                positions
                    .iter()
                    .filter_map(|&i| cols.get(i).cloned())
                    .collect()
            }
            Some(cols) => {
                return Err(self.bad(
                    &marked.join(", "),
                    &format!(
                        "this {op} identifies rows by these columns, earlier events by ({}); \
                         the aggregate needs one row key (the primary key, or every column \
                         under REPLICA IDENTITY FULL)",
                        cols.join(", ")
                    ),
                ));
            }
        };
        let key = current
            .iter()
            .map(|c| table.column_index(c))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| self.missing(op, &current.join(", ")))?;
        self.committed.key_columns = Some(current);
        let plan = Arc::new(Plan { key, group, value });
        if self.plans.len() >= 4 {
            self.plans.remove(0);
        }
        self.plans.push((table.clone(), plan.clone()));
        Ok(plan)
    }

    /// Re-keys every remembered row by the key segments at `positions`.
    /// Rows that collide (two versions of one row, which a table whose key
    /// is included in the old one cannot produce) keep one version; the
    /// groups stay the sums of the rows.
    fn rekey(&mut self, positions: &[usize]) {
        self.plans.clear();
        let old = std::mem::take(&mut self.committed.rows);
        let mut rows = HashMap::with_capacity(old.len());
        for (id, row) in old {
            match id.project(positions) {
                Some(new) if !rows.contains_key(&new) => {
                    rows.insert(new, row);
                }
                _ => {
                    let Some(key) = self.committed.ids.key(row.group()).cloned() else {
                        continue;
                    };
                    if let Some(g) = self.committed.groups.get_mut(&key) {
                        g.remove(row.value());
                        if g.count <= 0 {
                            self.committed.groups.remove(&key);
                        }
                    }
                    self.pending.insert(key);
                }
            }
        }
        self.committed.rows = rows;

        let old = std::mem::take(&mut self.open.rows);
        let mut open: HashMap<RowId, Option<Row>> = HashMap::with_capacity(old.len());
        for (id, row) in old {
            let Some(new) = id.project(positions) else {
                continue;
            };
            match open.entry(new) {
                Entry::Vacant(e) => {
                    e.insert(row);
                }
                Entry::Occupied(mut e) => {
                    if e.get().is_none() {
                        e.insert(row);
                    }
                }
            }
        }
        // The deltas are what the open rows add to the committed ones.
        let Open {
            rows: open_rows,
            deltas,
            truncated,
        } = &mut self.open;
        *open_rows = open;
        deltas.values_mut().for_each(|d| *d = Group::default());
        for (id, row) in open_rows.iter() {
            if let Some(r) = row {
                deltas.entry(r.group()).or_default().add(r.value());
            }
            if let Some(c) = self.committed.rows.get(id).filter(|_| !*truncated) {
                deltas.entry(c.group()).or_default().remove(c.value());
            }
        }
    }
}
