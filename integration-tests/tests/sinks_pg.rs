//! Sinks against a real PostgreSQL: the table sink applies changes
//! idempotently, and changes captured from a real pgoutput slot go through
//! the converter into the file sink and the table sink and match the
//! source table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use cdc_core::{types, Decoder, Lsn, ProtocolVersion, TxnAssembler, Value};
use cdc_runtime::encoding::{
    DebeziumOptions, DecimalHandlingMode, JsonEncoder, JsonFormat, SkippedOperations,
};
use cdc_runtime::event::{
    ChangeEvent, ColumnSchema, EventConverter, Operation, Row, SourceInfo, TableSchema,
};
use cdc_runtime::sinks::{
    FileSink, FileSinkOptions, PgTableSink, PgTableSinkOptions, Sink, TableName,
};
use integration_tests::{TestDatabase, TestPostgres};
use serde_json::{json, Value as Json};
use tokio_postgres::Client;

/// A scratch directory removed on drop (no tempfile dependency here).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("pgcdc-sinks-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const WEIRD: &str = "we\"ird t";

async fn sink_for(db: &TestDatabase, options: PgTableSinkOptions) -> PgTableSink {
    PgTableSink::connect(&db.connection_string(), options)
        .await
        .unwrap()
}

fn col(name: &str, type_oid: u32, is_key: bool) -> ColumnSchema {
    ColumnSchema {
        name: name.into(),
        type_oid,
        type_modifier: -1,
        is_key,
    }
}

fn source(index: u32) -> SourceInfo {
    SourceInfo {
        commit_lsn: Lsn::from_u64(0x1000),
        lsn: Lsn::from_u64(0x1000 + u64::from(index)),
        xid: 42,
        commit_time: None,
        database: "src".into(),
        slot: "slot".into(),
    }
}

fn ev(
    op: Operation,
    table: &Arc<TableSchema>,
    before: Option<Vec<Value<'static>>>,
    after: Option<Vec<Value<'static>>>,
    index: u32,
) -> ChangeEvent {
    ChangeEvent {
        op,
        table: Some(table.clone()),
        before: before.map(Row::from_values),
        after: after.map(Row::from_values),
        message: None,
        schema_change: None,
        source: source(index),
        index,
        position: Default::default(),
        boundary: None,
    }
}

fn text(s: &str) -> Value<'static> {
    Value::Text(s.to_owned().into())
}

fn parse(oid: u32, s: &str) -> Value<'static> {
    cdc_core::decode_text(oid, s.as_bytes())
        .unwrap()
        .into_owned()
}

