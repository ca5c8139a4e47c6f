//! Tests of Debezium's records: expected JSON written from Debezium 2.7's
//! PostgreSQL connector documentation and source (`SourceInfo`,
//! `PostgresTransactionStructMaker`, `RelationalChangeRecordEmitter`,
//! `SnapshotRecord`), not from the encoder's output.

use std::sync::Arc;

use cdc_core::{types, Lsn, PgTimestamp, Value};
use serde_json::{json, Value as Json};

use super::*;
use crate::encoding::{JsonEncoder, JsonFormat, SkippedOperations};
use crate::event::{
    ColumnFacts, ColumnSchema, MessagePayload, Position, Row, SnapshotMark, SourceInfo, TableFacts,
    TableSchema, TransactionBoundary, TransactionStatus,
};

/// 2023-11-14T22:13:20.000001Z.
const COMMIT_US: i64 = 1_700_000_000_000_001;
/// The processing time: 2023-11-14T22:13:20.123456789Z.
const NOW: ProcessingTime = ProcessingTime::from_unix_nanos(1_700_000_000_123_456_789);

fn col(name: &str, type_oid: cdc_core::Oid, is_key: bool) -> ColumnSchema {
    ColumnSchema {
        name: name.into(),
        type_oid,
        type_modifier: -1,
        is_key,
    }
}

/// `public.t (id int4 primary key, doc text)`; with `facts`, the catalog
/// says `id` is the primary key.
fn table(facts: bool) -> Arc<TableSchema> {
    let t = TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "public".into(),
        table: "t".into(),
        columns: vec![col("id", types::INT4, true), col("doc", types::TEXT, false)],
    };
    if facts {
        let _ = t.facts.set(TableFacts {
            columns: vec![
                ColumnFacts {
                    not_null: true,
                    primary_key: true,
                    ..ColumnFacts::default()
                },
                ColumnFacts::default(),
            ],
        });
    }
    Arc::new(t)
}

fn source() -> SourceInfo {
    SourceInfo {
        commit_lsn: Lsn::from_u64(0x0200),
        lsn: Lsn::from_u64(0x0100),
        xid: 755,
        commit_time: PgTimestamp::from_unix_micros(COMMIT_US),
        database: "appdb".into(),
        slot: "slot".into(),
    }
}

fn row(id: i32, doc: Option<&str>) -> Option<Row> {
    let doc = doc.map_or(Value::Null, |d| Value::Text(d.to_owned().into()));
    Some(Row::from_values(vec![Value::Int4(id), doc]))
}

fn event(
    op: Operation,
    t: &Arc<TableSchema>,
    before: Option<Row>,
    after: Option<Row>,
) -> ChangeEvent {
    ChangeEvent {
        op,
        table: Some(t.clone()),
        before,
        after,
        message: None,
        schema_change: None,
        source: source(),
        index: 3,
        position: Position {
            table_index: 1,
            previous_commit: Some(Lsn::from_u64(0x0080)),
            snapshot: SnapshotMark::Unmarked,
            read_epoch: Lsn::INVALID,
        },
        boundary: None,
    }
}

fn options() -> DebeziumOptions {
    DebeziumOptions {
        name: "app".into(),
        version: "9.9.9".into(),
        ..DebeziumOptions::default()
    }
}

fn encoder(opts: DebeziumOptions) -> JsonEncoder {
    JsonEncoder::new(JsonFormat::Debezium(opts))
}

