//! Spilling streamed transactions: replay yields exactly the events of the
//! in-memory path, and every spill file is appended, replayed or discarded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use cdc_core::pgoutput::*;
use cdc_core::spill::{frame_len, SpillOp, SpillRecordError, FRAME_HEADER_LEN};
use cdc_core::{Change, Lsn, PgTimestamp, TxnAssembler, TxnEvent, Xid};

const REL: u32 = 16384;
const REL2: u32 = 16390;

fn lsn(v: u64) -> Lsn {
    Lsn::from_u64(v)
}

fn ts(v: i64) -> PgTimestamp {
    PgTimestamp::from_pg_micros(v)
}

/// Relation `oid` in schema version `version` (a different column name and
/// count per version), as sent inside a stream block of `xid` or outside.
fn relation(xid: Option<Xid>, oid: u32, version: u8) -> LogicalMessage<'static> {
    let mut columns = vec![Column {
        flags: 1,
        name: "id".into(),
        type_oid: 23,
        type_modifier: -1,
    }];
    for i in 0..version {
        columns.push(Column {
            flags: 0,
            name: format!("c{i}").into(),
            type_oid: 25,
            type_modifier: -1,
        });
    }
    LogicalMessage::Relation(Relation {
        xid,
        oid,
        namespace: "public".into(),
        name: format!("t{oid}").into(),
        replica_identity: ReplicaIdentity::Default,
        columns,
    })
}

fn tuple(value: &str) -> TupleData<'static> {
    TupleData::from_values(&[TupleValue::Text(value.as_bytes()), TupleValue::Null]).unwrap()
}

/// One change of each kind, chosen by `kind`, carrying `value`.
fn change(xid: Option<Xid>, kind: u8, oid: u32, value: &str) -> LogicalMessage<'static> {
    match kind % 6 {
        0 => LogicalMessage::Insert(Insert {
            xid,
            relation: oid,
            new: tuple(value),
        }),
        1 => LogicalMessage::Update(Update {
            xid,
            relation: oid,
            old: Some(OldTuple::Key(tuple("old"))),
            new: tuple(value),
        }),
        2 => LogicalMessage::Update(Update {
            xid,
            relation: oid,
            old: None,
            new: tuple(value),
        }),
        3 => LogicalMessage::Delete(Delete {
            xid,
            relation: oid,
            old: OldTuple::Full(tuple(value)),
        }),
        4 => LogicalMessage::Truncate(Truncate {
            xid,
            options: 1,
            relations: vec![REL, REL2],
        }),
        _ => LogicalMessage::Message(LogicalDecodingMessage {
            xid,
            transactional: true,
            lsn: lsn(77),
            prefix: "p".into(),
            content: value.as_bytes().to_vec().into(),
        }),
    }
}

fn insert(xid: Option<Xid>, value: &str) -> LogicalMessage<'static> {
    change(xid, 0, REL, value)
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

fn stream_prepare(xid: Xid, prepare_lsn: u64) -> LogicalMessage<'static> {
    LogicalMessage::StreamPrepare(Prepare {
        flags: 0,
        prepare_lsn: lsn(prepare_lsn),
        end_lsn: lsn(prepare_lsn + 8),
        prepare_time: ts(7),
        xid,
        gid: format!("gid-{xid}").into(),
    })
}

fn commit_prepared(xid: Xid, commit_lsn: u64) -> LogicalMessage<'static> {
    LogicalMessage::CommitPrepared(CommitPrepared {
        flags: 0,
        commit_lsn: lsn(commit_lsn),
        end_lsn: lsn(commit_lsn + 8),
        commit_time: ts(11),
        xid,
        gid: format!("gid-{xid}").into(),
    })
}