async fn weird_rows(
    client: &Client,
) -> Vec<(
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
)> {
    client
        .query(
            r#"SELECT id, "na me", doc, n::text, arr::text FROM public."we""ird t" ORDER BY id"#,
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

#[tokio::test]
async fn table_sink_applies_every_operation_idempotently() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            r#"CREATE TABLE public."we""ird t" (
                 id int8 PRIMARY KEY, "na me" text, doc text, n numeric, arr int4[],
                 ts timestamptz, b bytea, f float8)"#,
        )
        .await
        .unwrap();
    // Source app.src maps to the oddly named target table.
    let options = PgTableSinkOptions::default().map_table(
        TableName::new("app", "src"),
        TableName::new("public", WEIRD),
    );
    let table = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "app".into(),
        table: "src".into(),
        columns: vec![
            col("id", types::INT8, true),
            col("na me", types::TEXT, false),
            col("doc", types::TEXT, false),
            col("n", types::NUMERIC, false),
            col("arr", types::INT4_ARRAY, false),
            col("ts", types::TIMESTAMPTZ, false),
            col("b", types::BYTEA, false),
            col("f", types::FLOAT8, false),
        ],
    });
    let row = |id: i64, name: &str, doc: Value<'static>| {
        vec![
            Value::Int8(id),
            text(name),
            doc,
            parse(types::NUMERIC, "12345678901234567890.125"),
            parse(types::INT4_ARRAY, "{1,NULL,3}"),
            parse(types::TIMESTAMPTZ, "2024-01-15 04:05:06.5+02"),
            Value::Bytea(b"\x00\x01'\"\\".to_vec().into()),
            Value::Float8(f64::NAN),
        ]
    };
    let key = |id: i64| {
        let mut r = vec![Value::Null; 8];
        r[0] = Value::Int8(id);
        r
    };
    let batch = vec![
        ev(
            Operation::Create,
            &table,
            None,
            Some(row(1, "one", text("big doc 1"))),
            0,
        ),
        ev(
            Operation::Create,
            &table,
            None,
            Some(row(2, "two", text("big doc 2"))),
            1,
        ),
        ev(
            Operation::Create,
            &table,
            None,
            Some(row(3, "three", Value::Null)),
            2,
        ),
        // doc unchanged (TOAST): must keep "big doc 2".
        ev(
            Operation::Update,
            &table,
            None,
            Some(row(2, "TWO", Value::UnchangedToast)),
            3,
        ),
        ev(Operation::Delete, &table, Some(key(3)), None, 4),
        // Key change 1 -> 10.
        ev(
            Operation::Update,
            &table,
            Some(key(1)),
            Some(row(10, "ten", text("d10"))),
            5,
        ),
        // A snapshot read of a row is an upsert too.
        ev(
            Operation::Read,
            &table,
            None,
            Some(row(4, "it's \"4\"", Value::Null)),
            6,
        ),
    ];
    let expected = vec![
        (2, Some("TWO".to_owned()), Some("big doc 2".to_owned())),
        (4, Some("it's \"4\"".to_owned()), None),
        (10, Some("ten".to_owned()), Some("d10".to_owned())),
    ];

    let mut sink = sink_for(&db, options.clone()).await;
    for round in 0..2 {
        sink.write(&batch).await.unwrap();
        sink.flush().await.unwrap();
        let rows = weird_rows(&client).await;
        let got: Vec<_> = rows
            .iter()
            .map(|r| (r.0, r.1.clone(), r.2.clone()))
            .collect();
        assert_eq!(got, expected, "round {round}");
        for r in &rows {
            assert_eq!(r.3.as_deref(), Some("12345678901234567890.125"));
            assert_eq!(r.4.as_deref(), Some("{1,NULL,3}"));
        }
    }
    let other: (String, Vec<u8>, f64) = {
        let r = client
            .query_one(
                r#"SELECT ts::text, b, f FROM public."we""ird t" WHERE id = 2"#,
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    client.batch_execute("SET TimeZone = 'UTC'").await.unwrap();
    let ts_utc: String = client
        .query_one(
            r#"SELECT ts AT TIME ZONE 'UTC' || '' FROM public."we""ird t" WHERE id = 2"#,
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ts_utc, "2024-01-15 02:05:06.5");
    assert_eq!(other.1, b"\x00\x01'\"\\");
    assert!(other.2.is_nan());

    // A fresh sink (as after a restart) replaying the same batch: same rows.
    let mut again = sink_for(&db, options.clone()).await;
    again.write(&batch).await.unwrap();
    assert_eq!(weird_rows(&client).await.len(), 3);

    // Truncate, replayed.
    let trunc = vec![ev(Operation::Truncate, &table, None, None, 7)];
    for _ in 0..2 {
        sink.write(&trunc).await.unwrap();
        assert!(weird_rows(&client).await.is_empty());
    }

    // A failed batch is rolled back as a whole.
    let bad = vec![
        ev(
            Operation::Create,
            &table,
            None,
            Some(row(20, "twenty", Value::Null)),
            0,
        ),
        ev(
            Operation::Create,
            &table,
            None,
            Some({
                let mut r = row(21, "x", Value::Null);
                r[3] = text("not a number");
                r
            }),
            1,
        ),
    ];
    let err = sink.write(&bad).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(weird_rows(&client).await.is_empty());

    sink.close().await.unwrap();
    assert!(sink.write(&batch).await.is_err());
}

#[tokio::test]
async fn table_without_key_is_a_typed_error() {
    let db = TestPostgres::new_database().await.unwrap();
    let table = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "public".into(),
        table: "nokey".into(),
        columns: vec![col("a", types::INT4, false)],
    });
    let mut sink = sink_for(&db, PgTableSinkOptions::default()).await;
    let err = sink
        .write(&[ev(
            Operation::Create,
            &table,
            None,
            Some(vec![Value::Int4(1)]),
            0,
        )])
        .await
        .unwrap_err();
    // The error names the event it failed on, around the typed cause.
    let cdc_runtime::sinks::SinkError::Event { source, table, .. } = &err else {
        panic!("expected an error naming the event: {err}");
    };
    assert_eq!(table, "public.nokey");
    assert!(
        matches!(**source, cdc_runtime::sinks::SinkError::NoKey { .. }),
        "{err}"
    );
    assert!(!err.is_retryable(), "{err}");
}

// ---- end to end from a real slot ------------------------------------------

