//! Golden tests: expected JSON written from the Debezium documentation and
//! the mapping in the module docs, not from the encoder's output.

use std::sync::Arc;

use cdc_core::{decode_text, types, Lsn, Oid, PgTimestamp, Value};
use serde_json::{json, Value as Json};

use super::*;
use crate::event::{ColumnSchema, MessagePayload, SchemaChange, SourceInfo};

fn col(name: &str, type_oid: Oid, typmod: i32, is_key: bool) -> ColumnSchema {
    ColumnSchema {
        name: name.into(),
        type_oid,
        type_modifier: typmod,
        is_key,
    }
}

fn v(oid: Oid, text: &str) -> Value<'static> {
    decode_text(oid, text.as_bytes()).unwrap().into_owned()
}

/// 2023-11-14T22:13:20Z: 1_700_000_000 s after the Unix epoch.
fn commit_time() -> PgTimestamp {
    PgTimestamp::from_unix_micros(1_700_000_000_000_000).unwrap()
}

fn source() -> SourceInfo {
    SourceInfo {
        commit_lsn: Lsn::from_u64(0x0200),
        lsn: Lsn::from_u64(0x0100),
        xid: 755,
        commit_time: Some(commit_time()),
        database: "appdb".into(),
        slot: "slot".into(),
    }
}

fn event(
    op: Operation,
    table: &Arc<TableSchema>,
    before: Option<Vec<Value<'static>>>,
    after: Option<Vec<Value<'static>>>,
) -> ChangeEvent {
    ChangeEvent {
        op,
        table: Some(table.clone()),
        before: before.map(Row::from_values),
        after: after.map(Row::from_values),
        message: None,
        schema_change: None,
        source: source(),
        index: 3,
        position: Default::default(),
        boundary: None,
    }
}

fn simple_table() -> Arc<TableSchema> {
    Arc::new(TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "public".into(),
        table: "t".into(),
        columns: vec![
            col("id", types::INT4, -1, true),
            col("doc", types::TEXT, -1, false),
        ],
    })
}

fn debezium_encoder() -> JsonEncoder {
    JsonEncoder::new(JsonFormat::Debezium(DebeziumOptions {
        name: "app".into(),
        version: "2.7.0.Final".into(),
        ..DebeziumOptions::default()
    }))
}

fn encode(enc: &JsonEncoder, ev: &ChangeEvent) -> Json {
    let mut buf = Vec::new();
    enc.encode_at(ev, 1_700_000_000_123, &mut buf);
    serde_json::from_slice(&buf)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&buf)))
}

#[test]
fn debezium_insert_envelope_is_exact() {
    let t = simple_table();
    let ev = event(
        Operation::Create,
        &t,
        None,
        Some(vec![Value::Int4(1), v(types::TEXT, "a\"b")]),
    );
    let mut buf = Vec::new();
    debezium_encoder().encode_at(&ev, 1_700_000_000_123, &mut buf);
    let expected = concat!(
        r#"{"before":null,"after":{"id":1,"doc":"a\"b"},"#,
        r#""source":{"version":"2.7.0.Final","connector":"postgresql","name":"app","ts_ms":1700000000000,"#,
        r#""snapshot":"false","db":"appdb","sequence":"[null,\"256\"]","#,
        r#""ts_us":1700000000000000,"ts_ns":1700000000000000000,"schema":"public","table":"t","#,
        r#""txId":755,"lsn":256,"xmin":null},"op":"c","ts_ms":1700000000123,"#,
        r#""ts_us":1700000000123000,"ts_ns":1700000000123000000,"transaction":null}"#
    );
    assert_eq!(String::from_utf8(buf).unwrap(), expected);
}

