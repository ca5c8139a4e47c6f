//! Checkpoints and recovery of whole jobs (`pgcdc::run`, what
//! `pgcdc run` does) against a real server.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use cdc_core::Lsn;
use cdc_runtime::job::{self, JobError};
use cdc_runtime::operators::{Group, KeyedAggregate, KeyedAggregateSpec};
use cdc_runtime::pipeline::Progress;
use cdc_runtime::sinks::FileSink;
use checkpoint_api::{CheckpointStore, JobName};
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::{ClusterOptions, TestDatabase, TestPostgres};
use pgcdc::config::Config;
use pgcdc::RunOptions;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_postgres::Client;

/// Logs of the code under test, filtered by `PGCDC_TEST_LOG` (off when unset).
fn init_logging() {
    if let Ok(filter) = std::env::var("PGCDC_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// How long any awaited condition may take before the test fails.
const TIMEOUT: Duration = Duration::from_secs(60);

struct Job {
    dir: PathBuf,
    config: Config,
    /// The configuration as a file, for the `pgcdc` command line.
    config_path: PathBuf,
}

impl Job {
    /// A job over `public.orders` with a file sink, a keyed aggregate, table
    /// counters and checkpoints every `interval_ms` into the source database.
    fn new(db: &TestDatabase, name: &str, interval_ms: u64, keep: usize, extra: &str) -> Job {
        let dir = std::env::temp_dir().join(format!("pgcdc-ckpt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let source = db.source_toml(
            &["public.orders"],
            &format!("{name}_slot"),
            &format!("{name}_pub"),
        );
        let text = format!(
            r#"
            {source}
            [pipeline]
            status_interval_secs = 1

            [[sinks]]
            type = "file"
            path = {path:?}

            [checkpoint]
            job = {name:?}
            interval_ms = {interval_ms}
            keep = {keep}
            {extra}

            [[operators]]
            type = "table_counters"
            id = "counts"

            [[operators]]
            type = "keyed_aggregate"
            id = "totals"
            table = "public.orders"
            key = "customer"
            value = "amount"
            "#,
            path = dir.join("events.jsonl").display().to_string(),
        );
        let config = Config::parse(&text).unwrap();
        config.check().unwrap();
        let config_path = dir.join("pgcdc.toml");
        std::fs::write(&config_path, &text).unwrap();
        Job {
            dir,
            config,
            config_path,
        }
    }

    fn spawn(&self) -> Running {
        let (stop, stopped) = oneshot::channel::<()>();
        let config = self.config.clone();
        let task = tokio::spawn(async move {
            pgcdc::run(&config, &RunOptions::default(), async move {
                let _ = stopped.await;
            })
            .await
        });
        Running { stop, task }
    }

    fn events(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for file in FileSink::files(&self.dir.join("events.jsonl")).unwrap() {
            let text = std::fs::read_to_string(file).unwrap();
            // The sink may be writing the last line while it is read: only
            // complete lines (ending in a newline) are events yet.
            let complete = text.rfind('\n').map_or("", |end| &text[..end]);
            for line in complete.lines() {
                out.push(serde_json::from_str(line).unwrap());
            }
        }
        out
    }

    fn job_name(&self) -> JobName {
        JobName::new(
            self.config
                .checkpoint
                .as_ref()
                .unwrap()
                .job
                .clone()
                .unwrap(),
        )
        .unwrap()
    }
}

struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<Progress, JobError>>,
}

impl Running {
    async fn stop(self) -> Progress {
        let _ = self.stop.send(());
        tokio::time::timeout(TIMEOUT, self.task)
            .await
            .expect("the job did not stop")
            .unwrap()
            .expect("the job failed")
    }
}

async fn create_orders(client: &Client) {
    client
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer int, amount int);
             ALTER TABLE orders REPLICA IDENTITY FULL;",
        )
        .await
        .unwrap();
}

/// Inserts ids `from..to` in transactions of `per_txn` rows.
async fn insert_orders(client: &Client, from: i64, to: i64, per_txn: i64) {
    let mut start = from;
    while start < to {
        let end = (start + per_txn).min(to);
        client
            .execute(
                "INSERT INTO orders SELECT g, g % 7, g * 3 FROM generate_series($1::bigint, $2::bigint - 1) g",
                &[&start, &end],
            )
            .await
            .unwrap();
        start = end;
    }
}

