//! Transaction assembly: plain, streamed, aborted and two-phase flows, and
//! every protocol-order error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cdc_core::pgoutput::*;
use cdc_core::{
    Change, Lsn, PgTimestamp, ProtocolError, TxnAssembler, TxnBegin, TxnCommit, TxnEvent, TxnKind,
    Xid,
};

const REL: u32 = 16384;

fn lsn(v: u64) -> Lsn {
    Lsn::from_u64(v)
}
fn ts(v: i64) -> PgTimestamp {
    PgTimestamp::from_pg_micros(v)
}

fn relation(oid: u32) -> LogicalMessage<'static> {
    LogicalMessage::Relation(Relation {
        xid: None,
        oid,
        namespace: "public".into(),
        name: format!("t{oid}").into(),
        replica_identity: ReplicaIdentity::Default,
        columns: vec![Column {
            flags: 1,
            name: "id".into(),
            type_oid: 23,
            type_modifier: -1,
        }],
    })
}

fn begin(xid: Xid, final_lsn: u64) -> LogicalMessage<'static> {
    LogicalMessage::Begin(Begin {
        final_lsn: lsn(final_lsn),
        commit_time: ts(5),
        xid,
    })
}

fn commit(commit_lsn: u64) -> LogicalMessage<'static> {
    LogicalMessage::Commit(Commit {
        flags: 0,
        commit_lsn: lsn(commit_lsn),
        end_lsn: lsn(commit_lsn + 8),
        commit_time: ts(5),
    })
}

fn insert(xid: Option<Xid>, oid: u32, value: &'static str) -> LogicalMessage<'static> {
    LogicalMessage::Insert(Insert {
        xid,
        relation: oid,
        new: TupleData::from_values(&[TupleValue::Text(value.as_bytes())]).unwrap(),
    })
}

fn stream_start(xid: Xid, first: bool) -> LogicalMessage<'static> {
    LogicalMessage::StreamStart(StreamStart {
        xid,
        first_segment: first,
    })
}

fn stream_commit(xid: Xid, commit_lsn: u64) -> LogicalMessage<'static> {
    LogicalMessage::StreamCommit(StreamCommit {
        xid,
        flags: 0,
        commit_lsn: lsn(commit_lsn),
        end_lsn: lsn(commit_lsn + 8),
        commit_time: ts(9),
    })
}

fn stream_abort(xid: Xid, subxid: Xid) -> LogicalMessage<'static> {
    LogicalMessage::StreamAbort(StreamAbort {
        xid,
        subxid,
        abort_info: None,
    })
}

fn prepare_msg(xid: Xid, gid: &'static str, prepare_lsn: u64) -> Prepare<'static> {
    Prepare {
        flags: 0,
        prepare_lsn: lsn(prepare_lsn),
        end_lsn: lsn(prepare_lsn + 8),
        prepare_time: ts(7),
        xid,
        gid: gid.into(),
    }
}

/// Feeds messages, collecting every event (returned and polled), in order.
fn run(
    asm: &mut TxnAssembler,
    msgs: impl IntoIterator<Item = LogicalMessage<'static>>,
) -> Vec<TxnEvent<'static>> {
    let mut out = Vec::new();
    for m in msgs {
        if let Some(e) = asm.handle_message(m).unwrap() {
            out.push(e.into_owned());
        }
        while let Some(e) = asm.poll_event() {
            out.push(e);
        }
    }
    out
}

