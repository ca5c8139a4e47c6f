//! Crash torture: `pgcdc run` as a child process under a concurrent write
//! workload, SIGKILLed at random moments and restarted each time. Afterwards
//! nothing committed is missing, deduplication by `(commit LSN, event index)`
//! gives exactly the committed changes, the PostgreSQL sink equals the
//! table (in the same database as the checkpoints, exactly once), the
//! aggregate equals a SQL recomputation, and the slot was never
//! confirmed past the oldest retained checkpoint.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_core::Lsn;
use cdc_runtime::operators::{Group, KeyedAggregate, KeyedAggregateSpec};
use cdc_runtime::sinks::FileSink;
use checkpoint_api::{CheckpointStore, JobName};
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::TestPostgres;
use serde_json::Value;
use tokio_postgres::Client;

const TIMEOUT: Duration = Duration::from_secs(120);
const KILLS: usize = 20;
const KEYS: i64 = 100_000;

fn spawn(config: &PathBuf, log: &PathBuf) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Command::new(integration_tests::pgcdc_binary().unwrap())
        .args(["run", "--config"])
        .arg(config)
        .env("PGCDC_METRICS_LISTEN", ":0")
        .env(
            "RUST_LOG",
            std::env::var("PGCDC_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

async fn lsn_query(client: &Client, sql: &str) -> Lsn {
    let row = client.query_opt(sql, &[]).await.unwrap();
    row.and_then(|r| r.get::<_, Option<String>>(0))
        .map(|s| s.parse().unwrap())
        .unwrap_or(Lsn::INVALID)
}

async fn slot_confirmed(client: &Client) -> Lsn {
    lsn_query(
        client,
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'torture_slot'",
    )
    .await
}

async fn oldest_retained(client: &Client, store: &PgCheckpointStore) -> Option<Lsn> {
    let sql = format!(
        "SELECT min(commit_end_lsn)::text FROM {} WHERE job = 'torture'",
        store.checkpoints_table()
    );
    let lsn = lsn_query(client, &sql).await;
    (!lsn.is_invalid()).then_some(lsn)
}

async fn rows(client: &Client, table: &str) -> BTreeMap<i64, (Option<i32>, Option<i32>)> {
    client
        .query(&format!("SELECT id, customer, amount FROM {table}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

/// Groups from a query returning (key text, count int8, sum int8).
async fn groups(client: &Client, sql: &str) -> BTreeMap<Option<String>, Group> {
    client
        .query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get(0),
                Group {
                    count: r.get(1),
                    sum: i128::from(r.get::<_, i64>(2)),
                },
            )
        })
        .collect()
}

#[tokio::test]
async fn sigkill_torture_loses_nothing() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    // The PostgreSQL sink writes into the source database, beside the
    // checkpoints: orders go to replica.orders, the aggregate to pgcdc.totals.
    let target_client = db.connect().await.unwrap();
    let ddl = "CREATE TABLE orders (id bigint PRIMARY KEY, customer int, amount int)";
    client.batch_execute(ddl).await.unwrap();
    client
        .batch_execute("ALTER TABLE orders REPLICA IDENTITY FULL")
        .await
        .unwrap();
    target_client
        .batch_execute(
            "CREATE SCHEMA replica; CREATE TABLE replica.orders (id bigint PRIMARY KEY, customer int, amount int);
             CREATE SCHEMA IF NOT EXISTS pgcdc;
             CREATE TABLE pgcdc.totals (key text PRIMARY KEY, count bigint, sum numeric)",
        )
        .await
        .unwrap();

    let dir = std::env::temp_dir().join(format!("pgcdc-torture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let events_path = dir.join("events.jsonl");
    let log = dir.join("pgcdc.log");
    let source = db.source_toml(&["public.orders"], "torture_slot", "torture_pub");
    let config_text = format!(
        r#"
        {source}
        [pipeline]
        status_interval_secs = 1

        [[sinks]]
        type = "file"
        path = {events:?}

        # The transaction block identifies events delivered again.
        [debezium]
        "provide.transaction.metadata" = true

        [[sinks]]
        type = "postgres"
        url = {target_url:?}
        exactly_once = true
        tables = {{ "public.orders" = "replica.orders" }}

        [checkpoint]
        job = "torture"
        interval_ms = 200
        keep = 3
        # Small enough that the aggregate's state is stored in chunks.
        inline_threshold = 65536

        [[operators]]
        type = "keyed_aggregate"
        id = "totals"
        table = "public.orders"
        key = "customer"
        value = "amount"
        "#,
        events = events_path.display().to_string(),
        target_url = db.connection_info().connection_string(),
    );
    let config = dir.join("pgcdc.toml");
    std::fs::write(&config, config_text).unwrap();

    let mut child = spawn(&config, &log);
    let store = PgCheckpointStore::connect(db.connection_info().config(), PgStoreConfig::default())
        .await
        .unwrap();
    let job = JobName::new("torture").unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while slot_confirmed(&client).await.is_invalid() {
        assert!(
            Instant::now() < deadline,
            "the job never started; see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // 100k keys in the aggregate: its state goes the big-state path.
    client
        .execute(
            "INSERT INTO orders SELECT g, g, 1 FROM generate_series(1, $1::bigint) g",
            &[&KEYS],
        )
        .await
        .unwrap();
    // Kills are meant to hit the steady state with big-state checkpoints, not
    // to replay the load over and over: wait until a checkpoint covers it.
    let loaded = lsn_query(&client, "SELECT pg_current_wal_lsn()::text").await;
    let deadline = Instant::now() + TIMEOUT;
    while !store
        .list(&job)
        .await
        .unwrap()
        .iter()
        .any(|m| m.commit_end_lsn >= loaded)
    {
        assert!(
            Instant::now() < deadline,
            "the load was never checkpointed; see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The write workload: inserts, updates and deletes in small transactions.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let client = db.connect().await.unwrap();
        tokio::spawn(async move {
            let mut next = KEYS + 1;
            let mut committed = Vec::new();
            let mut round = 0i64;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let ids: Vec<i64> = (next..next + 5).collect();
                next += 5;
                client
                    .execute(
                        "INSERT INTO orders SELECT g, (g * 7919) % $2::bigint, (g % 100)::int FROM unnest($1::bigint[]) g",
                        &[&ids, &KEYS],
                    )
                    .await
                    .unwrap();
                committed.extend(ids);
                client
                    .execute(
                        "UPDATE orders SET amount = amount + 1, customer = (customer + 1) % 1000 WHERE id = $1",
                        &[&(round * 37 % KEYS + 1)],
                    )
                    .await
                    .unwrap();
                if round % 3 == 0 {
                    client
                        .execute(
                            "DELETE FROM orders WHERE id = $1",
                            &[&(round * 101 % KEYS + 1)],
                        )
                        .await
                        .unwrap();
                }
            }
            committed
        })
    };

    // The slot must never pass the oldest retained checkpoint: sampled
    // throughout (slot first, then the checkpoints, so a retention that
    // commits in between cannot fake a violation).
    let monitor = {
        let stop = stop.clone();
        let client = db.connect().await.unwrap();
        let store = store.clone();
        tokio::spawn(async move {
            let mut samples = 0u64;
            let mut violations = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let confirmed = slot_confirmed(&client).await;
                if let Some(oldest) = oldest_retained(&client, &store).await {
                    if confirmed > oldest {
                        violations.push((confirmed, oldest));
                    }
                }
                samples += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (samples, violations)
        })
    };

    // SIGKILL at random moments; restart each time.
    let mut seed = std::process::id() as u64 | 1;
    let mut random = move |max: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % max
    };
    let mut kills_during_save = 0;
    // Every third kill waits for a checkpoint save in flight and kills right
    // then: the PostgreSQL sink, whose target is the checkpoint store's
    // database, saves each checkpoint in its own writing transaction.
    let save_in_flight = "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
                          AND backend_xid IS NOT NULL AND ((application_name = 'pgcdc checkpoints' \
                          AND state IN ('active', 'idle in transaction')) \
                          OR (state = 'active' AND query LIKE '%checkpoints%'))";
    for kill in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(150 + random(900))).await;
        let mut saving = false;
        let hunt_until = Instant::now() + Duration::from_secs(if kill % 3 == 0 { 3 } else { 0 });
        loop {
            saving = saving
                || client
                    .query_one(save_in_flight, &[])
                    .await
                    .unwrap()
                    .get::<_, i64>(0)
                    > 0;
            if saving || Instant::now() >= hunt_until {
                break;
            }
        }
        if saving {
            kills_during_save += 1;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        child = spawn(&config, &log);
    }
    stop.store(true, Ordering::Relaxed);
    let committed = writer.await.unwrap();
    let (samples, violations) = monitor.await.unwrap();

    // Let the last instance catch up, then stop it cleanly.
    let end = lsn_query(&client, "SELECT pg_current_wal_lsn()::text").await;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let list = store.list(&job).await.unwrap();
        if list.iter().any(|m| m.commit_end_lsn >= end) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the job never caught up; see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(
        exit.success(),
        "pgcdc exited with {exit}; see {}",
        log.display()
    );

    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(
        log_text.contains("each checkpoint commit in one transaction"),
        "the PostgreSQL sink commits the checkpoints with its writes; see {}",
        log.display()
    );

    // File sink: dedup by (commit LSN, index), then replay in order.
    let mut seen = HashSet::new();
    let mut lines = 0usize;
    let mut replayed: BTreeMap<i64, (Option<i32>, Option<i32>)> = BTreeMap::new();
    for file in FileSink::files(&events_path).unwrap() {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            if e["source"]["table"] != "orders" {
                continue;
            }
            lines += 1;
            // Debezium's transaction id ("<txId>:<LSN>") and order; a
            // snapshot read carries no transaction (as Debezium's), and is
            // identified by its chunk's position and its row.
            let id = match e["transaction"]["id"].as_str() {
                Some(tx) => (
                    tx.to_owned(),
                    e["transaction"]["total_order"].as_u64().unwrap(),
                ),
                None => (
                    format!("r:{}", e["source"]["lsn"]),
                    e["after"]["id"].as_u64().unwrap(),
                ),
            };
            if !seen.insert(id) {
                continue;
            }
            let row = |v: &Value| {
                (
                    v["id"].as_i64().unwrap(),
                    (
                        v["customer"].as_i64().map(|x| x as i32),
                        v["amount"].as_i64().map(|x| x as i32),
                    ),
                )
            };
            match e["op"].as_str().unwrap() {
                // `r`: a row of the initial snapshot (which a restart may
                // continue while the workload runs), applied as an upsert.
                "c" | "u" | "r" => {
                    if e["op"] == "u" {
                        replayed.remove(&row(&e["before"]).0);
                    }
                    let (id, r) = row(&e["after"]);
                    replayed.insert(id, r);
                }
                "d" => {
                    replayed.remove(&row(&e["before"]).0);
                }
                other => panic!("unexpected op {other}"),
            }
        }
    }
    let table = rows(&client, "orders").await;
    let delivered: HashSet<i64> = replayed.keys().copied().collect();
    let deleted_or_present = |id: &i64| delivered.contains(id) || !table.contains_key(id);
    assert!(
        committed.iter().all(deleted_or_present),
        "a committed insert is missing"
    );
    assert_eq!(
        replayed, table,
        "the deduplicated file sink replays to the table"
    );
    assert_eq!(
        rows(&target_client, "replica.orders").await,
        table,
        "the PostgreSQL sink equals the table"
    );
    let progress: i64 = target_client
        .query_one(
            "SELECT count(*) FROM pgcdc.sink_progress WHERE sink = 'torture_slot'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(progress, 1, "the exactly-once sink recorded its progress");

    // The aggregate, from the newest checkpoint and in the target table.
    let latest = store.latest(&job).await.unwrap();
    assert!(latest.skipped.is_empty());
    let latest = latest.checkpoint.unwrap();
    assert_ne!(
        latest.meta.storage,
        checkpoint_api::StorageKind::Inline,
        "the aggregate's state is big"
    );
    let mut agg = KeyedAggregate::new(KeyedAggregateSpec {
        id: "totals".into(),
        schema: "public".into(),
        table: "orders".into(),
        key: "customer".into(),
        value: "amount".into(),
    });
    latest
        .checkpoint
        .operator("totals")
        .unwrap()
        .restore_into(&mut agg)
        .unwrap();
    let expected = groups(
        &client,
        "SELECT customer::text, count(*), coalesce(sum(amount), 0)::int8 FROM orders GROUP BY customer",
    )
    .await;
    assert!(
        expected.len() >= (KEYS as usize) / 2,
        "the aggregate has many keys"
    );
    assert_eq!(
        agg.groups(),
        &expected,
        "the checkpointed aggregate equals SQL"
    );
    let target_totals = groups(
        &target_client,
        "SELECT key, count, sum::int8 FROM pgcdc.totals",
    )
    .await;
    assert_eq!(
        target_totals, expected,
        "the aggregate's upserts reached the PostgreSQL sink"
    );

    // Retention, no orphans, and the slot invariant.
    let list = store.list(&job).await.unwrap();
    assert!(list.len() <= 3, "{} checkpoints kept", list.len());
    assert_eq!(
        store.vacuum().await.unwrap(),
        0,
        "no orphaned large objects"
    );
    let orphans: i64 = client
        .query_one("SELECT count(*) FROM pg_largeobject_metadata", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(orphans, 0);
    assert!(
        violations.is_empty(),
        "slot passed the oldest checkpoint: {violations:?}"
    );
    assert!(slot_confirmed(&client).await <= list[0].commit_end_lsn);
    eprintln!(
        "torture: {KILLS} kills ({kills_during_save} during a checkpoint save), {} committed inserts, \
         {lines} orders events written, {} after dedup ({} duplicates), {samples} slot samples, \
         newest checkpoint {} bytes",
        committed.len(),
        seen.len(),
        lines - seen.len(),
        latest.meta.stored_bytes
    );
    if std::env::var_os("PGCDC_KEEP_TEST_DIRS").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