/// Every line `ev` becomes, parsed.
fn lines(enc: &JsonEncoder, ev: &ChangeEvent) -> Vec<Json> {
    let mut out = Vec::new();
    enc.lines_at(NOW).encode_line(ev, &mut out);
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn one(enc: &JsonEncoder, ev: &ChangeEvent) -> Json {
    let mut all = lines(enc, ev);
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

#[test]
fn insert_envelope_is_exact() {
    let t = table(false);
    let ev = event(Operation::Create, &t, None, row(1, Some("a\"b")));
    let mut out = Vec::new();
    encoder(options()).lines_at(NOW).encode_line(&ev, &mut out);
    let expected = concat!(
        r#"{"before":null,"after":{"id":1,"doc":"a\"b"},"#,
        r#""source":{"version":"9.9.9","connector":"postgresql","name":"app","ts_ms":1700000000000,"#,
        r#""snapshot":"false","db":"appdb","sequence":"[\"128\",\"256\"]","#,
        r#""ts_us":1700000000000001,"ts_ns":1700000000000001000,"#,
        r#""schema":"public","table":"t","txId":755,"lsn":256,"xmin":null},"#,
        r#""op":"c","ts_ms":1700000000123,"ts_us":1700000000123456,"ts_ns":1700000000123456789,"#,
        r#""transaction":null}"#,
        "\n"
    );
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn sequence_starts_with_null_without_a_previous_commit_and_for_reads() {
    let t = table(false);
    let enc = encoder(options());
    let mut ev = event(Operation::Create, &t, None, row(1, None));
    ev.position.previous_commit = None;
    assert_eq!(one(&enc, &ev)["source"]["sequence"], "[null,\"256\"]");
    let mut read = event(Operation::Read, &t, None, row(1, None));
    read.position.previous_commit = Some(Lsn::from_u64(7));
    let j = one(&enc, &read);
    assert_eq!(j["source"]["sequence"], "[null,\"256\"]");
    // The sequence parses as Debezium's: a JSON array of strings or null.
    let seq: Json = serde_json::from_str(j["source"]["sequence"].as_str().unwrap()).unwrap();
    assert_eq!(seq, json!([null, "256"]));
}

#[test]
fn transaction_block_only_with_metadata_and_never_for_reads() {
    let t = table(false);
    let ev = event(Operation::Update, &t, None, row(1, Some("x")));
    assert_eq!(one(&encoder(options()), &ev)["transaction"], Json::Null);
    let enc = encoder(DebeziumOptions {
        provide_transaction_metadata: true,
        ..options()
    });
    assert_eq!(
        one(&enc, &ev)["transaction"],
        json!({"id": "755:256", "total_order": 4, "data_collection_order": 2})
    );
    let read = event(Operation::Read, &t, None, row(1, None));
    assert_eq!(one(&enc, &read)["transaction"], Json::Null);
    let mut outside = event(Operation::Create, &t, None, row(1, None));
    outside.source.xid = 0;
    assert_eq!(one(&enc, &outside)["transaction"], Json::Null);
}

fn boundary(status: TransactionStatus) -> ChangeEvent {
    let data_collections = match status {
        TransactionStatus::Begin => Vec::new(),
        TransactionStatus::End => vec![("public.t".into(), 2), ("s2.a".into(), 1)],
    };
    ChangeEvent {
        op: Operation::Transaction,
        table: None,
        before: None,
        after: None,
        message: None,
        schema_change: None,
        source: SourceInfo {
            lsn: Lsn::from_u64(0x90),
            ..source()
        },
        index: 0,
        position: Position::default(),
        boundary: Some(Arc::new(TransactionBoundary {
            status,
            event_count: 3,
            data_collections,
        })),
    }
}

#[test]
fn begin_and_end_records_only_with_metadata() {
    let begin = boundary(TransactionStatus::Begin);
    let end = boundary(TransactionStatus::End);
    assert!(lines(&encoder(options()), &begin).is_empty());
    assert!(lines(&JsonEncoder::new(JsonFormat::Plain), &end).is_empty());
    let enc = encoder(DebeziumOptions {
        provide_transaction_metadata: true,
        ..options()
    });
    let mut out = Vec::new();
    enc.lines_at(NOW).encode_line(&begin, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\"status\":\"BEGIN\",\"id\":\"755:144\",\"ts_ms\":1700000000000,\"event_count\":null,\"data_collections\":null}\n"
    );
    assert_eq!(
        one(&enc, &end),
        json!({"status": "END", "id": "755:144", "ts_ms": 1700000000000u64, "event_count": 3,
               "data_collections": [{"data_collection": "public.t", "event_count": 2},
                                    {"data_collection": "s2.a", "event_count": 1}]})
    );
    let keyed = encoder(DebeziumOptions {
        provide_transaction_metadata: true,
        key: true,
        ..options()
    });
    assert_eq!(one(&keyed, &end)["key"], json!({"id": "755:144"}));
}

#[test]
fn snapshot_marks_are_written_as_debezium_names_them() {
    let t = table(false);
    let enc = encoder(options());
    for (mark, want) in [
        (SnapshotMark::Unmarked, "true"),
        (SnapshotMark::Read, "true"),
        (SnapshotMark::First, "first"),
        (SnapshotMark::FirstInTable, "first_in_data_collection"),
        (SnapshotMark::LastInTable, "last_in_data_collection"),
        (SnapshotMark::Last, "last"),
        (SnapshotMark::Incremental, "incremental"),
    ] {
        let mut ev = event(Operation::Read, &t, None, row(1, None));
        ev.position.snapshot = mark;
        let j = one(&enc, &ev);
        assert_eq!(j["source"]["snapshot"], want, "{mark:?}");
        assert_eq!(j["op"], "r");
    }
}

#[test]
fn delete_is_followed_by_a_tombstone_where_records_carry_keys() {
    let t = table(true);
    let del = event(Operation::Delete, &t, row(2, None), None);
    // Without keys: the value alone, no tombstone.
    let plain = lines(&encoder(options()), &del);
    assert_eq!(plain.len(), 1);
    assert_eq!(plain[0]["op"], "d");
    let keyed = encoder(DebeziumOptions {
        key: true,
        ..options()
    });
    let got = lines(&keyed, &del);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0]["key"], json!({"id": 2}));
    assert_eq!(got[0]["value"]["op"], "d");
    assert_eq!(got[0]["value"]["before"], json!({"id": 2, "doc": null}));
    assert!(got[0].get("headers").is_none());
    assert_eq!(got[1], json!({"key": {"id": 2}, "value": null}));
    let no_tombstones = encoder(DebeziumOptions {
        key: true,
        tombstones_on_delete: false,
        ..options()
    });
    assert_eq!(lines(&no_tombstones, &del).len(), 1);
}

#[test]
fn a_key_change_becomes_delete_tombstone_create_with_key_headers() {
    let t = table(true);
    let upd = event(Operation::Update, &t, row(1, None), row(2, Some("x")));
    assert!(key_changed(&upd));
    let enc = encoder(DebeziumOptions {
        key: true,
        ..options()
    });
    let got = lines(&enc, &upd);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0]["key"], json!({"id": 1}));
    assert_eq!(got[0]["headers"], json!({"__debezium.newkey": {"id": 2}}));
    assert_eq!(got[0]["value"]["op"], "d");
    assert_eq!(got[0]["value"]["before"], json!({"id": 1, "doc": null}));
    assert_eq!(got[0]["value"]["after"], Json::Null);
    assert_eq!(got[1], json!({"key": {"id": 1}, "value": null}));
    assert_eq!(got[2]["key"], json!({"id": 2}));
    assert_eq!(got[2]["headers"], json!({"__debezium.oldkey": {"id": 1}}));
    assert_eq!(got[2]["value"]["op"], "c");
    assert_eq!(got[2]["value"]["before"], Json::Null);
    assert_eq!(got[2]["value"]["after"], json!({"id": 2, "doc": "x"}));
    // Both records carry the update's source.
    assert_eq!(got[2]["value"]["source"]["lsn"], 256);
    // Without keys: the d and c values, no tombstone.
    let ops: Vec<Json> = lines(&encoder(options()), &upd)
        .iter()
        .map(|l| l["op"].clone())
        .collect();
    assert_eq!(ops, [json!("d"), json!("c")]);
    // An update of the same key (REPLICA IDENTITY FULL sends the old row):
    // one `u`.
    let same = event(Operation::Update, &t, row(1, Some("a")), row(1, Some("b")));
    assert!(!key_changed(&same));
    let got = lines(&enc, &same);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["value"]["op"], "u");
    assert_eq!(got[0]["key"], json!({"id": 1}));
}

