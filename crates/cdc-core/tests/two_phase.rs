//! Two-phase transactions through the decoder and the assembler: held from
//! Begin Prepare (or Stream Prepare) until decided, released once at Commit
//! Prepared with the commit's position, dropped at Rollback Prepared, under
//! every protocol version (a slot created with `two_phase` sends them
//! whatever version the client asked for).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cdc_core::encode::message_bytes;
use cdc_core::pgoutput::*;
use cdc_core::{
    Change, Decoder, Lsn, PgTimestamp, ProtocolError, TxnAssembler, TxnBegin, TxnCommit, TxnEvent,
    TxnKind, Xid,
};

const REL: u32 = 16384;

fn lsn(v: u64) -> Lsn {
    Lsn::from_u64(v)
}

fn ts(v: i64) -> PgTimestamp {
    PgTimestamp::from_pg_micros(v)
}

fn relation() -> LogicalMessage<'static> {
    LogicalMessage::Relation(Relation {
        xid: None,
        oid: REL,
        namespace: "public".into(),
        name: "ledger".into(),
        replica_identity: ReplicaIdentity::Default,
        columns: vec![Column {
            flags: 1,
            name: "id".into(),
            type_oid: 23,
            type_modifier: -1,
        }],
    })
}

fn insert(xid: Option<Xid>, value: &'static str) -> LogicalMessage<'static> {
    LogicalMessage::Insert(Insert {
        xid,
        relation: REL,
        new: TupleData::from_values(&[TupleValue::Text(value.as_bytes())]).unwrap(),
    })
}

fn begin(xid: Xid, at: u64) -> LogicalMessage<'static> {
    LogicalMessage::Begin(Begin {
        final_lsn: lsn(at),
        commit_time: ts(3),
        xid,
    })
}

fn commit(at: u64) -> LogicalMessage<'static> {
    LogicalMessage::Commit(Commit {
        flags: 0,
        commit_lsn: lsn(at),
        end_lsn: lsn(at + 8),
        commit_time: ts(3),
    })
}

