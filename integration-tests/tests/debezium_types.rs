//! The golden suite of Debezium values: every row of the Debezium
//! PostgreSQL connector's type-mapping table, in every mode that changes the
//! value, against a real PostgreSQL. Rows are inserted into one table per
//! column type, streamed through a real job (slot, pgoutput, pipeline) into
//! a collecting sink, and each event is encoded in the Debezium format with
//! the case's settings; the column's JSON must be the expected value,
//! written here from Debezium's converters and documentation.
//!
//! Also: an unchanged TOASTed `bytea`/`text[]`/`int[]`/`int8[]`/`text`
//! column writes the typed placeholder, and a delete under `REPLICA
//! IDENTITY DEFAULT` writes the `NOT NULL` columns' defaults in `before`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use cdc_runtime::encoding::{DebeziumOptions, JsonEncoder, JsonFormat};
use cdc_runtime::snapshot::StartupMode;
use cdc_runtime::{
    Capture, ChangeEvent, Job, Operation, Progress, ReplicationConfig, SnapshotSettings,
    SourceOptions, TableRef,
};
use integration_tests::CollectSink as Collect;
use integration_tests::{eventually, TestDatabase, TestPostgres};
use serde_json::{json, Value as Json};
use tokio::sync::{oneshot, watch};

const TIMEOUT: Duration = Duration::from_secs(60);
const PLACEHOLDER: &str = "__debezium_unavailable_value";

/// One value: a column of type `ty` holding `literal`, written with the
/// Debezium `settings`, must be `want`.
struct Case {
    ty: &'static str,
    literal: &'static str,
    settings: &'static [(&'static str, &'static str)],
    want: Json,
}

fn case(
    ty: &'static str,
    literal: &'static str,
    settings: &'static [(&'static str, &'static str)],
    want: Json,
) -> Case {
    Case {
        ty,
        literal,
        settings,
        want,
    }
}

const PRECISE: &[(&str, &str)] = &[];
const STRING: &[(&str, &str)] = &[("decimal.handling.mode", "string")];
const DOUBLE: &[(&str, &str)] = &[("decimal.handling.mode", "double")];
const BYTES: &[(&str, &str)] = &[("binary.handling.mode", "bytes")];
const BASE64: &[(&str, &str)] = &[("binary.handling.mode", "base64")];
const URL_SAFE: &[(&str, &str)] = &[("binary.handling.mode", "base64-url-safe")];
const HEX: &[(&str, &str)] = &[("binary.handling.mode", "hex")];
const ADAPTIVE: &[(&str, &str)] = &[("time.precision.mode", "adaptive")];
const MICROS: &[(&str, &str)] = &[("time.precision.mode", "adaptive_time_microseconds")];
const CONNECT: &[(&str, &str)] = &[("time.precision.mode", "connect")];
const NUMERIC: &[(&str, &str)] = &[("interval.handling.mode", "numeric")];
const ISO: &[(&str, &str)] = &[("interval.handling.mode", "string")];
const HSTORE_JSON: &[(&str, &str)] = &[("hstore.handling.mode", "json")];
const HSTORE_MAP: &[(&str, &str)] = &[("hstore.handling.mode", "map")];
const DEFAULT: &[(&str, &str)] = &[];

fn point(x: f64, y: f64, wkb: &str) -> Json {
    json!({"x": x, "y": y, "wkb": wkb, "srid": null})
}

