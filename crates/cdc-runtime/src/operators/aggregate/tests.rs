//! Unit tests of [`KeyedAggregate`]: the classic cases, the interleavings
//! of an initial snapshot with the stream, transactions, and the state.

use std::collections::BTreeMap;

use bytes::Bytes;
use cdc_core::{Numeric, Value};
use checkpoint_api::{OperatorState, OperatorStateError, StatefulOperator};

use super::super::tests::{aggregate, commit, event, event_in, orders_schema, row};
use super::super::{Operator, OperatorError};
use super::{Group, GroupKey, KeyedAggregate};
use crate::event::{ChangeEvent, Operation};

/// The expected groups, from `(customer, count, sum)`.
fn groups(rows: &[(i32, i64, i128)]) -> BTreeMap<GroupKey, Group> {
    rows.iter()
        .map(|&(c, count, sum)| (Some(c.to_string()), Group { count, sum }))
        .collect()
}

fn on(a: &mut KeyedAggregate, e: ChangeEvent) {
    a.on_event(&e).unwrap();
}

fn insert(r: Vec<Value<'static>>) -> ChangeEvent {
    event(Operation::Create, None, Some(r))
}

fn read(r: Vec<Value<'static>>) -> ChangeEvent {
    event(Operation::Read, None, Some(r))
}

/// An update under the default identity (key unchanged: no old row).
fn update(r: Vec<Value<'static>>) -> ChangeEvent {
    event(Operation::Update, None, Some(r))
}

/// A delete under the default identity: the old key, other columns NULL.
fn delete(id: i64) -> ChangeEvent {
    event(
        Operation::Delete,
        Some(vec![Value::Int8(id), Value::Null, Value::Null]),
        None,
    )
}

fn full(
    op: Operation,
    before: Option<Vec<Value<'static>>>,
    after: Option<Vec<Value<'static>>>,
) -> ChangeEvent {
    event_in(orders_schema(true), op, before, after)
}

#[test]
fn aggregate_tracks_inserts_updates_deletes_and_emits_upserts() {
    let mut a = aggregate();
    on(&mut a, insert(row(1, 10, "5")));
    on(&mut a, insert(row(2, 10, "7")));
    on(&mut a, insert(row(3, 20, "1")));
    let out = commit(&mut a, 3);
    assert_eq!(out.len(), 2, "one upsert per touched group");
    assert_eq!(out[0].index, 3);
    assert_eq!(out[1].index, 4);
    assert_eq!(out[0].op, Operation::Update);
    assert_eq!(out[0].table_name(), Some("totals"));
    assert_eq!(out[0].schema_name(), Some("pgcdc"));
    let after = out[0].after_values().unwrap();
    assert_eq!(after[0], Value::Text("10".into()));
    assert_eq!(after[1], Value::Int8(2));
    assert_eq!(
        after[2],
        Value::Numeric(Numeric::parse("12").unwrap().into_owned())
    );

    // Move row 2 to group 20, delete row 3, then row 1: group 10 empties.
    on(&mut a, update(row(2, 20, "8")));
    on(&mut a, delete(3));
    on(&mut a, delete(1));
    let out = commit(&mut a, 0);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].op, Operation::Delete, "group 10 is gone");
    assert_eq!(out[0].before_values().unwrap()[0], Value::Text("10".into()));
    assert_eq!(a.groups(), &groups(&[(20, 1, 8)]));
    assert_eq!(a.rows(), 1);
}

#[test]
fn an_insert_then_the_same_row_read_by_the_snapshot_counts_once() {
    let mut a = aggregate();
    // Streamed before the chunk's low watermark ...
    on(&mut a, insert(row(1, 10, "5")));
    commit(&mut a, 0);
    // ... and read again at its high watermark.
    on(&mut a, read(row(1, 10, "5")));
    on(&mut a, read(row(2, 10, "1")));
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(10, 2, 6)]));
    // A read repeated in one transaction (and a re-delivered insert) too.
    on(&mut a, read(row(2, 10, "1")));
    on(&mut a, insert(row(2, 10, "1")));
    on(&mut a, read(row(2, 10, "1")));
    let out = commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(10, 2, 6)]));
    assert_eq!(out.len(), 1, "the touched group is emitted, unchanged");
}