fn begin_prepare(xid: Xid, gid: &'static str, at: u64) -> LogicalMessage<'static> {
    LogicalMessage::BeginPrepare(BeginPrepare {
        prepare_lsn: lsn(at),
        end_lsn: lsn(at + 8),
        prepare_time: ts(7),
        xid,
        gid: gid.into(),
    })
}

fn prepare_body(xid: Xid, gid: &'static str, at: u64) -> Prepare<'static> {
    Prepare {
        flags: 0,
        prepare_lsn: lsn(at),
        end_lsn: lsn(at + 8),
        prepare_time: ts(7),
        xid,
        gid: gid.into(),
    }
}

fn prepare(xid: Xid, gid: &'static str, at: u64) -> LogicalMessage<'static> {
    LogicalMessage::Prepare(prepare_body(xid, gid, at))
}

fn commit_prepared_body(xid: Xid, gid: &'static str, at: u64) -> CommitPrepared<'static> {
    CommitPrepared {
        flags: 0,
        commit_lsn: lsn(at),
        end_lsn: lsn(at + 8),
        commit_time: ts(9),
        xid,
        gid: gid.into(),
    }
}

fn commit_prepared(xid: Xid, gid: &'static str, at: u64) -> LogicalMessage<'static> {
    LogicalMessage::CommitPrepared(commit_prepared_body(xid, gid, at))
}

fn rollback_prepared(xid: Xid, gid: &'static str, at: u64) -> LogicalMessage<'static> {
    LogicalMessage::RollbackPrepared(RollbackPrepared {
        flags: 0,
        prepare_end_lsn: lsn(at - 100),
        rollback_end_lsn: lsn(at + 8),
        prepare_time: ts(7),
        rollback_time: ts(9),
        xid,
        gid: gid.into(),
    })
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

/// The events as short strings: `B<kind>@lsn`, `I<value>`, `C@lsn/end`, ...
fn outline(events: &[TxnEvent<'_>]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            TxnEvent::Begin(b) => format!("B{:?}@{}", b.kind, b.final_lsn.as_u64()),
            TxnEvent::Origin(o) => format!("O{}", o.name),
            TxnEvent::Change(Change::Insert(_, i)) => match i.new.get(0) {
                Some(TupleValue::Text(t)) => format!("I{}", String::from_utf8_lossy(t)),
                other => format!("I{other:?}"),
            },
            TxnEvent::Change(c) => format!("{c:?}"),
            TxnEvent::Commit(c) => format!("C@{}/{}", c.commit_lsn.as_u64(), c.end_lsn.as_u64()),
            TxnEvent::CommitPrepared(c) => format!("K{}", c.gid),
            TxnEvent::RollbackPrepared(r) => format!("r{}", r.gid),
            TxnEvent::Message(m) => format!("M{}", m.prefix),
        })
        .collect()
}

fn assembler() -> TxnAssembler {
    let mut asm = TxnAssembler::new();
    assert_eq!(asm.handle_message(relation()).unwrap(), None);
    asm
}

/// The scenario of the issue: prepare, other transactions, commit prepared;
/// prepare, rollback prepared. Encoded to bytes and decoded under `version`.
fn scenario() -> Vec<LogicalMessage<'static>> {
    vec![
        relation(),
        begin_prepare(20, "fx_commit", 400),
        insert(None, "prepared"),
        prepare(20, "fx_commit", 400),
        begin(21, 450),
        insert(None, "between"),
        commit(450),
        commit_prepared(20, "fx_commit", 500),
        begin_prepare(22, "fx_rollback", 600),
        insert(None, "rolled back"),
        prepare(22, "fx_rollback", 600),
        rollback_prepared(22, "fx_rollback", 700),
    ]
}

#[test]
fn prepared_transactions_are_held_until_decided_under_every_version() {
    for version in ProtocolVersion::ALL {
        let bytes: Vec<Vec<u8>> = scenario().iter().map(message_bytes).collect();
        let mut decoder = Decoder::new(version);
        let mut asm = TxnAssembler::new();
        let mut events = Vec::new();
        let mut holds = Vec::new();
        for b in &bytes {
            let msg = decoder
                .decode(b)
                .unwrap_or_else(|e| panic!("v{version:?}: {e}"));
            if let Some(e) = asm.handle_message(msg).unwrap() {
                events.push(e.into_owned());
            }
            while let Some(e) = asm.poll_event() {
                events.push(e);
            }
            holds.push(asm.oldest_undecided_prepare().map(|l| l.as_u64()));
        }
        assert_eq!(
            outline(&events),
            [
                "BPlain@450",
                "Ibetween",
                "C@450/458",
                "BPrepared@500",
                "Iprepared",
                "C@500/508",
                "rfx_rollback",
            ],
            "{version:?}"
        );
        // Held from Begin Prepare until its decision, not after.
        assert_eq!(
            holds,
            [
                None,
                Some(400),
                Some(400),
                Some(400),
                Some(400),
                Some(400),
                Some(400),
                None,
                Some(600),
                Some(600),
                Some(600),
                None
            ],
            "{version:?}"
        );
        assert_eq!(asm.prepared_waiting(), 0);
        assert_eq!(asm.buffered_bytes(), 0);
    }
}

#[test]
fn the_released_transaction_carries_the_commit_position_and_time() {
    let mut asm = assembler();
    assert!(run(
        &mut asm,
        [
            begin_prepare(20, "g", 400),
            insert(None, "a"),
            prepare(20, "g", 400)
        ]
    )
    .is_empty());
    assert_eq!(asm.prepared_waiting(), 1);
    assert!(asm.buffered_bytes() > 0);
    let events = run(&mut asm, [commit_prepared(20, "g", 500)]);
    assert_eq!(
        events[0],
        TxnEvent::Begin(TxnBegin {
            xid: 20,
            final_lsn: lsn(500),
            timestamp: ts(9),
            kind: TxnKind::Prepared,
        })
    );
    assert_eq!(
        events[2],
        TxnEvent::Commit(TxnCommit {
            xid: 20,
            commit_lsn: lsn(500),
            end_lsn: lsn(508),
            commit_time: ts(9),
        })
    );
    assert_eq!(events.len(), 3);
    // Decided: nothing is held, and a second Commit Prepared is unknown.
    assert_eq!(asm.prepared_waiting(), 0);
    assert_eq!(
        run(&mut asm, [commit_prepared(20, "g", 500)]),
        [TxnEvent::CommitPrepared(commit_prepared_body(20, "g", 500))]
    );
}

#[test]
fn a_rolled_back_prepared_transaction_yields_no_changes() {
    let mut asm = assembler();
    let events = run(
        &mut asm,
        [
            begin_prepare(22, "g", 600),
            insert(None, "x"),
            insert(None, "y"),
            prepare(22, "g", 600),
            rollback_prepared(22, "g", 700),
        ],
    );
    assert_eq!(outline(&events), ["rg"]);
    assert_eq!(asm.buffered_changes(), 0);
    assert_eq!(asm.oldest_undecided_prepare(), None);
}

#[test]
fn several_prepared_transactions_wait_side_by_side() {
    let mut asm = assembler();
    run(
        &mut asm,
        [
            begin_prepare(1, "one", 100),
            insert(None, "1"),
            prepare(1, "one", 100),
            begin_prepare(2, "two", 200),
            insert(None, "2"),
            prepare(2, "two", 200),
        ],
    );
    assert_eq!(asm.oldest_undecided_prepare(), Some(lsn(100)));
    // Decided in the other order.
    let events = run(&mut asm, [commit_prepared(2, "two", 300)]);
    assert_eq!(outline(&events), ["BPrepared@300", "I2", "C@300/308"]);
    assert_eq!(asm.oldest_undecided_prepare(), Some(lsn(100)));
    let events = run(&mut asm, [commit_prepared(1, "one", 400)]);
    assert_eq!(outline(&events), ["BPrepared@400", "I1", "C@400/408"]);
    assert_eq!(asm.oldest_undecided_prepare(), None);
}

#[test]
fn the_origin_of_a_prepared_transaction_follows_its_begin() {
    let mut asm = assembler();
    let origin = LogicalMessage::Origin(Origin {
        commit_lsn: lsn(77),
        name: "upstream".into(),
    });
    let events = run(
        &mut asm,
        [
            begin_prepare(5, "g", 100),
            origin,
            insert(None, "o"),
            prepare(5, "g", 100),
            commit_prepared(5, "g", 200),
        ],
    );
    assert_eq!(
        outline(&events),
        ["BPrepared@200", "Oupstream", "Io", "C@200/208"]
    );
}

#[test]
fn a_streamed_prepared_transaction_is_held_too() {
    let mut asm = assembler();
    let events = run(
        &mut asm,
        [
            LogicalMessage::StreamStart(StreamStart {
                xid: 30,
                first_segment: true,
            }),
            insert(Some(30), "s"),
            LogicalMessage::StreamStop,
            LogicalMessage::StreamPrepare(prepare_body(30, "gs", 700)),
            begin(31, 750),
            insert(None, "between"),
            commit(750),
        ],
    );
    assert_eq!(outline(&events), ["BPlain@750", "Ibetween", "C@750/758"]);
    assert_eq!(asm.streamed_in_progress(), 0);
    assert_eq!(asm.prepared_waiting(), 1);
    assert_eq!(asm.oldest_undecided_prepare(), Some(lsn(700)));
    // A second Stream Prepare, or a Stream Commit, does not fit a prepared one.
    assert_eq!(
        asm.handle_message(LogicalMessage::StreamPrepare(prepare_body(30, "gs", 700))),
        Err(ProtocolError::UnknownStreamedTransaction { xid: 30 })
    );
    let events = run(&mut asm, [commit_prepared(30, "gs", 800)]);
    assert_eq!(
        outline(&events),
        ["BStreamedPrepared@800", "Is", "C@800/808"]
    );
}

#[test]
fn prepared_transactions_survive_a_reset_and_a_resent_copy_replaces_them() {
    let mut asm = assembler();
    run(
        &mut asm,
        [
            begin_prepare(20, "g", 400),
            insert(None, "old copy"),
            prepare(20, "g", 400),
            begin_prepare(21, "open", 450),
            insert(None, "unfinished"),
        ],
    );
    // A reconnect: the unfinished one goes, the prepared one stays.
    asm.reset();
    assert_eq!(asm.open_transaction(), None);
    assert_eq!(asm.prepared_waiting(), 1);
    assert_eq!(asm.oldest_undecided_prepare(), Some(lsn(400)));
    // The server sends it again (it started at or before the prepare).
    run(
        &mut asm,
        [
            begin_prepare(20, "g", 400),
            insert(None, "new copy"),
            prepare(20, "g", 400),
        ],
    );
    assert_eq!(asm.prepared_waiting(), 1);
    let events = run(&mut asm, [commit_prepared(20, "g", 500)]);
    assert_eq!(
        outline(&events),
        ["BPrepared@500", "Inew copy", "C@500/508"]
    );
    // Or it does not (it started past the prepare): the decision alone
    // releases what is held.
    run(
        &mut asm,
        [
            begin_prepare(22, "h", 600),
            insert(None, "kept"),
            prepare(22, "h", 600),
        ],
    );
    asm.reset();
    let events = run(&mut asm, [commit_prepared(22, "h", 700)]);
    assert_eq!(outline(&events), ["BPrepared@700", "Ikept", "C@700/708"]);
}

#[test]
fn two_phase_ordering_errors_leave_the_state_alone() {
    let mut asm = assembler();
    run(&mut asm, [begin_prepare(20, "g", 400)]);
    assert_eq!(
        asm.handle_message(commit(400)),
        Err(ProtocolError::MismatchedEnd {
            what: "Commit",
            opened_by: "Begin Prepare"
        })
    );
    assert_eq!(
        asm.handle_message(prepare(20, "other", 400)),
        Err(ProtocolError::PrepareMismatch { xid: 20 })
    );
    assert_eq!(
        asm.handle_message(prepare(20, "g", 401)),
        Err(ProtocolError::CommitLsnMismatch {
            xid: 20,
            expected: lsn(400),
            actual: lsn(401)
        })
    );
    assert_eq!(
        asm.handle_message(commit_prepared(20, "g", 500)),
        Err(ProtocolError::InsideTransaction {
            what: "Commit Prepared",
            open_xid: 20
        })
    );
    assert_eq!(
        asm.handle_message(begin(9, 410)),
        Err(ProtocolError::NestedBegin {
            xid: 9,
            open_xid: 20
        })
    );
    run(&mut asm, [prepare(20, "g", 400)]);
    // Decided under another gid, or a Begin Prepare of a prepared xid
    // that is still streaming: errors.
    assert_eq!(
        asm.handle_message(commit_prepared(20, "other", 500)),
        Err(ProtocolError::NotPrepared {
            what: "Commit Prepared",
            xid: 20
        })
    );
    assert_eq!(
        asm.handle_message(rollback_prepared(20, "other", 500)),
        Err(ProtocolError::NotPrepared {
            what: "Rollback Prepared",
            xid: 20
        })
    );
    run(
        &mut asm,
        [LogicalMessage::StreamStart(StreamStart {
            xid: 30,
            first_segment: true,
        })],
    );
    run(&mut asm, [LogicalMessage::StreamStop]);
    assert_eq!(
        asm.handle_message(commit_prepared(30, "g", 500)),
        Err(ProtocolError::NotPrepared {
            what: "Commit Prepared",
            xid: 30
        })
    );
    assert_eq!(
        asm.handle_message(begin_prepare(30, "g", 500)),
        Err(ProtocolError::DuplicateStreamedTransaction { xid: 30 })
    );
    assert_eq!(asm.prepared_waiting(), 1);
    assert_eq!(asm.streamed_in_progress(), 1);
    // Still fine afterwards.
    let events = run(&mut asm, [commit_prepared(20, "g", 500)]);
    assert_eq!(outline(&events), ["BPrepared@500", "C@500/508"]);
}
