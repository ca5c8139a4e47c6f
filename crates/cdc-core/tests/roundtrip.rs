//! Property tests: encoder -> decoder round trips for every message type in
//! every protocol version (and stream / parallel context) where it exists,
//! every truncation is `UnexpectedEnd`, and arbitrary bytes never panic.
//!
//! Failing cases print their seed; replay with `PROPTEST_SEED` as proptest
//! documents, or add it to `proptest-regressions/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;

use cdc_core::encode::message_bytes;
use cdc_core::pgoutput::*;
use cdc_core::{DecodeError, Lsn, PgTimestamp};
use proptest::collection::vec;
use proptest::prelude::*;

fn arb_lsn() -> impl Strategy<Value = Lsn> {
    any::<u64>().prop_map(Lsn::from_u64)
}

fn arb_ts() -> impl Strategy<Value = PgTimestamp> {
    any::<i64>().prop_map(PgTimestamp::from_pg_micros)
}

fn arb_str() -> impl Strategy<Value = Cow<'static, str>> {
    "[a-zA-Z0-9_ .äß€-]{0,12}".prop_map(Cow::Owned)
}

fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..24)
}

fn arb_tuple() -> impl Strategy<Value = TupleData<'static>> {
    vec(
        prop_oneof![
            Just(None),
            Just(Some(None)),
            arb_bytes().prop_map(|b| Some(Some((true, b)))),
            arb_bytes().prop_map(|b| Some(Some((false, b)))),
        ],
        0..12,
    )
    .prop_map(|cols| {
        let values: Vec<TupleValue<'_>> = cols
            .iter()
            .map(|c| match c {
                None => TupleValue::Null,
                Some(None) => TupleValue::UnchangedToast,
                Some(Some((true, b))) => TupleValue::Text(b),
                Some(Some((false, b))) => TupleValue::Binary(b),
            })
            .collect();
        TupleData::from_values(&values).unwrap()
    })
}

fn arb_old() -> impl Strategy<Value = OldTuple<'static>> {
    prop_oneof![
        arb_tuple().prop_map(OldTuple::Key),
        arb_tuple().prop_map(OldTuple::Full)
    ]
}

fn arb_ri() -> impl Strategy<Value = ReplicaIdentity> {
    prop_oneof![
        Just(ReplicaIdentity::Default),
        Just(ReplicaIdentity::Nothing),
        Just(ReplicaIdentity::Full),
        Just(ReplicaIdentity::Index),
    ]
}

fn arb_prepare() -> impl Strategy<Value = Prepare<'static>> {
    (
        any::<u8>(),
        arb_lsn(),
        arb_lsn(),
        arb_ts(),
        any::<u32>(),
        arb_str(),
    )
        .prop_map(
            |(flags, prepare_lsn, end_lsn, prepare_time, xid, gid)| Prepare {
                flags,
                prepare_lsn,
                end_lsn,
                prepare_time,
                xid,
                gid,
            },
        )
}

/// A context: every version, inside a stream block only where streaming
/// exists, parallel streaming on or off.
fn arb_ctx() -> impl Strategy<Value = ParseContext> {
    (1u32..=4, any::<bool>(), any::<bool>()).prop_map(|(v, stream, parallel)| {
        let version = ProtocolVersion::new(v).unwrap();
        ParseContext::new(version)
            .with_in_stream(stream && version.supports_streaming())
            .with_parallel_streaming(parallel)
    })
}