#[test]
fn keys_are_the_primary_key_else_the_replica_identity_else_null() {
    let enc = encoder(DebeziumOptions {
        key: true,
        ..options()
    });
    // The catalog says `doc` is the primary key; the identity is `id`.
    let t = table(false);
    let by_pk = Arc::new(TableSchema {
        facts: Default::default(),
        ..(*t).clone()
    });
    let _ = by_pk.facts.set(TableFacts {
        columns: vec![
            ColumnFacts::default(),
            ColumnFacts {
                primary_key: true,
                ..ColumnFacts::default()
            },
        ],
    });
    let ins = |t: &Arc<TableSchema>| event(Operation::Create, t, None, row(5, Some("k")));
    assert_eq!(one(&enc, &ins(&by_pk))["key"], json!({"doc": "k"}));
    assert_eq!(one(&enc, &ins(&t))["key"], json!({"id": 5}));
    let keyless = Arc::new(TableSchema {
        facts: Default::default(),
        columns: vec![
            col("id", types::INT4, false),
            col("doc", types::TEXT, false),
        ],
        ..(*t).clone()
    });
    assert_eq!(one(&enc, &ins(&keyless))["key"], Json::Null);
    // Truncates have no key; messages are keyed by their prefix.
    let enc = encoder(DebeziumOptions {
        key: true,
        skipped_operations: SkippedOperations::NONE,
        ..options()
    });
    assert_eq!(
        one(&enc, &event(Operation::Truncate, &t, None, None))["key"],
        Json::Null
    );
    let mut msg = event(Operation::Message, &t, None, None);
    msg.table = None;
    msg.message = Some(MessagePayload {
        transactional: true,
        prefix: "audit".into(),
        content: b"hi".to_vec(),
    });
    let j = one(&enc, &msg);
    assert_eq!(j["key"], json!({"prefix": "audit"}));
    assert_eq!(
        j["value"]["message"],
        json!({"prefix": "audit", "content": "aGk="})
    );
}