async fn current_wal(client: &Client) -> Lsn {
    let row = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}

async fn slot_confirmed(client: &Client, slot: &str) -> Lsn {
    let row = client
        .query_opt(
            "SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    row.map_or(Lsn::INVALID, |r| r.get::<_, String>(0).parse().unwrap())
}

async fn store(db: &TestDatabase) -> PgCheckpointStore {
    PgCheckpointStore::connect(db.connection_info().config(), PgStoreConfig::default())
        .await
        .unwrap()
}

/// Polls `check` until it yields a value, for at most TIMEOUT.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    check: impl FnMut() -> F,
) -> T {
    integration_tests::eventually(what, TIMEOUT, check).await
}

/// Waits until a checkpoint at or past `lsn` is stored.
async fn await_checkpoint(store: &PgCheckpointStore, job: &JobName, lsn: Lsn) {
    eventually("a checkpoint", || async {
        let list = store.list(job).await.unwrap();
        list.iter().any(|m| m.commit_end_lsn >= lsn).then_some(())
    })
    .await
}

/// Order ids in insert events of `orders`, and how often each was delivered.
fn inserted_ids(events: &[Value]) -> BTreeMap<i64, usize> {
    let mut ids = BTreeMap::new();
    for e in events {
        if e["source"]["table"] == "orders" && e["op"] == "c" {
            *ids.entry(e["after"]["id"].as_i64().unwrap()).or_default() += 1;
        }
    }
    ids
}

/// The aggregate as the newest checkpoint holds it.
async fn checkpointed_groups(
    store: &PgCheckpointStore,
    job: &JobName,
) -> BTreeMap<Option<String>, Group> {
    let latest = store.latest(job).await.unwrap().checkpoint.unwrap();
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
    agg.groups().clone()
}

/// `SELECT customer, count(*), sum(amount) ... GROUP BY customer`.
async fn sql_groups(client: &Client) -> BTreeMap<Option<String>, Group> {
    let rows = client
        .query(
            "SELECT customer::text, count(*), coalesce(sum(amount), 0)::int8 FROM orders GROUP BY customer",
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            (
                r.get::<_, Option<String>>(0),
                Group {
                    count: r.get(1),
                    sum: i128::from(r.get::<_, i64>(2)),
                },
            )
        })
        .collect()
}

#[tokio::test]
async fn a_restarted_job_resumes_from_its_checkpoint_with_operator_state() {
    init_logging();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    create_orders(&client).await;
    let job = Job::new(&db, "resume", 100, 3, "");
    let name = job.job_name();

    let running = job.spawn();
    let store = store(&db).await;
    // The job creates the slot; wait until it streams before writing.
    eventually("the slot", || async {
        (!slot_confirmed(&client, "resume_slot").await.is_invalid()).then_some(())
    })
    .await;
    insert_orders(&client, 0, 200, 20).await;
    client
        .execute(
            "UPDATE orders SET amount = amount + 1 WHERE id % 5 = 0",
            &[],
        )
        .await
        .unwrap();
    client
        .execute("DELETE FROM orders WHERE id % 11 = 0", &[])
        .await
        .unwrap();
    let written = current_wal(&client).await;
    await_checkpoint(&store, &name, written).await;
    let first = running.stop().await;
    assert!(first.checkpoints.saved >= 1, "{first:?}");

    // While it is down: more changes.
    insert_orders(&client, 200, 300, 25).await;
    let running = job.spawn();
    let written = current_wal(&client).await;
    await_checkpoint(&store, &name, written).await;
    let second = running.stop().await;

    // Every row arrived exactly once: graceful stops leave nothing to replay.
    let ids = inserted_ids(&job.events());
    assert_eq!(ids.len(), 300, "every insert arrived");
    assert!(ids.values().all(|&n| n == 1), "no insert arrived twice");
    // The operator state went through the restart.
    assert_eq!(
        checkpointed_groups(&store, &name).await,
        sql_groups(&client).await
    );
    // Retention, and the slot never past the oldest retained checkpoint.
    let list = store.list(&name).await.unwrap();
    assert!(list.len() <= 3, "{} checkpoints kept", list.len());
    let oldest = list.iter().map(|m| m.commit_end_lsn).min().unwrap();
    let confirmed = slot_confirmed(&client, "resume_slot").await;
    assert!(
        confirmed <= oldest,
        "slot {confirmed} passed the oldest checkpoint {oldest}"
    );
    assert!(second.confirmed <= oldest);
}