/// The inserted text values of the Insert events.
fn inserted(events: &[TxnEvent<'_>]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            TxnEvent::Change(Change::Insert(_, i)) => match i.new.get(0) {
                Some(TupleValue::Text(t)) => Some(String::from_utf8(t.to_vec()).unwrap()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn assembler_with_relation() -> TxnAssembler {
    let mut asm = TxnAssembler::new();
    assert_eq!(asm.handle_message(relation(REL)).unwrap(), None);
    asm
}

#[test]
fn plain_transaction_is_passed_through_in_order() {
    let mut asm = assembler_with_relation();
    let del = LogicalMessage::Delete(Delete {
        xid: None,
        relation: REL,
        old: OldTuple::Key(TupleData::from_values(&[TupleValue::Text(b"a")]).unwrap()),
    });
    let trunc = LogicalMessage::Truncate(Truncate {
        xid: None,
        options: 0,
        relations: vec![REL],
    });
    let events = run(
        &mut asm,
        [
            begin(10, 100),
            insert(None, REL, "a"),
            insert(None, REL, "b"),
            del,
            trunc,
            commit(100),
        ],
    );
    assert_eq!(events.len(), 6);
    assert_eq!(
        events[0],
        TxnEvent::Begin(TxnBegin {
            xid: 10,
            final_lsn: lsn(100),
            timestamp: ts(5),
            kind: TxnKind::Plain
        })
    );
    assert_eq!(inserted(&events), ["a", "b"]);
    assert!(matches!(&events[3], TxnEvent::Change(Change::Delete(r, _)) if r.oid == REL));
    assert!(matches!(&events[4], TxnEvent::Change(Change::Truncate(_))));
    assert_eq!(
        events[5],
        TxnEvent::Commit(TxnCommit {
            xid: 10,
            commit_lsn: lsn(100),
            end_lsn: lsn(108),
            commit_time: ts(5)
        })
    );
    assert_eq!(asm.open_transaction(), None);
}

#[test]
fn the_direct_path_borrows_the_input() {
    let mut asm = assembler_with_relation();
    asm.handle_message(begin(1, 50)).unwrap();
    let bytes = cdc_core::encode::message_bytes(&insert(None, REL, "x"));
    let msg = LogicalMessage::parse(&bytes, ParseContext::new(ProtocolVersion::V1)).unwrap();
    let Some(TxnEvent::Change(Change::Insert(_, ins))) = asm.handle_message(msg).unwrap() else {
        panic!("expected an insert event")
    };
    // The returned value points into `bytes`: nothing was copied.
    let value = ins.new.get(0).and_then(|v| v.bytes()).unwrap();
    assert!(bytes.as_ptr_range().contains(&value.as_ptr()));
}

#[test]
fn undrained_events_keep_their_order() {
    let mut asm = assembler_with_relation();
    run(
        &mut asm,
        [
            stream_start(7, true),
            insert(Some(7), REL, "s"),
            LogicalMessage::StreamStop,
        ],
    );
    assert_eq!(asm.handle_message(stream_commit(7, 200)).unwrap(), None);
    // The caller does not drain the queue; the next transaction's events queue up behind it.
    assert_eq!(asm.handle_message(begin(8, 300)).unwrap(), None);
    assert_eq!(asm.handle_message(insert(None, REL, "p")).unwrap(), None);
    let mut events = Vec::new();
    while let Some(e) = asm.poll_event() {
        events.push(e);
    }
    assert_eq!(inserted(&events), ["s", "p"]);
    assert!(matches!(
        events[0],
        TxnEvent::Begin(TxnBegin { xid: 7, .. })
    ));
    assert!(matches!(
        events[3],
        TxnEvent::Begin(TxnBegin { xid: 8, .. })
    ));
}

#[test]
fn nested_begin_is_an_error_and_changes_nothing() {
    let mut asm = assembler_with_relation();
    run(&mut asm, [begin(1, 100)]);
    assert_eq!(
        asm.handle_message(begin(2, 200)),
        Err(ProtocolError::NestedBegin {
            xid: 2,
            open_xid: 1
        })
    );
    // Transaction 1 is still open and can commit.
    assert!(matches!(
        asm.handle_message(commit(100)).unwrap(),
        Some(TxnEvent::Commit(TxnCommit { xid: 1, .. }))
    ));
    // Begin Prepare inside a transaction, too.
    run(&mut asm, [begin(3, 300)]);
    let bp = LogicalMessage::BeginPrepare(BeginPrepare {
        prepare_lsn: lsn(400),
        end_lsn: lsn(408),
        prepare_time: ts(1),
        xid: 4,
        gid: "g".into(),
    });
    assert_eq!(
        asm.handle_message(bp),
        Err(ProtocolError::NestedBegin {
            xid: 4,
            open_xid: 3
        })
    );
}

#[test]
fn commit_without_begin() {
    let mut asm = TxnAssembler::new();
    assert_eq!(
        asm.handle_message(commit(100)),
        Err(ProtocolError::EndWithoutBegin { what: "Commit" })
    );
    assert_eq!(
        asm.handle_message(LogicalMessage::Prepare(prepare_msg(1, "g", 5))),
        Err(ProtocolError::EndWithoutBegin { what: "Prepare" })
    );
}

#[test]
fn commit_lsn_must_match_begin() {
    let mut asm = TxnAssembler::new();
    run(&mut asm, [begin(1, 100)]);
    assert_eq!(
        asm.handle_message(commit(101)),
        Err(ProtocolError::CommitLsnMismatch {
            xid: 1,
            expected: lsn(100),
            actual: lsn(101)
        })
    );
    assert_eq!(asm.open_transaction(), Some(1));
}

#[test]
fn changes_need_a_known_relation() {
    let mut asm = TxnAssembler::new();
    run(&mut asm, [begin(1, 100)]);
    assert_eq!(
        asm.handle_message(insert(None, 99, "a")),
        Err(ProtocolError::UnknownRelation { oid: 99 })
    );
    let upd = LogicalMessage::Update(Update {
        xid: None,
        relation: 98,
        old: None,
        new: TupleData::from_values(&[]).unwrap(),
    });
    assert_eq!(
        asm.handle_message(upd),
        Err(ProtocolError::UnknownRelation { oid: 98 })
    );
    let del = LogicalMessage::Delete(Delete {
        xid: None,
        relation: 97,
        old: OldTuple::Full(TupleData::from_values(&[]).unwrap()),
    });
    assert_eq!(
        asm.handle_message(del),
        Err(ProtocolError::UnknownRelation { oid: 97 })
    );
    run(&mut asm, [relation(REL)]);
    let trunc = LogicalMessage::Truncate(Truncate {
        xid: None,
        options: 1,
        relations: vec![REL, 96],
    });
    assert_eq!(
        asm.handle_message(trunc),
        Err(ProtocolError::UnknownRelation { oid: 96 })
    );
    // A Relation inside the transaction makes the oid known.
    run(&mut asm, [relation(99), insert(None, 99, "ok")]);
}

#[test]
fn changes_outside_a_transaction() {
    let mut asm = assembler_with_relation();
    assert_eq!(
        asm.handle_message(insert(None, REL, "a")),
        Err(ProtocolError::ChangeOutsideTransaction { what: "Insert" })
    );
    let tx_msg = LogicalMessage::Message(LogicalDecodingMessage {
        xid: None,
        transactional: true,
        lsn: lsn(1),
        prefix: "p".into(),
        content: b"c".as_slice().into(),
    });
    assert_eq!(
        asm.handle_message(tx_msg),
        Err(ProtocolError::ChangeOutsideTransaction {
            what: "transactional Message"
        })
    );
    let origin = LogicalMessage::Origin(Origin {
        commit_lsn: lsn(1),
        name: "o".into(),
    });
    assert_eq!(
        asm.handle_message(origin),
        Err(ProtocolError::ChangeOutsideTransaction { what: "Origin" })
    );
    // A non-transactional message is fine anywhere.
    let msg = LogicalMessage::Message(LogicalDecodingMessage {
        xid: None,
        transactional: false,
        lsn: lsn(1),
        prefix: "p".into(),
        content: b"c".as_slice().into(),
    });
    assert!(matches!(
        asm.handle_message(msg).unwrap(),
        Some(TxnEvent::Message(m)) if m.prefix == "p"
    ));
}

#[test]
fn streamed_transaction_is_released_at_stream_commit() {
    let mut asm = assembler_with_relation();
    let events = run(
        &mut asm,
        [
            stream_start(7, true),
            insert(Some(7), REL, "s1"),
            LogicalMessage::StreamStop,
            // A plain transaction between the blocks goes straight through.
            begin(8, 150),
            insert(None, REL, "p1"),
            commit(150),
            stream_start(7, false),
            insert(Some(7), REL, "s2"),
            LogicalMessage::StreamStop,
        ],
    );
    assert_eq!(inserted(&events), ["p1"]);
    assert_eq!((asm.streamed_in_progress(), asm.buffered_changes()), (1, 2));
    // Two one-column rows of two bytes each, plus per-change overhead.
    let bytes = asm.buffered_bytes();
    assert!(bytes >= 2 * (1 + 4 + 2), "{bytes}");
    let events = run(&mut asm, [stream_commit(7, 200)]);
    assert_eq!(events.len(), 4);
    assert_eq!(
        events[0],
        TxnEvent::Begin(TxnBegin {
            xid: 7,
            final_lsn: lsn(200),
            timestamp: ts(9),
            kind: TxnKind::Streamed
        })
    );
    assert_eq!(inserted(&events), ["s1", "s2"]);
    assert!(matches!(
        events[3],
        TxnEvent::Commit(TxnCommit { xid: 7, end_lsn, .. }) if end_lsn == lsn(208)
    ));
    assert_eq!((asm.streamed_in_progress(), asm.buffered_changes()), (0, 0));
    assert_eq!(asm.buffered_bytes(), 0);
}

#[test]
fn stream_abort_drops_the_transaction() {
    let mut asm = assembler_with_relation();
    let events = run(
        &mut asm,
        [
            stream_start(7, true),
            insert(Some(7), REL, "gone"),
            LogicalMessage::StreamStop,
            stream_abort(7, 7),
        ],
    );
    assert!(events.is_empty());
    assert_eq!(asm.streamed_in_progress(), 0);
    assert_eq!(
        asm.handle_message(stream_commit(7, 200)),
        Err(ProtocolError::UnknownStreamedTransaction { xid: 7 })
    );
}

#[test]
fn subtransaction_abort_drops_only_its_changes() {
    let mut asm = assembler_with_relation();
    run(
        &mut asm,
        [
            stream_start(7, true),
            insert(Some(7), REL, "top1"),
            insert(Some(71), REL, "sub71"),
            insert(Some(72), REL, "sub72"),
            LogicalMessage::StreamStop,
            stream_abort(7, 71),
        ],
    );
    let after_abort = asm.buffered_bytes();
    assert_eq!(asm.buffered_changes(), 2);
    run(
        &mut asm,
        [
            stream_start(7, false),
            insert(Some(7), REL, "top2"),
            LogicalMessage::StreamStop,
        ],
    );
    assert!(asm.buffered_bytes() > after_abort);
    let events = run(&mut asm, [stream_commit(7, 300)]);
    assert_eq!(inserted(&events), ["top1", "sub72", "top2"]);
}

#[test]
fn stream_ordering_errors() {
    let mut asm = assembler_with_relation();
    assert_eq!(
        asm.handle_message(LogicalMessage::StreamStop),
        Err(ProtocolError::StreamStopWithoutStart)
    );
    assert_eq!(
        asm.handle_message(stream_start(5, false)),
        Err(ProtocolError::UnknownStreamedTransaction { xid: 5 })
    );
    assert_eq!(
        asm.handle_message(stream_abort(5, 5)),
        Err(ProtocolError::UnknownStreamedTransaction { xid: 5 })
    );
    assert_eq!(
        asm.handle_message(stream_abort(5, 6)),
        Err(ProtocolError::UnknownStreamedTransaction { xid: 5 })
    );
    run(&mut asm, [stream_start(5, true)]);
    assert_eq!(
        asm.handle_message(stream_start(6, true)),
        Err(ProtocolError::NestedStream {
            xid: 6,
            open_xid: 5
        })
    );
    for (msg, what) in [
        (begin(9, 1), "Begin"),
        (commit(1), "Commit"),
        (stream_commit(5, 1), "Stream Commit"),
        (stream_abort(5, 5), "Stream Abort"),
    ] {
        assert_eq!(
            asm.handle_message(msg),
            Err(ProtocolError::InsideStreamBlock { what })
        );
    }
    run(&mut asm, [LogicalMessage::StreamStop]);
    assert_eq!(
        asm.handle_message(stream_start(5, true)),
        Err(ProtocolError::DuplicateStreamedTransaction { xid: 5 })
    );
    // Stream messages inside a plain transaction.
    run(&mut asm, [begin(9, 1)]);
    assert_eq!(
        asm.handle_message(stream_start(5, false)),
        Err(ProtocolError::NestedBegin {
            xid: 5,
            open_xid: 9
        })
    );
    assert_eq!(
        asm.handle_message(stream_commit(5, 1)),
        Err(ProtocolError::InsideTransaction {
            what: "Stream Commit",
            open_xid: 9
        })
    );
    asm.reset();
    assert_eq!(
        (
            asm.open_transaction(),
            asm.open_stream(),
            asm.streamed_in_progress()
        ),
        (None, None, 0)
    );
    assert_eq!(
        asm.relations().relation_count(),
        1,
        "reset keeps the schema cache"
    );
}

mod random_sequences {
    use super::*;
    use proptest::prelude::*;

    /// Small message vocabulary with few xids and LSNs, so that valid and
    /// invalid orders both occur often.
    fn arb_msg() -> impl Strategy<Value = LogicalMessage<'static>> {
        let xid = 1u32..4;
        let l = 1u64..4;
        prop_oneof![
            (xid.clone(), l.clone()).prop_map(|(x, l)| begin(x, l * 100)),
            l.clone().prop_map(|l| commit(l * 100)),
            (
                proptest::option::of(xid.clone()),
                prop_oneof![Just(REL), Just(99u32)]
            )
                .prop_map(|(x, oid)| insert(x, oid, "v")),
            (xid.clone(), any::<bool>()).prop_map(|(x, f)| stream_start(x, f)),
            Just(LogicalMessage::StreamStop),
            (xid.clone(), l.clone()).prop_map(|(x, l)| stream_commit(x, l * 100)),
            (xid.clone(), xid.clone()).prop_map(|(x, s)| stream_abort(x, s)),
            (xid.clone(), l.clone()).prop_map(|(x, l)| LogicalMessage::BeginPrepare(
                BeginPrepare {
                    prepare_lsn: lsn(l * 100),
                    end_lsn: lsn(l * 100 + 8),
                    prepare_time: ts(1),
                    xid: x,
                    gid: "g".into(),
                }
            )),
            (xid.clone(), l.clone()).prop_map(|(x, l)| LogicalMessage::Prepare(prepare_msg(
                x,
                "g",
                l * 100
            ))),
            (xid.clone(), l.clone()).prop_map(|(x, l)| LogicalMessage::StreamPrepare(prepare_msg(
                x,
                "g",
                l * 100
            ))),
            (xid.clone(), l.clone()).prop_map(|(x, l)| LogicalMessage::CommitPrepared(
                CommitPrepared {
                    flags: 0,
                    commit_lsn: lsn(l * 100 + 50),
                    end_lsn: lsn(l * 100 + 58),
                    commit_time: ts(2),
                    xid: x,
                    gid: "g".into(),
                }
            )),
            (xid, l).prop_map(|(x, l)| LogicalMessage::RollbackPrepared(RollbackPrepared {
                flags: 0,
                prepare_end_lsn: lsn(l * 100 + 8),
                rollback_end_lsn: lsn(l * 100 + 58),
                prepare_time: ts(1),
                rollback_time: ts(2),
                xid: x,
                gid: "g".into(),
            })),
        ]
    }

    type Snapshot = (Option<Xid>, Option<Xid>, usize, usize, usize, Option<Lsn>);

    fn snapshot(a: &TxnAssembler) -> Snapshot {
        (
            a.open_transaction(),
            a.open_stream(),
            a.streamed_in_progress(),
            a.buffered_changes(),
            a.prepared_waiting(),
            a.oldest_undecided_prepare(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Never panics, errors leave the state alone, and the events always
        /// form well-bracketed transactions.
        #[test]
        fn events_are_well_bracketed(msgs in proptest::collection::vec(arb_msg(), 0..40)) {
            let mut asm = assembler_with_relation();
            let mut open: Option<Xid> = None;
            // The transaction between Begin Prepare and Prepare: held, no events.
            let mut preparing: Option<Xid> = None;
            for m in msgs {
                let before = snapshot(&asm);
                let mut events = Vec::new();
                let kind = (
                    matches!(m, LogicalMessage::BeginPrepare(_)),
                    matches!(m, LogicalMessage::Prepare(_)),
                );
                let xid = match &m {
                    LogicalMessage::BeginPrepare(b) => Some(b.xid),
                    _ => None,
                };
                match asm.handle_message(m) {
                    Ok(e) => {
                        events.extend(e.map(TxnEvent::into_owned));
                        match kind {
                            (true, _) => preparing = xid,
                            (_, true) => preparing = None,
                            _ => {}
                        }
                    }
                    Err(_) => prop_assert_eq!(snapshot(&asm), before),
                }
                while let Some(e) = asm.poll_event() {
                    events.push(e);
                }
                for e in events {
                    match e {
                        TxnEvent::Begin(b) => {
                            prop_assert_eq!(open, None);
                            open = Some(b.xid);
                        }
                        TxnEvent::Change(_) | TxnEvent::Origin(_) => prop_assert!(open.is_some()),
                        TxnEvent::Commit(c) => {
                            prop_assert_eq!(open, Some(c.xid));
                            open = None;
                        }
                        TxnEvent::CommitPrepared(_) | TxnEvent::RollbackPrepared(_) => {
                            prop_assert_eq!(open, None);
                        }
                        TxnEvent::Message(_) => {}
                    }
                }
                // Between messages, an open event-level transaction (or the
                // prepared one being received) is exactly the assembler's
                // open (non-streamed) transaction.
                prop_assert_eq!(open.or(preparing), asm.open_transaction());
                prop_assert_eq!(open.is_some() && preparing.is_some(), false);
                prop_assert_eq!(asm.buffered_changes() == 0, asm.buffered_bytes() == 0);
            }
        }
    }
}
