use bytes::{BufMut, Bytes};
use cdc_core::Lsn;
use prost::Message;

use super::*;
use crate::model::{
    CheckpointId, JobName, OperatorState, ProtocolOptions, SinkPosition, SourcePosition, Timestamp,
};

fn checkpoint(states: &[Bytes]) -> Checkpoint {
    let mut cp = Checkpoint::new(
        JobName::new("job").unwrap(),
        CheckpointId::new(7).unwrap(),
        Timestamp::from_unix_micros(1_234_567),
        SourcePosition {
            commit_end_lsn: Lsn::from_u64(0x16_B374_D848),
            slot: "slot".into(),
            publications: vec!["p".into()],
            protocol: ProtocolOptions::default(),
        },
    );
    cp.operators = states
        .iter()
        .enumerate()
        .map(|(i, s)| OperatorState {
            id: format!("op{i}"),
            kind: "k".into(),
            state_version: i as u32,
            state: s.clone(),
        })
        .collect();
    cp.sinks.push(SinkPosition {
        sink_id: "sink".into(),
        position: Bytes::from_static(b"pos"),
    });
    cp
}

fn noise(len: usize) -> Bytes {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// An envelope around `payload` in stored blocks, with a correct checksum.
fn wrap(payload: &[u8], block_size: u32) -> Vec<u8> {
    let header = EnvelopeHeader {
        version: ENVELOPE_VERSION,
        compression: Compression::Lz4Block,
        block_size,
        uncompressed_len: payload.len() as u64,
    };
    let mut out = header.to_bytes().to_vec();
    for block in payload.chunks(block_size as usize) {
        out.put_u32_le(block.len() as u32);
        out.put_u32_le(block.len() as u32 | STORED_BIT);
        out.extend_from_slice(block);
    }
    let crc = crc32c::crc32c(&out);
    out.put_u32_le(crc);
    out.extend_from_slice(&TRAILER_MAGIC);
    out
}

/// Where each block is: (payload offset, block length, payload length, stored).
fn blocks(env: &[u8]) -> Vec<(usize, usize, usize, bool)> {
    let u32_at = |at: usize| u32::from_le_bytes(env[at..at + 4].try_into().unwrap());
    let total = u64::from_le_bytes(env[12..20].try_into().unwrap()) as usize;
    let (mut pos, mut done, mut out) = (HEADER_LEN, 0, Vec::new());
    while done < total {
        let len = u32_at(pos) as usize;
        let word = u32_at(pos + 4);
        let payload_len = (word & !STORED_BIT) as usize;
        out.push((pos + 8, len, payload_len, word & STORED_BIT != 0));
        pos += 8 + payload_len;
        done += len;
    }
    assert_eq!(pos + TRAILER_LEN, env.len());
    out
}

/// Recomputes the checksum of a hand-edited envelope.
fn reseal(envelope: &mut [u8]) {
    let body = envelope.len() - TRAILER_LEN;
    let crc = crc32c::crc32c(&envelope[..body]);
    envelope[body..body + 4].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn round_trips_with_both_compressions_and_many_block_sizes() {
    let cp = checkpoint(&[
        Bytes::from(vec![1u8; 100_000]),
        noise(50_000),
        Bytes::new(),
        Bytes::from_static(b"small"),
    ]);
    for compression in [Compression::Lz4Block, Compression::None] {
        for block_size in [1, 100, 4096, 65_536, DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE] {
            let opts = EncodeOptions::default()
                .with_compression(compression)
                .with_block_size(block_size);
            let env = encode_with(&cp, &opts).unwrap();
            assert_eq!(decode(&env).unwrap(), cp, "{compression:?} {block_size}");
        }
    }
}

#[test]
fn chunks_concatenate_to_the_one_shot_envelope() {
    let cp = checkpoint(&[Bytes::from(vec![3u8; 300_000]), noise(70_000)]);
    let opts = EncodeOptions::default().with_block_size(32 << 10);
    let whole = encode_with(&cp, &opts).unwrap();
    for chunk_size in [
        1,
        13,
        4096,
        65_536,
        whole.len() - 1,
        whole.len(),
        10 * whole.len(),
    ] {
        let mut enc = ChunkedEncoder::new(&cp, &opts, chunk_size).unwrap();
        assert!(enc.manifest().is_none());
        let chunks: Vec<Bytes> = enc.by_ref().collect();
        assert!(enc.next().is_none(), "fused after the end");
        let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(joined, whole[..], "chunk size {chunk_size}");
        assert!(chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c.len() == chunk_size));
        let m = enc.manifest().unwrap();
        assert_eq!(m.chunk_count, chunks.len() as u64);
        assert_eq!(m.total_len, whole.len() as u64);
        assert_eq!(m.uncompressed_len, enc.uncompressed_len());
        let trailer_crc = &whole[whole.len() - TRAILER_LEN..whole.len() - 4];
        assert_eq!(m.crc32c.to_le_bytes(), trailer_crc);
        m.check_chunk_lens(chunks.iter().map(|c| c.len() as u64))
            .unwrap();
        assert_eq!(
            decode_chunks(&chunks, &DecodeOptions::default()).unwrap(),
            cp
        );
    }
}

#[test]
fn manifest_detects_missing_extra_and_resized_chunks() {
    let m = ChunkManifest {
        total_len: 25,
        chunk_size: 10,
        chunk_count: 3,
        uncompressed_len: 0,
        crc32c: 0,
    };
    assert_eq!(m.expected_chunk_len(2), Some(5));
    assert_eq!(m.expected_chunk_len(3), None);
    assert_eq!(m.check_chunk_lens([10, 10, 5]), Ok(()));
    assert_eq!(
        m.check_chunk_lens([10, 10]),
        Err(ManifestError::ChunkCount {
            expected: 3,
            found: Some(2)
        })
    );
    assert!(matches!(
        m.check_chunk_lens([10, 10, 5, 1]),
        Err(ManifestError::ChunkCount { found: None, .. })
    ));
    assert_eq!(
        m.check_chunk_lens([10, 9, 5]),
        Err(ManifestError::ChunkLen {
            index: 1,
            expected: 10,
            found: 9
        })
    );
}

#[test]
fn compressible_state_shrinks_and_noise_is_stored_not_expanded() {
    let zeros = checkpoint(&[Bytes::from(vec![0u8; 4 << 20])]);
    assert!(encode(&zeros).unwrap().len() < 64 << 10);

    let random = checkpoint(&[noise(4 << 20)]);
    let env = encode(&random).unwrap();
    let block_count = (4 << 20) / DEFAULT_BLOCK_SIZE as usize + 2;
    let bound = (4 << 20) + 200 + HEADER_LEN + TRAILER_LEN + block_count * BLOCK_HEADER_LEN;
    assert!(env.len() <= bound, "{} > {bound}", env.len());
    let full: Vec<_> = blocks(&env)
        .into_iter()
        .filter(|b| b.1 == DEFAULT_BLOCK_SIZE as usize)
        .collect();
    assert_eq!(full.len(), 4, "4 MiB of state in 1 MiB blocks");
    assert!(full.iter().all(|b| b.3), "blocks of noise are stored raw");
}

#[test]
fn large_state_is_referenced_not_copied() {
    let big = noise(INLINE_STATE_MAX + 1);
    let small = Bytes::from_static(b"tiny");
    let cp = checkpoint(&[big.clone(), small.clone()]);
    let segments = protobuf_segments(&cp);
    assert!(segments
        .iter()
        .any(|s| s.as_ptr() == big.as_ptr() && s.len() == big.len()));
    assert!(!segments.iter().any(|s| s.as_ptr() == small.as_ptr()));
    // The segments are one valid protobuf message describing the same checkpoint.
    let joined: Vec<u8> = segments.iter().flat_map(|s| s.iter().copied()).collect();
    let msg = pb::Checkpoint::decode(&joined[..]).unwrap();
    assert_eq!(Checkpoint::try_from(msg).unwrap(), cp);
}

#[test]
fn decoded_state_is_a_slice_of_the_decompressed_message() {
    let cp = checkpoint(&[
        Bytes::from(vec![5u8; 1 << 20]),
        Bytes::from(vec![6u8; 1 << 20]),
    ]);
    let back = decode(&encode(&cp).unwrap()).unwrap();
    let (a, b) = (&back.operators[0].state, &back.operators[1].state);
    // Both payloads live in one buffer, in order, a few protobuf bytes apart.
    let gap = (b.as_ptr() as usize).wrapping_sub(a.as_ptr() as usize + a.len());
    assert!(gap < 64, "gap {gap}");
}

#[test]
fn header_errors_are_typed() {
    let env = encode(&checkpoint(&[])).unwrap().to_vec();
    let opts = DecodeOptions::default();

    let mut bad = env.clone();
    bad[0] = b'X';
    assert!(matches!(decode(&bad), Err(DecodeError::BadMagic { found }) if found == *b"XGCK"));

    let mut bad = env.clone();
    bad[4..6].copy_from_slice(&2u16.to_le_bytes());
    assert_eq!(
        decode(&bad),
        Err(DecodeError::UnsupportedVersion {
            found: 2,
            supported: 1
        })
    );

    let mut bad = env.clone();
    bad[6] = 9;
    assert_eq!(
        decode(&bad),
        Err(DecodeError::UnsupportedCompression { found: 9 })
    );

    let mut bad = env.clone();
    bad[7] = 1;
    assert!(matches!(
        decode(&bad),
        Err(DecodeError::InvalidHeader { .. })
    ));

    for size in [0, MAX_BLOCK_SIZE + 1] {
        let mut bad = env.clone();
        bad[8..12].copy_from_slice(&size.to_le_bytes());
        assert!(matches!(
            decode(&bad),
            Err(DecodeError::InvalidHeader { .. })
        ));
    }

    let len = u64::from_le_bytes(env[12..20].try_into().unwrap());
    let tight = opts.clone().with_max_uncompressed_len(len - 1);
    assert_eq!(
        decode_with(&env, &tight),
        Err(DecodeError::TooLarge {
            len,
            limit: len - 1
        })
    );
    assert!(decode_with(&env, &opts.with_max_uncompressed_len(len)).is_ok());

    let mut huge = env.clone();
    huge[12..20].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        decode(&huge),
        Err(DecodeError::TooLarge { len: u64::MAX, .. })
    ));
}