#[tokio::test]
async fn a_corrupt_newest_checkpoint_falls_back_to_the_previous_one() {
    init_logging();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    create_orders(&client).await;
    let job = Job::new(&db, "corrupt", 100, 5, "");
    let name = job.job_name();
    let store = store(&db).await;

    let running = job.spawn();
    eventually("the slot", || async {
        (!slot_confirmed(&client, "corrupt_slot").await.is_invalid()).then_some(())
    })
    .await;
    insert_orders(&client, 0, 100, 10).await;
    await_checkpoint(&store, &name, current_wal(&client).await).await;
    insert_orders(&client, 100, 150, 10).await;
    await_checkpoint(&store, &name, current_wal(&client).await).await;
    running.stop().await;

    // Flip a byte in the newest checkpoint (small states are inline).
    let newest = store.list(&name).await.unwrap().last().unwrap().clone();
    let flipped = client
        .execute(
            &format!(
                "UPDATE {} SET data = set_byte(data, length(data) / 2, get_byte(data, length(data) / 2) # 16) \
                 WHERE job = $1 AND checkpoint_id = $2 AND storage = 'inline'",
                store.checkpoints_table()
            ),
            &[&name.as_str(), &(newest.id.get() as i64)],
        )
        .await
        .unwrap();
    assert_eq!(flipped, 1);

    insert_orders(&client, 150, 200, 10).await;
    let running = job.spawn();
    await_checkpoint(&store, &name, current_wal(&client).await).await;
    running.stop().await;

    let ids = inserted_ids(&job.events());
    let expected: BTreeSet<i64> = (0..200).collect();
    assert_eq!(
        ids.keys().copied().collect::<BTreeSet<_>>(),
        expected,
        "nothing lost"
    );
    let list = store.list(&name).await.unwrap();
    assert!(
        list.iter().all(|m| m.id != newest.id),
        "the corrupt checkpoint was deleted"
    );
    assert_eq!(
        checkpointed_groups(&store, &name).await,
        sql_groups(&client).await
    );
}

#[tokio::test]
async fn a_job_lock_is_granted_when_its_holder_goes_and_refused_after_the_wait() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    let (a, b) = (store(&db).await, store(&db).await);
    let held = job::JobLock::acquire(a.pool(), "locked").await.unwrap();
    // Held elsewhere: refused once the wait is over, naming the holder.
    let err = job::JobLock::acquire_within(b.pool(), "locked", Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(
        matches!(err, job::LockError::Held { pid, .. } if pid > 0),
        "{err}"
    );
    // A waiter gets it the moment the holder's session ends.
    let waiter =
        tokio::spawn(
            async move { job::JobLock::acquire_within(b.pool(), "locked", TIMEOUT).await },
        );
    eventually("a session waiting for the lock", || async {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND ((classid::int8 << 32) | objid::int8) = hashtextextended('pgcdc job locked', 0)",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        (waiting == 1).then_some(())
    })
    .await;
    drop(held);
    tokio::time::timeout(TIMEOUT, waiter)
        .await
        .expect("the waiter was not granted the lock")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_second_instance_of_a_running_job_is_refused() {
    init_logging();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    create_orders(&client).await;
    let job = Job::new(&db, "twice", 1000, 5, "");
    let first = job.spawn();
    eventually("the slot to be active", || async {
        let row = client
            .query_one(
                // A slot being created is already active, but only changes
                // after its consistent point (confirmed_flush_lsn set) stream.
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'twice_slot' AND active \
                 AND confirmed_flush_lsn IS NOT NULL",
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0) == 1).then_some(())
    })
    .await;
    let err = tokio::time::timeout(
        TIMEOUT,
        pgcdc::run(&job.config, &RunOptions::default(), std::future::pending()),
    )
    .await
    .expect("the second instance must not wait")
    .unwrap_err();
    assert!(matches!(err, JobError::Lock(_)), "{err}");
    assert!(err.to_string().contains("already running"), "{err}");
    // The first one was not disturbed (its lease was not taken over).
    insert_orders(&client, 0, 10, 10).await;
    let store = store(&db).await;
    let written = current_wal(&client).await;
    await_checkpoint(&store, &job.job_name(), written).await;
    let progress = first.stop().await;
    assert!(progress.events >= 10, "{progress:?} written={written}");
    assert_eq!(inserted_ids(&job.events()).len(), 10);
    assert_eq!(inserted_ids(&job.events()).len(), 10);
}