#[test]
fn debezium_update_delete_and_read() {
    let t = simple_table();
    let enc = debezium_encoder();
    let upd = event(
        Operation::Update,
        &t,
        Some(vec![Value::Int4(1), Value::Null]),
        Some(vec![Value::Int4(2), v(types::TEXT, "x")]),
    );
    let j = encode(&enc, &upd);
    assert_eq!(j["op"], "u");
    assert_eq!(j["before"], json!({"id": 1, "doc": null}));
    assert_eq!(j["after"], json!({"id": 2, "doc": "x"}));
    let del = event(
        Operation::Delete,
        &t,
        Some(vec![Value::Int4(2), Value::Null]),
        None,
    );
    let j = encode(&enc, &del);
    assert_eq!(j["op"], "d");
    assert_eq!(j["after"], Json::Null);
    assert_eq!(j["before"]["id"], 2);
    let read = event(
        Operation::Read,
        &t,
        None,
        Some(vec![Value::Int4(3), Value::Null]),
    );
    let j = encode(&enc, &read);
    assert_eq!(j["op"], "r");
    assert_eq!(j["source"]["snapshot"], "true");
}

#[test]
fn unchanged_toast_is_the_placeholder_never_null() {
    let t = simple_table();
    let ev = event(
        Operation::Update,
        &t,
        None,
        Some(vec![Value::Int4(1), Value::UnchangedToast]),
    );
    let j = encode(&debezium_encoder(), &ev);
    assert_eq!(j["after"]["doc"], "__debezium_unavailable_value");

    let j = encode(&JsonEncoder::new(JsonFormat::Plain), &ev);
    assert_eq!(j["after"], json!({"id": 1}), "left out of the plain row");
    assert_eq!(j["unchanged_toast"], json!(["doc"]));
}

#[test]
fn truncate_has_no_rows() {
    let t = simple_table();
    let ev = event(Operation::Truncate, &t, None, None);
    let j = encode(&debezium_encoder(), &ev);
    assert_eq!(j["op"], "t");
    assert_eq!(j["before"], Json::Null);
    assert_eq!(j["after"], Json::Null);
    assert_eq!(j["source"]["table"], "t");
    let j = encode(&JsonEncoder::new(JsonFormat::Plain), &ev);
    assert_eq!(j["op"], "truncate");
    assert_eq!(j["table"], "t");
}

#[test]
fn message_op() {
    let ev = ChangeEvent {
        op: Operation::Message,
        table: None,
        before: None,
        after: None,
        message: Some(MessagePayload {
            transactional: true,
            prefix: "audit".into(),
            content: b"\x00\x01\xfehello".to_vec(),
        }),
        schema_change: None,
        source: source(),
        index: 0,
        position: Default::default(),
        boundary: None,
    };
    let j = encode(&debezium_encoder(), &ev);
    assert_eq!(j["op"], "m");
    assert!(j.get("before").is_none() && j.get("after").is_none());
    assert_eq!(
        j["message"],
        json!({"prefix": "audit", "content": "AAH+aGVsbG8="})
    );
    assert_eq!(j["source"]["schema"], "");
    let j = encode(&JsonEncoder::new(JsonFormat::Plain), &ev);
    assert_eq!(
        j["message"],
        json!({"transactional": true, "prefix": "audit", "content": "AAH+aGVsbG8="})
    );
    assert_eq!(j["table"], Json::Null);
}

/// Every value type in one row: (column, type, typmod, text, Debezium JSON, plain JSON).
type Case = (&'static str, Oid, i32, Option<&'static str>, Json, Json);