#[test]
fn an_update_of_an_unknown_row_then_its_read_counts_once_with_the_read_values() {
    let mut a = aggregate();
    on(&mut a, update(row(1, 10, "5")));
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(10, 1, 5)]), "an upsert");
    on(&mut a, read(row(1, 20, "9")));
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(20, 1, 9)]));
}

#[test]
fn a_delete_of_an_unknown_row_changes_nothing() {
    let mut a = aggregate();
    on(&mut a, insert(row(1, 10, "5")));
    commit(&mut a, 0);
    on(&mut a, delete(2));
    on(&mut a, full(Operation::Delete, Some(row(3, 10, "4")), None));
    assert!(commit(&mut a, 0).is_empty(), "no group touched");
    assert_eq!(a.groups(), &groups(&[(10, 1, 5)]));
    // Deleted twice (once re-delivered): removed once.
    on(&mut a, delete(1));
    on(&mut a, delete(1));
    commit(&mut a, 0);
    on(&mut a, delete(1));
    commit(&mut a, 0);
    assert!(a.groups().is_empty());
    assert_eq!(a.rows(), 0);
}

#[test]
fn the_default_identity_keys_rows_by_the_primary_key() {
    let mut a = aggregate();
    on(&mut a, insert(row(1, 10, "5")));
    on(&mut a, insert(row(2, 10, "7")));
    // The key changes: the old key arrives, other columns NULL.
    on(
        &mut a,
        event(
            Operation::Update,
            Some(vec![Value::Int8(1), Value::Null, Value::Null]),
            Some(row(5, 30, "6")),
        ),
    );
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(10, 1, 7), (30, 1, 6)]));
    on(&mut a, read(row(5, 30, "6")));
    on(&mut a, delete(2));
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(30, 1, 6)]));
}

#[test]
fn replica_identity_full_rows_are_rekeyed_by_the_snapshot_primary_key() {
    let mut a = aggregate();
    // Streamed under FULL before the snapshot reads them: keyed by the
    // whole row.
    on(&mut a, full(Operation::Create, None, Some(row(1, 10, "5"))));
    on(&mut a, full(Operation::Create, None, Some(row(2, 10, "7"))));
    on(
        &mut a,
        full(
            Operation::Update,
            Some(row(2, 10, "7")),
            Some(row(2, 20, "8")),
        ),
    );
    // An update of a row the snapshot will deliver.
    on(
        &mut a,
        full(
            Operation::Update,
            Some(row(3, 10, "1")),
            Some(row(3, 10, "2")),
        ),
    );
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(10, 2, 7), (20, 1, 8)]));
    // Snapshot reads mark the primary key: rows are re-keyed by it.
    on(&mut a, read(row(1, 10, "5")));
    on(&mut a, read(row(3, 10, "2")));
    on(&mut a, read(row(4, 40, "4")));
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(10, 2, 7), (20, 1, 8), (40, 1, 4)]));
    assert_eq!(a.rows(), 4);
    // Later FULL changes find the rows by their primary key.
    on(
        &mut a,
        full(
            Operation::Update,
            Some(row(4, 40, "4")),
            Some(row(4, 10, "1")),
        ),
    );
    on(&mut a, full(Operation::Delete, Some(row(2, 20, "8")), None));
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(10, 3, 8)]));

    // The key survives a checkpoint.
    let state = OperatorState::capture(&a).unwrap();
    let mut b = aggregate();
    state.restore_into(&mut b).unwrap();
    on(&mut b, full(Operation::Delete, Some(row(1, 10, "5")), None));
    on(&mut b, read(row(3, 10, "2")));
    commit(&mut b, 0);
    assert_eq!(b.groups(), &groups(&[(10, 2, 3)]));
}

#[test]
fn rekeying_two_versions_of_one_row_keeps_one_and_consistent_groups() {
    // A stream no server sends: two live versions of row 1 under FULL,
    // committed (row 1) and open (row 2); then a read re-keys them by `id`.
    let mut a = aggregate();
    on(&mut a, full(Operation::Create, None, Some(row(1, 10, "5"))));
    on(
        &mut a,
        full(
            Operation::Update,
            Some(row(1, 99, "9")),
            Some(row(1, 20, "6")),
        ),
    );
    commit(&mut a, 0);
    on(&mut a, full(Operation::Create, None, Some(row(2, 10, "5"))));
    on(
        &mut a,
        full(
            Operation::Update,
            Some(row(2, 99, "9")),
            Some(row(2, 20, "6")),
        ),
    );
    on(&mut a, read(row(1, 30, "7")));
    on(&mut a, read(row(2, 30, "1")));
    let out = commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(30, 2, 8)]));
    assert_eq!(a.rows(), 2);
    let emitted: Vec<_> = out.iter().map(|e| e.op).collect();
    assert_eq!(
        emitted,
        vec![Operation::Delete, Operation::Delete, Operation::Update],
        "groups 10 and 20 emptied, 30 filled"
    );
}

