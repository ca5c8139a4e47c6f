//! Sink faults against a real server: a transient error (the sink's backend
//! terminated) is retried inside the sink's task without a replication
//! reconnect and without losing or duplicating anything; a permanent one
//! stops with the table, commit LSN and event that failed.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_core::{types, Lsn, Value};
use cdc_runtime::event::{ChangeEvent, ColumnSchema, Operation, Row, SourceInfo, TableSchema};
use cdc_runtime::sinks::{PgTableSink, PgTableSinkOptions, Sink, SinkError};
use checkpoint_api::{CheckpointStore, JobName};
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::{TestDatabase, TestPostgres};
use pgcdc::config::Config;
use pgcdc::RunOptions;
use tokio::sync::oneshot;
use tokio_postgres::Client;

const TIMEOUT: Duration = Duration::from_secs(60);

/// The sink's `application_name`, to find its backend.
const SINK_APP: &str = "pgcdc_fault_sink";

/// How many times the sink's backend is terminated.
const KILLS: usize = 5;

fn init_logging() {
    if let Ok(filter) = std::env::var("PGCDC_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// A job from `public.orders` into `replica.orders` of the same database:
/// exactly once, with the checkpoints committed in the sink's transaction
/// (the default when the store is in the target database), every 100 ms,
/// and a file sink beside it (a peer that must flush before each commit).
fn config(db: &TestDatabase, name: &str) -> Config {
    let dir = std::env::temp_dir().join(format!("pgcdc-faults-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let source = db.source_toml(
        &["public.orders"],
        &format!("{name}_slot"),
        &format!("{name}_pub"),
    );
    let url = format!(
        "{} application_name={SINK_APP}",
        db.connection_info().connection_string()
    );
    let text = format!(
        r#"
        {source}
        [[sinks]]
        type = "file"
        path = {path:?}

        [[sinks]]
        type = "postgres"
        url = {url:?}
        exactly_once = true
        name = {name:?}
        tables = {{ "public.orders" = "replica.orders" }}

        [checkpoint]
        job = {name:?}
        interval_ms = 100
        keep = 100000
        "#,
        path = dir.join("events.jsonl").display().to_string(),
    );
    let config = Config::parse(&text).unwrap();
    config.check().unwrap();
    config
}

async fn setup(client: &Client) {
    client
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer int, amount int);
             CREATE SCHEMA replica;
             CREATE TABLE replica.orders (id bigint PRIMARY KEY, customer int, amount int);",
        )
        .await
        .unwrap();
}

async fn lsn(client: &Client, sql: &str) -> Lsn {
    let row = client.query_opt(sql, &[]).await.unwrap();
    row.and_then(|r| r.get::<_, Option<String>>(0))
        .map_or(Lsn::INVALID, |s| s.parse().unwrap())
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

/// One round: 25 inserts, an update and every fourth round a delete, in
/// three transactions.
async fn round(client: &Client, round: i64) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "INSERT INTO orders SELECT g, g % 7, g FROM generate_series($1::bigint, $1 + 24) g",
            &[&(round * 25)],
        )
        .await?;
    client
        .execute(
            "UPDATE orders SET amount = amount + 1 WHERE id = $1",
            &[&(round * 13)],
        )
        .await?;
    if round % 4 == 0 {
        client
            .execute("DELETE FROM orders WHERE id = $1", &[&(round * 7)])
            .await?;
    }
    Ok(())
}

/// The pid of the sink's backend in this test's database (the tests share
/// a cluster), if it is connected, other than the `killed` ones; with
/// `committing`, only while it runs a `COMMIT`.
async fn sink_backend(client: &Client, killed: &BTreeSet<i32>, committing: bool) -> Option<i32> {
    client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 \
             AND datname = current_database() \
             AND (NOT $2 OR (state = 'active' AND query = 'COMMIT'))",
            &[&SINK_APP, &committing],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i32>(0))
        .find(|pid| !killed.contains(pid))
}

/// The position the sink's progress row records (committed with the
/// checkpoints).
async fn sink_progress(client: &Client, name: &str) -> Lsn {
    let exists = client
        .query_one("SELECT to_regclass('pgcdc.sink_progress') IS NOT NULL", &[])
        .await
        .unwrap()
        .get::<_, bool>(0);
    if !exists {
        return Lsn::INVALID;
    }
    lsn(
        client,
        &format!("SELECT commit_lsn::text FROM pgcdc.sink_progress WHERE sink = '{name}'"),
    )
    .await
}

#[tokio::test]
async fn terminating_the_sinks_backend_is_retried_without_a_reconnect_or_a_difference() {
    kill_the_sink_while_streaming("faults", false).await;
}

