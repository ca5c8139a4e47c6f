//! Writes the committed seed corpus: `cargo run --example gen_seeds` from
//! `fuzz/` (stable toolchain is fine). Seeds come from the test encoder
//! (every message kind, in every context where it exists, and whole
//! transactions of each shape) and from the captured server fixtures in
//! `crates/cdc-core/tests/fixtures/*.bin` when they are present.
//!
//! Existing seeds with the same name are overwritten; nothing is deleted.

use std::borrow::Cow;
use std::fs;
use std::path::{Path, PathBuf};

use cdc_core::encode::{encode_keepalive, encode_xlog_data, message_bytes};
use cdc_core::pgoutput::*;
use cdc_core::{Decoder, Lsn, PgTimestamp, PrimaryKeepalive, StandbyStatusUpdate, XLogData};
use cdc_core_fuzz::{context_to_byte, join_records};

const REL: u32 = 16_384;

fn lsn(v: u64) -> Lsn {
    Lsn::from_u64(v)
}

fn ts(v: i64) -> PgTimestamp {
    PgTimestamp::from_pg_micros(v)
}

fn tuple(vals: &[Option<&str>]) -> TupleData<'static> {
    let vals: Vec<TupleValue<'_>> = vals
        .iter()
        .map(|v| match v {
            Some(s) => TupleValue::Text(s.as_bytes()),
            None => TupleValue::Null,
        })
        .collect();
    TupleData::from_values(&vals).unwrap_or_else(|| unreachable!("small tuple"))
}

fn relation(xid: Option<u32>) -> LogicalMessage<'static> {
    let col = |name: &'static str, type_oid, flags| Column {
        flags,
        name: Cow::Borrowed(name),
        type_oid,
        type_modifier: -1,
    };
    LogicalMessage::Relation(Relation {
        xid,
        oid: REL,
        namespace: Cow::Borrowed("public"),
        name: Cow::Borrowed("items"),
        replica_identity: ReplicaIdentity::Default,
        columns: vec![
            col("id", cdc_core::types::INT4, 1),
            col("name", cdc_core::types::TEXT, 0),
            col("at", cdc_core::types::TIMESTAMPTZ, 0),
            col("price", cdc_core::types::NUMERIC, 0),
            col("tags", cdc_core::types::TEXT_ARRAY, 0),
        ],
    })
}

fn row(id: u32) -> TupleData<'static> {
    let id = id.to_string();
    tuple(&[
        Some(&id),
        Some("héllo"),
        Some("2024-02-29 12:34:56.789012+00"),
        Some("12345.6789"),
        Some("{a,\"b c\",NULL}"),
    ])
}

fn insert(xid: Option<u32>, id: u32) -> LogicalMessage<'static> {
    LogicalMessage::Insert(Insert {
        xid,
        relation: REL,
        new: row(id),
    })
}

fn update(xid: Option<u32>, full: bool) -> LogicalMessage<'static> {
    let old = if full {
        OldTuple::Full(row(1))
    } else {
        OldTuple::Key(tuple(&[Some("1"), None, None, None, None]))
    };
    LogicalMessage::Update(Update {
        xid,
        relation: REL,
        old: Some(old),
        new: row(2),
    })
}

fn delete(xid: Option<u32>) -> LogicalMessage<'static> {
    LogicalMessage::Delete(Delete {
        xid,
        relation: REL,
        old: OldTuple::Key(tuple(&[Some("1"), None, None, None, None])),
    })
}

fn message(xid: Option<u32>, transactional: bool) -> LogicalMessage<'static> {
    LogicalMessage::Message(LogicalDecodingMessage {
        xid,
        transactional,
        lsn: lsn(0x100),
        prefix: Cow::Borrowed("pgcdc"),
        content: Cow::Borrowed(b"\x00payload\xff"),
    })
}

fn begin(xid: u32, at: u64) -> LogicalMessage<'static> {
    LogicalMessage::Begin(Begin {
        final_lsn: lsn(at),
        commit_time: ts(1),
        xid,
    })
}

fn commit(at: u64) -> LogicalMessage<'static> {
    LogicalMessage::Commit(Commit {
        flags: 0,
        commit_lsn: lsn(at),
        end_lsn: lsn(at + 8),
        commit_time: ts(1),
    })
}

