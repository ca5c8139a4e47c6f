//! [`TableCounters`]: per-table counts by operation.

use std::collections::BTreeMap;

use bytes::Bytes;
use checkpoint_api::{OperatorStateError, StatefulOperator};

use super::wire::{Reader, Writer};
use super::{CommitContext, Operator, OperatorError};
use crate::event::{ChangeEvent, Operation};

/// Counts of one table's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OperationCounts {
    /// Inserted rows.
    pub inserts: u64,
    /// Updated rows.
    pub updates: u64,
    /// Deleted rows.
    pub deletes: u64,
    /// Truncates.
    pub truncates: u64,
}

impl OperationCounts {
    fn add(&mut self, other: &OperationCounts) {
        self.inserts = self.inserts.saturating_add(other.inserts);
        self.updates = self.updates.saturating_add(other.updates);
        self.deletes = self.deletes.saturating_add(other.deletes);
        self.truncates = self.truncates.saturating_add(other.truncates);
    }
}

/// Counts committed inserts, updates, deletes and truncates per table
/// (`schema.table`). Emits nothing; its totals live in every checkpoint
/// (`pgcdc checkpoints show`).
#[derive(Debug, Clone)]
pub struct TableCounters {
    id: String,
    committed: BTreeMap<String, OperationCounts>,
    open: BTreeMap<String, OperationCounts>,
}

impl TableCounters {
    const KIND: &'static str = "table_counters";
    const VERSION: u32 = 1;

    /// Counters with operator id `id` and nothing counted.
    pub fn new(id: impl Into<String>) -> Self {
        TableCounters {
            id: id.into(),
            committed: BTreeMap::new(),
            open: BTreeMap::new(),
        }
    }

    /// The committed counts by `schema.table`.
    pub fn totals(&self) -> &BTreeMap<String, OperationCounts> {
        &self.committed
    }
}

impl StatefulOperator for TableCounters {
    fn operator_id(&self) -> &str {
        &self.id
    }

    fn kind(&self) -> &str {
        Self::KIND
    }

    fn state_version(&self) -> u32 {
        Self::VERSION
    }

    fn snapshot_state(&self) -> Result<Bytes, OperatorStateError> {
        let mut w = Writer::with_capacity(8 + self.committed.len() * 64);
        w.u64(self.committed.len() as u64);
        for (table, c) in &self.committed {
            w.str(table);
            for n in [c.inserts, c.updates, c.deletes, c.truncates] {
                w.u64(n);
            }
        }
        Ok(w.finish())
    }

    fn restore_state(&mut self, version: u32, state: Bytes) -> Result<(), OperatorStateError> {
        if version != Self::VERSION {
            return Err(OperatorStateError::UnsupportedVersion {
                operator: self.id.clone(),
                found: version,
                supported: Self::VERSION,
            });
        }
        let invalid = || OperatorStateError::Invalid {
            operator: self.id.clone(),
            reason: format!("malformed {}-byte table_counters state", state.len()),
        };
        let mut r = Reader::new(&state);
        let mut committed = BTreeMap::new();
        let n = r.count(36).map_err(|_| invalid())?;
        for _ in 0..n {
            let table = r.str().map_err(|_| invalid())?.to_owned();
            let mut c = OperationCounts::default();
            for slot in [
                &mut c.inserts,
                &mut c.updates,
                &mut c.deletes,
                &mut c.truncates,
            ] {
                *slot = r.u64().map_err(|_| invalid())?;
            }
            committed.insert(table, c);
        }
        r.finish().map_err(|_| invalid())?;
        self.committed = committed;
        self.open.clear();
        Ok(())
    }
}

impl Operator for TableCounters {
    fn on_event(&mut self, event: &ChangeEvent) -> Result<(), OperatorError> {
        let Some(table) = event.table.as_deref() else {
            return Ok(());
        };
        let key = format!("{}.{}", table.schema, table.table);
        let c = self.open.entry(key).or_default();
        match event.op {
            Operation::Create => c.inserts += 1,
            Operation::Update => c.updates += 1,
            Operation::Delete => c.deletes += 1,
            Operation::Truncate => c.truncates += 1,
            Operation::Read
            | Operation::Message
            | Operation::SchemaChange
            | Operation::Transaction => {}
        }
        Ok(())
    }

    fn on_commit(
        &mut self,
        _commit: &CommitContext,
        _out: &mut Vec<ChangeEvent>,
    ) -> Result<(), OperatorError> {
        for (table, delta) in std::mem::take(&mut self.open) {
            self.committed.entry(table).or_default().add(&delta);
        }
        Ok(())
    }

    fn on_abort(&mut self) {
        self.open.clear();
    }
}
