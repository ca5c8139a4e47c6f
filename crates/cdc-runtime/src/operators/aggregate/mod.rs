//! [`KeyedAggregate`]: count and sum of a column grouped by a key column,
//! kept exact over a stream with upsert semantics.

mod groups;
#[cfg(test)]
mod model_tests;
mod operator;
mod plan;
mod rows;
mod state;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use cdc_core::types;
use cdc_core::{Numeric, Value};

use super::{CommitContext, OperatorError};
use crate::event::{ChangeEvent, ColumnSchema, Operation, TableSchema};
use groups::GroupIds;
use plan::Plan;
use rows::{Row, RowId};

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
    /// Sum of the non-NULL values (wrapping past the range of `i128`).
    pub sum: i128,
}

impl Group {
    /// Adds one row with `value`. Wrapping arithmetic: a sum is the same
    /// whatever order rows come and go in.
    fn add(&mut self, value: Option<i128>) {
        self.count = self.count.wrapping_add(1);
        if let Some(v) = value {
            self.sum = self.sum.wrapping_add(v);
        }
    }

    /// Removes one row with `value`.
    fn remove(&mut self, value: Option<i128>) {
        self.count = self.count.wrapping_sub(1);
        if let Some(v) = value {
            self.sum = self.sum.wrapping_sub(v);
        }
    }

    fn merge(&mut self, delta: Group) {
        self.count = self.count.wrapping_add(delta.count);
        self.sum = self.sum.wrapping_add(delta.sum);
    }
}

/// A group key: the key column's text, `None` for NULL (one group, as SQL's
/// `GROUP BY`).
pub type GroupKey = Option<String>;

/// Maintains `SELECT key, count(*), sum(value) FROM table GROUP BY key` over
/// the change stream, and emits each group a transaction touched as an
/// upsert (`op` update) of the derived table `pgcdc.<id>` with columns
/// `key`, `count`, `sum`, or a delete when the group became empty.
///
/// # Upsert semantics
///
/// The stream pgcdc delivers during an initial snapshot is a sequence of
/// upserts and deletes of rows, not of deltas: a row may be read (`r`) after
/// stream changes to it, and an update or delete may refer to a row the
/// snapshot has not delivered yet (or never will). So the aggregate
/// remembers every source row's contribution (its group and value), keyed by
/// the row's key, and treats each event as setting or removing that
/// contribution:
///
/// * insert, read: the row's contribution becomes the new one (replacing
///   the old one if the row is known);
/// * update: if the old row's key differs (a key change, or any change
///   under `REPLICA IDENTITY FULL`) the old row is removed, then the new
///   row is set;
/// * delete: the row is removed if known; an unknown row changes nothing,
///   so counts never go negative;
/// * truncate: everything is removed.
///
/// A row's key is the value of the columns its event marks as key columns:
/// the primary key (or replica identity index) under the default replica
/// identity, every column under `REPLICA IDENTITY FULL` or for a table
/// without a key. Snapshot reads always mark the primary key, so when
/// events of one table mark different column sets, one included in the
/// other, the aggregate keeps the smaller set and re-keys the rows it holds
/// (under `REPLICA IDENTITY FULL`, rows streamed before the first read are
/// re-keyed by their primary key then). Column sets neither of which
/// includes the other stop the pipeline with an error. In a table without
/// any key, identical rows count once.
///
/// A column the server did not send because it is an unchanged TOASTed
/// value (possible only for a text grouping column, or a huge numeric) keeps
/// the value the old row had: from the update's old row if it carries the
/// column, else from the remembered row; if neither knows it, the pipeline
/// stops with [`OperatorError::MissingColumn`].
///
/// Memory: a hash table of 48-byte entries, one per source row (24 bytes
/// for the key, inline when it encodes to at most 22 bytes as an integer
/// or uuid key does, and 24 for the contribution), 7/16 to 7/8 full: 56 to
/// 112 bytes a row (1M rows with a `bigint` key: 103 MB), plus the group
/// keys. In a checkpoint a row with a `bigint` key takes about 9 bytes.
///
/// The changes of the open transaction are kept apart (the rows it touched
/// and per-group deltas) and merged at commit, or dropped at abort.
#[derive(Clone)]
pub struct KeyedAggregate {
    spec: KeyedAggregateSpec,
    output: Arc<TableSchema>,
    committed: Committed,
    open: Open,
    /// Column positions of the last few schemas seen (a snapshot read and
    /// a stream change of one table carry different schemas).
    plans: Vec<(Arc<TableSchema>, Arc<Plan>)>,
    /// Groups changed outside a transaction's deltas (by re-keying), to
    /// emit at the next commit.
    pending: BTreeSet<GroupKey>,
}