#[tokio::test]
async fn the_slot_advances_while_the_published_tables_are_idle() {
    init_logging();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    create_orders(&client).await;
    client
        .batch_execute("CREATE TABLE noise (id bigint, pad text)")
        .await
        .unwrap();
    let job = Job::new(&db, "idle", 100, 2, "");
    let running = job.spawn();
    let start = eventually("the slot", || async {
        let c = slot_confirmed(&client, "idle_slot").await;
        (!c.is_invalid()).then_some(c)
    })
    .await;
    // About 100 MB of WAL in a table nobody publishes.
    for chunk in 0..10 {
        client
            .execute(
                "INSERT INTO noise SELECT g, repeat(md5(g::text), 30) FROM generate_series($1::bigint, $1::bigint + 9999) g",
                &[&(chunk * 10_000i64)],
            )
            .await
            .unwrap();
    }
    let written = current_wal(&client).await;
    assert!(
        written.as_u64() - start.as_u64() > 50 << 20,
        "the noise wrote WAL"
    );
    let confirmed = eventually("the slot to pass the noise", || async {
        let c = slot_confirmed(&client, "idle_slot").await;
        (c >= written).then_some(c)
    })
    .await;
    running.stop().await;
    assert!(confirmed >= written);
    assert!(
        inserted_ids(&job.events()).is_empty(),
        "nothing published was written"
    );
}

#[tokio::test]
async fn streaming_goes_on_while_the_checkpoint_store_is_down() {
    init_logging();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    create_orders(&client).await;
    // The checkpoints live in a server of their own, which the test stops.
    let store_cluster = TestPostgres::dedicated(ClusterOptions::new())
        .await
        .unwrap();
    let store_db = store_cluster.create_database().await.unwrap();
    let url = store_db.connection_info().connection_string();
    let job = Job::new(&db, "outage", 100, 2, &format!("url = {url:?}"));
    let name = job.job_name();
    let running = job.spawn();
    let slot = "outage_slot";
    eventually("the slot", || async {
        (!slot_confirmed(&client, slot).await.is_invalid()).then_some(())
    })
    .await;
    insert_orders(&client, 0, 20, 10).await;
    let written = current_wal(&client).await;
    let checkpoints_table = {
        let store = store(&store_db).await;
        await_checkpoint(&store, &name, written).await;
        store.checkpoints_table().to_owned()
    };
    eventually("the slot to follow the checkpoints", || async {
        (slot_confirmed(&client, slot).await >= written).then_some(())
    })
    .await;
    // From here no save can commit: the newest durable checkpoint is known,
    // and the slot must never pass it while the store is down. (Other
    // databases' WAL keeps the job checkpointing until then.)
    let blocker = store_db.connect().await.unwrap();
    let durable: Lsn = {
        blocker.batch_execute("BEGIN").await.unwrap();
        blocker
            .batch_execute(&format!("LOCK TABLE {checkpoints_table} IN SHARE MODE"))
            .await
            .unwrap();
        let row = blocker
            .query_one(
                &format!("SELECT max(commit_end_lsn)::text FROM {checkpoints_table}"),
                &[],
            )
            .await
            .unwrap();
        row.get::<_, String>(0).parse().unwrap()
    };
    assert!(durable >= written);

    store_cluster.stop().await.unwrap();
    drop(blocker);
    let outage = tokio::time::Instant::now();
    // For 10 s: changes keep arriving, the slot stays where it was.
    let mut next = 20i64;
    while outage.elapsed() < Duration::from_secs(10) {
        insert_orders(&client, next, next + 5, 5).await;
        next += 5;
        let want = next;
        eventually("events during the outage", || async {
            (inserted_ids(&job.events()).len() as i64 == want).then_some(())
        })
        .await;
        let confirmed = slot_confirmed(&client, slot).await;
        assert!(
            confirmed <= durable,
            "the slot moved to {confirmed} without a durable checkpoint (newest {durable})"
        );
    }

    store_cluster.start().await.unwrap();
    let end = current_wal(&client).await;
    let store = store(&store_db).await;
    await_checkpoint(&store, &name, end).await;
    eventually("the slot to move again", || async {
        (slot_confirmed(&client, slot).await > durable).then_some(())
    })
    .await;
    let progress = running.stop().await;
    assert!(
        progress.checkpoints.failed > 0,
        "saves failed during the outage: {progress:?}"
    );
    assert_eq!(inserted_ids(&job.events()).len() as i64, next);
}

