//! [`KeyedAggregate`]: count and sum of a column grouped by a key column.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use cdc_core::types;
use cdc_core::{Numeric, Value};
use checkpoint_api::{OperatorStateError, StatefulOperator};

use super::wire::{Reader, Writer};
use super::{CommitContext, Operator, OperatorError};
use crate::event::{ChangeEvent, ColumnSchema, Operation, RowValues, TableSchema};

/// What a [`KeyedAggregate`] computes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedAggregateSpec {
    /// Operator id; also the name of the derived table (`pgcdc.<id>`).
    pub id: String,
    /// Source schema.
    pub schema: String,
    /// Source table.
    pub table: String,
    /// The grouping column.
    pub key: String,
    /// The summed column (integer types, or numeric without a fraction).
    pub value: String,
}

/// One group: `count(*)` and `sum(value)` (NULLs counted, not summed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Group {
    /// Rows in the group.
    pub count: i64,
    /// Sum of the non-NULL values.
    pub sum: i128,
}

/// A group key: the key column's text, `None` for NULL (one group, as SQL's
/// `GROUP BY`).
pub type GroupKey = Option<String>;

/// Maintains `SELECT key, count(*), sum(value) FROM table GROUP BY key` over
/// the change stream, and emits each group a transaction touched as an
/// upsert (`op` update) of the derived table `pgcdc.<id>` with columns
/// `key`, `count`, `sum`, or a delete when the group became empty.
///
/// Updates and deletes must carry the old row: set `REPLICA IDENTITY FULL`
/// on the source table (the operator stops the pipeline with that advice
/// otherwise).
#[derive(Debug, Clone)]
pub struct KeyedAggregate {
    spec: KeyedAggregateSpec,
    output: Arc<TableSchema>,
    committed: BTreeMap<GroupKey, Group>,
    open: BTreeMap<GroupKey, Group>,
    open_truncated: bool,
}

impl KeyedAggregate {
    const KIND: &'static str = "keyed_aggregate";
    const VERSION: u32 = 1;

    /// An empty aggregate.
    pub fn new(spec: KeyedAggregateSpec) -> Self {
        let col = |name: &str, type_oid, is_key| ColumnSchema {
            name: Arc::from(name),
            type_oid,
            type_modifier: -1,
            is_key,
        };
        let output = Arc::new(TableSchema {
            oid: 0,
            schema: Arc::from("pgcdc"),
            table: Arc::from(spec.id.as_str()),
            columns: vec![
                col("key", types::TEXT, true),
                col("count", types::INT8, false),
                col("sum", types::NUMERIC, false),
            ],
        });
        KeyedAggregate {
            spec,
            output,
            committed: BTreeMap::new(),
            open: BTreeMap::new(),
            open_truncated: false,
        }
    }

    /// The committed groups.
    pub fn groups(&self) -> &BTreeMap<GroupKey, Group> {
        &self.committed
    }

    fn table_name(&self) -> String {
        format!("{}.{}", self.spec.schema, self.spec.table)
    }

    fn matches(&self, table: &TableSchema) -> bool {
        *table.schema == *self.spec.schema && *table.table == *self.spec.table
    }

    /// The key and value of a row image.
    fn extract(
        &self,
        table: &TableSchema,
        row: &RowValues,
        fallback: Option<&RowValues>,
        op: &'static str,
    ) -> Result<(GroupKey, Option<i128>), OperatorError> {
        let get = |column: &str| -> Result<&Value<'static>, OperatorError> {
            let missing = || OperatorError::MissingColumn {
                operator: self.spec.id.clone(),
                table: self.table_name(),
                op,
                column: column.to_owned(),
            };
            let i = table.column_index(column).ok_or_else(missing)?;
            match row.get(i) {
                Some(Value::UnchangedToast) => fallback
                    .and_then(|f| f.get(i))
                    .filter(|v| !matches!(v, Value::UnchangedToast))
                    .ok_or_else(missing),
                Some(v) => Ok(v),
                None => Err(missing()),
            }
        };
        let key = group_key(get(&self.spec.key)?).ok_or_else(|| {
            self.bad(
                &self.spec.key,
                "the key column must be an integer, text, uuid, bool or numeric",
            )
        })?;
        let value = match get(&self.spec.value)? {
            Value::Null => None,
            v => Some(integer(v).ok_or_else(|| {
                self.bad(
                    &self.spec.value,
                    "the summed column must hold integers (int2, int4, int8, or numeric without a fraction)",
                )
            })?),
        };
        Ok((key, value))
    }

    fn bad(&self, column: &str, reason: &str) -> OperatorError {
        OperatorError::BadValue {
            operator: self.spec.id.clone(),
            table: self.table_name(),
            column: column.to_owned(),
            reason: reason.to_owned(),
        }
    }

    fn apply(&mut self, key: GroupKey, value: Option<i128>, sign: i64) {
        let g = self.open.entry(key).or_default();
        g.count = g.count.saturating_add(sign);
        if let Some(v) = value {
            g.sum = g.sum.saturating_add(v.saturating_mul(i128::from(sign)));
        }
    }

    fn upsert(
        &self,
        key: &GroupKey,
        group: Option<Group>,
        commit: &CommitContext,
        index: u32,
    ) -> ChangeEvent {
        let key_value = match key {
            Some(k) => Value::Text(k.clone().into()),
            None => Value::Null,
        };
        let (op, before, after) = match group {
            Some(g) => {
                let sum = Numeric::parse(&g.sum.to_string())
                    .map(Numeric::into_owned)
                    .map_or(Value::Null, Value::Numeric);
                (
                    Operation::Update,
                    None,
                    Some(vec![key_value, Value::Int8(g.count), sum]),
                )
            }
            None => (
                Operation::Delete,
                Some(vec![key_value, Value::Null, Value::Null]),
                None,
            ),
        };
        ChangeEvent {
            op,
            table: Some(self.output.clone()),
            before,
            after,
            message: None,
            source: commit.source.clone(),
            index,
        }
    }
}