impl std::fmt::Debug for KeyedAggregate {
    /// A summary: the rows would be millions of lines.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedAggregate")
            .field("spec", &self.spec)
            .field("key_columns", &self.committed.key_columns)
            .field("rows", &self.committed.rows.len())
            .field("groups", &self.committed.groups.len())
            .field("open_rows", &self.open.rows.len())
            .finish_non_exhaustive()
    }
}

/// The committed state (what a checkpoint holds).
#[derive(Debug, Clone, Default)]
struct Committed {
    /// The names of the columns rows are keyed by, once known.
    key_columns: Option<Vec<String>>,
    rows: HashMap<RowId, Row>,
    groups: BTreeMap<GroupKey, Group>,
    ids: GroupIds,
}

/// The open transaction's changes.
#[derive(Debug, Clone, Default)]
struct Open {
    /// Rows it set (`Some`) or removed (`None`).
    rows: HashMap<RowId, Option<Row>>,
    /// Per group id: what the rows above add to the committed group (the
    /// groups it touched, zero deltas included).
    deltas: HashMap<u32, Group>,
    /// It truncated the table: committed rows no longer count.
    truncated: bool,
}

/// A row's group: known by key, or the id of a remembered row's group.
enum GroupRef {
    Key(GroupKey),
    Id(u32),
}

impl KeyedAggregate {
    const KIND: &'static str = "keyed_aggregate";
    const VERSION: u32 = 2;

