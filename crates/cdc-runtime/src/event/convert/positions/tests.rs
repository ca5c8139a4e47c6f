//! The positions the converter gives events, and the boundaries.

use cdc_core::pgoutput::{Column, Insert, Relation, ReplicaIdentity, Truncate};
use cdc_core::{types, TupleData, TupleValue, TxnBegin, TxnCommit, TxnKind};

use super::super::*;
use crate::event::{SnapshotMark, TransactionStatus};

fn relation(cache: &mut RelationCache, oid: Oid, name: &str) -> Arc<Relation<'static>> {
    cache.insert_relation(Relation {
        xid: None,
        oid,
        namespace: "public".into(),
        name: name.to_owned().into(),
        replica_identity: ReplicaIdentity::Default,
        columns: vec![Column {
            flags: 1,
            name: "id".into(),
            type_oid: types::INT8,
            type_modifier: -1,
        }],
    })
}

fn begin(xid: Xid, commit: u64) -> TxnEvent<'static> {
    TxnEvent::Begin(TxnBegin {
        xid,
        final_lsn: Lsn::from_u64(commit),
        timestamp: PgTimestamp::from_pg_micros(1_000_000),
        kind: TxnKind::Plain,
    })
}

fn commit(xid: Xid, commit: u64) -> TxnEvent<'static> {
    TxnEvent::Commit(TxnCommit {
        xid,
        commit_lsn: Lsn::from_u64(commit),
        end_lsn: Lsn::from_u64(commit + 0x30),
        commit_time: PgTimestamp::from_pg_micros(1_000_000),
    })
}

fn insert(rel: &Arc<Relation<'static>>, id: &'static [u8]) -> TxnEvent<'static> {
    TxnEvent::Change(Change::Insert(
        rel.clone(),
        Insert {
            xid: None,
            relation: rel.oid,
            new: TupleData::from_values(&[TupleValue::Text(id)]).unwrap(),
        },
    ))
}

/// Feeds `events`, the i-th at LSN `0x400 + i`.
fn feed(
    conv: &mut EventConverter,
    cache: &RelationCache,
    events: &[TxnEvent<'_>],
) -> Vec<ChangeEvent> {
    let mut out = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        conv.handle(ev, cache, Some(Lsn::from_u64(0x400 + i as u64)), &mut out)
            .unwrap();
    }
    out
}