fn every_type() -> Vec<Case> {
    vec![
        ("b", types::BOOL, -1, Some("t"), json!(true), json!(true)),
        (
            "i2",
            types::INT2,
            -1,
            Some("-32768"),
            json!(-32768),
            json!(-32768),
        ),
        (
            "i4",
            types::INT4,
            -1,
            Some("2147483647"),
            json!(2147483647),
            json!(2147483647),
        ),
        (
            "i8",
            types::INT8,
            -1,
            Some("-9223372036854775808"),
            json!(i64::MIN),
            json!(i64::MIN),
        ),
        (
            "o",
            types::OID,
            -1,
            Some("4294967295"),
            json!(4294967295u32),
            json!(4294967295u32),
        ),
        ("f4", types::FLOAT4, -1, Some("1.5"), json!(1.5), json!(1.5)),
        (
            "f8",
            types::FLOAT8,
            -1,
            Some("-0.25"),
            json!(-0.25),
            json!(-0.25),
        ),
        (
            "f8nan",
            types::FLOAT8,
            -1,
            Some("NaN"),
            json!("NaN"),
            json!("NaN"),
        ),
        (
            "f8inf",
            types::FLOAT8,
            -1,
            Some("Infinity"),
            json!("Infinity"),
            json!("Infinity"),
        ),
        (
            "f4ninf",
            types::FLOAT4,
            -1,
            Some("-Infinity"),
            json!("-Infinity"),
            json!("-Infinity"),
        ),
        (
            "num",
            types::NUMERIC,
            -1,
            Some("12345678901234567890.000100"),
            // decimal.handling.mode=precise: VariableScaleDecimal, trailing
            // zeros stripped (123456789012345678900001, scale 4).
            json!({"scale": 4, "value": "GiSbHxCgbJarIQ=="}),
            json!("12345678901234567890.000100"),
        ),
        (
            "numnan",
            types::NUMERIC,
            -1,
            Some("NaN"),
            // Debezium stops on NaN in precise mode; pgcdc writes null.
            Json::Null,
            json!("NaN"),
        ),
        (
            "txt",
            types::TEXT,
            -1,
            Some("line\n\"q\" é"),
            json!("line\n\"q\" é"),
            json!("line\n\"q\" é"),
        ),
        ("vc", types::VARCHAR, -1, Some("v"), json!("v"), json!("v")),
        (
            "bp",
            types::BPCHAR,
            -1,
            Some("ab  "),
            json!("ab  "),
            json!("ab  "),
        ),
        ("ch", types::CHAR, -1, Some("x"), json!("x"), json!("x")),
        (
            "by",
            types::BYTEA,
            -1,
            Some("\\x0001fe68656c6c6f"),
            json!("AAH+aGVsbG8="),
            json!("AAH+aGVsbG8="),
        ),
        (
            "js",
            types::JSON,
            -1,
            Some("{\"a\": [1, 2]}"),
            json!("{\"a\": [1, 2]}"),
            json!("{\"a\": [1, 2]}"),
        ),
        (
            "jb",
            types::JSONB,
            -1,
            Some("{\"a\": 1}"),
            json!("{\"a\": 1}"),
            json!("{\"a\": 1}"),
        ),
        (
            "u",
            types::UUID,
            -1,
            Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            json!("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            json!("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        ),
        // 2024-01-15 is 19737 days after 1970-01-01.
        (
            "d",
            types::DATE,
            -1,
            Some("2024-01-15"),
            json!(19737),
            json!("2024-01-15"),
        ),
        (
            "dinf",
            types::DATE,
            -1,
            Some("infinity"),
            // The epoch day of -5877611-06-21, Debezium's date infinity.
            json!(-2_147_472_692i64),
            json!("infinity"),
        ),
        // 04:05:06.789 = 14706.789 s.
        (
            "tm",
            types::TIME,
            -1,
            Some("04:05:06.789"),
            json!(14_706_789_000i64),
            json!("04:05:06.789"),
        ),
        (
            "tm3",
            types::TIME,
            3,
            Some("04:05:06.789"),
            json!(14_706_789),
            json!("04:05:06.789"),
        ),
        (
            "ttz",
            types::TIMETZ,
            -1,
            Some("04:05:06+02"),
            json!("02:05:06Z"),
            json!("04:05:06+02"),
        ),
        // 2024-01-15 04:05:06.123456 UTC = 1705291506.123456 s after the epoch.
        (
            "ts",
            types::TIMESTAMP,
            -1,
            Some("2024-01-15 04:05:06.123456"),
            json!(1_705_291_506_123_456i64),
            json!("2024-01-15T04:05:06.123456"),
        ),
        (
            "ts3",
            types::TIMESTAMP,
            3,
            Some("2024-01-15 04:05:06.123"),
            json!(1_705_291_506_123i64),
            json!("2024-01-15T04:05:06.123"),
        ),
        (
            "tsninf",
            types::TIMESTAMP,
            -1,
            Some("-infinity"),
            json!(-9_223_372_036_832_400_000i64),
            json!("-infinity"),
        ),
        (
            "tstz",
            types::TIMESTAMPTZ,
            -1,
            Some("2024-01-15 04:05:06.5+02"),
            // The fraction to the column's precision (6 without a modifier).
            json!("2024-01-15T02:05:06.500000Z"),
            json!("2024-01-15T02:05:06.5+00:00"),
        ),
        // 1 month = 365.25/12 days = 2_629_800 s; + 2 days + 1 s.
        (
            "iv",
            types::INTERVAL,
            -1,
            Some("1 mon 2 days 00:00:01"),
            json!(2_802_601_000_000i64),
            json!("P1M2DT1S"),
        ),
        (
            "ip",
            types::INET,
            -1,
            Some("192.168.0.1/24"),
            json!("192.168.0.1/24"),
            json!("192.168.0.1/24"),
        ),
        (
            "cidr",
            types::CIDR,
            -1,
            Some("10.0.0.0/8"),
            json!("10.0.0.0/8"),
            json!("10.0.0.0/8"),
        ),
        (
            "mac",
            types::MACADDR,
            -1,
            Some("08:00:2b:01:02:03"),
            json!("08:00:2b:01:02:03"),
            json!("08:00:2b:01:02:03"),
        ),
        (
            "lsn",
            types::PG_LSN,
            -1,
            Some("16/B374D848"),
            json!(0x16_B374_D848u64),
            json!("16/B374D848"),
        ),
        (
            "arr",
            types::INT4_ARRAY,
            -1,
            Some("{1,NULL,3}"),
            json!([1, null, 3]),
            json!([1, null, 3]),
        ),
        (
            "arr2",
            types::TEXT_ARRAY,
            -1,
            Some("{{a,b},{\"c d\",e}}"),
            json!([["a", "b"], ["c d", "e"]]),
            json!([["a", "b"], ["c d", "e"]]),
        ),
        (
            "enm",
            90001,
            -1,
            Some("happy"),
            json!("happy"),
            json!("happy"),
        ),
        ("nul", types::INT4, -1, None, Json::Null, Json::Null),
    ]
}

#[test]
fn every_value_type_in_both_encodings() {
    let cases = every_type();
    let table = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 2,
        schema: "s".into(),
        table: "all".into(),
        columns: cases
            .iter()
            .map(|(n, oid, tm, ..)| col(n, *oid, *tm, false))
            .collect(),
    });
    let row: Vec<Value<'static>> = cases
        .iter()
        .map(|(_, oid, _, text, ..)| text.map_or(Value::Null, |t| v(*oid, t)))
        .collect();
    let ev = event(Operation::Create, &table, None, Some(row));
    let dbz = encode(&debezium_encoder(), &ev);
    let plain = encode(&JsonEncoder::new(JsonFormat::Plain), &ev);
    for (name, _, _, _, want_dbz, want_plain) in &cases {
        assert_eq!(&dbz["after"][name], want_dbz, "debezium {name}");
        assert_eq!(&plain["after"][name], want_plain, "plain {name}");
    }
    assert_eq!(dbz["after"].as_object().unwrap().len(), cases.len());
}

