//! Messages captured from a real PostgreSQL 15.20 server (pgoutput through
//! `pg_logical_slot_peek_binary_changes`, which returns the same bytes a
//! walsender puts in XLogData), decoded and checked field by field, and fed
//! through the assembler.
//!
//! Captured with `proto_version '3', streaming 'on', two_phase 'on',
//! messages 'true'` (plus one `binary 'true'` and one `proto_version '1'`
//! session) from this workload:
//!
//! ```sql
//! CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
//! CREATE TABLE users (id int PRIMARY KEY, name text, m mood, big text);
//! CREATE TABLE full_ri (id int, v text); ALTER TABLE full_ri REPLICA IDENTITY FULL;
//! INSERT INTO users VALUES (1, 'alice', 'happy', ...), (2, NULL, 'sad', 'b');
//! UPDATE users SET id = 10 WHERE id = 2; DELETE FROM users WHERE id = 10;
//! INSERT INTO full_ri VALUES (1, 'a'); UPDATE full_ri SET v = 'b'; DELETE FROM full_ri;
//! TRUNCATE full_ri RESTART IDENTITY CASCADE;
//! SELECT pg_logical_emit_message(false, 'nontx', 'hello');
//! BEGIN; SELECT pg_logical_emit_message(true, 'tx', '\x00ff'::bytea); ...; COMMIT;
//! -- > logical_decoding_work_mem, so streamed, with ROLLBACK TO SAVEPOINT inside:
//! BEGIN; INSERT 1001 rows; SAVEPOINT sp; INSERT 1001 rows; ROLLBACK TO sp; INSERT 501 rows; COMMIT;
//! BEGIN; INSERT 1501 rows; ROLLBACK;                         -- streamed, aborted
//! BEGIN; INSERT ...; PREPARE TRANSACTION 'gid1'; COMMIT PREPARED 'gid1';
//! BEGIN; INSERT ...; PREPARE TRANSACTION 'gid2'; ROLLBACK PREPARED 'gid2';
//! BEGIN; INSERT 1501 rows; PREPARE TRANSACTION 'gid3'; COMMIT PREPARED 'gid3'; -- streamed
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cdc_core::pgoutput::*;
use cdc_core::{Change, Lsn, TxnAssembler, TxnEvent, TxnKind};

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0);
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const BEGIN: &str = "420000000001542f78000304679bb27e16000002d9";
const TYPE_MOOD: &str = "59000040017075626c6963006d6f6f6400";
const RELATION_USERS: &str = "52000040077075626c6963007573657273006400040169640000000017ffffffff006e616d650000000019ffffffff006d0000004001ffffffff006269670000000019ffffffff";
const INSERT_2: &str = "49000040074e00047400000001326e7400000003736164740000000162";
const COMMIT: &str = "43000000000001542f780000000001542fa8000304679bb27e16";
const UPDATE_KEY: &str =
    "55000040074b00047400000001326e6e6e4e0004740000000231306e7400000003736164740000000162";
const DELETE_KEY: &str = "44000040074b0004740000000231306e6e6e";
const RELATION_FULL: &str =
    "520000400e7075626c69630066756c6c5f7269006600020169640000000017ffffffff01760000000019ffffffff";
const UPDATE_OLD: &str = "550000400e4f00027400000001317400000001614e0002740000000131740000000162";
const DELETE_OLD: &str = "440000400e4f0002740000000131740000000162";
const TRUNCATE: &str = "5400000001030000400e";
const MESSAGE_NONTX: &str = "4d000000000001543d006e6f6e7478000000000568656c6c6f";
const MESSAGE_TX: &str = "4d010000000001543d387478000000000200ff";
const STREAM_START_FIRST: &str = "53000002e201";
const STREAM_TYPE: &str = "59000002e2000040017075626c6963006d6f6f6400";
const STREAM_RELATION: &str = "52000002e2000040077075626c6963007573657273006400040169640000000017ffffffff006e616d650000000019ffffffff006d0000004001ffffffff006269670000000019ffffffff";
const STREAM_INSERT_TOP: &str =
    "49000002e2000040074e0004740000000331303074000000046e31303074000000026f6b740000000176";