#[test]
fn events_are_numbered_per_table_after_the_previous_commit() {
    let mut cache = RelationCache::new();
    let a = relation(&mut cache, 10, "a");
    let b = relation(&mut cache, 11, "b");
    let mut conv = EventConverter::new("db", "slot");
    conv.set_previous_commit(Lsn::from_u64(0x100));
    let truncate = TxnEvent::Change(Change::Truncate(Truncate {
        xid: None,
        options: 0,
        relations: vec![10],
    }));
    let out = feed(
        &mut conv,
        &cache,
        &[
            begin(7, 0x500),
            insert(&a, b"1"),
            insert(&b, b"1"),
            insert(&a, b"2"),
            truncate,
            commit(7, 0x500),
            begin(8, 0x600),
            insert(&b, b"3"),
            commit(8, 0x600),
        ],
    );
    let got: Vec<(u32, u32, Option<u64>)> = out
        .iter()
        .map(|e| {
            (
                e.index,
                e.position.table_index,
                e.position.previous_commit.map(Lsn::as_u64),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (0, 0, Some(0x100)),
            (1, 0, Some(0x100)),
            (2, 1, Some(0x100)),
            (3, 2, Some(0x100)),
            // The next transaction follows the first one's commit end.
            (0, 0, Some(0x530)),
        ]
    );
    assert!(
        out.iter().all(|e| e.op != Operation::Transaction),
        "markers are off"
    );
}

#[test]
fn boundaries_surround_the_events_of_a_transaction() {
    let mut cache = RelationCache::new();
    let a = relation(&mut cache, 10, "a");
    let b = relation(&mut cache, 11, "b");
    let mut conv = EventConverter::new("db", "slot").with_transaction_markers(true);
    let out = feed(
        &mut conv,
        &cache,
        &[
            begin(7, 0x500),
            insert(&a, b"1"),
            insert(&b, b"1"),
            insert(&a, b"2"),
            commit(7, 0x500),
            // A transaction with nothing to deliver gets no boundaries.
            begin(8, 0x600),
            commit(8, 0x600),
        ],
    );
    let ops: Vec<Operation> = out.iter().map(|e| e.op).collect();
    use Operation::*;
    assert_eq!(ops, [Transaction, Create, Create, Create, Transaction]);
    let (first, last) = (&out[0], &out[4]);
    let status = |e: &ChangeEvent| e.boundary.as_ref().unwrap().status;
    assert_eq!(status(first), TransactionStatus::Begin);
    assert_eq!(status(last), TransactionStatus::End);
    // BEGIN at the Begin's place in the stream, END at the commit's end.
    assert_eq!(first.source.lsn, Lsn::from_u64(0x400));
    assert_eq!(last.source.lsn, Lsn::from_u64(0x530));
    assert_eq!((first.source.xid, last.source.xid), (7, 7));
    assert_eq!(first.source.commit_lsn, Lsn::from_u64(0x500));
    // The events keep their numbers.
    let idx: Vec<u32> = out.iter().map(|e| e.index).collect();
    assert_eq!(idx, [0, 0, 1, 2, 3]);
    let end = last.boundary.as_ref().unwrap();
    assert_eq!(end.event_count, 3);
    assert_eq!(
        end.data_collections,
        [("public.a".into(), 2), ("public.b".into(), 1)]
    );
}

#[test]
fn a_table_renamed_between_transactions_is_counted_under_its_new_name() {
    let mut cache = RelationCache::new();
    let a = relation(&mut cache, 10, "a");
    let b = relation(&mut cache, 11, "b");
    let mut conv = EventConverter::new("db", "slot").with_transaction_markers(true);
    let mut out = feed(
        &mut conv,
        &cache,
        &[
            begin(7, 0x500),
            insert(&a, b"1"),
            insert(&b, b"1"),
            commit(7, 0x500),
        ],
    );
    // The same oid under a new name: the Relation message the server
    // sends after `ALTER TABLE a RENAME TO c`.
    let c = relation(&mut cache, 10, "c");
    out.extend(feed(
        &mut conv,
        &cache,
        &[
            begin(8, 0x600),
            insert(&b, b"2"),
            insert(&c, b"2"),
            commit(8, 0x600),
        ],
    ));
    // (The rename's schema change counts among the second's events too.)
    let names: Vec<Vec<String>> = out
        .iter()
        .filter_map(|e| e.boundary.as_ref())
        .filter(|b| b.status == TransactionStatus::End)
        .map(|b| {
            b.data_collections
                .iter()
                .map(|(n, _)| n.to_string())
                .collect()
        })
        .collect();
    assert_eq!(names, [["public.a", "public.b"], ["public.b", "public.c"]]);
}

#[test]
fn a_replayed_transaction_begins_once_and_counts_once() {
    let mut cache = RelationCache::new();
    let a = relation(&mut cache, 10, "a");
    let mut conv = EventConverter::new("db", "slot").with_transaction_markers(true);
    let mut out = feed(&mut conv, &cache, &[begin(7, 0x500), insert(&a, b"1")]);
    // The connection drops; the events not shipped are dropped and the
    // server sends the transaction again.
    conv.reset();
    out.clear();
    out.extend(feed(
        &mut conv,
        &cache,
        &[
            begin(7, 0x500),
            insert(&a, b"1"),
            insert(&a, b"2"),
            commit(7, 0x500),
        ],
    ));
    let ops: Vec<Operation> = out.iter().map(|e| e.op).collect();
    use Operation::*;
    assert_eq!(ops, [Transaction, Create, Create, Transaction]);
    assert_eq!(out[3].boundary.as_ref().unwrap().event_count, 2);
    assert_eq!(out[2].position.table_index, 1);
}

#[test]
fn adopted_events_are_counted_and_the_end_follows_them() {
    let mut cache = RelationCache::new();
    let a = relation(&mut cache, 10, "a");
    let mut conv = EventConverter::new("db", "slot").with_transaction_markers(true);
    let mut out = feed(&mut conv, &cache, &[begin(7, 0x500), insert(&a, b"1")]);
    // An operator's event at the commit, on a table of its own.
    let derived = ChangeEvent {
        index: 1,
        ..out[1].clone()
    };
    let from = out.len();
    out.push(derived);
    assert_eq!(
        conv.adopt(&mut out, from),
        0,
        "the transaction began already"
    );
    conv.handle(&commit(7, 0x500), &cache, None, &mut out)
        .unwrap();
    let end = out.last().unwrap();
    assert_eq!(end.index, 2);
    assert_eq!(end.boundary.as_ref().unwrap().event_count, 2);
    assert_eq!(out[2].position.table_index, 1);
}

#[test]
fn snapshot_reads_are_marked_and_not_counted() {
    let mut cache = RelationCache::new();
    let a = relation(&mut cache, 10, "a");
    let mut conv = EventConverter::new("db", "slot").with_transaction_markers(true);
    let mut out = feed(&mut conv, &cache, &[begin(7, 0x500)]);
    let schema = Arc::new(TableSchema::from_relation(&a));
    let rows = vec![
        Row::from_values(vec![cdc_core::Value::Int8(1)]),
        Row::from_values(vec![cdc_core::Value::Int8(2)]),
    ];
    let marks = ChunkMarks {
        first_table: true,
        first_in_table: true,
        last_in_table: true,
        ..ChunkMarks::default()
    };
    conv.push_reads(&schema, rows, marks, &mut out).unwrap();
    conv.handle(&commit(7, 0x500), &cache, None, &mut out)
        .unwrap();
    let marks: Vec<SnapshotMark> = out.iter().map(|e| e.position.snapshot).collect();
    assert_eq!(marks, [SnapshotMark::First, SnapshotMark::LastInTable]);
    assert!(
        out.iter().all(|e| e.op == Operation::Read),
        "no boundaries for reads alone"
    );
    assert!(out.iter().all(|e| e.position.previous_commit.is_none()));
    let incremental = ChunkMarks {
        incremental: true,
        ..marks_all()
    };
    assert_eq!(incremental.mark(0, 1), SnapshotMark::Incremental);
    assert_eq!(marks_all().mark(0, 1), SnapshotMark::Last);
    assert_eq!(marks_all().mark(1, 3), SnapshotMark::Read);
}

fn marks_all() -> ChunkMarks {
    ChunkMarks {
        incremental: false,
        first_table: true,
        last_table: true,
        first_in_table: true,
        last_in_table: true,
        read_epoch: Lsn::INVALID,
    }
}