    /// An empty aggregate.
    pub fn new(spec: KeyedAggregateSpec) -> Self {
        let col = |name: &str, type_oid, is_key| ColumnSchema {
            name: Arc::from(name),
            type_oid,
            type_modifier: -1,
            is_key,
        };
        let output = Arc::new(TableSchema {
            facts: Default::default(),
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
            committed: Committed::default(),
            open: Open::default(),
            plans: Vec::new(),
            pending: BTreeSet::new(),
        }
    }

    /// The committed groups.
    pub fn groups(&self) -> &BTreeMap<GroupKey, Group> {
        &self.committed.groups
    }

    /// How many source rows the committed state remembers.
    pub fn rows(&self) -> usize {
        self.committed.rows.len()
    }

    fn table_name(&self) -> String {
        format!("{}.{}", self.spec.schema, self.spec.table)
    }

    fn matches(&self, table: &TableSchema) -> bool {
        *table.schema == *self.spec.schema && *table.table == *self.spec.table
    }

    fn missing(&self, op: &'static str, column: &str) -> OperatorError {
        OperatorError::MissingColumn {
            operator: self.spec.id.clone(),
            table: self.table_name(),
            op,
            column: column.to_owned(),
        }
    }

    fn bad(&self, column: &str, reason: &str) -> OperatorError {
        OperatorError::BadValue {
            operator: self.spec.id.clone(),
            table: self.table_name(),
            column: column.to_owned(),
            reason: reason.to_owned(),
        }
    }

    /// The key of `row`; a key value the server did not send (TOASTed) is
    /// taken from `before` if that carries it.
    fn row_id(
        &self,
        table: &TableSchema,
        plan: &Plan,
        row: &[Value<'_>],
        before: Option<&[Value<'_>]>,
        op: &'static str,
    ) -> Result<RowId, OperatorError> {
        let mut values = Vec::with_capacity(plan.key.len());
        for &i in &plan.key {
            let v = sent(table, row, before, i).ok_or_else(|| {
                let name = table.columns.get(i).map_or("?", |c| &*c.name);
                self.missing(op, name)
            })?;
            values.push(v);
        }
        RowId::encode(values).ok_or_else(|| self.missing(op, "(row key)"))
    }

    /// The row `id` as the open transaction sees it.
    fn current(&self, id: &RowId) -> Option<Row> {
        if let Some(r) = self.open.rows.get(id) {
            return *r;
        }
        if self.open.truncated {
            return None;
        }
        self.committed.rows.get(id).copied()
    }

    /// Sets (`Some`) or removes (`None`) row `id` in the open transaction.
    fn set(&mut self, id: RowId, row: Option<Row>) {
        let old = self.current(&id);
        if old.is_none() && row.is_none() {
            return;
        }
        if let Some(o) = old {
            self.open
                .deltas
                .entry(o.group())
                .or_default()
                .remove(o.value());
        }
        if let Some(n) = row {
            self.open
                .deltas
                .entry(n.group())
                .or_default()
                .add(n.value());
        }
        self.open.rows.insert(id, row);
    }

    /// An insert, read or update: `after` replaces the row (and `before`'s
    /// row, if its key differs).
    fn upsert(
        &mut self,
        table: &Arc<TableSchema>,
        before: Option<&[Value<'_>]>,
        after: &[Value<'_>],
        op: &'static str,
    ) -> Result<(), OperatorError> {
        let plan = self.plan(table, op)?;
        let after_id = self.row_id(table, &plan, after, before, op)?;
        let before_id = match before {
            Some(b) => Some(self.row_id(table, &plan, b, None, op)?),
            None => None,
        };
        let known = self.current(before_id.as_ref().unwrap_or(&after_id));

        let group = match sent(table, after, before, plan.group) {
            Some(v) => GroupRef::Key(group_key(v).ok_or_else(|| {
                self.bad(
                    &self.spec.key,
                    "the key column must be an integer, text, uuid, bool or numeric",
                )
            })?),
            None => GroupRef::Id(
                known
                    .map(|r| r.group())
                    .ok_or_else(|| self.missing(op, &self.spec.key))?,
            ),
        };
        let value = match sent(table, after, before, plan.value) {
            Some(Value::Null) => None,
            Some(v) => Some(integer(v).ok_or_else(|| {
                self.bad(
                    &self.spec.value,
                    "the summed column must hold integers (int2, int4, int8, or numeric without a fraction)",
                )
            })?),
            None => known
                .ok_or_else(|| self.missing(op, &self.spec.value))?
                .value(),
        };
        let group = match group {
            GroupRef::Id(id) => id,
            GroupRef::Key(k) => self
                .committed
                .ids
                .intern(k)
                .ok_or_else(|| self.bad(&self.spec.key, "more than 2^32 groups"))?,
        };
        if let Some(b) = before_id.filter(|b| *b != after_id) {
            self.set(b, None);
        }
        self.set(after_id, Some(Row::new(group, value)));
        Ok(())
    }

    /// Frees the ids of `keys` whose groups are not committed (no row can
    /// refer to them once the open rows are gone).
    fn release_uncommitted(&mut self, keys: impl IntoIterator<Item = GroupKey>) {
        for key in keys {
            if !self.committed.groups.contains_key(&key) {
                self.committed.ids.release(&key);
            }
        }
    }

    /// The groups the open transaction's deltas touch.
    fn delta_keys(&self) -> Vec<GroupKey> {
        self.open
            .deltas
            .keys()
            .filter_map(|&id| self.committed.ids.key(id).cloned())
            .collect()
    }

    /// The derived event for group `key`: its new totals, or a delete.
    fn derived(
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
            before: before.map(crate::event::Row::from_values),
            after: after.map(crate::event::Row::from_values),
            message: None,
            schema_change: None,
            source: commit.source.clone(),
            index,
            position: Default::default(),
            boundary: None,
        }
    }
}

/// Column `i` of `row` as sent; an unchanged TOASTed value is taken from
/// `before` when that carries the column (a key column of the event).
fn sent<'r>(
    table: &TableSchema,
    row: &'r [Value<'r>],
    before: Option<&'r [Value<'r>]>,
    i: usize,
) -> Option<&'r Value<'r>> {
    match row.get(i)? {
        Value::UnchangedToast => before
            .filter(|_| table.columns.get(i).is_some_and(|c| c.is_key))
            .and_then(|b| b.get(i))
            .filter(|v| !matches!(v, Value::UnchangedToast)),
        v => Some(v),
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