const STREAM_INSERT_SUB: &str =
    "49000002e3000040074e000474000000043230303074000000077375623230303074000000026f6b740000000176";
const STREAM_STOP: &str = "45";
const STREAM_START_NEXT: &str = "53000002e200";
const STREAM_ABORT_SUB: &str = "41000002e2000002e3";
const STREAM_COMMIT: &str = "63000002e200000000000159d450000000000159d488000304679bb29bbd";
const STREAM_ABORT_TOP: &str = "41000002e5000002e5";
const BEGIN_PREPARE: &str = "6200000000015d00f000000000015d01e8000304679bb2a608000002e66769643100";
const PREPARE: &str = "500000000000015d00f000000000015d01e8000304679bb2a608000002e66769643100";
const COMMIT_PREPARED: &str =
    "4b0000000000015d01e800000000015d0220000304679bb2aca0000002e66769643100";
const ROLLBACK_PREPARED: &str =
    "720000000000015d03a000000000015d03d8000304679bb2adab000304679bb2ae62000002e76769643200";
const STREAM_PREPARE: &str =
    "70000000000001602f780000000001603070000304679bb2b63b000002e86769643300";
/// `binary 'true'`: the int4 2 in binary, NULL, the enum and text as bytes.
const INSERT_BINARY: &str = "49000040074e00046200000004000000026e6200000003736164620000000162";
/// `UPDATE users SET name = 'big2'` on a row whose `big` value is TOASTed.
const UPDATE_UNCHANGED_TOAST: &str =
    "55000040074e00047400000005323030303074000000046269673274000000026f6b75";

fn v3() -> ParseContext {
    ParseContext::new(ProtocolVersion::V3)
}

fn parse(h: &str, ctx: ParseContext) -> LogicalMessage<'static> {
    let bytes = hex(h);
    let msg = LogicalMessage::parse(&bytes, ctx)
        .unwrap_or_else(|e| panic!("{e}: {h}"))
        .into_owned();
    // What we parse, our encoder writes back byte for byte.
    assert_eq!(cdc_core::encode::message_bytes(&msg), bytes, "{h}");
    msg
}

fn texts(t: &TupleData<'_>) -> Vec<Option<String>> {
    t.iter()
        .map(|v| v.bytes().map(|b| String::from_utf8_lossy(b).into_owned()))
        .collect()
}

#[test]
fn plain_transaction_messages() {
    let LogicalMessage::Begin(b) = parse(BEGIN, v3()) else {
        panic!()
    };
    assert_eq!(
        (b.xid, b.final_lsn.to_string()),
        (0x2d9, "0/1542F78".to_owned())
    );
    let LogicalMessage::Type(t) = parse(TYPE_MOOD, v3()) else {
        panic!()
    };
    assert_eq!((t.oid, &*t.namespace, &*t.name), (16385, "public", "mood"));
    let LogicalMessage::Relation(r) = parse(RELATION_USERS, v3()) else {
        panic!()
    };
    assert_eq!(
        (r.oid, &*r.name, r.replica_identity),
        (16391, "users", ReplicaIdentity::Default)
    );
    let cols: Vec<_> = r
        .columns
        .iter()
        .map(|c| (&*c.name, c.is_key(), c.type_oid, c.type_modifier))
        .collect();
    assert_eq!(
        cols,
        [
            ("id", true, 23, -1),
            ("name", false, 25, -1),
            ("m", false, 16385, -1),
            ("big", false, 25, -1)
        ]
    );
    let LogicalMessage::Insert(i) = parse(INSERT_2, v3()) else {
        panic!()
    };
    assert_eq!(
        texts(&i.new),
        [Some("2".into()), None, Some("sad".into()), Some("b".into())]
    );
    let LogicalMessage::Commit(c) = parse(COMMIT, v3()) else {
        panic!()
    };
    assert_eq!(c.commit_lsn, b.final_lsn);
    assert_eq!(c.commit_time, b.commit_time);
    assert!(c.end_lsn > c.commit_lsn);
}