#[test]
fn plain_metadata() {
    let t = simple_table();
    let ev = event(
        Operation::Create,
        &t,
        None,
        Some(vec![Value::Int4(1), Value::Null]),
    );
    let j = encode(&JsonEncoder::new(JsonFormat::Plain), &ev);
    assert_eq!(
        j,
        json!({
            "op": "insert", "schema": "public", "table": "t",
            "commit_lsn": "0/200", "lsn": "0/100", "xid": 755,
            "commit_time": "2023-11-14T22:13:20+00:00", "index": 3,
            "before": null, "after": {"id": 1, "doc": null}
        })
    );
}

#[test]
fn encode_line_appends_one_line() {
    let t = simple_table();
    let ev = event(
        Operation::Create,
        &t,
        None,
        Some(vec![Value::Int4(1), v(types::TEXT, "x\ny")]),
    );
    let enc = debezium_encoder();
    let mut buf = b"prev\n".to_vec();
    enc.encode_line(&ev, &mut buf);
    enc.encode_line(&ev, &mut buf);
    let text = String::from_utf8(buf).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "newlines inside values are escaped");
    assert_eq!(lines[0], "prev");
    serde_json::from_str::<Json>(lines[2]).unwrap();
}

#[test]
fn encode_lines_share_one_processing_time() {
    let t = simple_table();
    let evs: Vec<ChangeEvent> = (0..3)
        .map(|i| {
            event(
                Operation::Create,
                &t,
                None,
                Some(vec![Value::Int4(i), v(types::TEXT, "x")]),
            )
        })
        .collect();
    let enc = debezium_encoder();
    let before = enc.now();
    let mut batch = Vec::new();
    enc.encode_lines(&evs, &mut batch);
    let after = enc.now();
    let text = String::from_utf8(batch.clone()).unwrap();
    let lines: Vec<Json> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let now = ProcessingTime::from_unix_nanos(lines[0]["ts_ns"].as_i64().unwrap());
    assert!(
        (before..=after).contains(&now),
        "{before:?} <= {now:?} <= {after:?}"
    );
    assert_eq!(lines[0]["ts_ms"].as_i64(), Some(now.millis()));
    // The same bytes as encoding each line with that time.
    let mut one_by_one = Vec::new();
    for ev in &evs {
        enc.lines_at(now).encode_line(ev, &mut one_by_one);
    }
    assert_eq!(batch, one_by_one);
    // The plain format writes no processing time and reads no clock.
    assert_eq!(JsonEncoder::new(JsonFormat::Plain).now_ms(), 0);
}