#[test]
fn skipped_operations_are_not_written() {
    let t = table(false);
    let trunc = event(Operation::Truncate, &t, None, None);
    assert!(
        lines(&encoder(options()), &trunc).is_empty(),
        "t is skipped by default"
    );
    let none = encoder(DebeziumOptions {
        skipped_operations: SkippedOperations::NONE,
        ..options()
    });
    assert_eq!(one(&none, &trunc)["op"], "t");
    let skip_cu = encoder(DebeziumOptions {
        skipped_operations: SkippedOperations {
            create: true,
            update: true,
            ..SkippedOperations::NONE
        },
        ..options()
    });
    assert!(lines(&skip_cu, &event(Operation::Create, &t, None, row(1, None))).is_empty());
    // A key-changing update is an update: skipped with `u`.
    assert!(lines(
        &skip_cu,
        &event(Operation::Update, &t, row(1, None), row(2, None))
    )
    .is_empty());
    assert_eq!(
        lines(&skip_cu, &event(Operation::Delete, &t, row(1, None), None)).len(),
        1
    );
    assert!(!skip_cu.writes(&event(Operation::Create, &t, None, row(1, None))));
}

#[test]
fn records_keys_and_headers_are_exposed_to_sinks() {
    let t = table(true);
    let enc = encoder(options());
    let upd = event(Operation::Update, &t, row(1, None), row(2, None));
    let records: Vec<RecordPart> = enc.records(&upd).map(|r| r.part).collect();
    assert_eq!(
        records,
        [
            RecordPart::KeyChangeDelete,
            RecordPart::Tombstone,
            RecordPart::KeyChangeCreate
        ]
    );
    let mut lines = enc.lines_at(NOW);
    let mut parts = Vec::new();
    for rec in enc.records(&upd) {
        let (mut key, mut value, mut headers) = (Vec::new(), Vec::new(), Vec::new());
        assert!(enc.write_key(&rec, &mut key));
        lines.write_value(&rec, &mut value);
        let has = enc.write_headers(&rec, &mut headers);
        parts.push((
            String::from_utf8(key).unwrap(),
            serde_json::from_slice::<Json>(&value).unwrap()["op"].clone(),
            has.then(|| String::from_utf8(headers).unwrap()),
        ));
    }
    assert_eq!(
        parts,
        [
            (
                "{\"id\":1}".into(),
                json!("d"),
                Some("{\"__debezium.newkey\":{\"id\":2}}".into())
            ),
            ("{\"id\":1}".into(), Json::Null, None),
            (
                "{\"id\":2}".into(),
                json!("c"),
                Some("{\"__debezium.oldkey\":{\"id\":1}}".into())
            ),
        ]
    );
    // The plain format: one record, no key.
    let plain = JsonEncoder::new(JsonFormat::Plain);
    let recs: Vec<_> = plain.records(&upd).collect();
    assert_eq!(recs.len(), 1);
    let mut key = Vec::new();
    assert!(!plain.write_key(&recs[0], &mut key));
    assert_eq!(key, b"null");
}