#[test]
fn updates_and_deletes_with_old_tuples() {
    let LogicalMessage::Update(u) = parse(UPDATE_KEY, v3()) else {
        panic!()
    };
    let Some(OldTuple::Key(old)) = &u.old else {
        panic!("key change sends the old key")
    };
    assert_eq!(texts(old), [Some("2".into()), None, None, None]);
    assert_eq!(texts(&u.new)[0].as_deref(), Some("10"));

    let LogicalMessage::Delete(d) = parse(DELETE_KEY, v3()) else {
        panic!()
    };
    assert!(matches!(&d.old, OldTuple::Key(t) if texts(t)[0].as_deref() == Some("10")));

    let LogicalMessage::Relation(r) = parse(RELATION_FULL, v3()) else {
        panic!()
    };
    assert_eq!(r.replica_identity, ReplicaIdentity::Full);
    assert!(r.columns.iter().all(Column::is_key));
    let LogicalMessage::Update(u) = parse(UPDATE_OLD, v3()) else {
        panic!()
    };
    assert!(
        matches!(&u.old, Some(OldTuple::Full(t)) if texts(t) == [Some("1".into()), Some("a".into())])
    );
    let LogicalMessage::Delete(d) = parse(DELETE_OLD, v3()) else {
        panic!()
    };
    assert!(matches!(d.old, OldTuple::Full(_)));

    let LogicalMessage::Update(u) = parse(
        UPDATE_UNCHANGED_TOAST,
        ParseContext::new(ProtocolVersion::V1),
    ) else {
        panic!()
    };
    assert_eq!(u.new.get(3), Some(TupleValue::UnchangedToast));
    assert_eq!(u.new.get(1), Some(TupleValue::Text(b"big2")));
}

#[test]
fn truncate_messages_and_binary_columns() {
    let LogicalMessage::Truncate(t) = parse(TRUNCATE, v3()) else {
        panic!()
    };
    assert_eq!(t.relations, [16398]);
    assert!(t.cascade() && t.restart_identity());

    let LogicalMessage::Message(m) = parse(MESSAGE_NONTX, v3()) else {
        panic!()
    };
    assert_eq!(
        (m.transactional, &*m.prefix, &*m.content),
        (false, "nontx", &b"hello"[..])
    );
    let LogicalMessage::Message(m) = parse(MESSAGE_TX, v3()) else {
        panic!()
    };
    assert_eq!(
        (m.transactional, &*m.prefix, &*m.content),
        (true, "tx", &[0x00, 0xff][..])
    );

    let LogicalMessage::Insert(i) = parse(INSERT_BINARY, v3()) else {
        panic!()
    };
    let vals: Vec<_> = i.new.iter().collect();
    assert_eq!(
        vals,
        [
            TupleValue::Binary(&[0, 0, 0, 2]),
            TupleValue::Null,
            TupleValue::Binary(b"sad"),
            TupleValue::Binary(b"b"),
        ]
    );
}