const SOURCE_DDL: &str = r#"
CREATE TABLE items (id int8 PRIMARY KEY, name text, qty int4, price numeric(12,2),
                    doc text, flag bool, seen timestamptz, tags text[]);
CREATE TABLE "Side table" (k int4 PRIMARY KEY, v text);
"#;

/// One transaction per entry.
const DML: &[&str] = &[
    r#"INSERT INTO items VALUES
  (1, 'apple', 3, 1.50, NULL, true, '2024-01-15 04:05:06.123456+00', '{a,b}'),
  (2, 'pear "x"', 0, 99999.99, (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) i), false, NULL, NULL),
  (3, 'plum', -7, -0.01, 'short', NULL, '-infinity', '{}')"#,
    "UPDATE items SET qty = qty + 1, name = 'pear' WHERE id = 2",
    "UPDATE items SET id = 30 WHERE id = 3",
    "DELETE FROM items WHERE id = 1",
    r#"INSERT INTO "Side table" VALUES (1, 'gone')"#,
    r#"BEGIN;
TRUNCATE "Side table";
INSERT INTO "Side table" VALUES (2, 'kept');
SELECT pg_logical_emit_message(true, 'pgcdc', 'in txn');
COMMIT"#,
    "SELECT pg_logical_emit_message(false, 'pgcdc', 'outside')",
    r#"INSERT INTO items VALUES (4, 'fig', 1, 2, 'd', true, now(), '{"with space","q\"uote"}')"#,
];

async fn capture(client: &Client, slot: &str, binary: bool) -> Vec<ChangeEvent> {
    let binary = if binary { "true" } else { "false" };
    let rows = client
        .query(
            "SELECT lsn::text, data FROM pg_logical_slot_get_binary_changes($1, NULL, NULL, \
             'proto_version', '1', 'publication_names', 'pub', 'messages', 'true', 'binary', $2)",
            &[&slot, &binary],
        )
        .await
        .unwrap();
    let mut decoder = Decoder::new(ProtocolVersion::V1);
    let mut assembler = TxnAssembler::new();
    let mut conv = EventConverter::new("src", slot);
    let mut out = Vec::new();
    for row in rows {
        let lsn: Lsn = row.get::<_, String>(0).parse().unwrap();
        let data: Vec<u8> = row.get(1);
        let msg = decoder.decode(&data).unwrap();
        let mut pending = Vec::new();
        if let Some(e) = assembler.handle_message(msg).unwrap() {
            pending.push(e.into_owned());
        }
        while let Some(e) = assembler.poll_event() {
            pending.push(e);
        }
        for e in pending {
            conv.handle(&e, assembler.relations(), Some(lsn), &mut out)
                .unwrap();
        }
    }
    out
}

/// Replays Debezium JSON lines into `table -> id -> row`, as a consumer would.
fn replay(lines: &[Json]) -> BTreeMap<String, BTreeMap<String, Json>> {
    let mut tables: BTreeMap<String, BTreeMap<String, Json>> = BTreeMap::new();
    for l in lines {
        if l["op"] == "m" {
            continue;
        }
        let t = tables
            .entry(l["source"]["table"].as_str().unwrap().to_owned())
            .or_default();
        let key_of = |row: &Json| {
            let obj = row.as_object().unwrap();
            obj.get("id").or_else(|| obj.get("k")).unwrap().to_string()
        };
        match l["op"].as_str().unwrap() {
            "c" | "u" | "r" => {
                if !l["before"].is_null() {
                    t.remove(&key_of(&l["before"]));
                }
                let mut after = l["after"].clone();
                let key = key_of(&after);
                if let Some(prev) = t.get(&key) {
                    for (k, v) in after.as_object_mut().unwrap() {
                        if v == "__debezium_unavailable_value" {
                            *v = prev[k].clone();
                        }
                    }
                }
                t.insert(key, after);
            }
            "d" => {
                t.remove(&key_of(&l["before"]));
            }
            "t" => t.clear(),
            op => panic!("unexpected op {op}"),
        }
    }
    tables
}