#[test]
fn replica_identity_full_alone_keys_rows_by_all_columns() {
    let mut a = aggregate();
    on(&mut a, full(Operation::Create, None, Some(row(1, 10, "5"))));
    on(&mut a, full(Operation::Create, None, Some(row(2, 10, "5"))));
    on(
        &mut a,
        full(
            Operation::Update,
            Some(row(1, 10, "5")),
            Some(row(1, 20, "6")),
        ),
    );
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(10, 1, 5), (20, 1, 6)]));
    on(&mut a, full(Operation::Delete, Some(row(2, 10, "5")), None));
    on(&mut a, full(Operation::Delete, Some(row(2, 10, "5")), None));
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(20, 1, 6)]));
}

#[test]
fn rows_keyed_by_unrelated_columns_are_refused() {
    let mut a = aggregate();
    on(&mut a, insert(row(1, 10, "5")));
    let mut by_customer = (*orders_schema(false)).clone();
    by_customer.columns[0].is_key = false;
    by_customer.columns[1].is_key = true;
    let err = a
        .on_event(&event_in(
            std::sync::Arc::new(by_customer),
            Operation::Create,
            None,
            Some(row(2, 10, "1")),
        ))
        .unwrap_err();
    assert!(matches!(err, OperatorError::BadValue { .. }), "{err}");
    assert!(err.to_string().contains("(id)"), "{err}");
}

#[test]
fn an_aborted_transaction_is_undone() {
    let mut a = aggregate();
    on(&mut a, insert(row(1, 10, "5")));
    commit(&mut a, 0);
    on(&mut a, delete(1));
    on(&mut a, insert(row(2, 10, "5")));
    on(&mut a, insert(row(3, 30, "5")));
    on(&mut a, event(Operation::Truncate, None, None));
    on(&mut a, insert(row(4, 40, "5")));
    a.on_abort();
    assert!(commit(&mut a, 0).is_empty());
    assert_eq!(a.groups(), &groups(&[(10, 1, 5)]));
    // Row 1 is still known, rows 2 and 3 are not.
    on(&mut a, read(row(1, 10, "5")));
    on(&mut a, delete(2));
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(10, 1, 5)]));
    assert_eq!(
        a.committed.ids.len(),
        1,
        "ids of aborted groups are released"
    );
}

#[test]
fn a_truncate_empties_and_later_changes_count_from_zero() {
    let mut a = aggregate();
    on(&mut a, insert(row(1, 10, "5")));
    on(&mut a, insert(row(2, 20, "5")));
    commit(&mut a, 0);
    on(&mut a, insert(row(3, 50, "1")));
    on(&mut a, event(Operation::Truncate, None, None));
    on(&mut a, insert(row(9, 30, "2")));
    on(&mut a, read(row(1, 30, "3")));
    let out = commit(&mut a, 0);
    let ops: Vec<_> = out
        .iter()
        .map(|e| {
            (
                e.op,
                e.after_values().or(e.before_values()).unwrap()[0].clone(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            (Operation::Delete, Value::Text("10".into())),
            (Operation::Delete, Value::Text("20".into())),
            (Operation::Update, Value::Text("30".into())),
        ],
        "group 50 was never committed"
    );
    assert_eq!(a.groups(), &groups(&[(30, 2, 5)]));
    assert_eq!(a.committed.ids.len(), 1);
}

#[test]
fn an_unchanged_toasted_value_keeps_the_known_one() {
    let mut a = aggregate();
    on(&mut a, insert(row(1, 10, "5")));
    commit(&mut a, 0);
    let mut toast = row(1, 20, "0");
    toast[2] = Value::UnchangedToast;
    on(&mut a, update(toast.clone()));
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(20, 1, 5)]));
    // Unknown row, nothing to take it from.
    toast[0] = Value::Int8(2);
    let err = a.on_event(&update(toast.clone())).unwrap_err();
    assert!(matches!(err, OperatorError::MissingColumn { .. }), "{err}");
    assert!(err.to_string().contains("amount"), "{err}");
    // Under FULL the old row carries it.
    on(
        &mut a,
        full(Operation::Update, Some(row(2, 10, "3")), Some(toast)),
    );
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(20, 2, 8)]));
}