/// The group key of a key column value.
fn group_key(v: &Value<'_>) -> Option<GroupKey> {
    Some(Some(match v {
        Value::Null => return Some(None),
        Value::Int2(i) => i.to_string(),
        Value::Int4(i) => i.to_string(),
        Value::Int8(i) => i.to_string(),
        Value::Text(s) => s.to_string(),
        Value::Uuid(u) => u.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Numeric(n) => n.to_string(),
        _ => return None,
    }))
}

/// An integer value, if `v` holds one.
fn integer(v: &Value<'_>) -> Option<i128> {
    match v {
        Value::Int2(i) => Some(i128::from(*i)),
        Value::Int4(i) => Some(i128::from(*i)),
        Value::Int8(i) => Some(i128::from(*i)),
        Value::Numeric(n) => {
            let s = n.as_str();
            let int = match s.split_once('.') {
                Some((int, frac)) if frac.bytes().all(|b| b == b'0') => int,
                Some(_) => return None,
                None => s,
            };
            int.parse().ok()
        }
        _ => None,
    }
}

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
        let mut w = Writer::with_capacity(8 + self.committed.len() * 48);
        w.u64(self.committed.len() as u64);
        for (key, g) in &self.committed {
            match key {
                Some(k) => {
                    w.u64(1);
                    w.str(k);
                }
                None => w.u64(0),
            }
            w.i64(g.count);
            w.i128(g.sum);
        }
        Ok(w.finish())
    }

    fn restore_state(&mut self, version: u32, state: Bytes) -> Result<(), OperatorStateError> {
        if version != Self::VERSION {
            return Err(OperatorStateError::UnsupportedVersion {
                operator: self.spec.id.clone(),
                found: version,
                supported: Self::VERSION,
            });
        }
        let invalid = || OperatorStateError::Invalid {
            operator: self.spec.id.clone(),
            reason: format!("malformed {}-byte keyed_aggregate state", state.len()),
        };
        let mut r = Reader::new(&state);
        let n = r.count(32).map_err(|_| invalid())?;
        let mut committed = BTreeMap::new();
        for _ in 0..n {
            let key = match r.u64().map_err(|_| invalid())? {
                0 => None,
                1 => Some(r.str().map_err(|_| invalid())?.to_owned()),
                _ => return Err(invalid()),
            };
            let count = r.i64().map_err(|_| invalid())?;
            let sum = r.i128().map_err(|_| invalid())?;
            committed.insert(key, Group { count, sum });
        }
        r.finish().map_err(|_| invalid())?;
        self.committed = committed;
        self.on_abort();
        Ok(())
    }
}

impl Operator for KeyedAggregate {
    fn on_event(&mut self, event: &ChangeEvent) -> Result<(), OperatorError> {
        let Some(table) = event.table.as_deref() else {
            return Ok(());
        };
        if !self.matches(table) {
            return Ok(());
        }
        let missing_before = |op| OperatorError::MissingColumn {
            operator: self.spec.id.clone(),
            table: self.table_name(),
            op,
            column: self.spec.value.clone(),
        };
        match event.op {
            Operation::Create | Operation::Read => {
                if let Some(after) = &event.after {
                    let (k, v) = self.extract(table, after, None, "insert")?;
                    self.apply(k, v, 1);
                }
            }
            Operation::Update => {
                let before = event
                    .before
                    .as_ref()
                    .ok_or_else(|| missing_before("update"))?;
                let (k0, v0) = self.extract(table, before, None, "update")?;
                if let Some(after) = &event.after {
                    let (k1, v1) = self.extract(table, after, Some(before), "update")?;
                    self.apply(k0, v0, -1);
                    self.apply(k1, v1, 1);
                }
            }
            Operation::Delete => {
                let before = event
                    .before
                    .as_ref()
                    .ok_or_else(|| missing_before("delete"))?;
                let (k, v) = self.extract(table, before, None, "delete")?;
                self.apply(k, v, -1);
            }
            Operation::Truncate => {
                self.open.clear();
                self.open_truncated = true;
            }
            Operation::Message => {}
        }
        Ok(())
    }

    fn on_commit(
        &mut self,
        commit: &CommitContext,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<(), OperatorError> {
        let mut touched: BTreeSet<GroupKey> = BTreeSet::new();
        if std::mem::take(&mut self.open_truncated) {
            touched.extend(std::mem::take(&mut self.committed).into_keys());
        }
        for (key, delta) in std::mem::take(&mut self.open) {
            let g = self.committed.entry(key.clone()).or_default();
            g.count = g.count.saturating_add(delta.count);
            g.sum = g.sum.saturating_add(delta.sum);
            touched.insert(key);
        }
        let mut index = commit.next_index;
        for key in touched {
            let group = match self.committed.get(&key) {
                Some(g) if g.count > 0 => Some(*g),
                _ => {
                    self.committed.remove(&key);
                    None
                }
            };
            out.push(self.upsert(&key, group, commit, index));
            index = index.saturating_add(1);
        }
        Ok(())
    }

    fn on_abort(&mut self) {
        self.open.clear();
        self.open_truncated = false;
    }
}