/// The line encoder renders the envelope parts events share once: whatever
/// changes from one event to the next (transaction, table, operation,
/// database, commit time, rows), the bytes are those of `encode_line_at`.
#[test]
fn line_encoder_writes_what_encode_line_at_writes() {
    let t = simple_table();
    let other = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 2,
        schema: "s\"q".into(),
        table: "other".into(),
        columns: vec![
            col("k\u{1}", types::INT8, -1, true),
            col("ts", types::TIMESTAMP, 3, false),
        ],
    });
    let row = |i: i32| Some(vec![Value::Int4(i), v(types::TEXT, "a\"b")]);
    let other_row = Some(vec![
        Value::Int8(-5),
        v(types::TIMESTAMP, "2024-01-15 04:05:06.5"),
    ]);
    let mut evs = Vec::new();
    for op in [Operation::Create, Operation::Update, Operation::Delete] {
        evs.push(event(op, &t, row(1), row(2)));
        evs.push(event(op, &t, None, row(3)));
    }
    evs.push(event(Operation::Create, &other, None, other_row.clone()));
    evs.push(event(Operation::Truncate, &other, None, None));
    evs.push(event(Operation::Truncate, &t, None, None));
    let mut next_txn = event(Operation::Create, &t, None, row(4));
    next_txn.source.commit_lsn = Lsn::from_u64(0x0900);
    next_txn.source.xid = 756;
    evs.push(next_txn.clone());
    next_txn.source.lsn = Lsn::from_u64(0x0901);
    next_txn.index = 4;
    evs.push(next_txn.clone());
    let mut no_xid = event(Operation::Read, &other, None, other_row);
    no_xid.source.xid = 0;
    no_xid.source.commit_time = None;
    evs.push(no_xid.clone());
    no_xid.source.database = "other db".into();
    evs.push(no_xid);
    let mut msg = event(Operation::Message, &t, None, None);
    msg.table = None;
    msg.message = Some(MessagePayload {
        transactional: true,
        prefix: "p".into(),
        content: b"hi".to_vec(),
    });
    evs.push(msg);
    evs.push(event(Operation::Create, &t, None, row(5)));
    // A schema equal to `t` but another allocation (a new Relation message).
    let t2 = Arc::new((*t).clone());
    evs.push(event(Operation::Create, &t2, None, row(6)));
    // A table without columns: `{}` rows.
    let empty = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 3,
        schema: "public".into(),
        table: "empty".into(),
        columns: vec![],
    });
    evs.push(event(Operation::Create, &empty, None, Some(vec![])));
    evs.push(event(Operation::Update, &empty, Some(vec![]), Some(vec![])));

    for enc in [debezium_encoder(), JsonEncoder::new(JsonFormat::Plain)] {
        let now = 1_700_000_000_123;
        let mut lines = enc.lines(now);
        let mut batch = Vec::new();
        let mut one_by_one = Vec::new();
        for ev in &evs {
            lines.encode_line(ev, &mut batch);
            enc.encode_line_at(ev, now, &mut one_by_one);
        }
        assert_eq!(
            String::from_utf8(batch).unwrap(),
            String::from_utf8(one_by_one).unwrap()
        );
    }
}

