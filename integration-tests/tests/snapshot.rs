//! The initial snapshot against a real server: under a concurrent write
//! workload the PostgreSQL sink ends up equal to the table; after a SIGKILL
//! mid-snapshot only unfinished chunks are read again; a table without a
//! key goes through the consistent read; the startup modes.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::{
    kill_and_wait, snapshot_progress, Pgcdc, TempDir, TestDatabase, TestPostgres,
};
use pgcdc::config::Config;
use pgcdc::{run, RunOptions};
use serde_json::Value;
use tokio_postgres::Client;

const TIMEOUT: Duration = Duration::from_secs(300);

/// Logs of the code under test, filtered by `PGCDC_TEST_LOG` (off when unset).
fn init_logging() {
    if let Ok(filter) = std::env::var("PGCDC_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// Rows of the big table (the acceptance size; smaller with the variable
/// for quick local runs).
fn big_rows() -> i64 {
    std::env::var("PGCDC_SNAPSHOT_TEST_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// Polls `check` until it yields a value, for at most TIMEOUT.
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

async fn table(client: &Client, name: &str) -> BTreeMap<i64, (i32, String)> {
    client
        .query(&format!("SELECT id, v, pad FROM {name}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

/// Random updates, deletes and inserts (inside and beyond the initial key
/// range) in small transactions until `stop`; then a sentinel row.
async fn workload(client: Client, rows: i64, stop: Arc<AtomicBool>) -> u64 {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut txns = 0u64;
    let mut fresh = rows + 1;
    while !stop.load(Ordering::Relaxed) {
        let mut sql = String::from("BEGIN;");
        for _ in 0..5 {
            let id = (next() % rows as u64) as i64 + 1;
            match next() % 10 {
                0 => sql.push_str(&format!("DELETE FROM items WHERE id = {id};")),
                1 => sql.push_str(&format!(
                    "INSERT INTO items VALUES ({id}, -1, 'back') ON CONFLICT (id) DO UPDATE SET v = items.v + 1000;"
                )),
                2 => {
                    sql.push_str(&format!("INSERT INTO items VALUES ({fresh}, 0, 'new');"));
                    fresh += 1;
                }
                _ => sql.push_str(&format!("UPDATE items SET v = v + 1 WHERE id = {id};")),
            }
        }
        sql.push_str("COMMIT;");
        client.batch_execute(&sql).await.unwrap();
        txns += 1;
    }
    client
        .batch_execute("INSERT INTO items VALUES (-1, 0, 'sentinel')")
        .await
        .unwrap();
    txns
}

async fn setup_items(client: &Client, rows: i64) {
    client
        .batch_execute(&format!(
            "CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL, pad text NOT NULL);
             INSERT INTO items SELECT g, 0, md5(g::text) FROM generate_series(1, {rows}) g;
             ANALYZE items;
             CREATE SCHEMA replica;
             CREATE TABLE replica.items (id bigint PRIMARY KEY, v int NOT NULL, pad text NOT NULL);"
        ))
        .await
        .unwrap();
}

fn items_config(db: &TestDatabase, slot: &str, chunk_size: u64, interval_ms: u64) -> String {
    let source = db.source_toml(&["public.items"], slot, &format!("{slot}_pub"));
    format!(
        r#"
        {source}
        [pipeline]
        status_interval_secs = 1

        [[sinks]]
        type = "postgres"
        url = {url:?}
        tables = {{ "public.items" = "replica.items" }}

        [checkpoint]
        job = {slot:?}
        interval_ms = {interval_ms}

        [snapshot]
        chunk_size = {chunk_size}
        readers = 2
        "#,
        url = db.connection_string(),
    )
}

async fn sentinel_arrived(client: &Client) -> Option<()> {
    client
        .query_opt("SELECT 1 FROM replica.items WHERE id = -1", &[])
        .await
        .unwrap()
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_under_concurrent_writes_equals_the_table() {
    init_logging();
    let rows = big_rows();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    setup_items(&client, rows).await;
    let config = Config::parse(&items_config(&db, "big", 10_000, 500)).unwrap();
    let store = store(&db).await;

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let job = tokio::spawn(async move {
        run(&config, &RunOptions::default(), async {
            let _ = stop_rx.await;
        })
        .await
    });
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(workload(db.connect().await.unwrap(), rows, stop.clone()));
    let started = std::time::Instant::now();
    eventually("the snapshot to complete", || async {
        snapshot_progress(&store, "big")
            .await
            .filter(|p| p.complete)
            .map(|_| ())
    })
    .await;
    let snapshot_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let txns = writer.await.unwrap();
    eventually("the sentinel in the sink", || sentinel_arrived(&client)).await;
    let _ = stop_tx.send(());
    job.await.unwrap().unwrap();

    let source = table(&client, "items").await;
    let target = table(&client, "replica.items").await;
    let p = snapshot_progress(&store, "big").await.unwrap();
    println!(
        "{rows} rows, {txns} concurrent transactions, snapshot {snapshot_secs:.1} s, {} chunks",
        p.tables_done.iter().map(|t| t.chunks).sum::<u64>()
    );
    assert!(txns > 0, "the workload ran during the snapshot");
    assert_eq!(source.len(), target.len());
    let differing: Vec<_> = source
        .iter()
        .filter(|(k, v)| target.get(k) != Some(v))
        .take(5)
        .collect();
    assert!(differing.is_empty(), "rows differ: {differing:?}");
    assert_eq!(source, target);
    assert_eq!(p.tables_done.len(), 1);
    assert!(p.tables_done[0].rows >= rows as u64 / 2);
}

/// `lo`/`hi` of the "snapshot chunk read" debug lines of a log.
fn chunk_reads(log: &str) -> Vec<(Option<i64>, Option<i64>)> {
    let field = |line: &str, name: &str| -> Option<i64> {
        let at = line.find(&format!(" {name}="))? + name.len() + 2;
        let v: String = line[at..]
            .chars()
            .take_while(|c| !c.is_whitespace())
            .collect();
        v.parse().ok()
    };
    log.lines()
        .filter(|l| l.contains("snapshot chunk read"))
        .map(|l| (field(l, "lo"), field(l, "hi")))
        .collect()
}

/// A key bound of the snapshot cursor (single bigint key column).
fn bound(v: &Value) -> Option<i64> {
    v.as_array()
        .map(|k| k[0].as_str().unwrap().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_snapshot_reads_only_unfinished_chunks() {
    const ROWS: i64 = 200_000;
    const CHUNK: i64 = 2_000;
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    setup_items(&client, ROWS).await;
    let dir = TempDir::new("snapshot-crash");
    let config = dir.path().join("pgcdc.toml");
    std::fs::write(&config, items_config(&db, "crashsnap", CHUNK as u64, 100)).unwrap();
    let store = store(&db).await;
    let log_filter = "info,cdc_runtime::snapshot=debug,tokio_postgres=warn";

    // Updates only: the key set, and so the chunk boundaries, stay fixed.
    let stop = Arc::new(AtomicBool::new(false));
    let updater = {
        let client = db.connect().await.unwrap();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut id = 1i64;
            while !stop.load(Ordering::Relaxed) {
                client
                    .batch_execute(&format!("UPDATE items SET v = v + 1 WHERE id = {id}"))
                    .await
                    .unwrap();
                id = id * 7919 % ROWS + 1;
            }
        })
    };

    let mut first = Pgcdc::run_with_log(&config, log_filter).unwrap();
    let at_kill = eventually("a checkpoint with 20 chunks done", || async {
        snapshot_progress(&store, "crashsnap")
            .await
            .filter(|p| p.in_progress.as_ref().is_some_and(|c| c.chunks_done >= 20))
    })
    .await;
    kill_and_wait(&mut first, &db, TIMEOUT).await;
    let reads_before = chunk_reads(&first.stderr());
    // What the last checkpoint before the kill recorded (a later one may
    // have been saved between our read and the kill).
    let saved = snapshot_progress(&store, "crashsnap").await.unwrap();
    assert!(!saved.complete, "killed before the snapshot completed");
    let cursor = saved.in_progress.as_ref().unwrap();
    assert!(cursor.chunks_done >= at_kill.in_progress.as_ref().unwrap().chunks_done);
    let cur: Value = serde_json::from_slice(&cursor.cursor).unwrap();
    let next = bound(&cur["next"]);
    let redo: Vec<(Option<i64>, Option<i64>)> = cur["redo"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|r| (bound(&r["lo"]), bound(&r["hi"])))
                .collect()
        })
        .unwrap_or_default();

    // `pgcdc slot status` shows where the snapshot stands.
    let status = integration_tests::run_pgcdc(
        &["slot", "status", "--config", config.to_str().unwrap()],
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{out}");
    assert!(
        out.contains("snapshot:         running")
            && out.contains(&format!("public.items: {} chunks", cursor.chunks_done)),
        "{out}"
    );
    let mut second = Pgcdc::run_with_log(&config, log_filter).unwrap();
    eventually("the snapshot to complete after the restart", || async {
        snapshot_progress(&store, "crashsnap")
            .await
            .filter(|p| p.complete)
            .map(|_| ())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    updater.await.unwrap();
    client
        .batch_execute("INSERT INTO items VALUES (-1, 0, 'sentinel')")
        .await
        .unwrap();
    eventually("the sentinel in the sink", || sentinel_arrived(&client)).await;
    second.terminate(Duration::from_secs(30)).await.unwrap();

    let reads_after = chunk_reads(&second.stderr());
    // Chunks are (lo, hi] of CHUNK keys, and a last open one (lo, ∞).
    let total_chunks = ROWS / CHUNK + 1;
    println!(
        "chunks: {total_chunks}; read before the kill {}, recorded done {}, redo {}, read after {}",
        reads_before.len(),
        cursor.chunks_done,
        redo.len(),
        reads_after.len()
    );
    // Nothing the checkpoint recorded as done is read again: every read
    // after the restart is a chunk to redo or lies past the planned cursor.
    for read in &reads_after {
        let past = match (read.0, next) {
            (Some(lo), Some(next)) => lo >= next,
            (_, None) => redo.is_empty() && cursor.chunks_done == 0,
            (None, Some(_)) => false,
        };
        assert!(
            past || redo.contains(read),
            "chunk {read:?} was read again though the checkpoint had it done (next {next:?}, redo {redo:?})"
        );
    }
    assert_eq!(
        reads_after.len() as u64,
        total_chunks as u64 - cursor.chunks_done,
        "after the restart exactly the chunks not done are read: {reads_after:?}\n{}",
        second
            .stderr()
            .lines()
            .filter(|l| !l.contains("chunk read"))
            .take(40)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        table(&client, "items").await,
        table(&client, "replica.items").await
    );
}

/// Every line a file sink wrote under base path `path`.
fn sink_text(path: &std::path::Path) -> String {
    cdc_runtime::sinks::FileSink::files(path)
        .unwrap_or_default()
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect()
}

/// The Debezium events of a file sink: (op, after.v) of table `nokey`.
fn file_events(path: &std::path::Path) -> Vec<(String, i64)> {
    sink_text(path)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|j| j["source"]["table"] == "nokey")
        .map(|j| {
            (
                j["op"].as_str().unwrap().to_owned(),
                j["after"]["v"].as_i64().unwrap_or(i64::MIN),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_without_a_key_goes_through_the_consistent_read() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE nokey (v bigint NOT NULL, pad text);
             INSERT INTO nokey SELECT g, 'x' FROM generate_series(1, 20000) g;",
        )
        .await
        .unwrap();
    let dir = TempDir::new("snapshot-nokey");
    let events = dir.path().join("events.jsonl");
    let source = db.source_toml(&["public.nokey"], "nokey_slot", "nokey_pub");
    let text = format!(
        r#"
        {source}
        [[sinks]]
        type = "file"
        path = {events:?}

        [checkpoint]
        job = "nokey"
        interval_ms = 100
        "#
    );
    let config_path = dir.path().join("pgcdc.toml");
    std::fs::write(&config_path, &text).unwrap();
    let store = store(&db).await;

    // Inserts run before, during and after the consistent read.
    let stop = Arc::new(AtomicBool::new(false));
    let inserter = {
        let client = db.connect().await.unwrap();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut v = 100_000i64;
            while !stop.load(Ordering::Relaxed) {
                client
                    .batch_execute(&format!("INSERT INTO nokey VALUES ({v}, 'live')"))
                    .await
                    .unwrap();
                v += 1;
            }
            v
        })
    };
    let mut pgcdc = Pgcdc::run(&config_path).unwrap();
    eventually("the snapshot to complete", || async {
        snapshot_progress(&store, "nokey")
            .await
            .filter(|p| p.complete)
            .map(|_| ())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let last = inserter.await.unwrap();
    client
        .batch_execute("INSERT INTO nokey VALUES (-1, 'sentinel')")
        .await
        .unwrap();
    eventually("the sentinel in the file", || async {
        file_events(&events)
            .iter()
            .any(|(_, v)| *v == -1)
            .then_some(())
    })
    .await;
    pgcdc.terminate(Duration::from_secs(30)).await.unwrap();
    assert!(
        pgcdc.stderr().contains("not resumable"),
        "the log says the read is not resumable"
    );

    let got = file_events(&events);
    let reads: Vec<i64> = got
        .iter()
        .filter(|(op, _)| op == "r")
        .map(|(_, v)| *v)
        .collect();
    let creates: Vec<i64> = got
        .iter()
        .filter(|(op, _)| op == "c")
        .map(|(_, v)| *v)
        .collect();
    assert!(reads.len() >= 20_000, "every initial row is read");
    let mut all: Vec<i64> = reads.iter().chain(&creates).copied().collect();
    let distinct: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        all.len(),
        "no row both read and streamed, none twice"
    );
    all.sort_unstable();
    let mut expected: Vec<i64> = client
        .query("SELECT v FROM nokey", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    expected.sort_unstable();
    assert_eq!(all, expected, "read + streamed rows are exactly the table");
    println!(
        "{} rows read, {} streamed, inserts up to {last}",
        reads.len(),
        creates.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_modes_latest_and_snapshot_only() {
    init_logging();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE modes (id int PRIMARY KEY, v int);
             INSERT INTO modes SELECT g, g FROM generate_series(1, 500) g;",
        )
        .await
        .unwrap();
    let dir = TempDir::new("snapshot-modes");
    let config = |mode: &str, slot: &str, events: &std::path::Path| {
        let source = db.source_toml(&["public.modes"], slot, "modes_pub");
        Config::parse(&format!(
            r#"
            {source}
            [[sinks]]
            type = "file"
            path = {events:?}

            [snapshot]
            mode = {mode:?}
            "#
        ))
        .unwrap()
    };
    let ops = |path: &std::path::Path| -> Vec<(String, i64)> {
        sink_text(path)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|j| j["source"]["table"] == "modes")
            .map(|j| {
                (
                    j["op"].as_str().unwrap().to_owned(),
                    j["after"]["id"].as_i64().unwrap_or(-1),
                )
            })
            .collect()
    };

    // snapshot_only: every row once as `r`, then the job stops by itself
    // and drops the slot it created.
    let only = dir.path().join("only.jsonl");
    let progress = tokio::time::timeout(
        TIMEOUT,
        run(
            &config("snapshot_only", "modes_only", &only),
            &RunOptions::default(),
            std::future::pending(),
        ),
    )
    .await
    .expect("snapshot_only stops by itself")
    .unwrap();
    assert_eq!(
        progress.snapshot,
        cdc_runtime::snapshot::SnapshotState::Complete
    );
    let got = ops(&only);
    let ids: Vec<i64> = got.iter().map(|(_, id)| *id).collect();
    assert!(got.iter().all(|(op, _)| op == "r"), "{got:?}");
    assert_eq!(ids.len(), 500);
    assert_eq!(ids.iter().copied().collect::<HashSet<_>>().len(), 500);
    let slot = client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'modes_only'",
            &[],
        )
        .await
        .unwrap();
    assert!(
        slot.is_none(),
        "the slot created for the snapshot is dropped"
    );

    // latest: no snapshot, only what changes from now on.
    let latest = dir.path().join("latest.jsonl");
    let cfg = config("latest", "modes_latest", &latest);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let job = tokio::spawn(async move {
        run(&cfg, &RunOptions::default(), async {
            let _ = stop_rx.await;
        })
        .await
    });
    eventually("the slot to be streaming", || async {
        client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'modes_latest' AND active AND confirmed_flush_lsn IS NOT NULL",
                &[],
            )
            .await
            .unwrap()
            .map(|_| ())
    })
    .await;
    client
        .batch_execute("INSERT INTO modes VALUES (1000, 1)")
        .await
        .unwrap();
    eventually("the insert in the file", || async {
        ops(&latest).iter().any(|(_, id)| *id == 1000).then_some(())
    })
    .await;
    let _ = stop_tx.send(());
    job.await.unwrap().unwrap();
    assert_eq!(ops(&latest), vec![("c".to_owned(), 1000)]);
}
