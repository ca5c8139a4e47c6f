//! Property tests of [`KeyedAggregate`] against models: the groups always
//! equal a `GROUP BY` over the rows the events describe.

use std::collections::{BTreeMap, BTreeSet};

use cdc_core::{Numeric, Value};
use checkpoint_api::OperatorState;
use proptest::prelude::*;

use super::super::tests::{aggregate, commit, event_in, orders_schema};
use super::super::Operator;
use super::{Group, GroupKey, KeyedAggregate};
use crate::event::{ChangeEvent, Operation};

type Customer = Option<i32>;
type Amount = Option<i64>;

fn values(id: i64, customer: Customer, amount: Amount) -> Vec<Value<'static>> {
    vec![
        Value::Int8(id),
        customer.map_or(Value::Null, Value::Int4),
        amount.map_or(Value::Null, |a| {
            Value::Numeric(Numeric::parse(&a.to_string()).unwrap().into_owned())
        }),
    ]
}

fn key_only(id: i64) -> Vec<Value<'static>> {
    vec![Value::Int8(id), Value::Null, Value::Null]
}

/// `SELECT customer, count(*), sum(amount) ... GROUP BY customer`.
fn group_by(rows: &BTreeMap<i64, (Customer, Amount)>) -> BTreeMap<GroupKey, Group> {
    let mut groups: BTreeMap<GroupKey, Group> = BTreeMap::new();
    for (c, a) in rows.values() {
        groups
            .entry(c.map(|c| c.to_string()))
            .or_default()
            .add(a.map(i128::from));
    }
    groups
}

/// Commits, checks the derived events against the new groups, and
/// sometimes goes through a checkpoint.
fn commit_and_check(a: &mut KeyedAggregate, restore: bool) {
    let before = a.groups().clone();
    let out = commit(a, 0);
    let mut emitted = BTreeSet::new();
    for e in &out {
        let (key, g) = match e.op {
            Operation::Update => {
                let after = e.after_values().unwrap();
                let count = match after[1] {
                    Value::Int8(c) => c,
                    _ => panic!("{e:?}"),
                };
                (after[0].clone(), Some(count))
            }
            _ => (e.before_values().unwrap()[0].clone(), None),
        };
        let key: GroupKey = match key {
            Value::Text(t) => Some(t.into_owned()),
            _ => None,
        };
        assert_eq!(g, a.groups().get(&key).map(|g| g.count), "{e:?}");
        assert!(emitted.insert(key), "one event per group");
    }
    for (k, g) in a.groups() {
        assert!(g.count > 0);
        if before.get(k) != Some(g) {
            assert!(emitted.contains(k), "changed group {k:?} emitted");
        }
    }
    for k in before.keys() {
        if !a.groups().contains_key(k) {
            assert!(emitted.contains(k), "emptied group {k:?} emitted");
        }
    }
    if restore {
        let state = OperatorState::capture(a).unwrap();
        let mut b = aggregate();
        state.restore_into(&mut b).unwrap();
        assert_eq!(b.groups(), a.groups());
        assert_eq!(b.rows(), a.rows());
        *a = b;
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// Insert, read or update (default identity: no old row) of a row.
    Put(Operation, i64, Customer, Amount),
    /// An update that changes the key (the old key arrives).
    Move(i64, i64, Customer, Amount),
    Delete(i64),
    Truncate,
    Commit {
        restore: bool,
    },
    Abort,
}

fn customer() -> impl Strategy<Value = Customer> {
    prop::option::weighted(0.9, 0..4)
}

fn amount() -> impl Strategy<Value = Amount> {
    prop::option::weighted(0.8, -5i64..100)
}

fn step() -> impl Strategy<Value = Step> {
    let op = prop_oneof![
        Just(Operation::Create),
        Just(Operation::Read),
        Just(Operation::Update)
    ];
    prop_oneof![
        8 => (op, 0i64..8, customer(), amount()).prop_map(|(o, i, c, a)| Step::Put(o, i, c, a)),
        2 => (0i64..8, 0i64..8, customer(), amount()).prop_map(|(f, t, c, a)| Step::Move(f, t, c, a)),
        4 => (0i64..8).prop_map(Step::Delete),
        1 => Just(Step::Truncate),
        4 => any::<bool>().prop_map(|restore| Step::Commit { restore }),
        1 => Just(Step::Abort),
    ]
}

/// The stream as a sequence of upserts and deletes, known rows or not: the
/// aggregate equals `GROUP BY` over the table those upserts build.
fn run_upserts(steps: Vec<Step>) {
    let table = orders_schema(false);
    let ev = |op, before, after| event_in(table.clone(), op, before, after);
    let mut a = aggregate();
    let mut committed: BTreeMap<i64, (Customer, Amount)> = BTreeMap::new();
    let mut open = committed.clone();
    for step in steps {
        let e: Option<ChangeEvent> = match step {
            Step::Put(op, id, c, am) => {
                open.insert(id, (c, am));
                Some(ev(op, None, Some(values(id, c, am))))
            }
            Step::Move(from, to, c, am) => {
                open.remove(&from);
                open.insert(to, (c, am));
                Some(ev(
                    Operation::Update,
                    Some(key_only(from)),
                    Some(values(to, c, am)),
                ))
            }
            Step::Delete(id) => {
                open.remove(&id);
                Some(ev(Operation::Delete, Some(key_only(id)), None))
            }
            Step::Truncate => {
                open.clear();
                Some(ev(Operation::Truncate, None, None))
            }
            Step::Commit { restore } => {
                commit_and_check(&mut a, restore);
                committed = open.clone();
                assert_eq!(a.groups(), &group_by(&committed));
                assert_eq!(a.rows(), committed.len());
                None
            }
            Step::Abort => {
                a.on_abort();
                open = committed.clone();
                None
            }
        };
        if let Some(e) = e {
            a.on_event(&e).unwrap();
        }
    }
    commit_and_check(&mut a, false);
    assert_eq!(a.groups(), &group_by(&open));
}

#[derive(Debug, Clone)]
enum Change {
    Insert(i64, Customer, Amount),
    Update(i64, Customer, Amount),
    Delete(i64),
    /// A snapshot read of the row's current version.
    Read(i64),
    Commit {
        restore: bool,
    },
    /// The connection drops: the open transaction is sent again.
    Resend,
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (0i64..10, customer(), amount()).prop_map(|(i, c, a)| Change::Insert(i, c, a)),
        4 => (0i64..10, customer(), amount()).prop_map(|(i, c, a)| Change::Update(i, c, a)),
        2 => (0i64..10).prop_map(Change::Delete),
        4 => (0i64..10).prop_map(Change::Read),
        3 => any::<bool>().prop_map(|restore| Change::Commit { restore }),
        1 => Just(Change::Resend),
    ]
}