/// A streamed row keeps its columns as sent and the encoders copy integer
/// and text columns from them: the bytes are those of the decoded row, for
/// every type and for the texts where copying would differ.
#[test]
fn rows_as_sent_encode_like_decoded_rows() {
    use cdc_core::{TupleData, TupleValue};
    let mut cases: Vec<(String, Oid, i32, TupleValue<'static>)> = every_type()
        .into_iter()
        .map(|(n, oid, tm, text, ..)| {
            let tv = text.map_or(TupleValue::Null, |t| TupleValue::Text(t.as_bytes()));
            (n.to_owned(), oid, tm, tv)
        })
        .collect();
    let extra: [(Oid, &'static [u8]); 14] = [
        (types::INT8, b"0"),
        (types::INT8, b"-0"),
        (types::INT4, b"007"),
        (types::INT4, b"-007"),
        (types::INT2, b"-1"),
        (types::INT8, b"-9223372036854775808"),
        (types::OID, b"4294967295"),
        (types::TEXT, b"q\"b\\s\n\t\x01\x7f \xc3\xa9\xf0\x9f\x98\x80"),
        (types::VARCHAR, b""),
        (types::BPCHAR, b"ab   "),
        (types::NAME, b"pg_class"),
        (types::JSON, b"{\"a\": [1, \"x\\ny\"]}"),
        (types::JSONB, b"{\"a\": 1}"),
        (types::TEXT, b"plain"),
    ];
    for (i, (oid, raw)) in extra.into_iter().enumerate() {
        cases.push((format!("x{i}"), oid, -1, TupleValue::Text(raw)));
    }
    cases.push(("toast".into(), types::TEXT, -1, TupleValue::UnchangedToast));
    cases.push((
        "bin".into(),
        types::INT8,
        -1,
        TupleValue::Binary(&[0, 0, 0, 0, 0, 0, 1, 0]),
    ));
    let table = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 3,
        schema: "s".into(),
        table: "wire".into(),
        columns: cases
            .iter()
            .map(|(n, oid, tm, _)| col(n, *oid, *tm, false))
            .collect(),
    });
    let values: Vec<TupleValue<'_>> = cases.iter().map(|c| c.3).collect();
    let tuple = TupleData::from_values(&values).unwrap();
    let mut arena = crate::event::RowArena::default();
    let wire = crate::event::decode_row(&mut arena, &table, &tuple).unwrap();
    assert!(wire.as_values().is_none(), "kept as sent");
    let decoded: Vec<Value<'static>> = wire
        .values(&table)
        .iter()
        .map(|v| v.clone().into_owned())
        .collect();
    assert_eq!(decoded.len(), cases.len());
    assert_eq!(decoded[cases.len() - 2], Value::UnchangedToast);
    assert_eq!(decoded[cases.len() - 1], Value::Int8(256));
    let mut as_sent = event(Operation::Update, &table, None, None);
    as_sent.before = Some(wire.clone());
    as_sent.after = Some(wire);
    let as_values = event(
        Operation::Update,
        &table,
        Some(decoded.clone()),
        Some(decoded),
    );
    for enc in [debezium_encoder(), JsonEncoder::new(JsonFormat::Plain)] {
        let bytes = |ev: &ChangeEvent| {
            let mut out = Vec::new();
            enc.encode_at(ev, 1_700_000_000_123, &mut out);
            enc.lines(1_700_000_000_123).encode_line(ev, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(bytes(&as_sent), bytes(&as_values));
    }
}

/// `public.t` after `ALTER TABLE t RENAME COLUMN doc TO body, ADD COLUMN n int8`.
fn schema_change_event() -> ChangeEvent {
    let previous = simple_table();
    let table = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "public".into(),
        table: "t".into(),
        columns: vec![
            col("id", types::INT4, -1, true),
            col("body", types::TEXT, -1, false),
            col("n", types::INT8, -1, false),
        ],
    });
    let change = SchemaChange::between(&previous, &table).unwrap();
    ChangeEvent {
        schema_change: Some(Arc::new(change)),
        ..event(Operation::SchemaChange, &table, None, None)
    }
}

