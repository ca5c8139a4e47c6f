//! The Debezium records against a real server, compared with what Debezium
//! 2.7's PostgreSQL connector writes: times and names in the envelope and
//! `source`, the `transaction` block and the BEGIN/END records, snapshot
//! markers, `source.sequence` across transactions and a restart,
//! tombstones, a primary-key change, skipped operations and keys. Fields
//! that vary from run to run (times, LSNs, xids) are checked for their
//! type and their relationships, then blanked out for an exact comparison.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use cdc_runtime::encoding::{DebeziumOptions, JsonFormat, SkippedOperations, VERSION};
use cdc_runtime::sinks::{FileSink, FileSinkOptions, SinkOptions};
use cdc_runtime::snapshot::{SnapshotOptions, StartupMode};
use cdc_runtime::{
    Capture, CheckpointSettings, Job, Progress, ReplicationConfig, SnapshotSettings, SourceOptions,
    StoreOptions, TableRef,
};
use integration_tests::{eventually, TestDatabase, TestPostgres};
use serde_json::{json, Value};
use tokio::sync::oneshot;

const TIMEOUT: Duration = Duration::from_secs(60);

struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<Progress, cdc_runtime::JobError>>,
}

fn init_logging() {
    if let Ok(filter) = std::env::var("PGCDC_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// A job over `tables` of `db` writing Debezium lines with `opts` into
/// `dir/events.jsonl`, checkpointing into `db`.
fn start(
    db: &TestDatabase,
    dir: &Path,
    tables: &[&str],
    opts: DebeziumOptions,
    mode: StartupMode,
) -> Running {
    init_logging();
    let rc: ReplicationConfig = db.replication_connection_string().parse().unwrap();
    let tables = Capture::Tables(tables.iter().map(|t| TableRef::parse(t).unwrap()).collect());
    let mut checkpoints = CheckpointSettings::new(StoreOptions::new(rc.clone()));
    checkpoints.interval = Duration::from_millis(100);
    let slot = slot_of(dir);
    let job = Job::builder(SourceOptions::new(rc, &slot, format!("{slot}_pub"), tables))
        .sink(SinkOptions::File {
            options: FileSinkOptions {
                path: dir.join("events.jsonl"),
                max_file_bytes: 0,
                page_cache_bytes: cdc_runtime::sinks::DEFAULT_PAGE_CACHE_BYTES,
                direct_io: true,
            },
            format: JsonFormat::Debezium(opts),
        })
        .checkpoints(checkpoints)
        .snapshot(SnapshotSettings {
            mode,
            start_lsn: None,
            options: SnapshotOptions::default(),
        })
        .build()
        .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let result = job
            .run(async move {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = &result {
            eprintln!("the job failed: {e}");
        }
        result
    });
    Running { stop, task }
}

/// The slot (and job) of the runs writing into `dir`: one per directory,
/// as slots are the whole cluster's.
fn slot_of(dir: &Path) -> String {
    let name = dir.file_name().unwrap().to_string_lossy();
    name.replace('-', "_")
}

/// Waits until the job writing into `dir` streams from its slot: changes
/// committed before the slot reached its consistent point are not in it
/// (while it is being created it is active already, and under load other
/// transactions of the cluster hold it back).
async fn streaming(db: &TestDatabase, dir: &Path) {
    let client = db.connect().await.unwrap();
    let slot = slot_of(dir);
    eventually("the job's slot to be active", TIMEOUT, || async {
        let row = client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active \
                 AND confirmed_flush_lsn IS NOT NULL",
                &[&slot],
            )
            .await
            .unwrap();
        row.map(|_| ())
    })
    .await;
}

async fn stop(run: Running) {
    let _ = run.stop.send(());
    tokio::time::timeout(TIMEOUT, run.task)
        .await
        .expect("the job stops")
        .unwrap()
        .unwrap();
}

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pgcdc-dbz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every whole line written so far, parsed, in file order.
fn lines(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for file in FileSink::files(&dir.join("events.jsonl")).unwrap_or_default() {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines() {
            if let Ok(v) = serde_json::from_str(line) {
                out.push(v);
            }
        }
    }
    out
}

/// Waits until `pred` holds for the lines, and returns them.
async fn until(dir: &Path, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    eventually(what, TIMEOUT, || async {
        let l = lines(dir);
        pred(&l).then_some(l)
    })
    .await
}

fn options() -> DebeziumOptions {
    DebeziumOptions {
        name: "app".into(),
        ..DebeziumOptions::default()
    }
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Checks the fields of a change record that vary (times, LSNs, xid) for
/// their types and relationships, then blanks them out.
fn normalized(line: &Value) -> Value {
    let mut v = line.clone();
    let target = match v.get_mut("value") {
        Some(inner) => inner,
        None => &mut v,
    };
    if target.is_null() {
        return v;
    }
    let s = &target["source"];
    let (ms, us, ns) = (
        u64_of(&s["ts_ms"]),
        u64_of(&s["ts_us"]),
        u64_of(&s["ts_ns"]),
    );
    assert_eq!(us / 1000, ms, "source.ts_us is ts_ms in microseconds: {s}");
    assert_eq!(
        ns,
        us * 1000,
        "source.ts_ns: the commit time has microseconds: {s}"
    );
    let lsn = u64_of(&s["lsn"]);
    let seq: Value = serde_json::from_str(s["sequence"].as_str().unwrap()).unwrap();
    assert_eq!(
        seq[1],
        json!(lsn.to_string()),
        "sequence ends with the event's LSN"
    );
    if let Some(prev) = seq[0].as_str() {
        assert!(
            prev.parse::<u64>().unwrap() <= lsn,
            "the previous commit comes first"
        );
    }
    let (tms, tus, tns) = (
        u64_of(&target["ts_ms"]),
        u64_of(&target["ts_us"]),
        u64_of(&target["ts_ns"]),
    );
    assert_eq!(tus / 1000, tms);
    assert_eq!(tns / 1000, tus);
    assert!(tms >= ms, "processed after the commit");
    for key in ["ts_ms", "ts_us", "ts_ns"] {
        target[key] = json!("T");
        target["source"][key] = json!("T");
    }
    target["source"]["lsn"] = json!("LSN");
    target["source"]["sequence"] = json!("SEQ");
    if target["source"]["txId"].is_u64() {
        target["source"]["txId"] = json!("XID");
    }
    if target["transaction"].is_object() {
        target["transaction"]["id"] = json!("ID");
    }
    v
}

fn change(
    op: &str,
    before: Value,
    after: Value,
    table: &str,
    snapshot: &str,
    transaction: Value,
) -> Value {
    json!({
        "before": before, "after": after,
        "source": {"version": VERSION, "connector": "postgresql", "name": "app",
                   "ts_ms": "T", "snapshot": snapshot, "db": "SKIP", "sequence": "SEQ",
                   "ts_us": "T", "ts_ns": "T", "schema": "public", "table": table,
                   "txId": "XID", "lsn": "LSN", "xmin": null},
        "op": op, "ts_ms": "T", "ts_us": "T", "ts_ns": "T", "transaction": transaction
    })
}

/// `change` with the database name filled in.
fn expect(db: &TestDatabase, mut v: Value) -> Value {
    let name = db.connection_info().dbname().to_owned();
    let target = match v.get_mut("value") {
        Some(inner) => inner,
        None => &mut v,
    };
    target["source"]["db"] = json!(name);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelope_times_version_and_name() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, doc text)")
        .await
        .unwrap();
    let dir = dir("times");
    let run = start(&db, &dir, &["public.t"], options(), StartupMode::Latest);
    streaming(&db, &dir).await;
    client
        .execute("INSERT INTO t VALUES (1, 'a')", &[])
        .await
        .unwrap();
    let got = until(&dir, "the insert", |l| l.len() == 1).await;
    stop(run).await;
    assert_eq!(
        normalized(&got[0]),
        expect(
            &db,
            change(
                "c",
                Value::Null,
                json!({"id": 1, "doc": "a"}),
                "t",
                "false",
                Value::Null
            )
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_metadata_blocks_and_begin_end_records() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY)")
        .await
        .unwrap();
    // Off by default: `transaction` is null and no BEGIN/END is written.
    let off = dir("txn-off");
    let run = start(
        &db,
        &off,
        &["public.a", "public.b"],
        options(),
        StartupMode::Latest,
    );
    streaming(&db, &off).await;
    client
        .execute("INSERT INTO a VALUES (100)", &[])
        .await
        .unwrap();
    let got = until(&off, "the insert", |l| !l.is_empty()).await;
    stop(run).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["transaction"], Value::Null);

    let on = dir("txn-on");
    let opts = DebeziumOptions {
        provide_transaction_metadata: true,
        ..options()
    };
    let run = start(
        &db,
        &on,
        &["public.a", "public.b"],
        opts,
        StartupMode::Latest,
    );
    streaming(&db, &on).await;
    client
        .batch_execute("BEGIN; INSERT INTO a VALUES (1); INSERT INTO b VALUES (1); INSERT INTO a VALUES (2); COMMIT")
        .await
        .unwrap();
    let got = until(&on, "BEGIN, three changes, END", |l| l.len() >= 5).await;
    stop(run).await;
    assert_eq!(got.len(), 5, "{got:#?}");
    let (begin, end) = (&got[0], &got[4]);
    let xid = u64_of(&got[1]["source"]["txId"]);
    let id = |v: &Value| -> (u64, u64) {
        let (x, l) = v["id"].as_str().unwrap().split_once(':').unwrap();
        (x.parse().unwrap(), l.parse().unwrap())
    };
    // Each record's id is "<txId>:<its LSN>".
    let mut last = 0;
    for (i, (rec, order)) in got[1..4].iter().zip([1, 1, 2]).enumerate() {
        let t = &rec["transaction"];
        assert_eq!(id(t), (xid, u64_of(&rec["source"]["lsn"])));
        assert_eq!(t["total_order"], json!(i + 1));
        assert_eq!(t["data_collection_order"], json!(order));
        assert_eq!(u64_of(&rec["source"]["txId"]), xid);
        last = u64_of(&rec["source"]["lsn"]);
    }
    // BEGIN at the transaction's start, END at its commit's end.
    let (bx, blsn) = id(begin);
    let (ex, elsn) = id(end);
    assert_eq!((bx, ex), (xid, xid));
    assert!(
        blsn <= u64_of(&got[1]["source"]["lsn"]) && elsn > last,
        "{blsn} {elsn} {last}"
    );
    let commit_ms = &got[1]["source"]["ts_ms"];
    assert_eq!(
        begin,
        &json!({"status": "BEGIN", "id": begin["id"], "ts_ms": commit_ms, "event_count": null, "data_collections": null})
    );
    assert_eq!(
        end,
        &json!({"status": "END", "id": end["id"], "ts_ms": commit_ms, "event_count": 3,
                "data_collections": [{"data_collection": "public.a", "event_count": 2},
                                     {"data_collection": "public.b", "event_count": 1}]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_reads_are_marked_first_last_and_incremental() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a SELECT generate_series(1, 3);
             CREATE TABLE b (id int PRIMARY KEY); INSERT INTO b SELECT generate_series(1, 2);",
        )
        .await
        .unwrap();
    let dir = dir("snapshot");
    let run = start(
        &db,
        &dir,
        &["public.a", "public.b"],
        options(),
        StartupMode::Initial,
    );
    streaming(&db, &dir).await;
    let reads = until(&dir, "the snapshot's five rows", |l| l.len() >= 5).await;
    let marks: Vec<(String, String)> = reads
        .iter()
        .map(|l| {
            assert_eq!(l["op"], "r");
            assert_eq!(l["transaction"], Value::Null, "reads carry no transaction");
            let seq: Value =
                serde_json::from_str(l["source"]["sequence"].as_str().unwrap()).unwrap();
            assert_eq!(
                seq[0],
                Value::Null,
                "a snapshot read's sequence starts with null"
            );
            (
                l["source"]["table"].as_str().unwrap().to_owned(),
                l["source"]["snapshot"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // Tables one after the other (chunks of 32768 rows: one chunk each).
    let (first, second) = if marks[0].0 == "a" {
        ("a", "b")
    } else {
        ("b", "a")
    };
    let n_first = if first == "a" { 3 } else { 2 };
    let mut want = vec![(first, "first")];
    want.extend(std::iter::repeat_n((first, "true"), n_first - 2));
    want.push((first, "last_in_data_collection"));
    want.push((second, "first_in_data_collection"));
    want.extend(std::iter::repeat_n((second, "true"), 5 - n_first - 2));
    want.push((second, "last"));
    let want: Vec<(String, String)> = want
        .into_iter()
        .map(|(t, m)| (t.to_owned(), m.to_owned()))
        .collect();
    assert_eq!(marks, want);

    // A change streams with "false"; a snapshot asked for later reads
    // "incremental".
    client
        .execute("INSERT INTO b VALUES (10)", &[])
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO pgcdc.signals (type, data) VALUES ('execute-snapshot', '{\"data-collections\": [\"public.b\"]}')",
            &[],
        )
        .await
        .unwrap();
    let got = until(&dir, "the change and the incremental read", |l| {
        l.len() >= 5 + 1 + 3
    })
    .await;
    stop(run).await;
    assert_eq!(got[5]["op"], "c");
    assert_eq!(got[5]["source"]["snapshot"], "false");
    for l in &got[6..9] {
        assert_eq!(l["op"], "r");
        assert_eq!(l["source"]["snapshot"], "incremental");
        assert_eq!(l["source"]["table"], "b");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_starts_with_the_previous_commit_across_a_restart() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    let dir = dir("sequence");
    let opts = DebeziumOptions {
        provide_transaction_metadata: true,
        ..options()
    };
    let run = start(&db, &dir, &["public.t"], opts.clone(), StartupMode::Latest);
    streaming(&db, &dir).await;
    client
        .execute("INSERT INTO t VALUES (1)", &[])
        .await
        .unwrap();
    client
        .execute("INSERT INTO t VALUES (2)", &[])
        .await
        .unwrap();
    let got = until(&dir, "two transactions", |l| l.len() >= 6).await;
    stop(run).await;
    let seq = |l: &Value| -> Vec<Option<u64>> {
        let v: Value = serde_json::from_str(l["source"]["sequence"].as_str().unwrap()).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().map(|s| s.parse().unwrap()))
            .collect()
    };
    let end_lsn = |l: &Value| -> u64 {
        assert_eq!(l["status"], "END");
        l["id"]
            .as_str()
            .unwrap()
            .split_once(':')
            .unwrap()
            .1
            .parse()
            .unwrap()
    };
    // BEGIN, c, END, BEGIN, c, END: the second change's sequence starts
    // with the first transaction's commit (its END's LSN).
    assert_eq!(seq(&got[4])[0], Some(end_lsn(&got[2])));
    assert_eq!(seq(&got[4])[1], Some(u64_of(&got[4]["source"]["lsn"])));

    // After a restart (from the checkpoint at or after that commit) the
    // next transaction's sequence starts with a position at or after the
    // second transaction's commit, and before its own change.
    let run = start(&db, &dir, &["public.t"], opts, StartupMode::Latest);
    streaming(&db, &dir).await;
    client
        .execute("INSERT INTO t VALUES (3)", &[])
        .await
        .unwrap();
    let got = until(&dir, "the third transaction", |l| {
        l.iter().any(|x| x["after"]["id"] == 3) && l.last().is_some_and(|x| x["status"] == "END")
    })
    .await;
    stop(run).await;
    let third = got.iter().find(|x| x["after"]["id"] == 3).unwrap();
    let previous = seq(third)[0].expect("known after a restart");
    assert!(previous >= end_lsn(&got[5]), "{previous}");
    assert!(previous < u64_of(&third["source"]["lsn"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_tombstones() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, doc text)")
        .await
        .unwrap();
    let keyed = dir("keys");
    let opts = DebeziumOptions {
        key: true,
        ..options()
    };
    let run = start(&db, &keyed, &["public.t"], opts, StartupMode::Latest);
    streaming(&db, &keyed).await;
    client
        .batch_execute("INSERT INTO t VALUES (1, 'a'); UPDATE t SET doc = 'b' WHERE id = 1; DELETE FROM t WHERE id = 1;")
        .await
        .unwrap();
    let got = until(&keyed, "c, u, d and the tombstone", |l| l.len() >= 4).await;
    stop(run).await;
    let got: Vec<Value> = got.iter().map(normalized).collect();
    let k = json!({"id": 1});
    assert_eq!(
        got,
        [
            expect(
                &db,
                json!({"key": k, "value": change("c", Value::Null, json!({"id": 1, "doc": "a"}), "t", "false", Value::Null)})
            ),
            expect(
                &db,
                json!({"key": k, "value": change("u", Value::Null, json!({"id": 1, "doc": "b"}), "t", "false", Value::Null)})
            ),
            expect(
                &db,
                json!({"key": k, "value": change("d", json!({"id": 1, "doc": null}), Value::Null, "t", "false", Value::Null)})
            ),
            json!({"key": k, "value": null}),
        ]
    );

    // Without keys: the values alone, and no tombstone.
    let unkeyed = dir("nokeys");
    let run = start(&db, &unkeyed, &["public.t"], options(), StartupMode::Latest);
    streaming(&db, &unkeyed).await;
    client
        .batch_execute("INSERT INTO t VALUES (2, 'x'); DELETE FROM t WHERE id = 2; INSERT INTO t VALUES (3, 'y');")
        .await
        .unwrap();
    let got = until(&unkeyed, "the changes", |l| l.len() >= 3).await;
    stop(run).await;
    let ops: Vec<&Value> = got.iter().map(|l| &l["op"]).collect();
    assert_eq!(ops, [&json!("c"), &json!("d"), &json!("c")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_key_change_is_a_delete_a_tombstone_and_a_create() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE t (id int PRIMARY KEY, doc text); INSERT INTO t VALUES (1, 'a')",
        )
        .await
        .unwrap();
    let dir = dir("pkchange");
    let opts = DebeziumOptions {
        key: true,
        ..options()
    };
    let run = start(&db, &dir, &["public.t"], opts, StartupMode::Latest);
    streaming(&db, &dir).await;
    client
        .execute("UPDATE t SET id = 2, doc = 'b' WHERE id = 1", &[])
        .await
        .unwrap();
    let got = until(&dir, "three records", |l| l.len() >= 3).await;
    stop(run).await;
    let got: Vec<Value> = got.iter().map(normalized).collect();
    let mut d = expect(
        &db,
        json!({"key": {"id": 1}, "value": change("d", json!({"id": 1, "doc": null}), Value::Null, "t", "false", Value::Null)}),
    );
    d["headers"] = json!({"__debezium.newkey": {"id": 2}});
    let mut c = expect(
        &db,
        json!({"key": {"id": 2}, "value": change("c", Value::Null, json!({"id": 2, "doc": "b"}), "t", "false", Value::Null)}),
    );
    c["headers"] = json!({"__debezium.oldkey": {"id": 1}});
    assert_eq!(got, [d, json!({"key": {"id": 1}, "value": null}), c]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncates_are_skipped_unless_asked_for() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    let skipped = dir("skip-default");
    let run = start(&db, &skipped, &["public.t"], options(), StartupMode::Latest);
    streaming(&db, &skipped).await;
    client
        .batch_execute("INSERT INTO t VALUES (1); TRUNCATE t; INSERT INTO t VALUES (2);")
        .await
        .unwrap();
    let got = until(&skipped, "the inserts", |l| l.len() >= 2).await;
    stop(run).await;
    let ops: Vec<&Value> = got.iter().map(|l| &l["op"]).collect();
    assert_eq!(
        ops,
        [&json!("c"), &json!("c")],
        "Debezium skips t by default"
    );

    let all = dir("skip-none");
    let opts = DebeziumOptions {
        skipped_operations: SkippedOperations::NONE,
        ..options()
    };
    let run = start(&db, &all, &["public.t"], opts, StartupMode::Latest);
    streaming(&db, &all).await;
    client
        .batch_execute("TRUNCATE t; INSERT INTO t VALUES (3);")
        .await
        .unwrap();
    let got = until(&all, "the truncate and the insert", |l| l.len() >= 2).await;
    stop(run).await;
    assert_eq!(
        normalized(&got[0]),
        expect(
            &db,
            change("t", Value::Null, Value::Null, "t", "false", Value::Null)
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_follow_the_primary_key_and_are_null_without_one() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE pk (a int, b int, doc text, PRIMARY KEY (b, a));
             CREATE TABLE nokey (doc text);",
        )
        .await
        .unwrap();
    let dir = dir("keycols");
    let opts = DebeziumOptions {
        key: true,
        ..options()
    };
    let run = start(
        &db,
        &dir,
        &["public.pk", "public.nokey"],
        opts,
        StartupMode::Latest,
    );
    streaming(&db, &dir).await;
    client
        .batch_execute("INSERT INTO pk VALUES (1, 2, 'x'); INSERT INTO nokey VALUES ('y');")
        .await
        .unwrap();
    let got = until(&dir, "both inserts", |l| l.len() >= 2).await;
    stop(run).await;
    // The key's columns in the table's column order.
    assert_eq!(got[0]["key"], json!({"a": 1, "b": 2}));
    assert_eq!(
        got[0]["value"]["after"],
        json!({"a": 1, "b": 2, "doc": "x"})
    );
    assert_eq!(got[1]["key"], Value::Null);
    assert_eq!(got[1]["value"]["after"], json!({"doc": "y"}));
}
