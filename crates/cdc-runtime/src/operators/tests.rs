//! Unit tests of the built-in operators, and helpers for the aggregate's
//! tests (`aggregate/tests.rs`).

use std::sync::Arc;

use cdc_core::{types, Lsn, Numeric, Value};
use checkpoint_api::OperatorState;

use super::*;
use crate::event::{ColumnSchema, Operation, SourceInfo, TableSchema};

/// `public.orders (id int8, customer int4, amount numeric)`; with `full`,
/// every column is marked as key (REPLICA IDENTITY FULL), else `id` (the
/// primary key, as the default identity and snapshot reads mark it).
pub(crate) fn orders_schema(full: bool) -> Arc<TableSchema> {
    let col = |name: &str, type_oid, is_key| ColumnSchema {
        name: Arc::from(name),
        type_oid,
        type_modifier: -1,
        is_key,
    };
    Arc::new(TableSchema {
        facts: Default::default(),
        oid: 16384,
        schema: Arc::from("public"),
        table: Arc::from("orders"),
        columns: vec![
            col("id", types::INT8, true),
            col("customer", types::INT4, full),
            col("amount", types::NUMERIC, full),
        ],
    })
}

pub(crate) fn orders() -> Arc<TableSchema> {
    orders_schema(false)
}

pub(crate) fn source() -> SourceInfo {
    SourceInfo {
        commit_lsn: Lsn::from_u64(0x100),
        lsn: Lsn::from_u64(0x100),
        xid: 7,
        commit_time: None,
        database: Arc::from("app"),
        slot: Arc::from("s"),
    }
}

pub(crate) fn row(id: i64, customer: i32, amount: &str) -> Vec<Value<'static>> {
    vec![
        Value::Int8(id),
        Value::Int4(customer),
        Numeric::parse(amount)
            .map(Numeric::into_owned)
            .map_or(Value::Null, Value::Numeric),
    ]
}

pub(crate) fn event(
    op: Operation,
    before: Option<Vec<Value<'static>>>,
    after: Option<Vec<Value<'static>>>,
) -> ChangeEvent {
    event_in(orders(), op, before, after)
}

pub(crate) fn event_in(
    table: Arc<TableSchema>,
    op: Operation,
    before: Option<Vec<Value<'static>>>,
    after: Option<Vec<Value<'static>>>,
) -> ChangeEvent {
    ChangeEvent {
        op,
        table: Some(table),
        before: before.map(crate::event::Row::from_values),
        after: after.map(crate::event::Row::from_values),
        message: None,
        schema_change: None,
        source: source(),
        index: 0,
        position: Default::default(),
        boundary: None,
    }
}

pub(crate) fn commit(op: &mut dyn Operator, next_index: u32) -> Vec<ChangeEvent> {
    let mut out = Vec::new();
    op.on_commit(
        &CommitContext {
            source: source(),
            next_index,
        },
        &mut out,
    )
    .unwrap();
    out
}

pub(crate) fn aggregate() -> KeyedAggregate {
    KeyedAggregate::new(KeyedAggregateSpec {
        id: "totals".into(),
        schema: "public".into(),
        table: "orders".into(),
        key: "customer".into(),
        value: "amount".into(),
    })
}

#[test]
fn counters_count_committed_transactions_only() {
    let mut c = TableCounters::new("counts");
    c.on_event(&event(Operation::Create, None, Some(row(1, 1, "5"))))
        .unwrap();
    c.on_event(&event(Operation::Update, None, Some(row(1, 1, "6"))))
        .unwrap();
    assert!(c.totals().is_empty(), "nothing counts before the commit");
    assert!(commit(&mut c, 2).is_empty(), "counters emit nothing");
    c.on_event(&event(Operation::Delete, Some(row(1, 1, "6")), None))
        .unwrap();
    c.on_abort();
    commit(&mut c, 0);
    let t = c.totals()["public.orders"];
    assert_eq!((t.inserts, t.updates, t.deletes, t.truncates), (1, 1, 0, 0));

    let state = OperatorState::capture(&c).unwrap();
    let mut restored = TableCounters::new("counts");
    state.restore_into(&mut restored).unwrap();
    assert_eq!(restored.totals(), c.totals());
}
