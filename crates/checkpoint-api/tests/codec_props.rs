//! Property tests of the envelope codec: round trips of random checkpoints through random
//! block and chunk sizes, and no panic (only typed errors) on damaged or arbitrary input.
//!
//! Failing cases are printed with their inputs and persisted by proptest for replay.

use bytes::Bytes;
use cdc_core::Lsn;
use checkpoint_api::*;
use proptest::collection::vec;
use proptest::prelude::*;

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_.-]{0,20}"
}

fn blob(max: usize) -> impl Strategy<Value = Bytes> {
    prop_oneof![
        vec(any::<u8>(), 0..max).prop_map(Bytes::from),
        (any::<u8>(), 0..max * 4).prop_map(|(b, n)| Bytes::from(vec![b; n])),
    ]
}

fn table() -> impl Strategy<Value = TableRef> {
    (name(), name()).prop_map(|(schema, name)| TableRef { schema, name })
}

fn snapshot() -> impl Strategy<Value = SnapshotProgress> {
    (
        any::<u64>(),
        vec(done(), 0..4),
        proptest::option::of((
            table(),
            any::<u64>(),
            any::<u64>(),
            blob(32),
            proptest::option::of(name()),
        )),
        any::<bool>(),
        vec(
            (name(), table(), proptest::option::of(name()), any::<u64>()),
            0..3,
        ),
        vec(done(), 0..3),
    )
        .prop_map(
            |(lsn, done, cursor, complete, requests, requests_done)| SnapshotProgress {
                consistent_point: Lsn::from_u64(lsn),
                tables_done: done,
                in_progress: cursor.map(|(table, chunks_done, rows_done, cursor, request_id)| {
                    TableCursor {
                        table,
                        chunks_done,
                        rows_done,
                        cursor,
                        request_id,
                    }
                }),
                complete,
                requests: requests
                    .into_iter()
                    .map(|(id, table, filter, lsn)| SnapshotRequest {
                        id,
                        table,
                        filter,
                        lsn: Lsn::from_u64(lsn),
                    })
                    .collect(),
                requests_done,
            },
        )
}

fn done() -> impl Strategy<Value = TableDone> {
    (
        table(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        proptest::option::of(name()),
        any::<bool>(),
    )
        .prop_map(
            |(table, chunks, rows, oid, request_id, skipped)| TableDone {
                table,
                chunks,
                rows,
                oid,
                request_id,
                skipped,
            },
        )
}

fn checkpoint() -> impl Strategy<Value = Checkpoint> {
    checkpoint_with(3000)
}

/// A checkpoint whose operator states are under `max_state` bytes (or 4x that of one byte).
fn checkpoint_with(max_state: usize) -> impl Strategy<Value = Checkpoint> {
    let source = (
        any::<u64>(),
        ".{0,12}",
        vec(name(), 0..3),
        (1u32..5, any::<bool>(), any::<bool>(), 0..3u8, any::<bool>()),
        proptest::option::of(name()),
    )
        .prop_map(
            |(lsn, slot, publications, (v, binary, messages, s, two_phase), origin)| {
                SourcePosition {
                    commit_end_lsn: Lsn::from_u64(lsn),
                    slot,
                    publications,
                    protocol: ProtocolOptions {
                        proto_version: v,
                        binary,
                        messages,
                        streaming: [
                            StreamingMode::Off,
                            StreamingMode::On,
                            StreamingMode::Parallel,
                        ][s as usize],
                        two_phase,
                        origin,
                    },
                }
            },
        );
    (
        name().prop_filter_map("job name", |n| JobName::new(n).ok()),
        (1..=u64::MAX).prop_filter_map("id", CheckpointId::new),
        any::<i64>(),
        source,
        blob(40),
        vec((name(), any::<u32>(), blob(max_state)), 0..6),
        proptest::option::of(snapshot()),
        vec(blob(20), 0..3),
    )
        .prop_map(
            |(job, id, micros, source, fp, ops, snap, sinks)| Checkpoint {
                job,
                id,
                created_at: Timestamp::from_unix_micros(micros),
                source,
                config_fingerprint: fp,
                // Ids made unique by their index.
                operators: ops
                    .into_iter()
                    .enumerate()
                    .map(|(i, (kind, v, state))| OperatorState {
                        id: format!("op-{i}"),
                        kind,
                        state_version: v,
                        state,
                    })
                    .collect(),
                snapshot: snap,
                sinks: sinks
                    .into_iter()
                    .enumerate()
                    .map(|(i, position)| SinkPosition {
                        sink_id: format!("sink-{i}"),
                        position,
                    })
                    .collect(),
                // Oids made unique by their index.
                relations: (1..=u32::try_from(micros.rem_euclid(3)).unwrap_or(0))
                    .map(|oid| RelationVersion {
                        oid,
                        lsn: Lsn::from_u64(u64::from(oid) << 8),
                        schema: "public".into(),
                        name: format!("t{oid}"),
                        columns: vec![RelationColumn {
                            name: "id".into(),
                            type_oid: 23,
                            type_modifier: -1,
                            key: true,
                        }],
                    })
                    .collect(),
            },
        )
}

fn options() -> impl Strategy<Value = EncodeOptions> {
    (1u32..5000, any::<bool>()).prop_map(|(block, lz4)| {
        EncodeOptions::default()
            .with_block_size(block)
            .with_compression(if lz4 {
                Compression::Lz4Block
            } else {
                Compression::None
            })
    })
}

/// Feeds `envelope` to a decoder in pieces of the sizes in `splits` (cycled).
fn decode_split(envelope: &[u8], splits: &[usize]) -> Result<Checkpoint, DecodeError> {
    let mut dec = ChunkedDecoder::new(DecodeOptions::default());
    let mut rest = envelope;
    for &n in splits.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (piece, tail) = rest.split_at(n.min(rest.len()));
        dec.push(piece)?;
        rest = tail;
    }
    dec.finish()
}