fn rollback_prepared(xid: Xid, rollback_lsn: u64) -> LogicalMessage<'static> {
    LogicalMessage::RollbackPrepared(RollbackPrepared {
        flags: 0,
        prepare_end_lsn: lsn(rollback_lsn - 8),
        rollback_end_lsn: lsn(rollback_lsn + 8),
        prepare_time: ts(7),
        rollback_time: ts(11),
        xid,
        gid: format!("gid-{xid}").into(),
    })
}

fn stream_abort(xid: Xid, subxid: Xid) -> LogicalMessage<'static> {
    LogicalMessage::StreamAbort(StreamAbort {
        xid,
        subxid,
        abort_info: None,
    })
}

/// A caller of the assembler that keeps "spill files" in memory.
struct Harness {
    asm: TxnAssembler,
    files: HashMap<Xid, Vec<u8>>,
    events: Vec<TxnEvent<'static>>,
    buf: Vec<u8>,
    /// The largest single Append seen.
    largest_append: usize,
    /// Every xid that was ever spilled.
    ever_spilled: Vec<Xid>,
}

impl Harness {
    fn new() -> Self {
        let mut asm = TxnAssembler::new();
        for oid in [REL, REL2] {
            asm.handle_message(relation(None, oid, 0)).unwrap();
        }
        Harness {
            asm,
            files: HashMap::new(),
            events: Vec::new(),
            buf: Vec::new(),
            largest_append: 0,
            ever_spilled: Vec::new(),
        }
    }

    fn feed(&mut self, msg: LogicalMessage<'_>, drain: bool) {
        if let Some(e) = self.asm.handle_message(msg).unwrap() {
            self.events.push(e.into_owned());
        }
        if drain {
            self.drain();
        }
    }

    fn spill(&mut self, xid: Xid) -> bool {
        let spilled = self.asm.spill(xid);
        if spilled {
            assert!(self.files.insert(xid, Vec::new()).is_none());
            self.ever_spilled.push(xid);
        }
        spilled
    }

    /// The loop the assembler's docs prescribe.
    fn drain(&mut self) {
        loop {
            while let Some(op) = self.asm.poll_spill(&mut self.buf) {
                match op {
                    SpillOp::Append { xid } => {
                        assert!(!self.buf.is_empty(), "an append carries bytes");
                        self.largest_append = self.largest_append.max(self.buf.len());
                        self.files
                            .get_mut(&xid)
                            .expect("appends go to a file created at spill")
                            .extend_from_slice(&self.buf);
                    }
                    SpillOp::Discard { xid } => {
                        assert!(self.files.remove(&xid).is_some(), "discard of {xid}");
                    }
                }
                self.buf.clear();
            }
            while let Some(e) = self.asm.poll_event() {
                self.events.push(e);
            }
            let Some(mut replay) = self.asm.poll_replay() else {
                break;
            };
            let file = self.files.remove(&replay.xid()).expect("replayed file");
            let mut rest = &file[..];
            while !rest.is_empty() {
                let (header, tail) = rest.split_at(FRAME_HEADER_LEN);
                let len = frame_len(header.try_into().unwrap()).unwrap();
                let (body, tail) = tail.split_at(len);
                rest = tail;
                if let Some(e) = replay.record(body).unwrap() {
                    self.events.push(e.into_owned());
                }
            }
            replay.finish().unwrap();
        }
    }
}

/// The inserted or updated text values of the row events, in order.
fn values(events: &[TxnEvent<'_>]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| {
            let t = match e {
                TxnEvent::Change(Change::Insert(_, i)) => &i.new,
                TxnEvent::Change(Change::Update(_, u)) => &u.new,
                _ => return None,
            };
            match t.get(0) {
                Some(TupleValue::Text(v)) => Some(String::from_utf8(v.to_vec()).unwrap()),
                _ => None,
            }
        })
        .collect()
}