/// Any message that exists in `ctx`, shaped as the server would send it there.
fn arb_message(ctx: ParseContext) -> BoxedStrategy<LogicalMessage<'static>> {
    let sx = move |x: u32| if ctx.in_stream { Some(x) } else { None };
    let mut all: Vec<BoxedStrategy<LogicalMessage<'static>>> = vec![
        (arb_lsn(), arb_ts(), any::<u32>())
            .prop_map(|(final_lsn, commit_time, xid)| {
                LogicalMessage::Begin(Begin {
                    final_lsn,
                    commit_time,
                    xid,
                })
            })
            .boxed(),
        (
            any::<u32>(),
            any::<bool>(),
            arb_lsn(),
            arb_str(),
            arb_bytes(),
        )
            .prop_map(move |(x, transactional, lsn, prefix, content)| {
                LogicalMessage::Message(LogicalDecodingMessage {
                    xid: sx(x),
                    transactional,
                    lsn,
                    prefix,
                    content: Cow::Owned(content),
                })
            })
            .boxed(),
        (any::<u8>(), arb_lsn(), arb_lsn(), arb_ts())
            .prop_map(|(flags, commit_lsn, end_lsn, commit_time)| {
                LogicalMessage::Commit(Commit {
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_time,
                })
            })
            .boxed(),
        (arb_lsn(), arb_str())
            .prop_map(|(commit_lsn, name)| LogicalMessage::Origin(Origin { commit_lsn, name }))
            .boxed(),
        (
            any::<u32>(),
            any::<u32>(),
            arb_str(),
            arb_str(),
            arb_ri(),
            vec((any::<u8>(), arb_str(), any::<u32>(), any::<i32>()), 0..6),
        )
            .prop_map(move |(x, oid, namespace, name, replica_identity, cols)| {
                LogicalMessage::Relation(Relation {
                    xid: sx(x),
                    oid,
                    namespace,
                    name,
                    replica_identity,
                    columns: cols
                        .into_iter()
                        .map(|(flags, name, type_oid, type_modifier)| Column {
                            flags,
                            name,
                            type_oid,
                            type_modifier,
                        })
                        .collect(),
                })
            })
            .boxed(),
        (any::<u32>(), any::<u32>(), arb_str(), arb_str())
            .prop_map(move |(x, oid, namespace, name)| {
                LogicalMessage::Type(Type {
                    xid: sx(x),
                    oid,
                    namespace,
                    name,
                })
            })
            .boxed(),
        (any::<u32>(), any::<u32>(), arb_tuple())
            .prop_map(move |(x, relation, new)| {
                LogicalMessage::Insert(Insert {
                    xid: sx(x),
                    relation,
                    new,
                })
            })
            .boxed(),
        (
            any::<u32>(),
            any::<u32>(),
            proptest::option::of(arb_old()),
            arb_tuple(),
        )
            .prop_map(move |(x, relation, old, new)| {
                LogicalMessage::Update(Update {
                    xid: sx(x),
                    relation,
                    old,
                    new,
                })
            })
            .boxed(),
        (any::<u32>(), any::<u32>(), arb_old())
            .prop_map(move |(x, relation, old)| {
                LogicalMessage::Delete(Delete {
                    xid: sx(x),
                    relation,
                    old,
                })
            })
            .boxed(),
        (any::<u32>(), any::<u8>(), vec(any::<u32>(), 0..8))
            .prop_map(move |(x, options, relations)| {
                LogicalMessage::Truncate(Truncate {
                    xid: sx(x),
                    options,
                    relations,
                })
            })
            .boxed(),
    ];
    if ctx.version.supports_streaming() {
        all.extend([
            (any::<u32>(), any::<bool>())
                .prop_map(|(xid, first_segment)| {
                    LogicalMessage::StreamStart(StreamStart { xid, first_segment })
                })
                .boxed(),
            Just(LogicalMessage::StreamStop).boxed(),
            (any::<u32>(), any::<u8>(), arb_lsn(), arb_lsn(), arb_ts())
                .prop_map(|(xid, flags, commit_lsn, end_lsn, commit_time)| {
                    LogicalMessage::StreamCommit(StreamCommit {
                        xid,
                        flags,
                        commit_lsn,
                        end_lsn,
                        commit_time,
                    })
                })
                .boxed(),
            (any::<u32>(), any::<u32>(), arb_lsn(), arb_ts())
                .prop_map(move |(xid, subxid, abort_lsn, abort_time)| {
                    LogicalMessage::StreamAbort(StreamAbort {
                        xid,
                        subxid,
                        abort_info: ctx.stream_abort_has_info().then_some(StreamAbortInfo {
                            abort_lsn,
                            abort_time,
                        }),
                    })
                })
                .boxed(),
        ]);
    }
    // Two-phase messages come under every version: a slot created with
    // `two_phase` sends them whatever the client asked for. Stream Prepare
    // ends a streamed transaction, so it needs streaming (v2+).
    if ctx.version.supports_streaming() {
        all.push(
            arb_prepare()
                .prop_map(LogicalMessage::StreamPrepare)
                .boxed(),
        );
    }
    {
        all.extend([
            (arb_lsn(), arb_lsn(), arb_ts(), any::<u32>(), arb_str())
                .prop_map(|(prepare_lsn, end_lsn, prepare_time, xid, gid)| {
                    LogicalMessage::BeginPrepare(BeginPrepare {
                        prepare_lsn,
                        end_lsn,
                        prepare_time,
                        xid,
                        gid,
                    })
                })
                .boxed(),
            arb_prepare().prop_map(LogicalMessage::Prepare).boxed(),
            (arb_prepare(), arb_ts())
                .prop_map(|(p, t)| {
                    LogicalMessage::CommitPrepared(CommitPrepared {
                        flags: p.flags,
                        commit_lsn: p.prepare_lsn,
                        end_lsn: p.end_lsn,
                        commit_time: t,
                        xid: p.xid,
                        gid: p.gid,
                    })
                })
                .boxed(),
            (arb_prepare(), arb_ts())
                .prop_map(|(p, t)| {
                    LogicalMessage::RollbackPrepared(RollbackPrepared {
                        flags: p.flags,
                        prepare_end_lsn: p.prepare_lsn,
                        rollback_end_lsn: p.end_lsn,
                        prepare_time: p.prepare_time,
                        rollback_time: t,
                        xid: p.xid,
                        gid: p.gid,
                    })
                })
                .boxed(),
        ]);
    }
    proptest::strategy::Union::new(all).boxed()
}

