//! [`KeyedAggregate`] as an operator: it sees every change event and each
//! commit (emitting the changed groups as derived events), and its
//! committed state is checkpointed and restored.

use bytes::Bytes;
use checkpoint_api::{OperatorStateError, StatefulOperator};

use super::super::{CommitContext, Operator, OperatorError};
use super::{state, KeyedAggregate, Open};
use crate::event::{ChangeEvent, Operation};

impl StatefulOperator for KeyedAggregate {
    fn operator_id(&self) -> &str {
        &self.spec.id
    }

    fn kind(&self) -> &str {
        Self::KIND
    }

    fn state_version(&self) -> u32 {
        Self::VERSION
    }

    fn snapshot_state(&self) -> Result<Bytes, OperatorStateError> {
        state::write(&self.committed).ok_or_else(|| OperatorStateError::Invalid {
            operator: self.spec.id.clone(),
            reason: "a remembered row refers to a group the aggregate does not hold".into(),
        })
    }

    fn restore_state(&mut self, version: u32, state: Bytes) -> Result<(), OperatorStateError> {
        let invalid = |reason: String| OperatorStateError::Invalid {
            operator: self.spec.id.clone(),
            reason,
        };
        match version {
            Self::VERSION => {}
            1 => return Err(invalid(state::V1_REFUSED.to_owned())),
            found => {
                return Err(OperatorStateError::UnsupportedVersion {
                    operator: self.spec.id.clone(),
                    found,
                    supported: Self::VERSION,
                })
            }
        }
        let committed = state::read(&state).map_err(|why| {
            invalid(format!(
                "malformed {}-byte keyed_aggregate state: {why}",
                state.len()
            ))
        })?;
        self.committed = committed;
        self.plans.clear();
        self.pending.clear();
        self.open = Open::default();
        Ok(())
    }
}

impl Operator for KeyedAggregate {
    fn on_event(&mut self, event: &ChangeEvent) -> Result<(), OperatorError> {
        let Some(table) = event.table.as_ref() else {
            return Ok(());
        };
        if let Some(change) = &event.schema_change {
            return self.check_schema_change(change, table);
        }
        if !self.matches(table) {
            return Ok(());
        }
        match event.op {
            Operation::Create | Operation::Read | Operation::Update => {
                let op = match event.op {
                    Operation::Create => "insert",
                    Operation::Read => "read",
                    _ => "update",
                };
                if let Some(after) = event.after_values() {
                    let before = event.before_values();
                    self.upsert(table, before.as_deref(), &after, op)?;
                }
            }
            Operation::Delete => {
                let plan = self.plan(table, "delete")?;
                let before = event
                    .before_values()
                    .ok_or_else(|| self.missing("delete", "(row key)"))?;
                let id = self.row_id(table, &plan, &before, None, "delete")?;
                self.set(id, None);
            }
            Operation::Truncate => {
                let keys = self.delta_keys();
                self.release_uncommitted(keys);
                self.open.rows.clear();
                self.open.deltas.clear();
                self.open.truncated = true;
            }
            Operation::Message | Operation::SchemaChange | Operation::Transaction => {}
        }
        Ok(())
    }

    fn on_commit(
        &mut self,
        commit: &CommitContext,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<(), OperatorError> {
        let mut touched = std::mem::take(&mut self.pending);
        let c = &mut self.committed;
        if std::mem::take(&mut self.open.truncated) {
            c.rows.clear();
            touched.extend(std::mem::take(&mut c.groups).into_keys());
        }
        for (id, row) in self.open.rows.drain() {
            match row {
                Some(r) => {
                    c.rows.insert(id, r);
                }
                None => {
                    c.rows.remove(&id);
                }
            }
        }
        for (id, delta) in self.open.deltas.drain() {
            let Some(key) = c.ids.key(id).cloned() else {
                continue;
            };
            c.groups.entry(key.clone()).or_default().merge(delta);
            touched.insert(key);
        }
        let mut index = commit.next_index;
        for key in touched {
            let group = match self.committed.groups.get(&key) {
                Some(g) if g.count > 0 => Some(*g),
                _ => {
                    self.committed.groups.remove(&key);
                    self.committed.ids.release(&key);
                    None
                }
            };
            out.push(self.derived(&key, group, commit, index));
            index = index.saturating_add(1);
        }
        Ok(())
    }

    fn on_abort(&mut self) {
        let mut keys = self.delta_keys();
        keys.extend(self.pending.iter().cloned());
        self.release_uncommitted(keys);
        self.open.rows.clear();
        self.open.deltas.clear();
        self.open.truncated = false;
    }
}