/// The line encoder renders what runs of events share once: whatever
/// changes from one record to the next, the bytes are those of encoding
/// each event alone.
#[test]
fn runs_write_what_single_events_write() {
    let t = table(true);
    let other = table(false);
    let mut evs = vec![
        event(Operation::Create, &t, None, row(1, Some("a"))),
        event(Operation::Update, &t, row(1, None), row(2, Some("b"))),
        event(Operation::Update, &t, None, row(2, Some("c"))),
        event(Operation::Delete, &t, row(2, None), None),
        event(Operation::Create, &other, None, row(3, None)),
        boundary(TransactionStatus::Begin),
        boundary(TransactionStatus::End),
    ];
    let mut next = event(Operation::Create, &t, None, row(4, None));
    next.position.previous_commit = None;
    next.position.table_index = 7;
    evs.push(next.clone());
    next.source.lsn = Lsn::from_u64(0x0999);
    evs.push(next.clone());
    next.op = Operation::Read;
    for mark in [SnapshotMark::First, SnapshotMark::Read, SnapshotMark::Last] {
        next.position.snapshot = mark;
        evs.push(next.clone());
    }
    for (key, meta) in [(false, false), (true, true), (true, false)] {
        let enc = encoder(DebeziumOptions {
            key,
            provide_transaction_metadata: meta,
            ..options()
        });
        let mut run = Vec::new();
        let mut lines = enc.lines_at(NOW);
        let mut single = Vec::new();
        for ev in &evs {
            lines.encode_line(ev, &mut run);
            enc.lines_at(NOW).encode_line(ev, &mut single);
        }
        assert_eq!(
            String::from_utf8(run).unwrap(),
            String::from_utf8(single).unwrap()
        );
    }
}

#[test]
fn processing_time_units() {
    assert_eq!(NOW.millis(), 1_700_000_000_123);
    assert_eq!(NOW.micros(), 1_700_000_000_123_456);
    assert_eq!(ProcessingTime::from_unix_millis(5).nanos(), 5_000_000);
    assert_eq!(ProcessingTime::from_unix_nanos(-1).millis(), -1);
    let a = ProcessingTime::now();
    assert!(a.millis() > 1_700_000_000_000);
}