proptest! {
    #[test]
    fn chunked_round_trip(
        cp in checkpoint(),
        opts in options(),
        chunk_size in 1usize..3000,
        splits in vec(1usize..2000, 1..8),
    ) {
        let whole = encode_with(&cp, &opts).unwrap();
        let mut enc = ChunkedEncoder::new(&cp, &opts, chunk_size).unwrap();
        let chunks: Vec<Bytes> = enc.by_ref().collect();
        let manifest = enc.manifest().unwrap();
        prop_assert!(manifest.check_chunk_lens(chunks.iter().map(|c| c.len() as u64)).is_ok());
        prop_assert_eq!(manifest.total_len, whole.len() as u64);
        let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        prop_assert_eq!(&joined[..], &whole[..]);
        prop_assert_eq!(&decode_chunks(&chunks, &DecodeOptions::default()).unwrap(), &cp);
        prop_assert_eq!(&decode_split(&whole, &splits).unwrap(), &cp);
    }

    #[test]
    fn arbitrary_bytes_are_refused(bytes in vec(any::<u8>(), 0..2000)) {
        prop_assert!(decode(&bytes).is_err());
    }

    #[test]
    fn arbitrary_bodies_behind_a_valid_header_are_refused(
        len in 0u64..5000,
        block in 1u32..600,
        compression in 0u8..2,
        body in vec(any::<u8>(), 0..6000),
    ) {
        let mut bytes = b"PGCK\x01\x00".to_vec();
        bytes.push(compression);
        bytes.push(0);
        bytes.extend_from_slice(&block.to_le_bytes());
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&body);
        prop_assert!(decode(&bytes).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn every_truncation_is_truncated(cp in checkpoint_with(300), opts in options()) {
        let env = encode_with(&cp, &opts).unwrap();
        for cut in 0..env.len() {
            prop_assert_eq!(decode(&env[..cut]), Err(DecodeError::Truncated), "cut at {}", cut);
        }
    }

    #[test]
    fn every_bit_flip_is_an_error(cp in checkpoint_with(100), opts in options()) {
        let env = encode_with(&cp, &opts).unwrap();
        let mut bad = env.to_vec();
        for bit in 0..bad.len() * 8 {
            bad[bit / 8] ^= 1 << (bit % 8);
            let result = decode_split(&bad, &[97]);
            prop_assert!(result.is_err(), "flip of bit {} decoded", bit);
            bad[bit / 8] ^= 1 << (bit % 8);
        }
    }
}