/// A table with rows the stream never showed, changed by the stream (under
/// the default identity or REPLICA IDENTITY FULL) while a snapshot reads
/// rows' current versions in any order, then reads every row: the
/// aggregate equals `GROUP BY` over the table.
fn run_snapshot(initial: BTreeMap<i64, (Customer, Amount)>, changes: Vec<Change>, full: bool) {
    let stream = orders_schema(full);
    let snapshot = orders_schema(false);
    let mut a = aggregate();
    let mut db = initial;
    let mut txn: Vec<ChangeEvent> = Vec::new();
    for change in changes {
        let e = match change {
            Change::Insert(id, c, am) if !db.contains_key(&id) => {
                db.insert(id, (c, am));
                event_in(
                    stream.clone(),
                    Operation::Create,
                    None,
                    Some(values(id, c, am)),
                )
            }
            Change::Update(id, c, am) if db.contains_key(&id) => {
                let (oc, oa) = db.insert(id, (c, am)).unwrap_or_default();
                let before = full.then(|| values(id, oc, oa));
                event_in(
                    stream.clone(),
                    Operation::Update,
                    before,
                    Some(values(id, c, am)),
                )
            }
            Change::Delete(id) if db.contains_key(&id) => {
                let (oc, oa) = db.remove(&id).unwrap_or_default();
                let before = if full {
                    values(id, oc, oa)
                } else {
                    key_only(id)
                };
                event_in(stream.clone(), Operation::Delete, Some(before), None)
            }
            Change::Read(id) if db.contains_key(&id) => {
                let (c, am) = db[&id];
                event_in(
                    snapshot.clone(),
                    Operation::Read,
                    None,
                    Some(values(id, c, am)),
                )
            }
            Change::Commit { restore } => {
                commit_and_check(&mut a, restore);
                txn.clear();
                continue;
            }
            Change::Resend => {
                a.on_abort();
                for e in &txn {
                    a.on_event(e).unwrap();
                }
                continue;
            }
            _ => continue,
        };
        a.on_event(&e).unwrap();
        txn.push(e);
    }
    commit_and_check(&mut a, false);
    for (&id, &(c, am)) in &db {
        let e = event_in(
            snapshot.clone(),
            Operation::Read,
            None,
            Some(values(id, c, am)),
        );
        a.on_event(&e).unwrap();
    }
    commit_and_check(&mut a, false);
    assert_eq!(a.groups(), &group_by(&db));
    assert_eq!(a.rows(), db.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn upserts_and_deletes_aggregate_like_group_by(steps in prop::collection::vec(step(), 0..60)) {
        run_upserts(steps);
    }

    #[test]
    fn a_snapshot_merged_into_the_stream_aggregates_like_group_by(
        initial in prop::collection::btree_map(0i64..10, (customer(), amount()), 0..8),
        changes in prop::collection::vec(change(), 0..60),
        full in any::<bool>(),
    ) {
        run_snapshot(initial, changes, full);
    }
}