/// The source tables, in the Debezium value mapping, by the database's own JSON functions.
async fn source_state(client: &Client) -> BTreeMap<String, BTreeMap<String, Json>> {
    let mut tables = BTreeMap::new();
    let items = client
        .query(
            "SELECT id, json_build_object('id', id, 'name', name, 'qty', qty, 'price', price::text,
                    'doc', doc, 'flag', flag,
                    'seen', CASE WHEN seen = '-infinity' THEN to_json('-infinity'::text)
                                 ELSE to_json(to_char(seen AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US'))
                            END,
                    'tags', tags)::text FROM items",
            &[],
        )
        .await
        .unwrap();
    let mut m = BTreeMap::new();
    for r in items {
        let id: i64 = r.get(0);
        m.insert(
            id.to_string(),
            serde_json::from_str::<Json>(r.get(1)).unwrap(),
        );
    }
    tables.insert("items".to_owned(), m);
    let side = client
        .query(
            r#"SELECT k, json_build_object('k', k, 'v', v)::text FROM "Side table""#,
            &[],
        )
        .await
        .unwrap();
    let mut m = BTreeMap::new();
    for r in side {
        let k: i32 = r.get(0);
        m.insert(
            k.to_string(),
            serde_json::from_str::<Json>(r.get(1)).unwrap(),
        );
    }
    tables.insert("Side table".to_owned(), m);
    tables
}

/// Our Debezium `seen` is a ZonedTimestamp (6 fraction digits, `Z`);
/// normalise both sides to 6 fraction digits without the zone.
fn normalise(tables: &mut BTreeMap<String, BTreeMap<String, Json>>) {
    for rows in tables.values_mut() {
        for row in rows.values_mut() {
            if let Some(Json::String(s)) = row.get_mut("seen") {
                if s != "-infinity" && s != "infinity" {
                    let s2 = s.trim_end_matches('Z').to_owned();
                    let (secs, frac) = s2.split_once('.').unwrap_or((&s2, ""));
                    *s = format!("{secs}.{frac:0<6}");
                }
            }
        }
    }
}

#[tokio::test]
async fn end_to_end_from_a_real_slot_through_file_and_table_sinks() {
    let src = TestPostgres::new_database().await.unwrap();
    let client = src.connect().await.unwrap();
    client.batch_execute(SOURCE_DDL).await.unwrap();
    for sql in [
        "CREATE PUBLICATION pub FOR ALL TABLES",
        "SELECT pg_create_logical_replication_slot('e2e_text', 'pgoutput')",
        "SELECT pg_create_logical_replication_slot('e2e_bin', 'pgoutput')",
    ]
    .iter()
    .chain(DML)
    {
        client.batch_execute(sql).await.unwrap();
    }
    let mut expected = source_state(&client).await;
    normalise(&mut expected);
    assert_eq!(expected["items"].len(), 3);

    for (slot, binary) in [("e2e_text", false), ("e2e_bin", true)] {
        let events = capture(&client, slot, binary).await;
        let ops: Vec<Operation> = events.iter().map(|e| e.op).collect();
        use Operation::*;
        assert_eq!(
            ops,
            [
                Create, Create, Create, Update, Update, Delete, Create, Truncate, Create, Message,
                Message, Create
            ],
            "{slot}"
        );
        // The update of row 2 left the big TOASTed doc out: explicit, not NULL.
        assert_eq!(
            events[3].after_values().unwrap()[4],
            Value::UnchangedToast,
            "{slot}"
        );
        // The key change carries the old key.
        assert_eq!(events[4].before_values().unwrap()[0], Value::Int8(3));
        // Indexes restart per transaction; the three-row insert is one transaction.
        let idx: Vec<u32> = events.iter().map(|e| e.index).collect();
        assert_eq!(idx, [0, 1, 2, 0, 0, 0, 0, 0, 1, 2, 0, 0], "{slot}");
        // (commit LSN, index) orders and identifies the transactional events.
        let ids: Vec<(Lsn, u32)> = events
            .iter()
            .filter(|e| e.message.as_ref().is_none_or(|m| m.transactional))
            .map(|e| (e.source.commit_lsn, e.index))
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert_eq!(events[10].message.as_ref().unwrap().content, b"outside");

        // File sink, Debezium format, tiny files so rotation happens.
        let dir = TempDir::new(slot);
        let base = dir.0.join("cdc.jsonl");
        // `price::text` on the other side: numeric as Debezium's string mode.
        let encoder = JsonEncoder::new(JsonFormat::Debezium(DebeziumOptions {
            decimal_handling_mode: DecimalHandlingMode::String,
            // The replay applies truncates, which Debezium skips by default.
            skipped_operations: SkippedOperations::NONE,
            ..DebeziumOptions::default()
        }));
        let mut file = FileSink::open(
            FileSinkOptions {
                path: base.clone(),
                max_file_bytes: 4096,
                page_cache_bytes: cdc_runtime::sinks::DEFAULT_PAGE_CACHE_BYTES,
                direct_io: true,
            },
            encoder,
        )
        .await
        .unwrap();
        for chunk in events.chunks(5) {
            file.write(chunk).await.unwrap();
        }
        file.flush().await.unwrap();
        file.close().await.unwrap();
        let files = FileSink::files(&base).unwrap();
        assert!(files.len() > 1, "rotation: {files:?}");
        let mut lines = Vec::new();
        for f in &files {
            for l in std::fs::read_to_string(f).unwrap().lines() {
                lines.push(serde_json::from_str::<Json>(l).unwrap());
            }
        }
        // The key update (`SET id = 30`) is two records, a delete and a
        // create, as Debezium writes it.
        assert_eq!(lines.len(), events.len() + 1);
        let message = lines.iter().find(|l| l["op"] == "m").unwrap();
        assert_eq!(
            message["message"],
            json!({"prefix": "pgcdc", "content": "aW4gdHhu"})
        );
        let mut got = replay(&lines);
        normalise(&mut got);
        assert_eq!(
            got, expected,
            "{slot}: file sink replay differs from the source tables"
        );

        // Table sink on a separate database with the same tables, applied twice.
        let target = TestPostgres::new_database().await.unwrap();
        let tclient = target.connect().await.unwrap();
        tclient.batch_execute(SOURCE_DDL).await.unwrap();
        let mut sink = sink_for(&target, PgTableSinkOptions::default()).await;
        sink.write(&events).await.unwrap();
        sink.write(&events).await.unwrap();
        sink.close().await.unwrap();
        let mut applied = source_state(&tclient).await;
        normalise(&mut applied);
        assert_eq!(
            applied, expected,
            "{slot}: table sink differs from the source tables"
        );
    }
}

#[tokio::test]
async fn an_exactly_once_table_sink_never_applies_a_replayed_event_twice() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    // A trigger counts every row the sink applies, so a second application
    // of the same event shows even though upserts would hide it.
    client
        .batch_execute(
            "CREATE TABLE counted (id int PRIMARY KEY, v int);
             CREATE TABLE applied (n int NOT NULL);
             INSERT INTO applied VALUES (0);
             CREATE FUNCTION count_applied() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN UPDATE applied SET n = n + 1; RETURN NEW; END $$;
             CREATE TRIGGER count_applied BEFORE INSERT OR UPDATE ON counted
               FOR EACH ROW EXECUTE FUNCTION count_applied();",
        )
        .await
        .unwrap();
    let table = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "public".into(),
        table: "counted".into(),
        columns: vec![col("id", types::INT4, true), col("v", types::INT4, false)],
    });
    let insert = |i: u32| {
        ev(
            Operation::Create,
            &table,
            None,
            Some(vec![Value::Int4(i as i32), Value::Int4(1)]),
            i,
        )
    };
    let events: Vec<ChangeEvent> = (0..10).map(insert).collect();
    let options = PgTableSinkOptions::default().exactly_once("job-a");
    let mut sink = sink_for(&db, options.clone()).await;
    // The first 6 events of the transaction, then a crash.
    sink.write(&events[..6]).await.unwrap();
    sink.flush().await.unwrap();
    drop(sink);
    assert_eq!(applied_count(&client).await, 6);

    // A new sink (a restarted pgcdc) gets the whole transaction again.
    let mut sink = sink_for(&db, options.clone()).await;
    sink.write(&events).await.unwrap();
    sink.write(&events).await.unwrap();
    sink.close().await.unwrap();
    assert_eq!(
        applied_count(&client).await,
        10,
        "each event applied exactly once"
    );
    let rows: i64 = client
        .query_one("SELECT count(*) FROM counted", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 10);
    let progress: (String, i64) = client
        .query_one(
            "SELECT commit_lsn::text, event_index FROM pgcdc.sink_progress WHERE sink = 'job-a'",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(progress, (Lsn::from_u64(0x1000).to_string(), 9));

    // Without exactly-once the same replay is applied again (idempotently).
    let mut sink = sink_for(&db, PgTableSinkOptions::default()).await;
    sink.write(&events).await.unwrap();
    sink.close().await.unwrap();
    // (an upsert onto an existing row fires both the insert and the update trigger)
    assert!(applied_count(&client).await >= 20);
}

async fn applied_count(client: &Client) -> i32 {
    client
        .query_one("SELECT n FROM applied", &[])
        .await
        .unwrap()
        .get(0)
}