fn arb_case() -> impl Strategy<Value = (ParseContext, LogicalMessage<'static>)> {
    arb_ctx().prop_flat_map(|ctx| (Just(ctx), arb_message(ctx)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn encode_then_parse_is_identity((ctx, msg) in arb_case()) {
        let bytes = message_bytes(&msg);
        let parsed = LogicalMessage::parse(&bytes, ctx);
        prop_assert_eq!(parsed.as_ref(), Ok(&msg), "{:?}", ctx);
        // Owned copies are equal too.
        prop_assert_eq!(parsed.unwrap().into_owned(), msg);
    }

    #[test]
    fn every_truncation_is_unexpected_end((ctx, msg) in arb_case()) {
        let bytes = message_bytes(&msg);
        for cut in 0..bytes.len() {
            match LogicalMessage::parse(&bytes[..cut], ctx) {
                Err(DecodeError::UnexpectedEnd { offset, needed }) => {
                    prop_assert!(needed > 0);
                    prop_assert!(offset <= cut);
                }
                other => prop_assert!(false, "cut {} of {:?}: {:?}", cut, msg, other),
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(ctx in arb_ctx(), bytes in vec(any::<u8>(), 0..64)) {
        let _ = LogicalMessage::parse(&bytes, ctx);
    }

    #[test]
    fn mutated_messages_never_panic((ctx, msg) in arb_case(), at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = message_bytes(&msg);
        if !bytes.is_empty() {
            let i = at % bytes.len();
            bytes[i] = byte;
        }
        if let Ok(m) = LogicalMessage::parse(&bytes, ctx) {
            // Whatever parsed must iterate cleanly and survive a re-encode (not
            // byte for byte: flag bytes such as Stream Start's are read as booleans).
            for t in tuples(&m) {
                prop_assert_eq!(t.iter().count(), t.len());
            }
            let again = message_bytes(&m);
            prop_assert_eq!(LogicalMessage::parse(&again, ctx), Ok(m));
        }
    }
}

fn tuples<'m>(m: &'m LogicalMessage<'_>) -> Vec<&'m TupleData<'m>> {
    match m {
        LogicalMessage::Insert(i) => vec![&i.new],
        LogicalMessage::Update(u) => u.old.iter().map(|o| o.tuple()).chain([&u.new]).collect(),
        LogicalMessage::Delete(d) => vec![d.old.tuple()],
        _ => vec![],
    }
}

#[test]
fn every_message_type_exists_in_its_versions() {
    // The strategy above must offer each tag in exactly the versions that have it.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    for v in ProtocolVersion::ALL {
        let mut tags = std::collections::BTreeSet::new();
        for stream in [false, true] {
            let ctx = ParseContext::new(v).with_in_stream(stream && v.supports_streaming());
            let strat = arb_message(ctx);
            for _ in 0..2000 {
                tags.insert(strat.new_tree(&mut runner).unwrap().current().tag());
            }
        }
        let expected: &[u8] = match v.get() {
            1 => b"BCDIKMOPRTUYbr",
            _ => b"ABCDEIKMOPRSTUYbcpr",
        };
        let mut expected: Vec<u8> = expected.to_vec();
        expected.sort_unstable();
        assert_eq!(
            tags.into_iter().collect::<Vec<_>>(),
            expected,
            "version {}",
            v.get()
        );
    }
}