fn prepare(xid: u32, gid: &'static str) -> Prepare<'static> {
    Prepare {
        flags: 0,
        prepare_lsn: lsn(0x300),
        end_lsn: lsn(0x308),
        prepare_time: ts(2),
        xid,
        gid: Cow::Borrowed(gid),
    }
}

/// Prepare, commit prepared; rollback prepared of another.
fn two_phase() -> Vec<LogicalMessage<'static>> {
    vec![
        LogicalMessage::BeginPrepare(BeginPrepare {
            prepare_lsn: lsn(0x300),
            end_lsn: lsn(0x308),
            prepare_time: ts(2),
            xid: 12,
            gid: Cow::Borrowed("g1"),
        }),
        relation(None),
        insert(None, 1),
        LogicalMessage::Prepare(prepare(12, "g1")),
        LogicalMessage::CommitPrepared(CommitPrepared {
            flags: 0,
            commit_lsn: lsn(0x600),
            end_lsn: lsn(0x608),
            commit_time: ts(6),
            xid: 12,
            gid: Cow::Borrowed("g1"),
        }),
        LogicalMessage::RollbackPrepared(RollbackPrepared {
            flags: 0,
            prepare_end_lsn: lsn(0x308),
            rollback_end_lsn: lsn(0x708),
            prepare_time: ts(2),
            rollback_time: ts(7),
            xid: 13,
            gid: Cow::Borrowed("g2"),
        }),
    ]
}

fn stream_start(xid: u32, first: bool) -> LogicalMessage<'static> {
    LogicalMessage::StreamStart(StreamStart {
        xid,
        first_segment: first,
    })
}

/// Whole transactions, each a list of (message, context) in order.
fn sequences(parallel: bool) -> Vec<(&'static str, ProtocolVersion, Vec<LogicalMessage<'static>>)> {
    let s = Some;
    let abort_info = parallel.then_some(StreamAbortInfo {
        abort_lsn: lsn(0x500),
        abort_time: ts(5),
    });
    vec![
        (
            "plain",
            ProtocolVersion::V1,
            vec![
                message(None, false),
                begin(7, 0x200),
                LogicalMessage::Origin(Origin {
                    commit_lsn: lsn(0xABCD),
                    name: Cow::Borrowed("upstream"),
                }),
                relation(None),
                LogicalMessage::Type(Type {
                    xid: None,
                    oid: 16_390,
                    namespace: Cow::Borrowed("public"),
                    name: Cow::Borrowed("mood"),
                }),
                insert(None, 1),
                update(None, false),
                update(None, true),
                delete(None),
                LogicalMessage::Truncate(Truncate {
                    xid: None,
                    options: 3,
                    relations: vec![REL],
                }),
                message(None, true),
                commit(0x200),
            ],
        ),
        (
            "streamed",
            // Abort info exists only with parallel streaming, which is v4.
            if parallel {
                ProtocolVersion::V4
            } else {
                ProtocolVersion::V2
            },
            vec![
                stream_start(9, true),
                relation(s(9)),
                insert(s(9), 1),
                insert(s(10), 2),
                LogicalMessage::StreamStop,
                stream_start(9, false),
                update(s(9), false),
                delete(s(9)),
                message(s(9), true),
                LogicalMessage::StreamStop,
                LogicalMessage::StreamAbort(StreamAbort {
                    xid: 9,
                    subxid: 10,
                    abort_info,
                }),
                LogicalMessage::StreamCommit(StreamCommit {
                    xid: 9,
                    flags: 0,
                    commit_lsn: lsn(0x400),
                    end_lsn: lsn(0x408),
                    commit_time: ts(4),
                }),
                stream_start(11, true),
                insert(s(11), 3),
                LogicalMessage::StreamStop,
                LogicalMessage::StreamAbort(StreamAbort {
                    xid: 11,
                    subxid: 11,
                    abort_info,
                }),
            ],
        ),
        ("two-phase", ProtocolVersion::V3, two_phase()),
        // A slot created with two_phase sends the same under v1.
        ("two-phase-v1", ProtocolVersion::V1, two_phase()),
        (
            "stream-prepare",
            ProtocolVersion::V4,
            vec![
                stream_start(14, true),
                relation(s(14)),
                insert(s(14), 1),
                LogicalMessage::StreamStop,
                LogicalMessage::StreamPrepare(prepare(14, "g3")),
            ],
        ),
    ]
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join(name), bytes)
}

/// Fixture records: u32 big-endian length + message.
fn fixture_records(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let len = (u32::from_be_bytes(*len) as usize).min(tail.len());
        let (rec, tail) = tail.split_at(len);
        out.push(rec);
        rest = tail;
    }
    out
}