#[test]
fn bad_events_are_refused() {
    let mut a = aggregate();
    let err = a
        .on_event(&event(Operation::Delete, None, None))
        .unwrap_err();
    assert!(matches!(err, OperatorError::MissingColumn { .. }), "{err}");
    assert!(!err.to_string().contains("REPLICA IDENTITY"), "{err}");
    let err = a.on_event(&insert(row(1, 1, "1.5"))).unwrap_err();
    assert!(matches!(err, OperatorError::BadValue { .. }), "{err}");
    // Whole-number numerics are fine.
    on(&mut a, insert(row(1, 1, "2.000")));
    commit(&mut a, 0);
    assert_eq!(a.groups(), &groups(&[(1, 1, 2)]));
    assert_eq!(a.committed.ids.len(), 1, "failed events intern no group");
}

/// An aggregate over `n` rows with int8 keys in 97 groups, one NULL group
/// and some NULL values.
fn filled(n: i64) -> KeyedAggregate {
    let mut a = aggregate();
    for i in 0..n {
        let mut r = row(i, (i % 97) as i32, "3");
        if i % 10 == 0 {
            r[2] = Value::Null;
        }
        on(&mut a, insert(r));
    }
    let mut null_key = row(n, 0, "4");
    null_key[1] = Value::Null;
    on(&mut a, insert(null_key));
    commit(&mut a, 0);
    a
}

#[test]
fn state_round_trips_with_its_rows() {
    let a = filled(1000);
    let state = OperatorState::capture(&a).unwrap();
    assert_eq!(state.state_version, 2);
    let mut b = aggregate();
    state.restore_into(&mut b).unwrap();
    assert_eq!(a.groups(), b.groups());
    assert_eq!(b.rows(), 1001);
    assert_eq!(b.groups()[&None], Group { count: 1, sum: 4 });
    // Rows 5, 102, ..., 975; 490's value is NULL.
    assert_eq!(b.groups()[&Some("5".into())], Group { count: 11, sum: 30 });
    // The rows came back: re-reading one does not count it again.
    on(&mut b, read(row(5, 5, "3")));
    on(&mut b, delete(5 + 97));
    commit(&mut b, 0);
    assert_eq!(b.groups()[&Some("5".into())], Group { count: 10, sum: 27 });
    // An empty aggregate too.
    let empty = OperatorState::capture(&aggregate()).unwrap();
    let mut c = filled(3);
    empty.restore_into(&mut c).unwrap();
    assert!(c.groups().is_empty());
    assert_eq!(c.rows(), 0);
}

#[test]
fn state_is_small() {
    let n = 100_000;
    let state = OperatorState::capture(&filled(n)).unwrap();
    let per_row = state.state.len() as f64 / n as f64;
    // Key with its lengths (1 + 1 + 1 + 3 bytes), group and value (2 + 1).
    assert!(per_row < 10.0, "{per_row} bytes a row");
}

#[test]
fn version_1_state_is_refused_with_the_way_out() {
    let mut a = filled(10);
    let before = a.groups().clone();
    let err = a.restore_state(1, Bytes::from_static(&[0; 8])).unwrap_err();
    let OperatorStateError::Invalid { reason, .. } = &err else {
        panic!("{err}");
    };
    assert!(reason.contains("version 1"), "{reason}");
    assert!(
        reason.contains("pgcdc checkpoints prune --keep 0"),
        "{reason}"
    );
    assert!(matches!(
        a.restore_state(3, Bytes::new()),
        Err(OperatorStateError::UnsupportedVersion {
            found: 3,
            supported: 2,
            ..
        })
    ));
    assert_eq!(a.groups(), &before);
}