#[test]
fn streamed_transaction_with_aborted_subtransaction() {
    let mut d = Decoder::new(ProtocolVersion::V3);
    let mut asm = TxnAssembler::new();
    let mut events = Vec::new();
    for h in [
        STREAM_START_FIRST,
        STREAM_TYPE,
        STREAM_RELATION,
        STREAM_INSERT_TOP,
        STREAM_INSERT_SUB,
        STREAM_STOP,
        STREAM_START_NEXT,
        STREAM_STOP,
        STREAM_ABORT_SUB,
        STREAM_COMMIT,
    ] {
        let bytes = hex(h);
        let msg = d.decode(&bytes).unwrap_or_else(|e| panic!("{e}: {h}"));
        match &msg {
            LogicalMessage::Insert(i) => assert!(i.xid.is_some(), "streamed changes carry an xid"),
            LogicalMessage::StreamAbort(a) => assert_eq!((a.xid, a.subxid), (0x2e2, 0x2e3)),
            _ => {}
        }
        if let Some(e) = asm.handle_message(msg).unwrap() {
            events.push(e.into_owned());
        }
        while let Some(e) = asm.poll_event() {
            events.push(e);
        }
    }
    assert!(matches!(
        events[0],
        TxnEvent::Begin(b) if b.kind == TxnKind::Streamed && b.xid == 0x2e2
    ));
    // The subtransaction's row is gone; the top-level row remains.
    let ids: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            TxnEvent::Change(Change::Insert(_, i)) => texts(&i.new)[0].clone(),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["100"]);
    assert!(
        matches!(events.last(), Some(TxnEvent::Commit(c)) if c.commit_lsn == Lsn::from_u64(0x159D450))
    );
}

#[test]
fn stream_abort_and_two_phase_messages() {
    let LogicalMessage::StreamAbort(a) = parse(STREAM_ABORT_TOP, v3()) else {
        panic!()
    };
    assert_eq!((a.xid, a.subxid, a.abort_info), (0x2e5, 0x2e5, None));

    let LogicalMessage::BeginPrepare(bp) = parse(BEGIN_PREPARE, v3()) else {
        panic!()
    };
    let LogicalMessage::Prepare(p) = parse(PREPARE, v3()) else {
        panic!()
    };
    assert_eq!((bp.xid, &*bp.gid), (p.xid, "gid1"));
    assert_eq!((bp.prepare_lsn, bp.end_lsn), (p.prepare_lsn, p.end_lsn));
    let LogicalMessage::CommitPrepared(cp) = parse(COMMIT_PREPARED, v3()) else {
        panic!()
    };
    assert_eq!((cp.xid, &*cp.gid), (p.xid, "gid1"));
    assert_eq!(cp.commit_lsn, p.end_lsn);
    let LogicalMessage::RollbackPrepared(rp) = parse(ROLLBACK_PREPARED, v3()) else {
        panic!()
    };
    assert_eq!(&*rp.gid, "gid2");
    assert!(rp.rollback_time > rp.prepare_time);
    let LogicalMessage::StreamPrepare(sp) = parse(STREAM_PREPARE, v3()) else {
        panic!()
    };
    assert_eq!((sp.xid, &*sp.gid), (0x2e8, "gid3"));

    // The same two-phase flow through the assembler, under every version (a
    // slot created with two_phase sends these bytes whatever version was
    // asked for): held until Commit Prepared, released then at its LSN.
    for v in ProtocolVersion::ALL {
        let ctx = ParseContext::new(v);
        let mut asm = TxnAssembler::new();
        asm.handle_message(parse(RELATION_USERS, ctx)).unwrap();
        // The Insert captured between Begin Prepare and Prepare.
        let insert = "49000040074e000474000000043730303074000000017074000000026f6b740000000170";
        let mut kinds = Vec::new();
        for h in [BEGIN_PREPARE, insert, PREPARE, COMMIT_PREPARED] {
            if let Some(e) = asm.handle_message(parse(h, ctx)).unwrap() {
                kinds.push(format!("{e:?}"));
            }
            while let Some(e) = asm.poll_event() {
                kinds.push(match e {
                    TxnEvent::Begin(b) => format!("begin {:?} at {}", b.kind, b.final_lsn),
                    TxnEvent::Change(_) => "change".into(),
                    TxnEvent::Commit(c) => format!("commit at {}", c.commit_lsn),
                    other => format!("{other:?}"),
                });
            }
        }
        let at = cp.commit_lsn;
        assert_eq!(
            kinds,
            [
                format!("begin Prepared at {at}"),
                "change".into(),
                format!("commit at {at}")
            ],
            "{v:?}"
        );
        assert_eq!(asm.oldest_undecided_prepare(), None);
    }
}