/// One case per row of Debezium's PostgreSQL type mapping, per mode.
fn cases() -> Vec<Case> {
    vec![
        case("boolean", "true", DEFAULT, json!(true)),
        case("smallint", "-32768", DEFAULT, json!(-32768)),
        case("integer", "2147483647", DEFAULT, json!(2147483647)),
        case("bigint", "-9223372036854775808", DEFAULT, json!(i64::MIN)),
        case("oid", "4294967295", DEFAULT, json!(4294967295u32)),
        case("real", "1.5", DEFAULT, json!(1.5)),
        case("real", "1", DEFAULT, json!(1.0)),
        case("double precision", "-0.25", DEFAULT, json!(-0.25)),
        case("double precision", "'NaN'", DEFAULT, json!("NaN")),
        case(
            "double precision",
            "'-Infinity'",
            DEFAULT,
            json!("-Infinity"),
        ),
        // numeric(10,2): Connect Decimal; 123411 = 0x01e213.
        case("numeric(10,2)", "1234.11", PRECISE, json!("AeIT")),
        case("numeric(10,2)", "1234.11", STRING, json!("1234.11")),
        case("numeric(10,2)", "1234.11", DOUBLE, json!(1234.11)),
        case("numeric(10,2)", "-1234.11", PRECISE, json!("/h3t")),
        // numeric: VariableScaleDecimal, trailing zeros stripped.
        case(
            "numeric",
            "1234.5600",
            PRECISE,
            json!({"scale": 2, "value": "AeJA"}),
        ),
        case("numeric", "1234.5600", STRING, json!("1234.5600")),
        case("numeric", "1234.5600", DOUBLE, json!(1234.56)),
        case("numeric", "0.00000010", STRING, json!("1.0E-7")),
        case("numeric", "'NaN'", STRING, json!("NAN")),
        case("numeric", "'NaN'", DOUBLE, json!("NaN")),
        case("numeric", "'NaN'", PRECISE, Json::Null),
        case("numeric", "'Infinity'", STRING, json!("POSITIVE_INFINITY")),
        case("numeric", "'-Infinity'", DOUBLE, json!("-Infinity")),
        case(
            "numeric(5,2)[]",
            "'{1.5,2.25}'",
            PRECISE,
            json!(["AJY=", "AOE="]),
        ),
        case(
            "numeric(5,2)[]",
            "'{1.5,2.25}'",
            STRING,
            json!(["1.50", "2.25"]),
        ),
        // money (lc_monetary C): scale 2.
        case("money", "1234.11", PRECISE, json!("AeIT")),
        case("money", "1234.11", STRING, json!("1234.11")),
        case("money", "1234.11", DOUBLE, json!(1234.11)),
        case("money", "-1234.11", PRECISE, json!("/h3t")),
        case("money", "-1234.11", STRING, json!("-1234.11")),
        case("money", "-1234.11", DOUBLE, json!(-1234.11)),
        case("char(3)", "'ab'", DEFAULT, json!("ab ")),
        case("varchar(10)", "'v\"q'", DEFAULT, json!("v\"q")),
        case("text", "E'line\\nbreak é'", DEFAULT, json!("line\nbreak é")),
        case("\"char\"", "'x'", DEFAULT, json!("x")),
        case("name", "'pg_class'", DEFAULT, json!("pg_class")),
        case("bytea", "'\\x0001fe'", BYTES, json!("AAH+")),
        case("bytea", "'\\x0001fe'", BASE64, json!("AAH+")),
        case("bytea", "'\\xfbff'", URL_SAFE, json!("-_8=")),
        case("bytea", "'\\x0001fe'", HEX, json!("0001fe")),
        case(
            "json",
            "'{\"a\": [1, 2]}'",
            DEFAULT,
            json!("{\"a\": [1, 2]}"),
        ),
        case("jsonb", "'{\"a\": 1}'", DEFAULT, json!("{\"a\": 1}")),
        case("xml", "'<a>1</a>'", DEFAULT, json!("<a>1</a>")),
        case(
            "uuid",
            "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
            DEFAULT,
            json!("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        ),
        case("inet", "'192.168.0.1/24'", DEFAULT, json!("192.168.0.1/24")),
        case("cidr", "'10.0.0.0/8'", DEFAULT, json!("10.0.0.0/8")),
        case(
            "macaddr",
            "'08:00:2b:01:02:03'",
            DEFAULT,
            json!("08:00:2b:01:02:03"),
        ),
        case(
            "macaddr8",
            "'08:00:2b:01:02:03:04:05'",
            DEFAULT,
            json!("08:00:2b:01:02:03:04:05"),
        ),
        // 2024-01-15 is day 19737.
        case("date", "'2024-01-15'", ADAPTIVE, json!(19737)),
        case("date", "'2024-01-15'", MICROS, json!(19737)),
        case("date", "'2024-01-15'", CONNECT, json!(1_705_276_800_000i64)),
        case("date", "'infinity'", ADAPTIVE, json!(-2_147_472_692i64)),
        case("date", "'-infinity'", ADAPTIVE, json!(-2_147_472_691i64)),
        case("time", "'04:05:06.789'", ADAPTIVE, json!(14_706_789_000i64)),
        case("time", "'04:05:06.789'", MICROS, json!(14_706_789_000i64)),
        case("time", "'04:05:06.789'", CONNECT, json!(14_706_789)),
        case("time(3)", "'04:05:06.789'", ADAPTIVE, json!(14_706_789)),
        case(
            "time(3)",
            "'04:05:06.789'",
            MICROS,
            json!(14_706_789_000i64),
        ),
        case("time(3)", "'04:05:06.789'", CONNECT, json!(14_706_789)),
        case("timetz", "'04:05:06+02'", DEFAULT, json!("02:05:06Z")),
        case(
            "timetz",
            "'04:05:06.5-01:30'",
            DEFAULT,
            json!("05:35:06.5Z"),
        ),
        case(
            "timestamp",
            "'2024-01-15 04:05:06.123456'",
            ADAPTIVE,
            json!(1_705_291_506_123_456i64),
        ),
        case(
            "timestamp",
            "'2024-01-15 04:05:06.123456'",
            MICROS,
            json!(1_705_291_506_123_456i64),
        ),
        case(
            "timestamp",
            "'2024-01-15 04:05:06.123456'",
            CONNECT,
            json!(1_705_291_506_123i64),
        ),
        case(
            "timestamp(3)",
            "'2024-01-15 04:05:06.123'",
            ADAPTIVE,
            json!(1_705_291_506_123i64),
        ),
        case(
            "timestamp(3)",
            "'2024-01-15 04:05:06.123'",
            MICROS,
            json!(1_705_291_506_123i64),
        ),
        case(
            "timestamp",
            "'infinity'",
            ADAPTIVE,
            json!(9_223_372_036_825_200_000i64),
        ),
        case(
            "timestamp",
            "'-infinity'",
            ADAPTIVE,
            json!(-9_223_372_036_832_400_000i64),
        ),
        case(
            "timestamp",
            "'infinity'",
            CONNECT,
            json!(9_223_372_036_825_200i64),
        ),
        case(
            "timestamptz",
            "'2024-01-15 04:05:06+00'",
            DEFAULT,
            json!("2024-01-15T04:05:06.000000Z"),
        ),
        case(
            "timestamptz",
            "'2024-01-15 04:05:06.5+02'",
            DEFAULT,
            json!("2024-01-15T02:05:06.500000Z"),
        ),
        case(
            "timestamptz(3)",
            "'2024-01-15 04:05:06.5+02'",
            DEFAULT,
            json!("2024-01-15T02:05:06.500Z"),
        ),
        case(
            "timestamptz(0)",
            "'2024-01-15 04:05:06+00'",
            DEFAULT,
            json!("2024-01-15T04:05:06Z"),
        ),
        case("timestamptz", "'infinity'", DEFAULT, json!("infinity")),
        case("timestamptz", "'-infinity'", CONNECT, json!("-infinity")),
        case(
            "interval",
            "'1 year 2 mons 3 days 04:05:06.78'",
            NUMERIC,
            json!(37_091_106_780_000i64),
        ),
        case(
            "interval",
            "'1 year 2 mons 3 days 04:05:06.78'",
            ISO,
            json!("P1Y2M3DT4H5M6.78S"),
        ),
        case("interval", "'0'", NUMERIC, json!(0)),
        case("interval", "'0'", ISO, json!("P0Y0M0DT0H0M0S")),
        case(
            "interval",
            "'-1 days +02:03:00'",
            ISO,
            json!("P0Y0M-1DT2H3M0S"),
        ),
        case("bit(1)", "B'1'", DEFAULT, json!(true)),
        case("bit(1)", "B'0'", DEFAULT, json!(false)),
        // 0x0102, little-endian.
        case("bit(16)", "B'0000000100000010'", DEFAULT, json!("AgE=")),
        case("varbit(8)", "B'101'", DEFAULT, json!("BQ==")),
        case(
            "point",
            "'(1.5,2)'",
            DEFAULT,
            point(1.5, 2.0, "AQEAAAAAAAAAAAD4PwAAAAAAAABA"),
        ),
        case(
            "hstore",
            "'\"a\"=>\"1\", \"b\"=>NULL'",
            HSTORE_JSON,
            json!("{\"a\":\"1\",\"b\":null}"),
        ),
        case(
            "hstore",
            "'\"a\"=>\"1\", \"b\"=>NULL'",
            HSTORE_MAP,
            json!({"a": "1", "b": null}),
        ),
        case("ltree", "'Top.Science'", DEFAULT, json!("Top.Science")),
        case("citext", "'MiXeD'", DEFAULT, json!("MiXeD")),
        case("mood", "'happy'", DEFAULT, json!("happy")),
        case("mood[]", "'{sad,happy}'", DEFAULT, json!(["sad", "happy"])),
        case("int4range", "'[1,10)'", DEFAULT, json!("[1,10)")),
        case("numrange", "'[1.5,2.5]'", DEFAULT, json!("[1.5,2.5]")),
        case(
            "daterange",
            "'[2024-01-01,2024-02-01)'",
            DEFAULT,
            json!("[2024-01-01,2024-02-01)"),
        ),
        case(
            "tsrange",
            "'[2024-01-01 00:00,2024-01-02 00:00)'",
            DEFAULT,
            json!("[\"2024-01-01 00:00:00\",\"2024-01-02 00:00:00\")"),
        ),
        case("tsvector", "'a fat cat'", DEFAULT, json!("'a' 'cat' 'fat'")),
        case("posint", "5", DEFAULT, json!(5)),
        case("label", "'tag'", DEFAULT, json!("tag")),
        case("integer[]", "'{1,NULL,3}'", DEFAULT, json!([1, null, 3])),
        case("bigint[]", "'{-1}'", DEFAULT, json!([-1])),
        case("text[]", "'{a,\"b c\"}'", DEFAULT, json!(["a", "b c"])),
        case("varchar[]", "'{x}'", DEFAULT, json!(["x"])),
        case("boolean[]", "'{t,f}'", DEFAULT, json!([true, false])),
        case("double precision[]", "'{1.5}'", DEFAULT, json!([1.5])),
        case("date[]", "'{2024-01-15}'", ADAPTIVE, json!([19737])),
        case(
            "date[]",
            "'{2024-01-15}'",
            CONNECT,
            json!([1_705_276_800_000i64]),
        ),
        case(
            "timestamptz[]",
            "'{\"2024-01-15 04:05:06+00\"}'",
            DEFAULT,
            json!(["2024-01-15T04:05:06.000000Z"]),
        ),
        case(
            "uuid[]",
            "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'",
            DEFAULT,
            json!(["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
        ),
        case(
            "jsonb[]",
            "ARRAY['{\"a\": 1}'::jsonb]",
            DEFAULT,
            json!(["{\"a\": 1}"]),
        ),
        case("inet[]", "'{10.0.0.1}'", DEFAULT, json!(["10.0.0.1"])),
    ]
}

const SETUP: &str = "
    CREATE EXTENSION hstore;
    CREATE EXTENSION ltree;
    CREATE EXTENSION citext;
    CREATE TYPE mood AS ENUM ('sad', 'happy');
    CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
    CREATE DOMAIN label AS text;
    SET lc_monetary = 'C';
";

struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<Progress, cdc_runtime::JobError>>,
}

/// Starts a job on `slot` capturing `tables` into `sink`; for a streaming
/// job, returns once its slot exists (streaming starts there).
async fn start(
    db: &TestDatabase,
    tables: &[String],
    sink: Collect,
    mode: StartupMode,
    slot: &'static str,
) -> Running {
    let rc: ReplicationConfig = db.replication_connection_string().parse().unwrap();
    let capture = Capture::Tables(
        tables
            .iter()
            .map(|t| TableRef::parse(&format!("public.{t}")).unwrap())
            .collect(),
    );
    let job = Job::builder(SourceOptions::new(rc, slot, "dbz_types_pub", capture))
        .custom_sink(sink)
        .snapshot(SnapshotSettings {
            mode,
            ..SnapshotSettings::default()
        })
        .build()
        .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let (tx, _progress) = watch::channel(Progress::default());
    let task = tokio::spawn(job.run_with_progress(
        async move {
            let _ = stopped.await;
        },
        tx,
    ));
    if mode != StartupMode::Latest {
        return Running { stop, task };
    }
    let client = db.connect().await.unwrap();
    eventually("the job's slot", TIMEOUT, || {
        let client = &client;
        async move {
            let n: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                    &[&slot],
                )
                .await
                .unwrap()
                .get(0);
            (n == 1).then_some(())
        }
    })
    .await;
    Running { stop, task }
}

fn options(settings: &[(&str, &str)]) -> DebeziumOptions {
    let mut o = DebeziumOptions::default();
    for (name, value) in settings {
        o.set(name, value).unwrap();
    }
    o
}

fn encode(event: &ChangeEvent, settings: &[(&str, &str)]) -> Json {
    let encoder = JsonEncoder::new(JsonFormat::Debezium(options(settings)));
    let mut buf = Vec::new();
    encoder.encode_at(event, 0, &mut buf);
    // The line encoder (the sinks' path) writes the same bytes.
    let mut line = Vec::new();
    encoder.lines(0).encode_line(event, &mut line);
    assert_eq!(line.strip_suffix(b"\n"), Some(&buf[..]));
    serde_json::from_slice(&buf)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&buf)))
}