#[test]
fn corrupt_state_is_refused_and_changes_nothing() {
    let a = filled(50);
    let state = OperatorState::capture(&a).unwrap().state;
    let mut b = filled(7);
    let before = b.groups().clone();
    let refused = |b: &mut KeyedAggregate, bytes: Vec<u8>| {
        let err = b.restore_state(2, Bytes::from(bytes)).unwrap_err();
        assert!(matches!(err, OperatorStateError::Invalid { .. }), "{err}");
    };
    for cut in (0..state.len()).step_by(7) {
        refused(&mut b, state[..cut].to_vec());
    }
    let mut extra = state.to_vec();
    extra.push(0);
    refused(&mut b, extra);
    // Every single-byte change is either refused or still a consistent
    // state (an unchecked byte: a group key's text, a row's key bytes).
    for i in 0..state.len() {
        let mut bad = state.to_vec();
        bad[i] ^= 0x41;
        let mut c = aggregate();
        if c.restore_state(2, Bytes::from(bad)).is_ok() {
            let total: i64 = c.groups().values().map(|g| g.count).sum();
            assert_eq!(total as usize, c.rows(), "byte {i}");
        }
    }
    // A group total that does not match its rows.
    let groups_at = {
        // key columns: u64 1, str "id" (4 + 2); groups: u64 count.
        8 + 4 + 2 + 8
    };
    let mut bad = state.to_vec();
    // The first group is NULL (u64 0), its count follows.
    assert_eq!(&bad[groups_at..groups_at + 8], &[0; 8]);
    bad[groups_at + 8] += 1;
    refused(&mut b, bad);
    assert_eq!(b.groups(), &before);
}

#[test]
fn a_sum_that_overflows_on_the_way_comes_back_exact() {
    let mut a = aggregate();
    let big = "170141183460469231731687303715884105727"; // i128::MAX
    on(&mut a, insert(row(1, 1, big)));
    on(&mut a, insert(row(2, 1, "1")));
    on(&mut a, delete(2));
    let out = commit(&mut a, 0);
    let after = out[0].after_values().unwrap();
    assert_eq!(
        after[2],
        Value::Numeric(Numeric::parse(big).unwrap().into_owned())
    );
}

/// A schema-change event of `public.orders` to `table` (from the usual schema).
fn schema_change_to(table: crate::event::TableSchema) -> ChangeEvent {
    let previous = super::super::tests::orders();
    let table = std::sync::Arc::new(table);
    let change = crate::event::SchemaChange::between(&previous, &table).unwrap();
    ChangeEvent {
        schema_change: Some(std::sync::Arc::new(change)),
        ..event_in(table, Operation::SchemaChange, None, None)
    }
}

#[test]
fn a_schema_change_taking_a_needed_column_or_the_table_is_refused() {
    let base = (*super::super::tests::orders()).clone();
    let with = |f: &dyn Fn(&mut crate::event::TableSchema)| {
        let mut t = base.clone();
        f(&mut t);
        t
    };
    let cases: Vec<(crate::event::TableSchema, &str)> = vec![
        (
            with(&|t| {
                t.columns.remove(1);
            }),
            "grouping column \"customer\" was dropped",
        ),
        (
            with(&|t| t.columns[2].name = "total".into()),
            "summed column \"amount\" was renamed to \"total\"",
        ),
        (
            with(&|t| t.table = "orders_old".into()),
            "the table is now public.orders_old",
        ),
        (
            with(&|t| t.columns[1].type_oid = cdc_core::types::INT8),
            "type of its grouping column",
        ),
    ];
    for (table, expected) in cases {
        let mut a = aggregate();
        on(&mut a, insert(row(1, 10, "5")));
        let err = a.on_event(&schema_change_to(table)).unwrap_err();
        assert!(matches!(err, OperatorError::SchemaChanged { .. }), "{err}");
        assert!(err.to_string().contains(expected), "{err}");
        assert!(err.to_string().contains("Fix:"), "{err}");
    }
    // Adding a column, or retyping the summed one, is fine.
    let mut a = aggregate();
    on(&mut a, insert(row(1, 10, "5")));
    let mut t = base.clone();
    t.columns.push(crate::event::ColumnSchema {
        name: "note".into(),
        type_oid: cdc_core::types::TEXT,
        type_modifier: -1,
        is_key: false,
    });
    t.columns[2].type_oid = cdc_core::types::INT8;
    a.on_event(&schema_change_to(t)).unwrap();
}