#[test]
fn too_large_is_refused_before_the_body_arrives() {
    let env = encode(&checkpoint(&[Bytes::from(vec![1u8; 10_000])])).unwrap();
    let mut dec = ChunkedDecoder::new(DecodeOptions::default().with_max_uncompressed_len(100));
    assert!(matches!(
        dec.push(&env[..HEADER_LEN]),
        Err(DecodeError::TooLarge { .. })
    ));
    assert_eq!(dec.push(&env[HEADER_LEN..]), Err(DecodeError::Failed));
    assert_eq!(dec.finish(), Err(DecodeError::Failed));
}

#[test]
fn body_and_trailer_errors_are_typed() {
    let cp = checkpoint(&[noise(5000)]);
    let env = encode_with(&cp, &EncodeOptions::default().with_block_size(1024))
        .unwrap()
        .to_vec();

    let stored = blocks(&env)
        .into_iter()
        .find(|b| b.3 && b.1 == 1024)
        .unwrap();

    // A flipped payload byte in a stored block: checksum mismatch.
    let mut bad = env.clone();
    bad[stored.0 + 100] ^= 0x01;
    assert!(matches!(
        decode(&bad),
        Err(DecodeError::ChecksumMismatch { .. })
    ));

    // A flipped checksum: the same.
    let mut bad = env.clone();
    let at = bad.len() - TRAILER_LEN;
    bad[at] ^= 0x80;
    assert!(matches!(
        decode(&bad),
        Err(DecodeError::ChecksumMismatch { .. })
    ));

    let mut bad = env.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x01;
    assert_eq!(decode(&bad), Err(DecodeError::BadTrailer));

    // A stored block whose payload length lies, or whose length is out of range.
    for (at, value) in [
        (stored.0 - 4, 1023 | STORED_BIT),
        (stored.0 - 8, 0),
        (stored.0 - 8, 1025),
    ] {
        let mut bad = env.clone();
        bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
        assert!(matches!(
            decode(&bad),
            Err(DecodeError::CorruptBlock { .. })
        ));
    }

    let mut long = env.clone();
    long.push(0);
    assert_eq!(decode(&long), Err(DecodeError::TrailingBytes));

    for cut in [0, 3, HEADER_LEN, HEADER_LEN + 5, env.len() - 1] {
        assert_eq!(
            decode(&env[..cut]),
            Err(DecodeError::Truncated),
            "cut at {cut}"
        );
    }
}