#[tokio::test]
async fn terminating_the_sinks_backend_during_a_checkpoint_commit_is_retried_too() {
    kill_the_sink_while_streaming("commit_faults", true).await;
}

/// Runs the job under a streaming workload and terminates the sink's
/// backend [`KILLS`] times, each time once it reconnected and committed a
/// checkpoint since the last kill; with `during_commit`, while it runs the
/// `COMMIT` of a checkpoint (made slow by a deferred trigger on the
/// checkpoints table), so the commit itself fails and is retried.
async fn kill_the_sink_while_streaming(name: &str, during_commit: bool) {
    init_logging();
    let started = Instant::now();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    setup(&client).await;
    let config = config(&db, name);
    let store = PgCheckpointStore::connect(db.connection_info().config(), PgStoreConfig::default())
        .await
        .unwrap();
    if during_commit {
        // Every checkpoint's COMMIT takes 200 ms: time to find and kill it.
        client
            .batch_execute(&format!(
                "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN PERFORM pg_sleep(0.2); RETURN NULL; END $$;
                 CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON {} \
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();",
                store.checkpoints_table()
            ))
            .await
            .unwrap();
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let job_config = config.clone();
    let task = tokio::spawn(async move {
        pgcdc::run(&job_config, &RunOptions::default(), async move {
            let _ = stopped.await;
        })
        .await
    });
    let slot = format!(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '{name}_slot'"
    );
    integration_tests::eventually("the job streams", TIMEOUT, || async {
        (!lsn(&client, &slot).await.is_invalid()).then_some(())
    })
    .await;

    // A workload streams while the sink's backend is terminated.
    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let writer_client = db.connect().await.unwrap();
        let writing = writing.clone();
        tokio::spawn(async move {
            let mut n = 0i64;
            while writing.load(Ordering::Relaxed) || n < 20 {
                round(&writer_client, n).await.unwrap();
                n += 1;
            }
            n
        })
    };

    let mut killed = BTreeSet::new();
    let mut kills = 0;
    let mut missed = 0;
    while kills < KILLS {
        // The sink is connected again and committed a checkpoint since the
        // last kill: the previous fault was recovered from.
        let before = sink_progress(&client, name).await;
        let pid = integration_tests::eventually(
            "the sink's backend, reconnected and committing",
            TIMEOUT,
            || async {
                let pid = sink_backend(&client, &killed, during_commit).await?;
                (sink_progress(&client, name).await > before).then_some(pid)
            },
        )
        .await;
        let terminated: bool = client
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap()
            .get(0);
        killed.insert(pid);
        if terminated {
            kills += 1;
        } else {
            // The backend ended between the lookup and the kill.
            missed += 1;
            assert!(missed <= KILLS, "{missed} backends gone before their kill");
        }
    }

    // The sink comes back after the last kill, then the workload ends.
    let before = sink_progress(&client, name).await;
    integration_tests::eventually("the sink after the last kill", TIMEOUT, || async {
        sink_backend(&client, &killed, false).await?;
        (sink_progress(&client, name).await > before).then_some(())
    })
    .await;
    writing.store(false, Ordering::Relaxed);
    let rounds = writer.await.unwrap();

    // Every change is covered by a checkpoint committed with the writes.
    let written = lsn(&client, "SELECT pg_current_wal_lsn()::text").await;
    let job_name = JobName::new(name).unwrap();
    integration_tests::eventually("a checkpoint covering the workload", TIMEOUT, || async {
        let list = store.list(&job_name).await.unwrap();
        list.iter()
            .any(|m| m.commit_end_lsn >= written)
            .then_some(())
    })
    .await;

    let _ = stop.send(());
    let progress = tokio::time::timeout(TIMEOUT, task)
        .await
        .expect("the job did not stop")
        .unwrap()
        .expect("the job failed");
    let source = rows(&client, "orders").await;
    assert!(
        source.len() > 400,
        "the workload wrote {} rows",
        source.len()
    );
    assert_eq!(
        rows(&client, "replica.orders").await,
        source,
        "the sink holds exactly the table"
    );
    assert_eq!(
        progress.reconnects, 0,
        "the sink's faults did not reconnect replication: {progress:?}"
    );
    assert_eq!(kills, KILLS);
    // The mode under test: every row the sink wrote committed in the
    // transaction of a checkpoint.
    let xmins = |sql: String| {
        let client = &client;
        async move {
            client
                .query(&sql, &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<BTreeSet<_>>()
        }
    };
    let target = xmins("SELECT xmin::text FROM replica.orders".into()).await;
    let checkpoints = xmins(format!(
        "SELECT xmin::text FROM {} WHERE job = '{name}'",
        store.checkpoints_table()
    ))
    .await;
    let strays: Vec<_> = target.difference(&checkpoints).collect();
    assert!(
        strays.is_empty(),
        "rows committed without a checkpoint: {strays:?}"
    );
    eprintln!(
        "sink_faults ({name}): {KILLS} kills of the sink's backend ({missed} missed), {rounds} rounds ({} rows, {} events, {} checkpoints) in {:?}",
        source.len(),
        progress.events,
        progress.checkpoints.saved,
        started.elapsed()
    );
}

// ---- a permanent error ------------------------------------------------------

fn col(name: &str, type_oid: u32, is_key: bool) -> ColumnSchema {
    ColumnSchema {
        name: name.into(),
        type_oid,
        type_modifier: -1,
        is_key,
    }
}

fn insert(
    table: &Arc<TableSchema>,
    commit_lsn: Lsn,
    index: u32,
    id: i64,
    amount: i32,
) -> ChangeEvent {
    ChangeEvent {
        op: Operation::Create,
        table: Some(table.clone()),
        before: None,
        after: Some(Row::from_values(vec![Value::Int8(id), Value::Int4(amount)])),
        message: None,
        schema_change: None,
        source: SourceInfo {
            commit_lsn,
            lsn: commit_lsn,
            xid: 42,
            commit_time: None,
            database: "src".into(),
            slot: "slot".into(),
        },
        index,
        position: Default::default(),
        boundary: None,
    }
}

#[tokio::test]
async fn a_permanent_error_names_the_table_commit_lsn_and_event() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE accounts (id bigint PRIMARY KEY, amount int CHECK (amount >= 0))",
        )
        .await
        .unwrap();
    let table = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "public".into(),
        table: "accounts".into(),
        columns: vec![
            col("id", types::INT8, true),
            col("amount", types::INT4, false),
        ],
    });
    let mut sink = PgTableSink::connect(
        &db.connection_string(),
        PgTableSinkOptions::default().exactly_once("permanent"),
    )
    .await
    .unwrap();
    let commit: Lsn = "0/5A0C1D8".parse().unwrap();
    let batch = [
        insert(&table, commit, 0, 1, 10),
        insert(&table, commit, 1, 2, 20),
        insert(&table, commit, 2, 3, -5),
        insert(&table, commit, 3, 4, 40),
    ];
    let err = sink.write(&batch).await.unwrap_err();
    let text = err.to_string();
    assert!(
        !err.is_retryable(),
        "a check violation is permanent: {text}"
    );
    let SinkError::Event {
        table: name,
        commit_lsn,
        index,
        op,
        ..
    } = &err
    else {
        panic!("expected the failing event: {text}");
    };
    assert_eq!(name, "public.accounts");
    assert_eq!(*commit_lsn, commit);
    assert_eq!(*index, 2, "{text}");
    assert_eq!(*op, Operation::Create.name());
    assert!(
        text.contains("public.accounts") && text.contains("0/5A0C1D8"),
        "{text}"
    );
    assert!(
        text.contains("23514"),
        "the server's SQLSTATE is kept: {text}"
    );
    // Nothing of the batch was applied.
    let n: i64 = client
        .query_one("SELECT count(*) FROM accounts", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn a_reset_reconnects_and_keeps_exactly_once() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE accounts (id bigint PRIMARY KEY, amount int)")
        .await
        .unwrap();
    let table = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "public".into(),
        table: "accounts".into(),
        columns: vec![
            col("id", types::INT8, true),
            col("amount", types::INT4, false),
        ],
    });
    let url = format!("{} application_name=pgcdc_reset", db.connection_string());
    let mut sink = PgTableSink::connect(&url, PgTableSinkOptions::default().exactly_once("reset"))
        .await
        .unwrap();
    let commit: Lsn = "0/1000".parse().unwrap();
    let first = [
        insert(&table, commit, 0, 1, 10),
        insert(&table, commit, 1, 2, 20),
    ];
    sink.write(&first).await.unwrap();
    let terminated: bool = client
        .query_one(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'pgcdc_reset' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(terminated);
    let second = [insert(&table, commit, 2, 3, 30)];
    let err = sink.write(&second).await.unwrap_err();
    assert!(
        err.is_retryable(),
        "a terminated backend is transient: {err}"
    );
    sink.reset().await.unwrap();
    // The replay of both batches applies only what was not committed: the
    // first batch's rows are not rewritten (their xmin stays).
    let xmin_before: String = client
        .query_one("SELECT xmin::text FROM accounts WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    sink.write(&first).await.unwrap();
    sink.write(&second).await.unwrap();
    let xmin_after: String = client
        .query_one("SELECT xmin::text FROM accounts WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        xmin_before, xmin_after,
        "a replayed event was applied again"
    );
    let ids: Vec<i64> = client
        .query("SELECT id FROM accounts ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [1, 2, 3]);
}