/// `pgcdc checkpoints ...` and `pgcdc slot status` through the binary.
async fn pgcdc(job: &Job, args: &[&str]) -> (bool, String) {
    let config = job.config_path.display().to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--config", &config]);
    let out = integration_tests::run_pgcdc(&all, TIMEOUT).await.unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn the_checkpoint_and_slot_commands_show_and_prune_checkpoints() {
    init_logging();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    create_orders(&client).await;
    let job = Job::new(&db, "admin", 100, 5, "");
    let name = job.job_name();
    let store = store(&db).await;
    let running = job.spawn();
    eventually("the slot", || async {
        (!slot_confirmed(&client, "admin_slot").await.is_invalid()).then_some(())
    })
    .await;
    for chunk in 0..3 {
        insert_orders(&client, chunk * 10, chunk * 10 + 10, 10).await;
        await_checkpoint(&store, &name, current_wal(&client).await).await;
    }
    // Changing checkpoints under a running job is refused.
    let (ok, text) = pgcdc(&job, &["checkpoints", "prune", "--keep", "1"]).await;
    assert!(!ok && text.contains("already running"), "{text}");
    running.stop().await;

    let list = store.list(&name).await.unwrap();
    assert!(list.len() >= 3, "{list:?}");
    let newest = list.last().unwrap();
    let (ok, text) = pgcdc(&job, &["checkpoints", "list"]).await;
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("{} checkpoint(s) of job admin", list.len())),
        "{text}"
    );
    assert!(text.contains(&newest.commit_end_lsn.to_string()), "{text}");

    let id = newest.id.get().to_string();
    let (ok, text) = pgcdc(&job, &["checkpoints", "show", &id]).await;
    assert!(ok, "{text}");
    assert!(text.contains("totals (keyed_aggregate v2)"), "{text}");
    assert!(text.contains("counts (table_counters v1)"), "{text}");

    let (ok, text) = pgcdc(&job, &["slot", "status"]).await;
    assert!(ok, "{text}");
    assert!(
        text.contains("lag:") && text.contains(&format!("newest:           {id}")),
        "{text}"
    );
    assert!(!text.contains("WARNING"), "{text}");

    let (ok, text) = pgcdc(&job, &["checkpoints", "prune", "--keep", "1"]).await;
    assert!(ok, "{text}");
    assert_eq!(store.list(&name).await.unwrap().len(), 1);
    let (ok, text) = pgcdc(&job, &["checkpoints", "delete", &id]).await;
    assert!(ok, "{text}");
    assert!(store.list(&name).await.unwrap().is_empty());
    let (ok, text) = pgcdc(&job, &["checkpoints", "show", &id]).await;
    assert!(!ok, "a deleted checkpoint cannot be shown: {text}");
}