#[test]
fn plain_schema_change_event() {
    let got = encode(&JsonEncoder::new(JsonFormat::Plain), &schema_change_event());
    let column = |name: &str, ty: &str, oid: u32, key: bool| json!({"name": name, "type": ty, "type_oid": oid, "type_modifier": -1, "key": key});
    assert_eq!(
        got,
        json!({
            "op": "schema_change", "schema": "public", "table": "t",
            "commit_lsn": "0/200", "lsn": "0/100", "xid": 755,
            "commit_time": "2023-11-14T22:13:20+00:00", "index": 3,
            "before": null, "after": null,
            "changes": [
                {"kind": "rename_column", "from": "doc", "to": "body"},
                {"kind": "add_column", "column": column("n", "int8", 20, false), "existing_rows": "unknown"},
            ],
            "columns": [
                column("id", "int4", 23, true),
                column("body", "text", 25, false),
                column("n", "int8", 20, false),
            ],
        })
    );
}

#[test]
fn debezium_writes_schema_changes_only_when_asked() {
    let ev = schema_change_event();
    let mut buf = Vec::new();
    debezium_encoder().encode_line(&ev, &mut buf);
    debezium_encoder().encode_lines(std::slice::from_ref(&ev), &mut buf);
    debezium_encoder().lines(0).encode_line(&ev, &mut buf);
    assert!(buf.is_empty(), "off by default: Debezium emits none");

    let enc = JsonEncoder::new(JsonFormat::Debezium(DebeziumOptions {
        schema_changes: true,
        ..DebeziumOptions::default()
    }));
    let mut line = Vec::new();
    enc.lines(1_700_000_000_123).encode_line(&ev, &mut line);
    assert_eq!(line.last(), Some(&b'\n'));
    let got: Json = serde_json::from_slice(&line).unwrap();
    assert_eq!(got["op"], "s");
    assert_eq!(got["source"]["table"], "t");
    assert_eq!(got["databaseName"], "appdb");
    assert_eq!(got["schemaName"], "public");
    assert_eq!(got["ddl"], Json::Null);
    assert_eq!(
        got["transaction"],
        Json::Null,
        "no transaction metadata by default"
    );
    let table = &got["tableChanges"][0];
    assert_eq!(table["type"], "ALTER");
    assert_eq!(table["id"], "\"public\".\"t\"");
    assert_eq!(table["table"]["primaryKeyColumnNames"], json!(["id"]));
    assert_eq!(
        table["table"]["columns"][2],
        json!({"name": "n", "typeName": "int8", "position": 3})
    );
    assert_eq!(got["changes"][0]["kind"], "rename_column");
    assert!(got.get("before").is_none());
}
