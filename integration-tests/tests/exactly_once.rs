//! Exactly-once delivery into PostgreSQL when the sink's target is the
//! checkpoint store's database: the sink's writes and each checkpoint commit
//! in one transaction. Proven on the server itself: every row the sink wrote
//! carries the transaction id (`xmin`) of a checkpoint row.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cdc_core::Lsn;
use cdc_runtime::JobError;
use checkpoint_api::{CheckpointStore, JobName};
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::{TestDatabase, TestPostgres};
use pgcdc::config::Config;
use pgcdc::RunOptions;
use tokio::sync::oneshot;
use tokio_postgres::Client;

const TIMEOUT: Duration = Duration::from_secs(60);

/// A job from `public.orders` into `replica.orders` of the same database
/// (exactly once, `commit_with_checkpoint` as given) and a file sink beside
/// it, checkpointing every 100 ms and keeping every checkpoint.
fn config(db: &TestDatabase, name: &str, commit_with_checkpoint: Option<bool>) -> Config {
    let dir = std::env::temp_dir().join(format!("pgcdc-eo-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let source = db.source_toml(
        &["public.orders"],
        &format!("{name}_slot"),
        &format!("{name}_pub"),
    );
    let commit = commit_with_checkpoint
        .map(|c| format!("commit_with_checkpoint = {c}"))
        .unwrap_or_default();
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
        tables = {{ "public.orders" = "replica.orders" }}
        {commit}

        [checkpoint]
        job = {name:?}
        interval_ms = 100
        keep = 100000
        "#,
        path = dir.join("events.jsonl").display().to_string(),
        url = db.connection_info().connection_string(),
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

/// Transaction ids (`xmin`) of the rows of `sql`'s table.
async fn xmins(client: &Client, sql: &str) -> BTreeSet<String> {
    client
        .query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn init_logging() {
    if let Ok(filter) = std::env::var("PGCDC_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

type JobTask = tokio::task::JoinHandle<Result<cdc_runtime::pipeline::Progress, JobError>>;

fn spawn(config: &Config) -> (oneshot::Sender<()>, JobTask) {
    let (stop, stopped) = oneshot::channel::<()>();
    let config = config.clone();
    let task = tokio::spawn(async move {
        pgcdc::run(&config, &RunOptions::default(), async move {
            let _ = stopped.await;
        })
        .await
    });
    (stop, task)
}

/// Inserts, updates and deletes in `rounds` small transactions from `first`.
async fn write(client: &Client, first: i64, rounds: i64) {
    for round in first..first + rounds {
        client
            .execute(
                "INSERT INTO orders SELECT g, g % 7, g FROM generate_series($1::bigint, $1 + 24) g",
                &[&(round * 25)],
            )
            .await
            .unwrap();
        client
            .execute(
                "UPDATE orders SET amount = amount + 1 WHERE id = $1",
                &[&(round * 13)],
            )
            .await
            .unwrap();
        if round % 4 == 0 {
            client
                .execute("DELETE FROM orders WHERE id = $1", &[&(round * 7)])
                .await
                .unwrap();
        }
    }
}

/// Waits until a checkpoint of `name` covers everything written so far.
async fn await_covered(client: &Client, store: &PgCheckpointStore, name: &str) {
    let written = lsn(client, "SELECT pg_current_wal_lsn()::text").await;
    let job = JobName::new(name).unwrap();
    integration_tests::eventually("a checkpoint covering the workload", TIMEOUT, || async {
        let list = store.list(&job).await.unwrap();
        list.iter()
            .any(|m| m.commit_end_lsn >= written)
            .then_some(())
    })
    .await;
}

/// Stops the job cleanly and checks the sink holds exactly the table.
async fn stop_and_compare(
    stop: oneshot::Sender<()>,
    task: JobTask,
    client: &Client,
) -> cdc_runtime::pipeline::Progress {
    let _ = stop.send(());
    let progress = tokio::time::timeout(TIMEOUT, task)
        .await
        .expect("the job did not stop")
        .unwrap()
        .expect("the job failed");
    assert_eq!(
        rows(client, "replica.orders").await,
        rows(client, "orders").await,
        "the sink holds exactly the table"
    );
    progress
}

/// Waits until the job `name` streams (its slot exists and was confirmed).
async fn await_streaming(client: &Client, name: &str) {
    let slot = format!(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '{name}_slot'"
    );
    integration_tests::eventually("the job streams", TIMEOUT, || async {
        (!lsn(client, &slot).await.is_invalid()).then_some(())
    })
    .await;
}

/// Runs the job over a write workload, stops it cleanly, and returns the
/// target rows' transaction ids and the checkpoint rows' ones.
async fn run_workload(
    commit_with_checkpoint: Option<bool>,
    name: &str,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    setup(&client).await;
    let config = config(&db, name, commit_with_checkpoint);
    let (stop, task) = spawn(&config);
    await_streaming(&client, name).await;
    let store = PgCheckpointStore::connect(db.connection_info().config(), PgStoreConfig::default())
        .await
        .unwrap();
    // Two halves, each awaited until a checkpoint covers it: the second
    // half's checkpoint is saved after the first one's was, so the sink's
    // writes span at least two checkpoints however fast the machine is.
    write(&client, 0, 20).await;
    await_covered(&client, &store, name).await;
    write(&client, 20, 20).await;
    await_covered(&client, &store, name).await;
    let progress = stop_and_compare(stop, task, &client).await;
    assert!(progress.checkpoints.saved >= 2, "{progress:?}");
    let target = xmins(&client, "SELECT xmin::text FROM replica.orders").await;
    let checkpoints = xmins(
        &client,
        &format!(
            "SELECT xmin::text FROM {} WHERE job = '{name}'",
            store.checkpoints_table()
        ),
    )
    .await;
    (target, checkpoints)
}

#[tokio::test]
async fn the_sink_writes_and_the_checkpoint_commit_in_one_transaction() {
    let (target, checkpoints) = run_workload(None, "together").await;
    assert!(!target.is_empty());
    let strays: Vec<_> = target.difference(&checkpoints).collect();
    assert!(
        strays.is_empty(),
        "rows written in transactions without a checkpoint: {strays:?} (checkpoints: {checkpoints:?})"
    );
}

#[tokio::test]
async fn without_commit_with_checkpoint_the_sink_commits_on_its_own() {
    // The same check fails when the mode is off: the assertion above can fail.
    let (target, checkpoints) = run_workload(Some(false), "apart").await;
    assert!(!target.is_empty());
    assert!(
        target.is_disjoint(&checkpoints),
        "the sink's transactions are its own: {target:?} / {checkpoints:?}"
    );
}

#[tokio::test]
async fn a_job_that_dies_mid_stream_resumes_without_loss_or_duplicates() {
    init_logging();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    setup(&client).await;
    let config = config(&db, "dies", None);
    let store = PgCheckpointStore::connect(db.connection_info().config(), PgStoreConfig::default())
        .await
        .unwrap();
    let mut first = 0;
    for _ in 0..3 {
        let (_stop, task) = spawn(&config);
        await_streaming(&client, "dies").await;
        write(&client, first, 20).await;
        first += 20;
        await_covered(&client, &store, "dies").await;
        write(&client, first, 5).await;
        first += 5;
        // Dies with writes since its last checkpoint in its open transaction.
        task.abort();
        let _ = task.await;
    }
    let (stop, task) = spawn(&config);
    write(&client, first, 10).await;
    await_covered(&client, &store, "dies").await;
    let _ = stop_and_compare(stop, task, &client).await;
}

#[tokio::test]
async fn the_final_checkpoint_at_an_idle_position_is_committed_by_the_sink() {
    init_logging();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    setup(&client).await;
    client
        .batch_execute("CREATE TABLE unpublished (v text)")
        .await
        .unwrap();
    let config = config(&db, "idle", None);
    let store = PgCheckpointStore::connect(db.connection_info().config(), PgStoreConfig::default())
        .await
        .unwrap();
    let (stop, task) = spawn(&config);
    await_streaming(&client, "idle").await;
    write(&client, 0, 10).await;
    await_covered(&client, &store, "idle").await;
    // WAL moves on without published changes: checkpoints follow the
    // server's position, and so does the final one.
    client
        .batch_execute(
            "INSERT INTO unpublished SELECT repeat('x', 100) FROM generate_series(1, 1000)",
        )
        .await
        .unwrap();
    await_covered(&client, &store, "idle").await;
    write(&client, 10, 3).await;
    await_covered(&client, &store, "idle").await;
    let covered = store
        .list(&JobName::new("idle").unwrap())
        .await
        .unwrap()
        .len();
    client
        .batch_execute(
            "INSERT INTO unpublished SELECT repeat('x', 100) FROM generate_series(1, 1000)",
        )
        .await
        .unwrap();
    let _ = stop_and_compare(stop, task, &client).await;
    assert!(
        store
            .list(&JobName::new("idle").unwrap())
            .await
            .unwrap()
            .len()
            >= covered,
        "checkpoints are kept"
    );
}