/// Runs `msgs` twice, without spilling and spilling `xid` after message
/// `spill_at`; returns both event sequences and the spilling harness.
fn both_ways(
    msgs: &[LogicalMessage<'static>],
    xid: Xid,
    spill_at: usize,
) -> (Vec<TxnEvent<'static>>, Harness) {
    let mut memory = Harness::new();
    let mut spilled = Harness::new();
    for (i, m) in msgs.iter().enumerate() {
        memory.feed(m.clone(), true);
        spilled.feed(m.clone(), true);
        if i == spill_at {
            assert!(spilled.spill(xid), "spill {xid} after message {i}");
            spilled.drain();
        }
    }
    (memory.events, spilled)
}

#[test]
fn a_spilled_transaction_replays_its_changes_at_commit() {
    let msgs = [
        stream_start(7, true),
        insert(Some(7), "a"),
        insert(Some(7), "b"),
        LogicalMessage::StreamStop,
        stream_start(7, false),
        insert(Some(7), "c"),
        LogicalMessage::StreamStop,
        stream_commit(7, 200),
    ];
    let (memory, spilled) = both_ways(&msgs, 7, 2);
    assert_eq!(values(&memory), ["a", "b", "c"]);
    assert_eq!(spilled.events, memory);
    assert!(spilled.files.is_empty(), "the file was replayed");
    assert_eq!(spilled.asm.spilled_in_progress(), 0);
}

#[test]
fn after_spilling_nothing_of_the_transaction_stays_in_memory() {
    let mut h = Harness::new();
    h.feed(stream_start(7, true), true);
    h.feed(insert(Some(7), "a"), true);
    assert_eq!(h.asm.largest_unspilled().map(|(x, _)| x), Some(7));
    assert!(h.asm.buffered_bytes() > 0);
    assert!(h.spill(7));
    assert!(!h.spill(7), "spilling twice does nothing");
    assert!(!h.asm.spill(8), "nor does spilling an unknown xid");
    assert!(h.asm.is_spilled(7));
    h.drain();
    assert_eq!(h.asm.buffered_bytes(), 0);
    assert_eq!(h.asm.buffered_changes(), 0);
    assert_eq!(h.asm.largest_unspilled(), None);
    for i in 0..100 {
        h.feed(insert(Some(7), &format!("v{i}")), true);
        assert_eq!(h.asm.buffered_bytes(), 0);
    }
    assert!(h.files[&7].len() > 100 * 10);
}

#[test]
fn a_large_backlog_is_handed_out_in_chunks() {
    let mut memory = Harness::new();
    let mut spilled = Harness::new();
    let value = "x".repeat(1000);
    let mut msgs = vec![stream_start(7, true)];
    msgs.extend((0..3000).map(|_| insert(Some(7), &value)));
    msgs.push(LogicalMessage::StreamStop);
    for m in &msgs {
        memory.feed(m.clone(), true);
        spilled.feed(m.clone(), true);
    }
    let before = spilled.asm.buffered_bytes();
    assert!(before > 3_000_000);
    assert!(spilled.spill(7));
    // The first chunk: the rest of the backlog is still in memory, and
    // shrinks as it is encoded.
    let Some(SpillOp::Append { xid: 7 }) = spilled.asm.poll_spill(&mut spilled.buf) else {
        panic!("expected an append");
    };
    let first = spilled.buf.len();
    assert!(first < 300 * 1024, "{first}");
    assert!(spilled.asm.buffered_bytes() < before - first / 2);
    spilled
        .files
        .get_mut(&7)
        .unwrap()
        .extend_from_slice(&spilled.buf);
    spilled.buf.clear();
    spilled.drain();
    assert!(spilled.largest_append < 300 * 1024);
    assert_eq!(spilled.asm.buffered_bytes(), 0);
    memory.feed(stream_commit(7, 500), true);
    spilled.feed(stream_commit(7, 500), true);
    assert_eq!(spilled.events.len(), 3002);
    assert_eq!(spilled.events, memory.events);
}

#[test]
fn subtransaction_aborts_drop_exactly_their_earlier_changes() {
    let msgs = [
        stream_start(7, true),
        insert(Some(7), "top1"),
        insert(Some(71), "sub71-a"),
        insert(Some(72), "sub72"),
        LogicalMessage::StreamStop,
        stream_start(7, false),
        insert(Some(71), "sub71-b"),
        insert(Some(73), "sub73"),
        LogicalMessage::StreamStop,
        // 71 rolls back: both its changes go, from memory and from the file.
        stream_abort(7, 71),
        stream_abort(7, 73),
        stream_start(7, false),
        insert(Some(7), "top2"),
        LogicalMessage::StreamStop,
        stream_commit(7, 300),
    ];
    let expected = ["top1", "sub72", "top2"];
    for spill_at in 0..msgs.len() - 1 {
        let (memory, spilled) = both_ways(&msgs, 7, spill_at);
        assert_eq!(values(&memory), expected);
        assert_eq!(spilled.events, memory, "spilled after message {spill_at}");
    }
}

#[test]
fn a_spilled_transaction_that_aborts_is_discarded_without_events() {
    let msgs = [
        stream_start(7, true),
        insert(Some(7), "gone"),
        LogicalMessage::StreamStop,
        stream_abort(7, 7),
    ];
    let (memory, spilled) = both_ways(&msgs, 7, 1);
    assert!(memory.is_empty());
    assert!(spilled.events.is_empty());
    assert!(spilled.files.is_empty(), "the file was discarded");
    assert_eq!(spilled.asm.spilled_in_progress(), 0);
}

#[test]
fn a_spilled_prepared_transaction_replays_like_the_in_memory_one() {
    let msgs = [
        stream_start(30, true),
        insert(Some(30), "sp"),
        change(Some(30), 5, REL, "msg"),
        LogicalMessage::StreamStop,
        stream_prepare(30, 700),
        commit_prepared(30, 800),
    ];
    let (memory, spilled) = both_ways(&msgs, 30, 1);
    assert_eq!(memory.len(), 4);
    assert!(matches!(memory[3], TxnEvent::Commit(c) if c.commit_lsn == lsn(800)));
    assert_eq!(spilled.events, memory);
    assert!(spilled.files.is_empty(), "the file was replayed");
}

#[test]
fn a_prepared_transaction_spilled_while_it_waits_keeps_its_file_over_a_reset() {
    let msgs = [
        LogicalMessage::BeginPrepare(BeginPrepare {
            prepare_lsn: lsn(700),
            end_lsn: lsn(708),
            prepare_time: ts(7),
            xid: 31,
            gid: "gid-31".into(),
        }),
        insert(None, "p1"),
        insert(None, "p2"),
        LogicalMessage::Prepare(Prepare {
            flags: 0,
            prepare_lsn: lsn(700),
            end_lsn: lsn(708),
            prepare_time: ts(7),
            xid: 31,
            gid: "gid-31".into(),
        }),
    ];
    let mut h = Harness::new();
    for m in msgs {
        h.feed(m, true);
    }
    assert!(h.events.is_empty(), "nothing before the decision");
    assert!(h.spill(31));
    h.drain();
    assert_eq!(h.asm.buffered_bytes(), 0);
    // A reconnect keeps the prepared transaction and its file.
    h.asm.reset();
    assert!(h.asm.is_spilled(31));
    assert_eq!(h.asm.spilled_in_progress(), 1);
    h.feed(commit_prepared(31, 900), true);
    assert_eq!(values(&h.events), ["p1", "p2"]);
    assert!(h.files.is_empty(), "the file was replayed");

    // Rolled back: the file is discarded and no change comes out.
    let mut h = Harness::new();
    h.feed(stream_start(32, true), true);
    h.feed(insert(Some(32), "r1"), true);
    h.feed(LogicalMessage::StreamStop, true);
    h.feed(stream_prepare(32, 950), true);
    assert!(h.spill(32));
    h.drain();
    h.feed(rollback_prepared(32, 990), true);
    assert!(h.files.is_empty(), "the file was discarded");
    assert!(matches!(h.events[..], [TxnEvent::RollbackPrepared(_)]));
}

#[test]
fn replayed_rows_keep_the_schema_version_they_were_sent_with() {
    let msgs = [
        stream_start(7, true),
        insert(Some(7), "v0"),
        relation(Some(7), REL, 1),
        insert(Some(7), "v1"),
        LogicalMessage::StreamStop,
        stream_commit(7, 300),
    ];
    let (memory, spilled) = both_ways(&msgs, 7, 1);
    assert_eq!(spilled.events, memory);
    let columns: Vec<usize> = spilled
        .events
        .iter()
        .filter_map(|e| match e {
            TxnEvent::Change(Change::Insert(r, _)) => Some(r.columns.len()),
            _ => None,
        })
        .collect();
    assert_eq!(columns, [1, 2]);
}

#[test]
fn undrained_output_still_replays_in_order() {
    // The caller spills, then feeds the commit and the next transaction
    // without draining anything in between.
    let mut memory = Harness::new();
    let mut spilled = Harness::new();
    let msgs = [
        stream_start(7, true),
        insert(Some(7), "a"),
        LogicalMessage::StreamStop,
    ];
    for m in &msgs {
        memory.feed(m.clone(), true);
        spilled.feed(m.clone(), true);
    }
    assert!(spilled.spill(7));
    let rest = [
        stream_start(7, false),
        insert(Some(7), "b"),
        LogicalMessage::StreamStop,
        stream_commit(7, 200),
        LogicalMessage::Begin(Begin {
            final_lsn: lsn(300),
            commit_time: ts(1),
            xid: 8,
        }),
        insert(None, "p"),
    ];
    for m in &rest {
        memory.feed(m.clone(), true);
        spilled.feed(m.clone(), false);
    }
    // The Begin of 7 may be polled, but its replay waits for the file.
    assert!(matches!(spilled.asm.poll_event(), Some(TxnEvent::Begin(_))));
    assert!(spilled.asm.poll_replay().is_none());
    assert!(spilled.asm.poll_event().is_none());
    spilled.events.push(memory.events[0].clone());
    spilled.drain();
    assert_eq!(values(&spilled.events), ["a", "b", "p"]);
    assert_eq!(spilled.events, memory.events);
}

#[test]
fn a_truncated_or_overlong_file_is_an_error() {
    let mut h = Harness::new();
    for m in [
        stream_start(7, true),
        insert(Some(7), "a"),
        insert(Some(7), "b"),
        LogicalMessage::StreamStop,
    ] {
        h.feed(m, true);
    }
    assert!(h.spill(7));
    h.drain();
    h.feed(stream_commit(7, 200), false);
    assert_eq!(h.asm.poll_spill(&mut h.buf), None, "nothing left to write");
    assert!(matches!(h.asm.poll_event(), Some(TxnEvent::Begin(_))));
    let mut replay = h.asm.poll_replay().unwrap();
    assert_eq!((replay.xid(), replay.records()), (7, 2));
    let file = &h.files[&7];
    let len = frame_len(file[..4].try_into().unwrap()).unwrap();
    let body = &file[4..4 + len];
    assert!(replay.record(body).unwrap().is_some());
    assert_eq!(replay.remaining(), 1);
    assert!(matches!(
        replay.record(&body[..5]),
        Err(SpillRecordError::TooShort { index: 1, len: 5 })
    ));
    // The short record was rejected before it counted.
    assert_eq!(replay.remaining(), 1);
    let mut corrupt = body.to_vec();
    corrupt[9] = b'B';
    assert!(matches!(
        replay.record(&corrupt),
        Err(SpillRecordError::NotAChange { index: 1, .. }) | Err(SpillRecordError::Decode { .. })
    ));
    assert_eq!(replay.remaining(), 1);
    assert_eq!(
        replay.finish(),
        Err(SpillRecordError::MissingRecords {
            xid: 7,
            expected: 2,
            got: 1
        })
    );
    assert!(matches!(
        frame_len(u32::MAX.to_be_bytes()),
        Err(SpillRecordError::TooLong { .. })
    ));
}

mod random_interleavings {
    use super::*;
    use proptest::prelude::*;

    /// One step of a generated replication stream. Indexes pick among the
    /// streamed transactions in progress (modulo their number).
    #[derive(Debug, Clone)]
    enum Step {
        /// A stream block of an in-progress transaction (or a new one when
        /// `txn` lands past the end), with its changes; optionally spill
        /// that transaction after `spill_after` of them.
        Block {
            txn: u8,
            changes: Vec<(u8, u8)>,
            spill_after: Option<u8>,
        },
        /// A plain transaction between stream blocks.
        Plain { changes: Vec<u8> },
        /// Stream Abort of a subtransaction (0: none of its own; 1..=3).
        SubAbort { txn: u8, sub: u8 },
        /// Stream Commit (0), Stream Prepare (1) or Stream Abort (2).
        End { txn: u8, how: u8 },
        /// Commit Prepared (true) or Rollback Prepared of a prepared one.
        Decide { txn: u8, commit: bool },
        /// Spill an in-progress transaction between blocks.
        Spill { txn: u8 },
    }

    fn arb_step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (
                any::<u8>(),
                proptest::collection::vec((any::<u8>(), 0u8..4), 0..8),
                proptest::option::of(0u8..8)
            )
                .prop_map(|(txn, changes, spill_after)| Step::Block {
                    txn,
                    changes,
                    spill_after
                }),
            1 => proptest::collection::vec(any::<u8>(), 0..4)
                .prop_map(|changes| Step::Plain { changes }),
            2 => (any::<u8>(), 1u8..4).prop_map(|(txn, sub)| Step::SubAbort { txn, sub }),
            2 => (any::<u8>(), 0u8..3).prop_map(|(txn, how)| Step::End { txn, how }),
            1 => (any::<u8>(), any::<bool>()).prop_map(|(txn, commit)| Step::Decide { txn, commit }),
            1 => any::<u8>().prop_map(|txn| Step::Spill { txn }),
        ]
    }

    /// What to do after a message of the generated stream.
    enum After {
        Nothing,
        Spill(Xid),
    }

    /// Turns steps into a valid message stream (and spill points).
    fn messages(steps: &[Step]) -> Vec<(LogicalMessage<'static>, After)> {
        let mut out = Vec::new();
        let mut open: Vec<Xid> = Vec::new();
        let mut prepared: Vec<Xid> = Vec::new();
        let mut next_xid = 100;
        let mut next_lsn = 1000;
        let mut counter = 0u32;
        let mut value = || {
            counter += 1;
            format!("v{counter}")
        };
        for step in steps {
            match step {
                Step::Block {
                    txn,
                    changes,
                    spill_after,
                } => {
                    let i = usize::from(*txn) % (open.len() + 1);
                    let (xid, first) = match open.get(i) {
                        Some(&x) => (x, false),
                        None => {
                            next_xid += 1;
                            open.push(next_xid);
                            (next_xid, true)
                        }
                    };
                    out.push((stream_start(xid, first), After::Nothing));
                    for (n, &(kind, sub)) in changes.iter().enumerate() {
                        let change_xid = if sub == 0 {
                            xid
                        } else {
                            xid * 10 + u32::from(sub)
                        };
                        let msg = if kind % 16 == 15 {
                            // A schema change inside the transaction.
                            relation(Some(change_xid), REL, kind % 3)
                        } else {
                            let oid = if kind % 2 == 0 { REL } else { REL2 };
                            change(Some(change_xid), kind / 2, oid, &value())
                        };
                        let after = match spill_after {
                            Some(s) if usize::from(*s) == n => After::Spill(xid),
                            _ => After::Nothing,
                        };
                        out.push((msg, after));
                    }
                    out.push((LogicalMessage::StreamStop, After::Nothing));
                }
                Step::Plain { changes } => {
                    next_xid += 1;
                    next_lsn += 100;
                    out.push((
                        LogicalMessage::Begin(Begin {
                            final_lsn: lsn(next_lsn),
                            commit_time: ts(3),
                            xid: next_xid,
                        }),
                        After::Nothing,
                    ));
                    for &kind in changes {
                        out.push((change(None, kind, REL, &value()), After::Nothing));
                    }
                    out.push((
                        LogicalMessage::Commit(Commit {
                            flags: 0,
                            commit_lsn: lsn(next_lsn),
                            end_lsn: lsn(next_lsn + 8),
                            commit_time: ts(3),
                        }),
                        After::Nothing,
                    ));
                }
                Step::SubAbort { txn, sub } => {
                    if let Some(&xid) = open.get(usize::from(*txn) % open.len().max(1)) {
                        out.push((
                            stream_abort(xid, xid * 10 + u32::from(*sub)),
                            After::Nothing,
                        ));
                    }
                }
                Step::End { txn, how } => {
                    if open.is_empty() {
                        continue;
                    }
                    let xid = open.remove(usize::from(*txn) % open.len());
                    next_lsn += 100;
                    let msg = match how {
                        0 => stream_commit(xid, next_lsn),
                        1 => {
                            prepared.push(xid);
                            stream_prepare(xid, next_lsn)
                        }
                        _ => stream_abort(xid, xid),
                    };
                    out.push((msg, After::Nothing));
                }
                Step::Decide { txn, commit } => {
                    if prepared.is_empty() {
                        continue;
                    }
                    let xid = prepared.remove(usize::from(*txn) % prepared.len());
                    next_lsn += 100;
                    let msg = match commit {
                        true => commit_prepared(xid, next_lsn),
                        false => rollback_prepared(xid, next_lsn),
                    };
                    out.push((msg, After::Nothing));
                }
                Step::Spill { txn } => {
                    // In progress or prepared, both are held.
                    let held: Vec<Xid> = open.iter().chain(&prepared).copied().collect();
                    if let Some(&xid) = held.get(usize::from(*txn) % held.len().max(1)) {
                        // Attached to the last message (spilled after it).
                        if let Some(last) = out.last_mut() {
                            last.1 = After::Spill(xid);
                        }
                    }
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Spilling at random points, and draining lazily, yields exactly the
        /// event sequence of never spilling; every file ends replayed or
        /// discarded once its transaction ends.
        #[test]
        fn spilling_never_changes_the_events(
            steps in proptest::collection::vec(arb_step(), 0..30),
            lazy in any::<bool>(),
        ) {
            let msgs = messages(&steps);
            let mut memory = Harness::new();
            let mut spilled = Harness::new();
            for (i, (msg, after)) in msgs.iter().enumerate() {
                memory.feed(msg.clone(), true);
                // Lazy: drain only every third message.
                spilled.feed(msg.clone(), !lazy || i % 3 == 0);
                if let After::Spill(xid) = after {
                    // False when the transaction already is spilled.
                    spilled.spill(*xid);
                }
            }
            spilled.drain();
            prop_assert_eq!(&spilled.events, &memory.events);
            prop_assert_eq!(spilled.files.len(), spilled.asm.spilled_in_progress());
            prop_assert_eq!(
                memory.asm.streamed_in_progress(),
                spilled.asm.streamed_in_progress()
            );
            prop_assert_eq!(spilled.asm.buffered_bytes() == 0, spilled.asm.buffered_changes() == 0);
            for xid in &spilled.ever_spilled {
                prop_assert_eq!(spilled.files.contains_key(xid), spilled.asm.is_spilled(*xid));
            }
        }
    }
}