fn version_of(file: &str) -> ProtocolVersion {
    let v = file
        .rsplit_once("-v")
        .and_then(|(_, v)| v.trim_end_matches(".bin").parse::<u32>().ok())
        .unwrap_or(1);
    ProtocolVersion::new(v).unwrap_or(ProtocolVersion::V4)
}

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let corpus = root.join("corpus");
    let msg_dir = corpus.join("pgoutput_message");
    let txn_dir = corpus.join("txn_assembler");
    let frame_dir = corpus.join("replication_frame");
    // Column types: index 0 of the known OIDs (advancing per column), and a
    // raw enum-like OID for every column.
    let selectors: [u32; 2] = [0, 0x8000_0000 | 16_390];

    for parallel in [false, true] {
        for (name, version, msgs) in sequences(parallel) {
            let mut decoder = Decoder::new(version).with_parallel_streaming(parallel);
            let mut records = Vec::new();
            for (i, m) in msgs.iter().enumerate() {
                let bytes = message_bytes(m);
                let ctx = decoder.context();
                if decoder.decode(&bytes).is_err() {
                    panic!("seed {name}/{i} does not decode: {m:?}");
                }
                for sel in selectors {
                    let mut seed = vec![context_to_byte(ctx)];
                    seed.extend_from_slice(&sel.to_be_bytes());
                    seed.extend_from_slice(&bytes);
                    write(
                        &msg_dir,
                        &format!("enc-{name}-{i}-p{}-{sel:08x}", u8::from(parallel)),
                        &seed,
                    )?;
                }
                records.push(bytes);
            }
            let mut seed = vec![(version.get() - 1) as u8 | (u8::from(parallel) << 3)];
            seed.extend(join_records(records.iter().map(Vec::as_slice)));
            write(
                &txn_dir,
                &format!("enc-{name}-p{}", u8::from(parallel)),
                &seed,
            )?;
            // The same messages with spilling on (option bit 5).
            seed[0] |= 32;
            write(
                &txn_dir,
                &format!("enc-{name}-p{}-spill", u8::from(parallel)),
                &seed,
            )?;
            if let Some(first) = records.get(2) {
                let mut frame = Vec::new();
                encode_xlog_data(
                    &XLogData {
                        wal_start: lsn(0x1_0000_0028),
                        wal_end: lsn(0x1_0000_0080),
                        send_time: ts(3),
                        data: first,
                    },
                    &mut frame,
                );
                write(
                    &frame_dir,
                    &format!("xlog-{name}-p{}", u8::from(parallel)),
                    &frame,
                )?;
            }
        }
    }
    let mut frame = Vec::new();
    encode_keepalive(
        &PrimaryKeepalive {
            wal_end: lsn(0x1_0000_0080),
            send_time: ts(3),
            reply_requested: true,
        },
        &mut frame,
    );
    write(&frame_dir, "keepalive", &frame)?;
    let status = StandbyStatusUpdate {
        write: lsn(0x10),
        flush: lsn(0x8),
        apply: lsn(0x8),
        send_time: ts(9),
        reply_requested: false,
    };
    write(&frame_dir, "status-update", &status.to_bytes())?;

    // Captured fixtures: each message once per file and tag (at most 4 of a
    // kind), and each file as one assembler input with at most 3 row changes
    // per transaction or stream block (libFuzzer works best on small inputs).
    let fixtures = root.join("../crates/cdc-core/tests/fixtures");
    let mut files: Vec<_> = match fs::read_dir(&fixtures) {
        Ok(rd) => rd.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    };
    files.retain(|p| p.extension().is_some_and(|e| e == "bin"));
    files.sort();
    for path in files {
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = file.trim_end_matches(".bin");
        let bytes = fs::read(&path)?;
        let version = version_of(&file);
        let mut decoder = Decoder::new(version);
        let mut per_tag = std::collections::HashMap::<u8, usize>::new();
        let mut kept = Vec::new();
        let mut rows_in_block = 0;
        for (i, rec) in fixture_records(&bytes).into_iter().enumerate() {
            let ctx = decoder.context();
            let Ok(msg) = decoder.decode(rec) else {
                panic!("fixture {file} record {i} does not decode");
            };
            let tag = msg.tag();
            let n = per_tag.entry(tag).or_default();
            *n += 1;
            if *n <= 4 {
                let mut seed = vec![context_to_byte(ctx)];
                seed.extend_from_slice(&0u32.to_be_bytes());
                seed.extend_from_slice(rec);
                write(&msg_dir, &format!("fx-{stem}-{i}"), &seed)?;
            }
            let row = matches!(tag, b'I' | b'U' | b'D');
            if !row {
                rows_in_block = 0;
            }
            if !row || rows_in_block < 3 {
                kept.push(rec);
            }
            rows_in_block += usize::from(row);
        }
        let mut seed = vec![(version.get() - 1) as u8];
        seed.extend(join_records(kept));
        write(&txn_dir, &format!("fx-{stem}"), &seed)?;
    }
    Ok(())
}