#[test]
fn undecompressable_block_with_a_valid_checksum_is_corrupt_block() {
    let payload = vec![b'a'; 1000];
    let mut env = encode(&checkpoint(&[Bytes::from(payload)]))
        .unwrap()
        .to_vec();
    let (start, _, payload_len, stored) = blocks(&env)[0];
    assert!(!stored, "the block is compressed");
    // Garble the LZ4 tokens, keep the checksum right.
    for b in &mut env[start..start + payload_len] {
        *b = 0xFF;
    }
    reseal(&mut env);
    assert!(matches!(
        decode(&env),
        Err(DecodeError::CorruptBlock { index: 0, .. })
    ));

    // A compressed block in an envelope that says "no compression".
    let mut env = encode(&checkpoint(&[Bytes::from(vec![b'a'; 1000])]))
        .unwrap()
        .to_vec();
    env[6] = Compression::None.code();
    reseal(&mut env);
    assert!(matches!(
        decode(&env),
        Err(DecodeError::CorruptBlock { .. })
    ));
}

#[test]
fn invalid_payloads_are_protobuf_or_model_errors() {
    assert!(matches!(
        decode(&wrap(&[0xFF; 40], 16)),
        Err(DecodeError::Protobuf(_))
    ));

    let valid = pb::Checkpoint::decode(
        &protobuf_segments(&checkpoint(&[]))
            .iter()
            .flat_map(|s| s.iter().copied())
            .collect::<Vec<u8>>()[..],
    )
    .unwrap();
    assert!(decode(&wrap(&valid.encode_to_vec(), 64)).is_ok());

    type Edit = fn(&mut pb::Checkpoint);
    let cases: [(Edit, InvalidCheckpoint); 5] = [
        (
            |m| m.format_version = 2,
            InvalidCheckpoint::UnsupportedFormat {
                found: 2,
                supported: 1,
            },
        ),
        (
            |m| m.format_version = 0,
            InvalidCheckpoint::UnsupportedFormat {
                found: 0,
                supported: 1,
            },
        ),
        (|m| m.id = 0, InvalidCheckpoint::ZeroId),
        (
            |m| m.source = None,
            InvalidCheckpoint::MissingField { field: "source" },
        ),
        (
            |m| {
                if let Some(p) = m.source.as_mut().and_then(|s| s.protocol.as_mut()) {
                    p.streaming = 77;
                }
            },
            InvalidCheckpoint::UnknownEnumValue {
                field: "source.protocol.streaming",
                value: 77,
            },
        ),
    ];
    for (edit, expected) in cases {
        let mut m = valid.clone();
        edit(&mut m);
        assert_eq!(
            decode(&wrap(&m.encode_to_vec(), 64)),
            Err(DecodeError::Invalid(expected))
        );
    }
    let mut m = valid;
    m.job = String::new();
    assert!(matches!(
        decode(&wrap(&m.encode_to_vec(), 64)),
        Err(DecodeError::Invalid(InvalidCheckpoint::InvalidName { .. }))
    ));
}

#[test]
fn encoder_refuses_bad_options_and_invalid_checkpoints() {
    let cp = checkpoint(&[]);
    let opts = EncodeOptions::default();
    assert!(matches!(
        ChunkedEncoder::new(&cp, &opts, 0),
        Err(EncodeError::InvalidOptions { .. })
    ));
    for size in [0, MAX_BLOCK_SIZE + 1] {
        assert!(matches!(
            encode_with(&cp, &opts.clone().with_block_size(size)),
            Err(EncodeError::InvalidOptions { .. })
        ));
    }
    let mut dup = checkpoint(&[Bytes::new(), Bytes::new()]);
    dup.operators[1].id = dup.operators[0].id.clone();
    assert!(matches!(
        encode(&dup),
        Err(EncodeError::Invalid(
            InvalidCheckpoint::DuplicateOperator { .. }
        ))
    ));
}
