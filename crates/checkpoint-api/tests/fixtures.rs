//! Committed envelopes: what this release wrote must stay readable by every later one.
//!
//! `tests/data/checkpoint-v1.bin` was written by envelope version 1 / format version 1.
//! Never regenerate it to make a failing test pass: a failure means old checkpoints would
//! no longer load. (To add a fixture for a new format, write a new file with
//! `PGCDC_BLESS=1 cargo test -p checkpoint-api --test fixtures`.)

use bytes::Bytes;
use cdc_core::Lsn;
use checkpoint_api::codec::{ENVELOPE_VERSION, HEADER_LEN};
use checkpoint_api::*;

const V1: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/checkpoint-v1.bin");

/// The checkpoint inside `checkpoint-v1.bin`.
fn v1_checkpoint() -> Result<Checkpoint, Box<dyn std::error::Error>> {
    let text: Vec<u8> = (0..400u32)
        .flat_map(|i| format!("row {i} of the dedup window;").into_bytes())
        .collect();
    // Incompressible and above the inline limit: its own segment, in stored blocks.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let noise: Vec<u8> = (0..20_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect();
    Ok(Checkpoint {
        job: JobName::new("orders-to-kafka")?,
        id: CheckpointId::new(42).ok_or("id 0")?,
        created_at: Timestamp::from_unix_micros(1_764_400_000_123_456),
        source: SourcePosition {
            commit_end_lsn: "16/B374D848".parse()?,
            slot: "pgcdc_orders".into(),
            publications: vec!["orders".into(), "customers".into()],
            protocol: ProtocolOptions {
                proto_version: 4,
                binary: true,
                messages: true,
                streaming: StreamingMode::Parallel,
                two_phase: false,
                origin: Some("none".into()),
            },
        },
        config_fingerprint: Bytes::from_static(&[0xC0, 0xFF, 0xEE, 0x01]),
        operators: vec![
            OperatorState {
                id: "dedup".into(),
                kind: "dedup".into(),
                state_version: 2,
                state: Bytes::from(text),
            },
            OperatorState {
                id: "bloom".into(),
                kind: "bloom-filter".into(),
                state_version: 1,
                state: Bytes::from(noise),
            },
            OperatorState {
                id: "idle".into(),
                kind: "noop".into(),
                state_version: 0,
                state: Bytes::new(),
            },
        ],
        snapshot: Some(SnapshotProgress {
            consistent_point: Lsn::from_u64(0x16_0000_0028),
            tables_done: vec![TableDone {
                table: TableRef {
                    schema: "public".into(),
                    name: "orders".into(),
                },
                chunks: 17,
                rows: 1_700_000,
                ..TableDone::default()
            }],
            in_progress: Some(TableCursor {
                table: TableRef {
                    schema: "public".into(),
                    name: "customers".into(),
                },
                chunks_done: 2,
                rows_done: 200_000,
                cursor: Bytes::from_static(b"\x00\x03\x0d\x40"),
                ..TableCursor::default()
            }),
            complete: false,
            ..SnapshotProgress::default()
        }),
        sinks: vec![
            SinkPosition {
                sink_id: "kafka".into(),
                position: Bytes::from_static(b"orders:0=1234,orders:1=999"),
            },
            SinkPosition {
                sink_id: "stdout".into(),
                position: Bytes::new(),
            },
        ],
        relations: Vec::new(),
    })
}

#[test]
fn v1_fixture_still_decodes() {
    let options = EncodeOptions::default().with_block_size(4096);
    if std::env::var_os("PGCDC_BLESS").is_some() && !std::path::Path::new(V1).exists() {
        std::fs::write(
            V1,
            encode_with(&v1_checkpoint().unwrap(), &options).unwrap(),
        )
        .unwrap();
    }
    let bytes = std::fs::read(V1).unwrap();
    let header = EnvelopeHeader::parse(&bytes, &DecodeOptions::default()).unwrap();
    assert_eq!(header.version, ENVELOPE_VERSION);
    assert_eq!(header.compression, Compression::Lz4Block);
    assert_eq!(header.block_size, 4096);
    assert!(bytes.len() > HEADER_LEN);
    assert_eq!(decode(&bytes).unwrap(), v1_checkpoint().unwrap());
    // And in chunks, as a backend reads it.
    assert_eq!(
        decode_chunks(bytes.chunks(1000), &DecodeOptions::default()).unwrap(),
        v1_checkpoint().unwrap()
    );
}
