//! Every pgoutput message, written byte by byte from the PostgreSQL docs
//! ("Logical Replication Message Formats"), not with the crate's encoder.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;

use cdc_core::pgoutput::*;
use cdc_core::{DecodeError, Lsn, PgTimestamp};

/// A byte builder that spells out the docs' field types.
#[derive(Default)]
struct B(Vec<u8>);

impl B {
    fn byte(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn int16(mut self, v: i16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn int32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn int64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn string(mut self, s: &str) -> Self {
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
}

const LSN1: i64 = 0x0000_0001_0000_00A0;
const LSN2: i64 = 0x0000_0001_0000_00F0;
const TS1: i64 = 780_000_000_123_456;
const TS2: i64 = 780_000_001_000_000;

fn lsn(v: i64) -> Lsn {
    Lsn::from_u64(v as u64)
}
fn ts(v: i64) -> PgTimestamp {
    PgTimestamp::from_pg_micros(v)
}

fn ctx(v: u32) -> ParseContext {
    ParseContext::new(ProtocolVersion::new(v).unwrap())
}

fn parse(buf: &[u8], c: ParseContext) -> LogicalMessage<'_> {
    LogicalMessage::parse(buf, c).unwrap_or_else(|e| panic!("{e} in {buf:?}"))
}

#[test]
fn begin() {
    let b = B::default().byte(b'B').int64(LSN1).int64(TS1).int32(77).0;
    for v in 1..=4 {
        assert_eq!(
            parse(&b, ctx(v)),
            LogicalMessage::Begin(Begin {
                final_lsn: lsn(LSN1),
                commit_time: ts(TS1),
                xid: 77
            })
        );
    }
}

#[test]
fn logical_decoding_message() {
    let b = B::default()
        .byte(b'M')
        .byte(1)
        .int64(LSN1)
        .string("my-prefix")
        .int32(3)
        .bytes(b"a\0b")
        .0;
    let LogicalMessage::Message(m) = parse(&b, ctx(1)) else {
        panic!()
    };
    assert_eq!(m.xid, None);
    assert!(m.transactional);
    assert_eq!(m.lsn, lsn(LSN1));
    assert_eq!(m.prefix, "my-prefix");
    assert_eq!(&*m.content, b"a\0b");
    assert!(
        matches!(m.prefix, Cow::Borrowed(_)),
        "borrows from the input"
    );

    // Inside a stream block (v2+) it carries the xid first.
    let b = B::default()
        .byte(b'M')
        .int32(900)
        .byte(0)
        .int64(LSN1)
        .string("p")
        .int32(0)
        .0;
    let LogicalMessage::Message(m) = parse(&b, ctx(2).with_in_stream(true)) else {
        panic!()
    };
    assert_eq!((m.xid, m.transactional), (Some(900), false));
    assert!(m.content.is_empty());
}

#[test]
fn commit() {
    let b = B::default()
        .byte(b'C')
        .byte(0)
        .int64(LSN1)
        .int64(LSN2)
        .int64(TS1)
        .0;
    assert_eq!(
        parse(&b, ctx(1)),
        LogicalMessage::Commit(Commit {
            flags: 0,
            commit_lsn: lsn(LSN1),
            end_lsn: lsn(LSN2),
            commit_time: ts(TS1)
        })
    );
}

#[test]
fn origin() {
    let b = B::default().byte(b'O').int64(LSN1).string("node_a").0;
    assert_eq!(
        parse(&b, ctx(1)),
        LogicalMessage::Origin(Origin {
            commit_lsn: lsn(LSN1),
            name: "node_a".into()
        })
    );
}

fn relation_body(b: B) -> B {
    b.int32(16384)
        .string("public")
        .string("users")
        .byte(b'd')
        .int16(2)
        .byte(1)
        .string("id")
        .int32(23)
        .int32(-1)
        .byte(0)
        .string("name")
        .int32(1043)
        .int32(68)
}

#[test]
fn relation() {
    let expected = |xid| {
        LogicalMessage::Relation(Relation {
            xid,
            oid: 16384,
            namespace: "public".into(),
            name: "users".into(),
            replica_identity: ReplicaIdentity::Default,
            columns: vec![
                Column {
                    flags: 1,
                    name: "id".into(),
                    type_oid: 23,
                    type_modifier: -1,
                },
                Column {
                    flags: 0,
                    name: "name".into(),
                    type_oid: 1043,
                    type_modifier: 68,
                },
            ],
        })
    };
    let b = relation_body(B::default().byte(b'R')).0;
    assert_eq!(parse(&b, ctx(1)), expected(None));
    let b = relation_body(B::default().byte(b'R').int32(5)).0;
    assert_eq!(parse(&b, ctx(4).with_in_stream(true)), expected(Some(5)));
    let LogicalMessage::Relation(r) = parse(&b, ctx(4).with_in_stream(true)) else {
        panic!()
    };
    assert!(r.columns[0].is_key() && !r.columns[1].is_key());
}

#[test]
fn type_message() {
    let b = B::default()
        .byte(b'Y')
        .int32(90_000)
        .string("public")
        .string("mood")
        .0;
    assert_eq!(
        parse(&b, ctx(1)),
        LogicalMessage::Type(Type {
            xid: None,
            oid: 90_000,
            namespace: "public".into(),
            name: "mood".into()
        })
    );
}

/// A TupleData with one column of each kind.
fn tuple_bytes(b: B) -> B {
    b.int16(4)
        .byte(b'n')
        .byte(b'u')
        .byte(b't')
        .int32(5)
        .bytes(b"hello")
        .byte(b'b')
        .int32(4)
        .bytes(&[0, 0, 0, 42])
}

fn assert_tuple(t: &TupleData<'_>) {
    assert_eq!(t.len(), 4);
    let values: Vec<_> = t.iter().collect();
    assert_eq!(
        values,
        [
            TupleValue::Null,
            TupleValue::UnchangedToast,
            TupleValue::Text(b"hello"),
            TupleValue::Binary(&[0, 0, 0, 42]),
        ]
    );
    assert_eq!(t.get(2), Some(TupleValue::Text(b"hello")));
    assert_eq!(t.get(4), None);
    assert_eq!(t.iter().len(), 4);
}

#[test]
fn insert() {
    let b = tuple_bytes(B::default().byte(b'I').int32(16384).byte(b'N')).0;
    let LogicalMessage::Insert(m) = parse(&b, ctx(1)) else {
        panic!()
    };
    assert_eq!((m.xid, m.relation), (None, 16384));
    assert_tuple(&m.new);

    let b = tuple_bytes(B::default().byte(b'I').int32(901).int32(16384).byte(b'N')).0;
    let LogicalMessage::Insert(m) = parse(&b, ctx(2).with_in_stream(true)) else {
        panic!()
    };
    assert_eq!((m.xid, m.relation), (Some(901), 16384));
    assert_tuple(&m.new);
    // The same bytes outside a stream block are a different (here: invalid) message.
    assert!(LogicalMessage::parse(&b, ctx(2)).is_err());
}

#[test]
fn update_with_and_without_old_tuple() {
    let plain = tuple_bytes(B::default().byte(b'U').int32(7).byte(b'N')).0;
    let LogicalMessage::Update(m) = parse(&plain, ctx(1)) else {
        panic!()
    };
    assert!(m.old.is_none());
    assert_tuple(&m.new);

    for (marker, is_key) in [(b'K', true), (b'O', false)] {
        let b = B::default()
            .byte(b'U')
            .int32(7)
            .byte(marker)
            .int16(1)
            .byte(b't')
            .int32(1)
            .bytes(b"1");
        let b = tuple_bytes(b.byte(b'N')).0;
        let LogicalMessage::Update(m) = parse(&b, ctx(3)) else {
            panic!()
        };
        let old = m.old.unwrap();
        assert_eq!(matches!(old, OldTuple::Key(_)), is_key);
        assert_eq!(
            old.tuple().iter().collect::<Vec<_>>(),
            [TupleValue::Text(b"1")]
        );
        assert_tuple(&m.new);
    }
}

#[test]
fn delete() {
    for (marker, is_key) in [(b'K', true), (b'O', false)] {
        let b = tuple_bytes(B::default().byte(b'D').int32(8).byte(marker)).0;
        let LogicalMessage::Delete(m) = parse(&b, ctx(1)) else {
            panic!()
        };
        assert_eq!(m.relation, 8);
        assert_eq!(matches!(m.old, OldTuple::Key(_)), is_key);
        assert_tuple(m.old.tuple());
    }
    let b = tuple_bytes(B::default().byte(b'D').int32(8).byte(b'N')).0;
    assert_eq!(
        LogicalMessage::parse(&b, ctx(1)),
        Err(DecodeError::InvalidTupleMarker {
            marker: b'N',
            offset: 5
        })
    );
}

#[test]
fn truncate() {
    let b = B::default()
        .byte(b'T')
        .int32(2)
        .byte(3)
        .int32(16384)
        .int32(16390)
        .0;
    let LogicalMessage::Truncate(t) = parse(&b, ctx(1)) else {
        panic!()
    };
    assert_eq!(t.relations, [16384, 16390]);
    assert!(t.cascade() && t.restart_identity());
    let b = B::default()
        .byte(b'T')
        .int32(55)
        .int32(1)
        .byte(2)
        .int32(1)
        .0;
    let LogicalMessage::Truncate(t) = parse(&b, ctx(2).with_in_stream(true)) else {
        panic!()
    };
    assert_eq!((t.xid, t.relations.as_slice()), (Some(55), &[1][..]));
    assert!(!t.cascade() && t.restart_identity());
}

#[test]
fn stream_start_stop_commit() {
    let b = B::default().byte(b'S').int32(1234).byte(1).0;
    assert_eq!(
        parse(&b, ctx(2)),
        LogicalMessage::StreamStart(StreamStart {
            xid: 1234,
            first_segment: true
        })
    );
    assert_eq!(parse(b"E", ctx(2)), LogicalMessage::StreamStop);
    let b = B::default()
        .byte(b'c')
        .int32(1234)
        .byte(0)
        .int64(LSN1)
        .int64(LSN2)
        .int64(TS1)
        .0;
    assert_eq!(
        parse(&b, ctx(2)),
        LogicalMessage::StreamCommit(StreamCommit {
            xid: 1234,
            flags: 0,
            commit_lsn: lsn(LSN1),
            end_lsn: lsn(LSN2),
            commit_time: ts(TS1)
        })
    );
}

#[test]
fn stream_abort_by_version_and_parallel_mode() {
    let short = B::default().byte(b'A').int32(1234).int32(1240).0;
    let long = B::default()
        .byte(b'A')
        .int32(1234)
        .int32(1240)
        .int64(LSN1)
        .int64(TS2)
        .0;
    let plain = LogicalMessage::StreamAbort(StreamAbort {
        xid: 1234,
        subxid: 1240,
        abort_info: None,
    });
    for v in 2..=4 {
        assert_eq!(parse(&short, ctx(v)), plain);
        assert!(matches!(
            LogicalMessage::parse(&long, ctx(v)),
            Err(DecodeError::TrailingBytes {
                offset: 9,
                remaining: 16
            })
        ));
    }
    // With `streaming 'parallel'` (v4) the abort LSN and time follow.
    let parallel = ctx(4).with_parallel_streaming(true);
    assert_eq!(
        parse(&long, parallel),
        LogicalMessage::StreamAbort(StreamAbort {
            xid: 1234,
            subxid: 1240,
            abort_info: Some(StreamAbortInfo {
                abort_lsn: lsn(LSN1),
                abort_time: ts(TS2)
            })
        })
    );
    assert!(matches!(
        LogicalMessage::parse(&short, parallel),
        Err(DecodeError::UnexpectedEnd {
            offset: 9,
            needed: 8
        })
    ));
    // Parallel mode does not exist below v4: the flag is ignored.
    assert_eq!(parse(&short, ctx(3).with_parallel_streaming(true)), plain);
}

/// A slot created with `two_phase = true` sends these under every protocol
/// version (PostgreSQL 15 does so even for `proto_version` 1 and 2); Stream
/// Prepare only where streaming exists.
#[test]
fn two_phase_messages_under_every_version() {
    for v in 1..=4 {
        two_phase_messages(v);
    }
}

fn two_phase_messages(v: u32) {
    let b = B::default()
        .byte(b'b')
        .int64(LSN1)
        .int64(LSN2)
        .int64(TS1)
        .int32(600)
        .string("gid-1")
        .0;
    assert_eq!(
        parse(&b, ctx(v)),
        LogicalMessage::BeginPrepare(BeginPrepare {
            prepare_lsn: lsn(LSN1),
            end_lsn: lsn(LSN2),
            prepare_time: ts(TS1),
            xid: 600,
            gid: "gid-1".into()
        })
    );
    let prepare = Prepare {
        flags: 0,
        prepare_lsn: lsn(LSN1),
        end_lsn: lsn(LSN2),
        prepare_time: ts(TS1),
        xid: 600,
        gid: "gid-1".into(),
    };
    for (tag, want) in [
        (b'P', LogicalMessage::Prepare(prepare.clone())),
        (b'p', LogicalMessage::StreamPrepare(prepare.clone())),
    ] {
        let b = B::default()
            .byte(tag)
            .byte(0)
            .int64(LSN1)
            .int64(LSN2)
            .int64(TS1)
            .int32(600)
            .string("gid-1")
            .0;
        if tag == b'p' && v < 2 {
            assert!(matches!(
                LogicalMessage::parse(&b, ctx(v)),
                Err(DecodeError::NotInProtocolVersion { tag: b'p', .. })
            ));
        } else {
            assert_eq!(parse(&b, ctx(v)), want, "version {v}");
        }
    }
    let b = B::default()
        .byte(b'K')
        .byte(0)
        .int64(LSN2)
        .int64(LSN2 + 8)
        .int64(TS2)
        .int32(600)
        .string("gid-1")
        .0;
    assert_eq!(
        parse(&b, ctx(v)),
        LogicalMessage::CommitPrepared(CommitPrepared {
            flags: 0,
            commit_lsn: lsn(LSN2),
            end_lsn: lsn(LSN2 + 8),
            commit_time: ts(TS2),
            xid: 600,
            gid: "gid-1".into()
        })
    );
    let b = B::default()
        .byte(b'r')
        .byte(0)
        .int64(LSN2)
        .int64(LSN2 + 8)
        .int64(TS1)
        .int64(TS2)
        .int32(600)
        .string("gid-1")
        .0;
    assert_eq!(
        parse(&b, ctx(v)),
        LogicalMessage::RollbackPrepared(RollbackPrepared {
            flags: 0,
            prepare_end_lsn: lsn(LSN2),
            rollback_end_lsn: lsn(LSN2 + 8),
            prepare_time: ts(TS1),
            rollback_time: ts(TS2),
            xid: 600,
            gid: "gid-1".into()
        })
    );
}

#[test]
fn messages_are_rejected_before_their_version() {
    let cases: [(&[u8], u32); 3] = [(b"E", 2), (b"S\0\0\0\x01\x01", 2), (b"p", 2)];
    for (buf, since) in cases {
        for v in 1..since {
            assert_eq!(
                LogicalMessage::parse(buf, ctx(v)),
                Err(DecodeError::NotInProtocolVersion {
                    tag: buf[0],
                    version: v,
                    offset: 0
                })
            );
        }
    }
}

#[test]
fn malformed_input() {
    assert_eq!(
        LogicalMessage::parse(b"", ctx(1)),
        Err(DecodeError::UnexpectedEnd {
            offset: 0,
            needed: 1
        })
    );
    assert_eq!(
        LogicalMessage::parse(b"Z", ctx(4)),
        Err(DecodeError::UnknownTag {
            tag: b'Z',
            offset: 0
        })
    );
    // Bad column kind.
    let b = B::default()
        .byte(b'I')
        .int32(1)
        .byte(b'N')
        .int16(1)
        .byte(b'x')
        .0;
    assert_eq!(
        LogicalMessage::parse(&b, ctx(1)),
        Err(DecodeError::InvalidColumnKind {
            kind: b'x',
            offset: 8
        })
    );
    // Negative column length and column count.
    let b = B::default()
        .byte(b'I')
        .int32(1)
        .byte(b'N')
        .int16(1)
        .byte(b't')
        .int32(-1)
        .0;
    assert_eq!(
        LogicalMessage::parse(&b, ctx(1)),
        Err(DecodeError::NegativeLength {
            value: -1,
            offset: 9
        })
    );
    let b = B::default().byte(b'I').int32(1).byte(b'N').int16(-2).0;
    assert_eq!(
        LogicalMessage::parse(&b, ctx(1)),
        Err(DecodeError::NegativeLength {
            value: -2,
            offset: 6
        })
    );
    // A huge column length is an unexpected end, not an allocation.
    let b = B::default()
        .byte(b'I')
        .int32(1)
        .byte(b'N')
        .int16(1)
        .byte(b't')
        .int32(i32::MAX)
        .0;
    assert_eq!(
        LogicalMessage::parse(&b, ctx(1)),
        Err(DecodeError::UnexpectedEnd {
            offset: 13,
            needed: i32::MAX as usize
        })
    );
    // Invalid UTF-8 and missing NUL in strings.
    let b = B::default().byte(b'O').int64(1).bytes(b"\xff\0").0;
    assert_eq!(
        LogicalMessage::parse(&b, ctx(1)),
        Err(DecodeError::InvalidUtf8 { offset: 9 })
    );
    let b = B::default().byte(b'O').int64(1).bytes(b"abc").0;
    assert_eq!(
        LogicalMessage::parse(&b, ctx(1)),
        Err(DecodeError::UnexpectedEnd {
            offset: 9,
            needed: 1
        })
    );
    // Trailing bytes.
    let b = B::default().byte(b'B').int64(1).int64(2).int32(3).byte(0).0;
    assert_eq!(
        LogicalMessage::parse(&b, ctx(1)),
        Err(DecodeError::TrailingBytes {
            offset: 21,
            remaining: 1
        })
    );
    // A Truncate claiming a billion relations fails without reserving memory for them.
    let b = B::default()
        .byte(b'T')
        .int32(1_000_000_000)
        .byte(0)
        .int32(1)
        .0;
    assert!(matches!(
        LogicalMessage::parse(&b, ctx(1)),
        Err(DecodeError::UnexpectedEnd { offset: 10, .. })
    ));
}

#[test]
fn decoder_tracks_stream_blocks() {
    let mut d = Decoder::new(ProtocolVersion::V2);
    let insert_streamed = tuple_bytes(B::default().byte(b'I').int32(42).int32(7).byte(b'N')).0;
    let insert_plain = tuple_bytes(B::default().byte(b'I').int32(7).byte(b'N')).0;
    assert!(!d.in_stream());
    assert!(matches!(
        d.decode(&insert_plain).unwrap(),
        LogicalMessage::Insert(Insert { xid: None, .. })
    ));
    d.decode(&B::default().byte(b'S').int32(42).byte(1).0)
        .unwrap();
    assert!(d.in_stream());
    assert!(matches!(
        d.decode(&insert_streamed).unwrap(),
        LogicalMessage::Insert(Insert {
            xid: Some(42),
            relation: 7,
            ..
        })
    ));
    // A failed parse leaves the state alone.
    assert!(d.decode(b"E\0").is_err());
    assert!(d.in_stream());
    d.decode(b"E").unwrap();
    assert!(!d.in_stream());
    assert!(matches!(
        d.decode(&insert_plain).unwrap(),
        LogicalMessage::Insert(Insert { xid: None, .. })
    ));
}

#[test]
fn owned_messages_outlive_the_buffer() {
    let owned: OwnedLogicalMessage = {
        let b = tuple_bytes(B::default().byte(b'I').int32(3).byte(b'N')).0;
        parse(&b, ctx(1)).into_owned()
    };
    let LogicalMessage::Insert(m) = &owned else {
        panic!()
    };
    assert_tuple(&m.new);
}

#[test]
fn protocol_version_is_checked() {
    assert!(ProtocolVersion::new(0).is_err());
    assert!(ProtocolVersion::new(5).is_err());
    assert_eq!(ProtocolVersion::new(3).map(ProtocolVersion::get), Ok(3));
    assert_eq!(ProtocolVersion::try_from(4), Ok(ProtocolVersion::V4));
}