fn table_name(event: &ChangeEvent) -> &str {
    event.table_name().unwrap_or_default()
}

/// Checks every case against its row's event of `op` among `events`.
fn check_cases(
    cases: &[Case],
    events: &[ChangeEvent],
    op: Operation,
    table_of: &dyn Fn(&str) -> String,
) {
    let mut failures = Vec::new();
    for (id, c) in cases.iter().enumerate() {
        let table = table_of(c.ty);
        let event = events
            .iter()
            .find(|e| {
                e.op == op
                    && table_name(e) == table
                    && encode(e, DEFAULT)["after"]["id"] == json!(id)
            })
            .unwrap_or_else(|| panic!("no {op:?} event of case {id} ({})", c.ty));
        let got = encode(event, c.settings)["after"]["v"].clone();
        if got != c.want {
            failures.push(format!(
                "case {id}: {} {} with {:?}: got {got}, want {}",
                c.ty, c.literal, c.settings, c.want
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{op:?}: {} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_in_every_mode_as_debezium_writes_it() {
    let cases = cases();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client.batch_execute(SETUP).await.unwrap();

    // One table per column type.
    let mut types: Vec<&str> = cases.iter().map(|c| c.ty).collect();
    types.sort_unstable();
    types.dedup();
    let table_of = |ty: &str| format!("t{}", types.iter().position(|t| *t == ty).unwrap());
    let mut tables: Vec<String> = Vec::new();
    for ty in &types {
        let t = table_of(ty);
        client
            .batch_execute(&format!(
                "CREATE TABLE {t} (id integer PRIMARY KEY, v {ty})"
            ))
            .await
            .unwrap();
        tables.push(t);
    }
    client
        .batch_execute(
            "CREATE TABLE toasty (id integer PRIMARY KEY, small integer, doc text, bin bytea,
                                  tags text[], ints integer[], longs bigint[]);
             ALTER TABLE toasty ALTER doc SET STORAGE EXTERNAL, ALTER bin SET STORAGE EXTERNAL,
                 ALTER tags SET STORAGE EXTERNAL, ALTER ints SET STORAGE EXTERNAL,
                 ALTER longs SET STORAGE EXTERNAL;
             CREATE TABLE req (id integer PRIMARY KEY, b boolean NOT NULL,
                               n numeric(10,2) NOT NULL, nv numeric NOT NULL, t text NOT NULL,
                               by bytea NOT NULL, ts timestamptz NOT NULL, d date NOT NULL,
                               iv interval NOT NULL, arr integer[] NOT NULL,
                               m money NOT NULL, opt text)",
        )
        .await
        .unwrap();
    tables.push("toasty".into());
    tables.push("req".into());

    let sink = Collect::default();
    let run = start(
        &db,
        &tables,
        sink.clone(),
        StartupMode::Latest,
        "dbz_stream",
    )
    .await;

    let writer = db.connect().await.unwrap();
    writer.batch_execute("SET lc_monetary = 'C'").await.unwrap();
    for (id, c) in cases.iter().enumerate() {
        writer
            .batch_execute(&format!(
                "INSERT INTO {} VALUES ({id}, {})",
                table_of(c.ty),
                c.literal
            ))
            .await
            .unwrap_or_else(|e| panic!("{} {}: {e}", c.ty, c.literal));
    }
    writer
        .batch_execute(
            "INSERT INTO toasty SELECT 1, 1, repeat('x', 10000), convert_to(repeat('y', 10000), 'UTF8'),
                    array_fill('z'::text, ARRAY[3000]), array_fill(7, ARRAY[3000]),
                    array_fill(8::bigint, ARRAY[3000]);
             UPDATE toasty SET small = 2 WHERE id = 1;
             INSERT INTO req VALUES (1, true, 1.5, 2.5, 'x', '\\x01', now(), now(), '1 day',
                                     '{1}', 1.5, 'o');
             DELETE FROM req WHERE id = 1",
        )
        .await
        .unwrap();

    let events = eventually("every change", TIMEOUT, || async {
        let events = sink.0.lock().unwrap();
        let creates = events.iter().filter(|e| e.op == Operation::Create).count();
        let done = events.iter().any(|e| e.op == Operation::Delete);
        (creates >= cases.len() + 2 && done).then(|| events.clone())
    })
    .await;
    run.stop.send(()).unwrap();
    run.task.await.unwrap().unwrap();
    // The pipeline looked up the catalog facts (NOT NULL, types) before
    // the events reached the sink.
    for e in &events {
        let t = e.table.as_ref().expect("row events");
        assert!(t.facts.get().is_some(), "no catalog facts for {}", t.table);
    }

    check_cases(&cases, &events, Operation::Create, &table_of);

    // An update that leaves the TOASTed columns alone: typed placeholders.
    let update = events
        .iter()
        .find(|e| e.op == Operation::Update && table_name(e) == "toasty")
        .expect("the update");
    let ph_bytes: Vec<i64> = PLACEHOLDER.bytes().map(i64::from).collect();
    let after = &encode(update, DEFAULT)["after"];
    assert_eq!(after["small"], json!(2));
    assert_eq!(after["doc"], json!(PLACEHOLDER));
    assert_eq!(
        after["bin"],
        json!("X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==")
    );
    assert_eq!(after["tags"], json!([PLACEHOLDER]));
    assert_eq!(after["ints"], json!(ph_bytes));
    assert_eq!(after["longs"], json!(ph_bytes));
    let after = &encode(update, HEX)["after"];
    assert_eq!(
        after["bin"],
        json!(PLACEHOLDER),
        "the text in the other binary modes"
    );
    let after = &encode(update, &[("unavailable.value.placeholder", "hex:00ff")])["after"];
    assert_eq!(after["bin"], json!("AP8="));
    assert_eq!(after["ints"], json!([0, -1]));

    // A delete under REPLICA IDENTITY DEFAULT: the key, and the NOT NULL
    // columns' defaults.
    let delete = events
        .iter()
        .find(|e| e.op == Operation::Delete && table_name(e) == "req")
        .expect("the delete");
    assert_eq!(
        encode(delete, DEFAULT)["before"],
        json!({
            "id": 1, "b": false, "n": "AA==", "nv": {"scale": 0, "value": "AA=="}, "t": "",
            "by": "", "ts": "1970-01-01T00:00:00Z", "d": 0, "iv": 0, "arr": [],
            "m": "AA==", "opt": null
        })
    );
    assert_eq!(
        encode(
            delete,
            &[
                ("decimal.handling.mode", "string"),
                ("interval.handling.mode", "string")
            ]
        )["before"],
        json!({
            "id": 1, "b": false, "n": "0.00", "nv": "0", "t": "",
            "by": "", "ts": "1970-01-01T00:00:00Z", "d": 0, "iv": "P0Y0M0DT0H0M0S", "arr": [],
            "m": "0.00", "opt": null
        })
    );

    // The same rows read by a snapshot (another job): the same values.
    let sink = Collect::default();
    let run = start(
        &db,
        &tables,
        sink.clone(),
        StartupMode::SnapshotOnly,
        "dbz_snap",
    )
    .await;
    let reads = eventually("every row read by the snapshot", TIMEOUT, || async {
        let events = sink.0.lock().unwrap();
        let reads = events.iter().filter(|e| e.op == Operation::Read).count();
        // Every case's row and the `toasty` row.
        (reads > cases.len()).then(|| events.clone())
    })
    .await;
    let _ = run.stop.send(());
    run.task.await.unwrap().unwrap();
    check_cases(&cases, &reads, Operation::Read, &table_of);
}
