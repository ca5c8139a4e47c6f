//! Tables that change under a running job, against a real server: a table
//! added to the configuration is added to the publication and snapshotted
//! while the stream runs (and resumes after a SIGKILL without re-reading
//! done chunks); a removed table is dropped from the publication and its
//! events stop; a table that appears in a published schema is snapshotted;
//! an on-demand snapshot with a condition, asked for by `pgcdc snapshot`
//! and by SQL; row filters and column lists apply to snapshot and stream.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkpoint_api::SnapshotProgress;
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::held_commit::{self, HeldCommit};
use integration_tests::{
    kill_and_wait, snapshot_progress, Pgcdc, TempDir, TestDatabase, TestPostgres,
};
use serde_json::Value;
use tokio_postgres::Client;

const TIMEOUT: Duration = Duration::from_secs(300);

/// Rows of the added table (the acceptance size; smaller with the variable
/// for quick local runs).
fn added_rows() -> i64 {
    std::env::var("PGCDC_TEST_ADDED_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    check: impl FnMut() -> F,
) -> T {
    integration_tests::eventually(what, TIMEOUT, check).await
}

async fn store(db: &TestDatabase) -> PgCheckpointStore {
    PgCheckpointStore::connect(db.connection_info().config(), PgStoreConfig::default())
        .await
        .unwrap()
}

/// Whether the newest checkpoint records `table` as read.
async fn recorded(store: &PgCheckpointStore, job: &str, table: &str) -> Option<SnapshotProgress> {
    snapshot_progress(store, job).await.filter(|p| {
        p.complete
            && p.tables_done
                .iter()
                .any(|t| format!("{}.{}", t.table.schema, t.table.name) == table)
    })
}

/// `id -> (v, pad)` of a table.
async fn rows_of(client: &Client, name: &str) -> BTreeMap<i64, (i32, String)> {
    client
        .query(&format!("SELECT id, v, pad FROM {name}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

/// The tables a publication lists.
async fn published(client: &Client, publication: &str) -> Vec<String> {
    client
        .query(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1",
            &[&publication],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Every event line a file sink wrote under base path `path`.
fn file_events(path: &Path) -> Vec<Value> {
    cdc_runtime::sinks::FileSink::files(path)
        .unwrap_or_default()
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// (op, id) of the events of `table` in a file sink (Debezium format).
fn ops_of(events: &[Value], table: &str) -> Vec<(String, i64)> {
    events
        .iter()
        .filter(|e| e["source"]["table"] == table)
        .map(|e| {
            let row = if e["after"].is_null() {
                &e["before"]
            } else {
                &e["after"]
            };
            (
                e["op"].as_str().unwrap_or("?").to_owned(),
                row["id"].as_i64().unwrap_or(i64::MIN),
            )
        })
        .collect()
}

/// Waits until the file sink has an event of `table` with `id`.
async fn arrived(path: &Path, table: &str, id: i64) {
    eventually(&format!("{table} id {id} in the file sink"), || async {
        ops_of(&file_events(path), table)
            .iter()
            .any(|(_, i)| *i == id)
            .then_some(())
    })
    .await
}

fn file_config(db: &TestDatabase, tables: &[&str], slot: &str, out: &Path) -> String {
    let source = db.source_toml(tables, slot, &format!("{slot}_pub"));
    format!(
        r#"
        {source}
        [pipeline]
        status_interval_secs = 1

        [[sinks]]
        type = "file"
        path = {out:?}
        format = "debezium"

        [checkpoint]
        job = {slot:?}
        interval_ms = 200

        [snapshot]
        chunk_size = 1000
        "#,
    )
}

/// `lo` of the "snapshot chunk read" debug lines of a log, for `table`.
fn chunk_reads(log: &str, table: &str) -> Vec<Option<i64>> {
    log.lines()
        .filter(|l| l.contains("snapshot chunk read") && l.contains(table))
        .map(|l| {
            let at = l.find(" lo=")? + 4;
            l[at..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect::<String>()
                .parse()
                .ok()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_table_is_snapshotted_while_writers_change_it_and_resumes_after_sigkill() {
    let rows = added_rows();
    // About 100 chunks, whatever the size.
    let chunk = (rows / 100).max(1000);
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE first (id bigint PRIMARY KEY, v int NOT NULL, pad text NOT NULL);
             INSERT INTO first SELECT g, 0, 'x' FROM generate_series(1, 100) g;
             CREATE TABLE added (id bigint PRIMARY KEY, v int NOT NULL, pad text NOT NULL);
             INSERT INTO added SELECT g, 0, md5(g::text) FROM generate_series(1, {rows}) g;
             ANALYZE added;
             CREATE SCHEMA replica;
             CREATE TABLE replica.first (LIKE first INCLUDING ALL);
             CREATE TABLE replica.added (LIKE added INCLUDING ALL);"
        ))
        .await
        .unwrap();
    let dir = TempDir::new("tables-added");
    let config_path = dir.path().join("pgcdc.toml");
    let config = |tables: &[&str]| {
        let source = db.source_toml(tables, "addt", "addt_pub");
        format!(
            r#"
            {source}
            [pipeline]
            status_interval_secs = 1

            [[sinks]]
            type = "postgres"
            url = {url:?}
            tables = {{ "public.first" = "replica.first", "public.added" = "replica.added" }}

            [checkpoint]
            job = "addt"
            interval_ms = 100

            [snapshot]
            chunk_size = {chunk}
            readers = 2
            "#,
            url = db.connection_string(),
        )
    };
    let store = store(&db).await;
    let log_filter = "info,cdc_runtime::snapshot=debug,tokio_postgres=warn";

    // The job runs with one table and records its snapshot.
    std::fs::write(&config_path, config(&["public.first"])).unwrap();
    let mut job = Pgcdc::run(&config_path).unwrap();
    eventually("the first table's snapshot", || {
        recorded(&store, "addt", "public.first")
    })
    .await;
    job.terminate(Duration::from_secs(30)).await.unwrap();
    assert_eq!(published(&client, "addt_pub").await, ["public.first"]);

    // The table is added to the configuration; three writers change it
    // while it is read.
    std::fs::write(&config_path, config(&["public.first", "public.added"])).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for w in 0..3i64 {
        let client = db.connect().await.unwrap();
        let (stop, writes) = (stop.clone(), writes.clone());
        writers.push(tokio::spawn(async move {
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (w as u64 + 1);
            let mut fresh = rows + 1 + w * 10_000_000;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let id = (x % rows as u64) as i64 + 1;
                let sql = match x % 10 {
                    0 => format!("DELETE FROM added WHERE id = {id}"),
                    1 => {
                        fresh += 1;
                        format!("INSERT INTO added VALUES ({fresh}, 0, 'new')")
                    }
                    _ => format!("UPDATE added SET v = v + 1 WHERE id = {id}"),
                };
                client.batch_execute(&sql).await.unwrap();
                writes.fetch_add(1, Ordering::Relaxed);
                // About 300 writes a second in all: a busy table, not a
                // saturated machine.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    let started = Instant::now();
    let mut first = Pgcdc::run_with_log(&config_path, log_filter).unwrap();
    let at_kill = eventually("a checkpoint with 10 chunks of the added table", || async {
        snapshot_progress(&store, "addt").await.filter(|p| {
            p.in_progress
                .as_ref()
                .is_some_and(|c| c.table.name == "added" && c.chunks_done >= 10)
        })
    })
    .await;
    assert!(!at_kill.complete);
    assert_eq!(
        published(&client, "addt_pub").await,
        ["public.added", "public.first"],
        "pgcdc added the table to the publication it manages"
    );
    kill_and_wait(&mut first, &db, TIMEOUT).await;
    let admin = db.connect().await.unwrap();
    let saved = snapshot_progress(&store, "addt").await.unwrap();
    let cursor = saved.in_progress.clone().unwrap();
    assert_eq!(cursor.table.name, "added");

    // `pgcdc slot status` shows the added table being read.
    let status = integration_tests::run_pgcdc(
        &["slot", "status", "--config", config_path.to_str().unwrap()],
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(
        out.contains("snapshot:         running")
            && out.contains(&format!("public.added: {} chunks", cursor.chunks_done)),
        "{out}"
    );

    let mut second = Pgcdc::run_with_log(&config_path, log_filter).unwrap();
    let done = eventually("the added table's snapshot after the restart", || {
        recorded(&store, "addt", "public.added")
    })
    .await;
    let snapshot_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    client
        .batch_execute("INSERT INTO added VALUES (-1, 0, 'sentinel')")
        .await
        .unwrap();
    eventually("the sentinel in the target", || async {
        admin
            .query_opt("SELECT 1 FROM replica.added WHERE id = -1", &[])
            .await
            .unwrap()
            .map(|_| ())
    })
    .await;
    second.terminate(Duration::from_secs(30)).await.unwrap();

    let reads_after = chunk_reads(&second.stderr(), "public.added");
    let added = done
        .tables_done
        .iter()
        .find(|t| t.table.name == "added")
        .unwrap();
    println!(
        "added table: {rows} rows under {} concurrent writes (3 writers), snapshot (with a SIGKILL) {snapshot_secs:.1} s, \
         {} chunks, {} recorded done at the kill, {} read after the restart",
        writes.load(Ordering::Relaxed),
        added.chunks,
        cursor.chunks_done,
        reads_after.len()
    );
    assert!(writes.load(Ordering::Relaxed) > 0);
    // Chunks recorded done are not read again: every read after the restart
    // starts at or past the recorded cursor, or is a chunk to redo.
    let cur: Value = serde_json::from_slice(&cursor.cursor).unwrap();
    let bound = |v: &Value| -> Option<i64> {
        v.as_array()
            .map(|k| k[0].as_str().unwrap().parse().unwrap())
    };
    let next = bound(&cur["next"]);
    let redo: Vec<Option<i64>> = cur["redo"]
        .as_array()
        .map(|r| r.iter().map(|r| bound(&r["lo"])).collect())
        .unwrap_or_default();
    for lo in &reads_after {
        let past = match (lo, next) {
            (Some(lo), Some(next)) => *lo >= next,
            (_, None) => cursor.chunks_done == 0,
            (None, Some(_)) => false,
        };
        assert!(
            past || redo.contains(lo),
            "a chunk from {lo:?} was read again though the checkpoint had it done (next {next:?}, redo {redo:?})"
        );
    }
    assert!(reads_after.len() as u64 + cursor.chunks_done >= added.chunks);
    let source = rows_of(&client, "added").await;
    let target = rows_of(&client, "replica.added").await;
    let differing: Vec<_> = source
        .iter()
        .filter(|(k, v)| target.get(k) != Some(v))
        .take(5)
        .collect();
    assert!(differing.is_empty(), "rows differ: {differing:?}");
    assert_eq!(source.len(), target.len());
    assert_eq!(
        rows_of(&client, "first").await,
        rows_of(&client, "replica.first").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_table_leaves_the_publication_and_is_read_again_when_it_returns() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE a (id bigint PRIMARY KEY, v int);
             CREATE TABLE b (id bigint PRIMARY KEY, v int);
             INSERT INTO a SELECT g, 0 FROM generate_series(1, 10) g;
             INSERT INTO b SELECT g, 0 FROM generate_series(1, 10) g;",
        )
        .await
        .unwrap();
    let dir = TempDir::new("tables-removed");
    let out = dir.path().join("events.json");
    let config_path = dir.path().join("pgcdc.toml");
    let store = store(&db).await;

    std::fs::write(
        &config_path,
        file_config(&db, &["public.a", "public.b"], "rmt", &out),
    )
    .unwrap();
    let mut job = Pgcdc::run(&config_path).unwrap();
    eventually("both tables read", || recorded(&store, "rmt", "public.b")).await;
    job.terminate(Duration::from_secs(30)).await.unwrap();

    // b is removed: the publication drops it and its changes no longer come.
    std::fs::write(&config_path, file_config(&db, &["public.a"], "rmt", &out)).unwrap();
    let mut job = Pgcdc::run(&config_path).unwrap();
    eventually("the publication without b", || async {
        (published(&client, "rmt_pub").await == ["public.a"]).then_some(())
    })
    .await;
    client
        .batch_execute("INSERT INTO b VALUES (100, 0); INSERT INTO a VALUES (100, 0);")
        .await
        .unwrap();
    arrived(&out, "a", 100).await;
    job.terminate(Duration::from_secs(30)).await.unwrap();
    let events = file_events(&out);
    assert!(
        !ops_of(&events, "b").iter().any(|(_, id)| *id == 100),
        "a change to the removed table was delivered"
    );
    let p = snapshot_progress(&store, "rmt").await.unwrap();
    assert!(
        !p.tables_done.iter().any(|t| t.table.name == "b"),
        "the removed table is forgotten: {p:?}"
    );

    // b comes back: it is read again (row 100 changed while it was away).
    std::fs::write(
        &config_path,
        file_config(&db, &["public.a", "public.b"], "rmt", &out),
    )
    .unwrap();
    let mut job = Pgcdc::run(&config_path).unwrap();
    arrived(&out, "b", 100).await;
    eventually("b recorded again", || recorded(&store, "rmt", "public.b")).await;
    job.terminate(Duration::from_secs(30)).await.unwrap();
    let reads: Vec<_> = ops_of(&file_events(&out), "b")
        .into_iter()
        .filter(|(op, _)| op == "r")
        .collect();
    assert_eq!(
        reads.len(),
        21,
        "b read twice (10 rows, then 11): {reads:?}"
    );
}

/// Tables `app.one` (with one row when `one_row`) and `staging.moved` (50
/// rows), and a running job that publishes schema `app` into a file sink
/// (`events.json` in the returned directory), once it has read `app.one`.
async fn schema_job(
    db: &TestDatabase,
    client: &Client,
    one_row: bool,
    slot: &str,
) -> (TempDir, PgCheckpointStore, Pgcdc) {
    client
        .batch_execute(
            "CREATE SCHEMA app; CREATE SCHEMA staging;
             CREATE TABLE app.one (id bigint PRIMARY KEY, v int);
             CREATE TABLE staging.moved (id bigint PRIMARY KEY, v int);
             INSERT INTO staging.moved SELECT g, 0 FROM generate_series(1, 50) g;",
        )
        .await
        .unwrap();
    if one_row {
        client
            .batch_execute("INSERT INTO app.one VALUES (1, 0)")
            .await
            .unwrap();
    }
    let dir = TempDir::new(&format!("tables-appears-{slot}"));
    let out = dir.path().join("events.json");
    let config_path = dir.path().join("pgcdc.toml");
    let config = file_config(db, &["app.one"], slot, &out)
        .replace("tables = [\"app.one\"]", "schemas = [\"app\"]");
    std::fs::write(&config_path, config).unwrap();
    let store = store(db).await;
    let job = Pgcdc::run(&config_path).unwrap();
    eventually("app.one read", || recorded(&store, slot, "app.one")).await;
    (dir, store, job)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_that_appears_in_a_published_schema_is_snapshotted() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    let (dir, store, mut job) = schema_job(&db, &client, true, "appt").await;
    let out = dir.path().join("events.json");

    // Rows that exist before the table joins the published schema are not
    // in the WAL as changes of it: only a snapshot brings them.
    client
        .batch_execute(
            "ALTER TABLE staging.moved SET SCHEMA app;
             INSERT INTO app.moved VALUES (51, 0);",
        )
        .await
        .unwrap();
    eventually("app.moved recorded as read", || {
        recorded(&store, "appt", "app.moved")
    })
    .await;
    for id in 1..=51 {
        arrived(&out, "moved", id).await;
    }
    job.terminate(Duration::from_secs(30)).await.unwrap();
    let ops = ops_of(&file_events(&out), "moved");
    let read: Vec<_> = ops.iter().filter(|(op, _)| op == "r").collect();
    assert!(read.len() >= 50, "the existing rows came as reads: {ops:?}");
}

/// The moment after a commit is streamed and before other sessions see it
/// (held open by a synchronous standby that never answers): a table moved
/// into the published schema is not there yet for a new snapshot. The job
/// waits until the transaction is visible before it looks the table up,
/// and its existing rows are read. (Without the wait this case also ends
/// well: the lookup waits for the moved table's lock, which the mover holds
/// until it is visible. A rewritten table's re-read did not; see
/// `schema_changes`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_appears_is_read_once_its_transaction_is_visible() {
    let cluster = held_commit::cluster_with_held_commits().await.unwrap();
    let db = cluster.create_database().await.unwrap();
    let client = db.connect().await.unwrap();
    let (dir, _store, mut job) = schema_job(&db, &client, false, "apph").await;
    let out = dir.path().join("events.json");

    let moved = HeldCommit::start(
        &db,
        "ALTER TABLE staging.moved SET SCHEMA app; INSERT INTO app.moved VALUES (51, 0);",
    )
    .await
    .unwrap();
    held_commit::await_visibility_wait(&client, TIMEOUT).await;
    let visible: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'app' AND tablename = 'moved'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        visible, 0,
        "the move is visible already: the test shows nothing"
    );
    assert!(!moved.is_finished(), "the move's commit did not wait");
    moved.release(&client).await.unwrap();
    for id in 1..=51 {
        arrived(&out, "moved", id).await;
    }
    job.terminate(Duration::from_secs(30)).await.unwrap();
    let ops = ops_of(&file_events(&out), "moved");
    let read: Vec<_> = ops.iter().filter(|(op, _)| op == "r").collect();
    assert!(read.len() >= 50, "the existing rows came as reads: {ops:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_demand_snapshot_with_a_condition_on_a_running_job() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE items (id bigint PRIMARY KEY, v int);
             INSERT INTO items SELECT g, 0 FROM generate_series(1, 3000) g;
             CREATE TABLE other (id bigint PRIMARY KEY, v int);
             INSERT INTO other SELECT g, 0 FROM generate_series(1, 20) g;",
        )
        .await
        .unwrap();
    let dir = TempDir::new("tables-ondemand");
    let out = dir.path().join("events.json");
    let config_path = dir.path().join("pgcdc.toml");
    std::fs::write(
        &config_path,
        file_config(&db, &["public.items", "public.other"], "odt", &out),
    )
    .unwrap();
    let store = store(&db).await;
    let mut job = Pgcdc::run(&config_path).unwrap();
    eventually("the initial snapshot", || {
        recorded(&store, "odt", "public.other")
    })
    .await;
    let initial_reads = ops_of(&file_events(&out), "items")
        .iter()
        .filter(|(op, _)| op == "r")
        .count();
    assert_eq!(initial_reads, 3000);

    // Through the command line, with a condition.
    let asked = integration_tests::run_pgcdc(
        &[
            "snapshot",
            "--table",
            "public.items",
            "--where",
            "id > 2500",
            "--config",
            config_path.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&asked.stdout);
    assert!(
        asked.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&asked.stderr)
    );
    eventually("the request answered", || async {
        snapshot_progress(&store, "odt").await.filter(|p| {
            p.requests.is_empty()
                && p.requests_done
                    .iter()
                    .any(|d| d.table.name == "items" && d.rows == 500)
        })
    })
    .await;
    // Through SQL (Debezium's signal shape).
    client
        .batch_execute(
            r#"INSERT INTO pgcdc.signals (id, type, data) VALUES ('by-sql', 'execute-snapshot',
               '{"data-collections": ["public.other"], "type": "incremental"}')"#,
        )
        .await
        .unwrap();
    eventually("the SQL request answered", || async {
        snapshot_progress(&store, "odt").await.filter(|p| {
            p.requests_done
                .iter()
                .any(|d| d.request_id.as_deref() == Some("by-sql") && d.rows == 20)
        })
    })
    .await;
    // A condition that is not SQL is refused by the command, not run.
    let bad = integration_tests::run_pgcdc(
        &[
            "snapshot",
            "--table",
            "public.items",
            "--where",
            "id > 1; DROP TABLE items",
            "--config",
            config_path.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let status = integration_tests::run_pgcdc(
        &["slot", "status", "--config", config_path.to_str().unwrap()],
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(
        shown.contains("by-sql public.other: done (20 rows)"),
        "{shown}"
    );
    job.terminate(Duration::from_secs(30)).await.unwrap();

    let reads: Vec<i64> = ops_of(&file_events(&out), "items")
        .into_iter()
        .filter(|(op, _)| op == "r")
        .map(|(_, id)| id)
        .skip(3000)
        .collect();
    assert_eq!(reads.len(), 500, "only the rows matching the condition");
    assert!(reads.iter().all(|id| *id > 2500), "{reads:?}");
    let one: i64 = client
        .query_one("SELECT count(*) FROM items", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(one, 3000, "the refused condition did not run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_filters_and_column_lists_apply_to_the_snapshot_and_the_stream() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL, total int, secret text);
             INSERT INTO orders SELECT g, CASE WHEN g % 2 = 0 THEN 'draft' ELSE 'paid' END, g, 'hidden'
               FROM generate_series(1, 10) g;",
        )
        .await
        .unwrap();
    let dir = TempDir::new("tables-filters");
    let out = dir.path().join("events.json");
    let config_path = dir.path().join("pgcdc.toml");
    let config = file_config(&db, &["public.orders"], "flt", &out).replace(
        "tables = [\"public.orders\"]",
        r#"tables = [{ name = "public.orders", where = "status <> 'draft'", columns = ["id", "status", "total"] }]"#,
    );
    std::fs::write(&config_path, config).unwrap();
    let store = store(&db).await;
    let mut job = Pgcdc::run(&config_path).unwrap();
    eventually("the snapshot", || recorded(&store, "flt", "public.orders")).await;
    client
        .batch_execute(
            "INSERT INTO orders VALUES (11, 'paid', 11, 'hidden'), (12, 'draft', 12, 'hidden');
             INSERT INTO orders VALUES (13, 'paid', 13, 'hidden');",
        )
        .await
        .unwrap();
    arrived(&out, "orders", 13).await;
    job.terminate(Duration::from_secs(30)).await.unwrap();
    let events = file_events(&out);
    let ids: Vec<i64> = ops_of(&events, "orders")
        .iter()
        .map(|(_, id)| *id)
        .collect();
    assert_eq!(
        ids,
        [1, 3, 5, 7, 9, 11, 13],
        "drafts are neither read nor streamed"
    );
    for e in events.iter().filter(|e| e["source"]["table"] == "orders") {
        let after = e["after"].as_object().unwrap();
        let mut cols: Vec<_> = after.keys().cloned().collect();
        cols.sort();
        assert_eq!(cols, ["id", "status", "total"], "{e}");
    }
    // The publication carries the filter and the column list.
    let row = client
        .query_one(
            "SELECT rowfilter, attnames::text[] FROM pg_publication_tables WHERE pubname = 'flt_pub'",
            &[],
        )
        .await
        .unwrap();
    let filter: String = row.get(0);
    let cols: Vec<String> = row.get(1);
    assert!(filter.contains("draft"), "{filter}");
    assert_eq!(cols, ["id", "status", "total"]);
}

/// The rows a consumer gets by applying the events of `table` in order
/// (reads, inserts and updates replace the row by key, deletes remove it),
/// as `(id, region) -> v`.
fn apply(events: &[Value], table: &str) -> BTreeMap<(i64, String), i64> {
    let mut rows = BTreeMap::new();
    for e in events.iter().filter(|e| e["source"]["table"] == table) {
        let key = |row: &Value| {
            (
                row["id"].as_i64().unwrap(),
                row["region"].as_str().unwrap().to_owned(),
            )
        };
        match e["op"].as_str().unwrap() {
            "d" => {
                rows.remove(&key(&e["before"]));
            }
            _ => {
                if !e["before"].is_null() {
                    rows.remove(&key(&e["before"]));
                }
                rows.insert(key(&e["after"]), e["after"]["v"].as_i64().unwrap());
            }
        }
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_table_cross_partition_update_and_attach_mid_stream() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE m (id bigint, region text, v int NOT NULL, PRIMARY KEY (id, region))
               PARTITION BY LIST (region);
             CREATE TABLE m_eu PARTITION OF m FOR VALUES IN ('eu');
             CREATE TABLE m_us PARTITION OF m FOR VALUES IN ('us');
             INSERT INTO m SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g FROM generate_series(1, 200) g;
             CREATE TABLE m_asia (id bigint, region text, v int NOT NULL, PRIMARY KEY (id, region));
             INSERT INTO m_asia SELECT g, 'asia', g FROM generate_series(1001, 1100) g;",
        )
        .await
        .unwrap();
    let dir = TempDir::new("tables-partitions");
    let out = dir.path().join("events.json");
    let config_path = dir.path().join("pgcdc.toml");
    std::fs::write(&config_path, file_config(&db, &["public.m"], "prt", &out)).unwrap();
    let store = store(&db).await;
    let mut job = Pgcdc::run(&config_path).unwrap();
    eventually("the snapshot of m", || recorded(&store, "prt", "public.m")).await;
    // Read once: 200 rows, none twice (not from the root and a partition).
    let reads = ops_of(&file_events(&out), "m")
        .into_iter()
        .filter(|(op, _)| op == "r")
        .count();
    assert_eq!(reads, 200);

    // A cross-partition update, and a partition attached while streaming.
    client
        .batch_execute(
            "UPDATE m SET region = 'us', v = -2 WHERE id = 2;
             ALTER TABLE m ATTACH PARTITION m_asia FOR VALUES IN ('asia');",
        )
        .await
        .unwrap();
    eventually("the attached partition read", || async {
        snapshot_progress(&store, "prt").await.filter(|p| {
            p.requests_done.iter().any(|d| {
                d.request_id
                    .as_deref()
                    .is_some_and(|r| r.starts_with("attach-"))
            })
        })
    })
    .await;
    client
        .batch_execute("INSERT INTO m VALUES (-1, 'asia', 0)")
        .await
        .unwrap();
    arrived(&out, "m", -1).await;
    job.terminate(Duration::from_secs(30)).await.unwrap();

    let events = file_events(&out);
    let names: std::collections::BTreeSet<_> = events
        .iter()
        .filter_map(|e| e["source"]["table"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["m"],
        "events carry the partitioned table's name"
    );
    let source: BTreeMap<(i64, String), i64> = client
        .query("SELECT id, region, v FROM m", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), i64::from(r.get::<_, i32>(2))))
        .collect();
    assert_eq!(source.len(), 301);
    assert_eq!(apply(&events, "m"), source);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_demand_snapshot_resumes_after_sigkill() {
    const ROWS: i64 = 100_000;
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE big (id bigint PRIMARY KEY, v int);
             INSERT INTO big SELECT g, 0 FROM generate_series(1, {ROWS}) g;"
        ))
        .await
        .unwrap();
    let dir = TempDir::new("tables-ondemand-kill");
    let out = dir.path().join("events.json");
    let config_path = dir.path().join("pgcdc.toml");
    // The initial snapshot is not taken; the request reads in 1,000-row chunks.
    let config = file_config(&db, &["public.big"], "odk", &out)
        .replace("chunk_size = 1000", "chunk_size = 1000\nmode = \"latest\"");
    std::fs::write(&config_path, config).unwrap();
    let store = store(&db).await;
    let log_filter = "info,cdc_runtime::snapshot=debug,tokio_postgres=warn";
    let mut first = Pgcdc::run_with_log(&config_path, log_filter).unwrap();
    eventually("the first checkpoint", || {
        recorded(&store, "odk", "public.big")
    })
    .await;
    client
        .batch_execute(
            r#"INSERT INTO pgcdc.signals (id, type, data) VALUES ('again', 'execute-snapshot',
               '{"data-collections": ["public.big"]}')"#,
        )
        .await
        .unwrap();
    eventually("a checkpoint with 10 chunks of the request", || async {
        snapshot_progress(&store, "odk").await.filter(|p| {
            p.in_progress
                .as_ref()
                .is_some_and(|c| c.request_id.as_deref() == Some("again") && c.chunks_done >= 10)
        })
    })
    .await;
    kill_and_wait(&mut first, &db, TIMEOUT).await;
    let saved = snapshot_progress(&store, "odk").await.unwrap();
    let cursor = saved.in_progress.clone().unwrap();
    assert_eq!(cursor.request_id.as_deref(), Some("again"));

    let mut second = Pgcdc::run_with_log(&config_path, log_filter).unwrap();
    let done = eventually("the request answered after the restart", || async {
        snapshot_progress(&store, "odk").await.filter(|p| {
            p.requests_done
                .iter()
                .any(|d| d.request_id.as_deref() == Some("again"))
        })
    })
    .await;
    second.terminate(Duration::from_secs(30)).await.unwrap();
    let answered = done
        .requests_done
        .iter()
        .find(|d| d.request_id.as_deref() == Some("again"))
        .unwrap();
    let reads_after = chunk_reads(&second.stderr(), "public.big");
    println!(
        "on-demand snapshot of {ROWS} rows: {} chunks, {} done at the kill, {} read after the restart",
        answered.chunks,
        cursor.chunks_done,
        reads_after.len()
    );
    assert_eq!(answered.rows, ROWS as u64, "every row read once in all");
    assert!(
        (reads_after.len() as u64) < answered.chunks,
        "chunks done before the kill were not read again"
    );
    // Every row arrived as a read (some twice: those of chunks in flight at
    // the kill), and the signal reached no sink.
    let events = file_events(&out);
    let read: std::collections::BTreeSet<i64> = ops_of(&events, "big")
        .into_iter()
        .filter(|(op, _)| op == "r")
        .map(|(_, id)| id)
        .collect();
    assert_eq!(read.len(), ROWS as usize);
    assert!(!events.iter().any(|e| e["source"]["table"] == "signals"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_the_role_may_not_read_stops_the_job_or_is_skipped_with_a_warning() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE open_t (id bigint PRIMARY KEY, v int);
             CREATE TABLE closed_t (id bigint PRIMARY KEY, v int);
             INSERT INTO open_t SELECT g, 0 FROM generate_series(1, 5) g;
             INSERT INTO closed_t SELECT g, 0 FROM generate_series(1, 5) g;
             DO $$ BEGIN
               IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgcdc_limited') THEN
                 CREATE ROLE pgcdc_limited LOGIN REPLICATION;
               END IF;
             END $$;
             GRANT SELECT ON open_t TO pgcdc_limited;
             CREATE PUBLICATION priv_pub FOR TABLE open_t, closed_t;",
        )
        .await
        .unwrap();
    let dir = TempDir::new("tables-privileges");
    let out = dir.path().join("events.json");
    let config_path = dir.path().join("pgcdc.toml");
    let user = format!("user = {:?}", db.user());
    let config = |on_unreadable: &str| {
        let source = db
            .source_toml(&["public.open_t", "public.closed_t"], "priv", "priv_pub")
            .replace(
                &user,
                "user = \"pgcdc_limited\"\ncreate_publication = false\nsignals = false",
            );
        format!(
            r#"
            {source}
            [[sinks]]
            type = "file"
            path = {out:?}

            [snapshot]
            on_unreadable_table = {on_unreadable:?}
            "#
        )
    };
    std::fs::write(&config_path, config("stop")).unwrap();
    let stopped = integration_tests::run_pgcdc(
        &["run", "--config", config_path.to_str().unwrap()],
        Duration::from_secs(120),
    )
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&stopped.stderr);
    assert!(!stopped.status.success(), "{said}");
    assert!(
        said.contains("cannot snapshot public.closed_t")
            && said.contains("GRANT SELECT ON \"public\".\"closed_t\""),
        "{said}"
    );
    // The slot it created stays; without checkpoints pgcdc reads only with a
    // new slot, so drop it to start over.
    client
        .batch_execute("SELECT pg_drop_replication_slot('priv')")
        .await
        .unwrap();

    std::fs::write(&config_path, config("warn")).unwrap();
    let mut job = Pgcdc::run(&config_path).unwrap();
    for id in 1..=5 {
        arrived(&out, "open_t", id).await;
    }
    job.terminate(Duration::from_secs(30)).await.unwrap();
    let log = job.stderr();
    assert!(
        log.contains("may not SELECT from the table") && log.contains("closed_t"),
        "{log}"
    );
    assert!(ops_of(&file_events(&out), "closed_t").is_empty());
}
