//! What the fixtures captured from newer servers (see `tests/fixtures/README.md`)
//! hold beyond the generic replay of `fixtures_decode.rs`:
//!
//! * `streamed-v4`: protocol 4 with `streaming = parallel`. The Stream Abort of
//!   a rolled-back subtransaction carries the abort LSN and abort time; both
//!   must be plausible (after the earlier commit, within a minute of it, the
//!   LSN within the decoded WAL).
//! * `generated-stored-v4`: a `GENERATED ALWAYS AS (...) STORED` column
//!   published with `publish_generated_columns = stored` (PostgreSQL 18):
//!   the Relation lists it and every row carries its computed value.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};

use cdc_core::pgoutput::{LogicalMessage, ProtocolVersion};
use cdc_core::{decode_text, Decoder, Lsn, TupleValue, Value};
use serde_json::Value as Json;

fn fixture(name: &str) -> (Vec<u8>, Json) {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let bin = fs::read(dir.join(format!("{name}.bin"))).unwrap();
    let json = fs::read_to_string(dir.join(format!("{name}.expected.json"))).unwrap();
    (bin, serde_json::from_str(&json).unwrap())
}

/// The records of a fixture: u32 big-endian length + message.
fn records(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some((len, tail)) = rest.split_first_chunk::<4>() {
        let (rec, tail) = tail.split_at(u32::from_be_bytes(*len) as usize);
        out.push(rec);
        rest = tail;
    }
    assert!(rest.is_empty(), "truncated record");
    out
}

fn version_of(expected: &Json) -> ProtocolVersion {
    ProtocolVersion::new(expected["proto_version"].as_u64().unwrap() as u32).unwrap()
}

#[test]
fn parallel_streaming_stream_aborts_carry_a_plausible_abort_lsn_and_time() {
    let (bin, expected) = fixture("streamed-v4");
    assert!(expected["options"]
        .as_str()
        .unwrap()
        .contains("'streaming', 'parallel'"));
    let recs = records(&bin);
    let lsns: Vec<Lsn> = expected["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap().parse().unwrap())
        .collect();
    let mut decoder = Decoder::new(version_of(&expected)).with_parallel_streaming(true);
    let mut commits = Vec::new();
    let mut aborts = Vec::new();
    for (i, rec) in recs.iter().enumerate() {
        match decoder.decode(rec).unwrap() {
            LogicalMessage::StreamCommit(c) => commits.push((i, c)),
            LogicalMessage::StreamAbort(a) => aborts.push((i, a)),
            _ => {}
        }
    }
    // The subtransaction rolled back to its savepoint. (Transaction 2, rolled
    // back as a whole before decoding began, is not sent at all by PostgreSQL 18.)
    assert_eq!(aborts.len(), 1, "Stream Aborts");
    let (_, sub) = aborts[0];
    assert_ne!(sub.xid, sub.subxid, "a subtransaction aborted");
    assert!(sub.subxid > sub.xid, "subxids follow their top-level xid");
    let (_, last_commit) = *commits.last().unwrap();
    assert_eq!(
        last_commit.xid, sub.xid,
        "its transaction commits afterwards"
    );

    let (_, first_commit) = commits.first().copied().expect("a Stream Commit before");
    let first_time = first_commit.commit_time.to_unix_micros().unwrap();
    let last_lsn = *lsns.iter().max().unwrap();
    let mut previous = first_commit.commit_lsn;
    for (i, abort) in &aborts {
        let info = abort
            .abort_info
            .expect("parallel streaming sends abort info");
        // The abort is written after the earlier commit and everything before it.
        assert!(
            info.abort_lsn > previous,
            "abort LSN {} after {previous}",
            info.abort_lsn
        );
        assert!(info.abort_lsn <= last_lsn, "within the decoded WAL");
        assert!(info.abort_lsn >= lsns[*i - 1], "after the record before it");
        previous = info.abort_lsn;
        let t = info.abort_time.to_unix_micros().unwrap();
        assert!(
            (0..60_000_000).contains(&(t - first_time)),
            "aborted {} µs after the first commit",
            t - first_time
        );
    }
    // The same bytes without parallel streaming are rejected (16 bytes too many),
    // not silently misread.
    let mut plain = Decoder::new(version_of(&expected));
    let err = recs
        .iter()
        .map(|rec| plain.decode(rec).map(|_| ()))
        .find_map(Result::err)
        .expect("abort info is trailing data without parallel streaming");
    assert!(err.to_string().contains("trailing"), "{err}");
}

#[test]
fn stored_generated_columns_are_published_with_their_values() {
    let (bin, expected) = fixture("generated-stored-v4");
    assert!(expected["publication"]
        .as_str()
        .unwrap()
        .contains("publish_generated_columns = stored"));
    let mut decoder = Decoder::new(version_of(&expected));
    let mut columns = Vec::new();
    let mut rows = Vec::new();
    for rec in records(&bin) {
        match decoder.decode(rec).unwrap() {
            LogicalMessage::Relation(r) => {
                columns = r
                    .columns
                    .iter()
                    .map(|c| (c.name.to_string(), c.type_oid))
                    .collect();
            }
            LogicalMessage::Insert(m) => rows.push(m.new.len()),
            LogicalMessage::Update(m) => rows.push(m.new.len()),
            _ => {}
        }
    }
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["id", "qty", "price", "total", "label"]);
    assert_eq!(rows, [5, 5, 5], "2 inserts and an update, every column");

    // Each new tuple's total is qty * price and its label 'item-' || id.
    let mut decoder = Decoder::new(version_of(&expected));
    let mut seen = Vec::new();
    for rec in records(&bin) {
        let msg = decoder.decode(rec).unwrap();
        let tuple = match &msg {
            LogicalMessage::Insert(m) => &m.new,
            LogicalMessage::Update(m) => &m.new,
            _ => continue,
        };
        let text: Vec<String> = tuple
            .iter()
            .map(|v| match v {
                TupleValue::Text(b) => String::from_utf8(b.to_vec()).unwrap(),
                other => panic!("text value expected, got {other:?}"),
            })
            .collect();
        let qty: i64 = text[1].parse().unwrap();
        let price_cents: i64 = text[2].replace('.', "").parse().unwrap();
        let total = decode_text(columns[3].1, text[3].as_bytes()).unwrap();
        assert!(matches!(total, Value::Numeric(_)), "{total:?}");
        assert_eq!(
            text[3]
                .replace('.', "")
                .trim_start_matches('0')
                .parse::<i64>()
                .unwrap(),
            qty * price_cents,
            "total of {text:?}"
        );
        assert_eq!(text[4], format!("item-{}", text[0]));
        seen.push(text);
    }
    let seen: Vec<Vec<&str>> = seen
        .iter()
        .map(|r| r.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        seen,
        [
            ["1", "3", "2.50", "7.50", "item-1"],
            ["2", "10", "0.99", "9.90", "item-2"],
            ["1", "4", "2.50", "10.00", "item-1"],
        ]
    );
}