#[tokio::test]
async fn from_checkpoint_resumes_from_an_older_one_and_drops_the_newer() {
    init_logging();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    create_orders(&client).await;
    // Every checkpoint kept, however many the machine's speed makes.
    let job = Job::new(&db, "older", 100, 100_000, "");
    let name = job.job_name();
    let store = store(&db).await;
    let running = job.spawn();
    eventually("the slot", || async {
        (!slot_confirmed(&client, "older_slot").await.is_invalid()).then_some(())
    })
    .await;
    let mut before_last = Lsn::INVALID;
    for chunk in 0..3 {
        before_last = current_wal(&client).await;
        insert_orders(&client, chunk * 10, chunk * 10 + 10, 10).await;
        await_checkpoint(&store, &name, current_wal(&client).await).await;
    }
    running.stop().await;
    let list = store.list(&name).await.unwrap();
    // The newest checkpoint from before the last chunk was written.
    let older = list
        .iter()
        .rev()
        .find(|m| m.commit_end_lsn <= before_last)
        .unwrap()
        .clone();
    let newest = list.last().unwrap().clone();
    assert!(older.id < newest.id);

    // Resume from it: the newer ones go, the transactions after it (the
    // last chunk) are delivered again, the state ends up exact.
    let (stop, stopped) = oneshot::channel::<()>();
    let config = job.config.clone();
    let from = older.id;
    let task = tokio::spawn(async move {
        pgcdc::run(
            &config,
            &RunOptions {
                from_checkpoint: Some(from),
                ..RunOptions::default()
            },
            async move {
                let _ = stopped.await;
            },
        )
        .await
    });
    eventually("the newer checkpoints to be replaced", || async {
        let list = store.list(&name).await.unwrap();
        (list.iter().all(|m| m.id <= older.id || m.id > newest.id)
            && list
                .iter()
                .any(|m| m.commit_end_lsn >= newest.commit_end_lsn && m.id > newest.id))
        .then_some(())
    })
    .await;
    let _ = stop.send(());
    tokio::time::timeout(TIMEOUT, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let ids = inserted_ids(&job.events());
    assert_eq!(ids.len(), 30, "every insert delivered");
    assert!(
        ids.values().any(|&n| n > 1),
        "the replay delivered some again"
    );
    assert_eq!(
        checkpointed_groups(&store, &name).await,
        sql_groups(&client).await
    );

    // A checkpoint that does not exist is a clear error.
    let err = pgcdc::run(
        &job.config,
        &RunOptions {
            from_checkpoint: checkpoint_api::CheckpointId::new(9999),
            ..RunOptions::default()
        },
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("has no checkpoint 9999"), "{err}");
}

#[tokio::test]
async fn heartbeats_move_the_slot_and_never_reach_the_sinks() {
    init_logging();
    // A server of its own: no other test's WAL moves the slot.
    let cluster = TestPostgres::dedicated(ClusterOptions::new())
        .await
        .unwrap();
    let db = cluster.create_database().await.unwrap();
    let client = db.connect().await.unwrap();
    create_orders(&client).await;
    let dir = std::env::temp_dir().join(format!("pgcdc-heartbeat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let events = dir.join("events.jsonl");
    let source = db.source_toml(&["public.orders"], "beat_slot", "beat_pub");
    let config = Config::parse(&format!(
        "{source}heartbeat_interval_ms = 50\n[pipeline]\nstatus_interval_secs = 1\n\
         [[sinks]]\ntype = \"file\"\npath = {events:?}\n[snapshot]\nmode = \"latest\"\n"
    ))
    .unwrap();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        pgcdc::run(&config, &RunOptions::default(), async {
            let _ = stop_rx.await;
        })
        .await
    });
    let first = eventually("the slot", || async {
        let lsn = slot_confirmed(&client, "beat_slot").await;
        (!lsn.is_invalid()).then_some(lsn)
    })
    .await;
    // Nobody writes; only heartbeats move the WAL, and the slot follows.
    let beats = eventually("a heartbeat connection", || async {
        client
            .query_opt(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'pgcdc heartbeat'",
                &[],
            )
            .await
            .unwrap()
            .map(|_| ())
    });
    beats.await;
    // Three times over, the slot passes the server's WAL end as it was:
    // only new WAL (PostgreSQL writes little of its own, and nothing that
    // often on an idle server) lets it.
    let mut moved = first;
    for _ in 0..3 {
        let end = current_wal(&client).await.max(moved);
        moved = eventually("the slot to move past heartbeats", || async {
            let lsn = slot_confirmed(&client, "beat_slot").await;
            (lsn > end).then_some(lsn)
        })
        .await;
    }
    let _ = stop_tx.send(());
    running.await.unwrap().unwrap();
    let text: String = FileSink::files(&events)
        .unwrap()
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    assert!(
        !text.contains("pgcdc.heartbeat"),
        "a heartbeat reached the sink: {text}"
    );
    assert!(moved > first);
    let _ = std::fs::remove_dir_all(&dir);
}
