//! Unit tests of the built-in operators.

use std::sync::Arc;

use bytes::Bytes;
use cdc_core::{types, Lsn, Numeric, Value};
use checkpoint_api::{OperatorState, OperatorStateError, StatefulOperator};

use super::*;
use crate::event::{ColumnSchema, Operation, SourceInfo, TableSchema};

fn orders() -> Arc<TableSchema> {
    let col = |name: &str, type_oid, is_key| ColumnSchema {
        name: Arc::from(name),
        type_oid,
        type_modifier: -1,
        is_key,
    };
    Arc::new(TableSchema {
        oid: 16384,
        schema: Arc::from("public"),
        table: Arc::from("orders"),
        columns: vec![
            col("id", types::INT8, true),
            col("customer", types::INT4, false),
            col("amount", types::NUMERIC, false),
        ],
    })
}

fn source() -> SourceInfo {
    SourceInfo {
        commit_lsn: Lsn::from_u64(0x100),
        lsn: Lsn::from_u64(0x100),
        xid: 7,
        commit_time: None,
        database: Arc::from("app"),
        slot: Arc::from("s"),
    }
}

fn row(id: i64, customer: i32, amount: &str) -> Vec<Value<'static>> {
    vec![
        Value::Int8(id),
        Value::Int4(customer),
        Numeric::parse(amount)
            .map(Numeric::into_owned)
            .map_or(Value::Null, Value::Numeric),
    ]
}

fn event(
    op: Operation,
    before: Option<Vec<Value<'static>>>,
    after: Option<Vec<Value<'static>>>,
) -> ChangeEvent {
    ChangeEvent {
        op,
        table: Some(orders()),
        before,
        after,
        message: None,
        source: source(),
        index: 0,
    }
}

fn commit(op: &mut dyn Operator, next_index: u32) -> Vec<ChangeEvent> {
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

fn aggregate() -> KeyedAggregate {
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

#[test]
fn aggregate_tracks_inserts_updates_deletes_and_emits_upserts() {
    let mut a = aggregate();
    a.on_event(&event(Operation::Create, None, Some(row(1, 10, "5"))))
        .unwrap();
    a.on_event(&event(Operation::Create, None, Some(row(2, 10, "7"))))
        .unwrap();
    a.on_event(&event(Operation::Create, None, Some(row(3, 20, "1"))))
        .unwrap();
    let out = commit(&mut a, 3);
    assert_eq!(out.len(), 2, "one upsert per touched group");
    assert_eq!(out[0].index, 3);
    assert_eq!(out[1].index, 4);
    assert_eq!(out[0].op, Operation::Update);
    assert_eq!(out[0].table_name(), Some("totals"));
    assert_eq!(out[0].schema_name(), Some("pgcdc"));
    let after = out[0].after.as_ref().unwrap();
    assert_eq!(after[0], Value::Text("10".into()));
    assert_eq!(after[1], Value::Int8(2));
    assert_eq!(
        after[2],
        Value::Numeric(Numeric::parse("12").unwrap().into_owned())
    );

    // Move row 2 to group 20, delete row 3, then row 1: group 10 empties.
    a.on_event(&event(
        Operation::Update,
        Some(row(2, 10, "7")),
        Some(row(2, 20, "8")),
    ))
    .unwrap();
    a.on_event(&event(Operation::Delete, Some(row(3, 20, "1")), None))
        .unwrap();
    a.on_event(&event(Operation::Delete, Some(row(1, 10, "5")), None))
        .unwrap();
    let out = commit(&mut a, 0);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].op, Operation::Delete, "group 10 is gone");
    let g = a.groups();
    assert_eq!(g.len(), 1);
    assert_eq!(g[&Some("20".to_owned())], Group { count: 1, sum: 8 });
}

#[test]
fn aggregate_forgets_an_aborted_transaction_and_handles_truncate() {
    let mut a = aggregate();
    a.on_event(&event(Operation::Create, None, Some(row(1, 10, "5"))))
        .unwrap();
    commit(&mut a, 0);
    a.on_event(&event(Operation::Create, None, Some(row(2, 10, "5"))))
        .unwrap();
    a.on_abort();
    assert!(commit(&mut a, 0).is_empty());
    assert_eq!(
        a.groups()[&Some("10".to_owned())],
        Group { count: 1, sum: 5 }
    );

    a.on_event(&event(Operation::Truncate, None, None)).unwrap();
    a.on_event(&event(Operation::Create, None, Some(row(9, 30, "2"))))
        .unwrap();
    let out = commit(&mut a, 0);
    let ops: Vec<_> = out.iter().map(|e| e.op).collect();
    assert_eq!(ops, vec![Operation::Delete, Operation::Update]);
    assert_eq!(a.groups().len(), 1);
}

#[test]
fn aggregate_needs_the_old_row_and_integer_values() {
    let mut a = aggregate();
    let err = a
        .on_event(&event(Operation::Delete, None, None))
        .unwrap_err();
    assert!(err.to_string().contains("REPLICA IDENTITY FULL"), "{err}");
    let err = a
        .on_event(&event(Operation::Create, None, Some(row(1, 1, "1.5"))))
        .unwrap_err();
    assert!(matches!(err, OperatorError::BadValue { .. }), "{err}");
    // Whole-number numerics are fine.
    a.on_event(&event(Operation::Create, None, Some(row(1, 1, "2.000"))))
        .unwrap();
}

#[test]
fn aggregate_state_round_trips_and_rejects_garbage() {
    let mut a = aggregate();
    for i in 0..1000 {
        a.on_event(&event(
            Operation::Create,
            None,
            Some(row(i, (i % 97) as i32, "3")),
        ))
        .unwrap();
    }
    let mut null_key = row(5000, 0, "4");
    null_key[1] = Value::Null;
    a.on_event(&event(Operation::Create, None, Some(null_key)))
        .unwrap();
    commit(&mut a, 0);
    let state = OperatorState::capture(&a).unwrap();
    let mut b = aggregate();
    state.restore_into(&mut b).unwrap();
    assert_eq!(a.groups(), b.groups());
    assert_eq!(b.groups()[&None], Group { count: 1, sum: 4 });

    for cut in [0, 1, 8, state.state.len() / 2, state.state.len() - 1] {
        let err = b.restore_state(1, state.state.slice(..cut)).unwrap_err();
        assert!(
            matches!(err, OperatorStateError::Invalid { .. }),
            "cut {cut}: {err}"
        );
    }
    let mut extra = state.state.to_vec();
    extra.push(0);
    assert!(b.restore_state(1, Bytes::from(extra)).is_err());
    assert!(matches!(
        b.restore_state(2, state.state.clone()),
        Err(OperatorStateError::UnsupportedVersion { found: 2, .. })
    ));
    // A failed restore leaves the state as it was.
    assert_eq!(a.groups(), b.groups());
}
