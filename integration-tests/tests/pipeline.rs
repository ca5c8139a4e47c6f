//! End-to-end tests of the streaming pipeline against a real server.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cdc_core::Lsn;
use cdc_runtime::encoding::{JsonEncoder, JsonFormat};
use cdc_runtime::event::ChangeEvent;
use cdc_runtime::pipeline::{Backoff, Pipeline, PipelineOptions, Progress};
use cdc_runtime::replication::ReplicationConnection;
use cdc_runtime::setup::{prepare, SetupError, SetupMode};
use cdc_runtime::sinks::{FileSink, FileSinkOptions, Sink, SinkError};
use integration_tests::{ClusterOptions, TestDatabase, TestPostgres};
use pgcdc::config::{Config, SourceConfig};
use serde_json::Value;
use tokio::sync::{oneshot, watch, Semaphore};
use tokio_postgres::Client;

/// How long any awaited condition may take before the test fails.
const TIMEOUT: Duration = Duration::from_secs(30);

fn source_config(db: &TestDatabase, tables: &[&str], slot: &str) -> SourceConfig {
    let config = Config::parse(&config_text(db, tables, slot)).unwrap();
    config.check().unwrap();
    config.source
}

/// A `pgcdc.toml` for `tables` of `db` through `slot`, with a null sink.
fn config_text(db: &TestDatabase, tables: &[&str], slot: &str) -> String {
    format!(
        "{}\n[[sinks]]\ntype = \"null\"\n",
        db.source_toml(tables, slot, "pgcdc_pub")
    )
}

async fn setup(source: &SourceConfig) -> Result<(), SetupError> {
    let rc = source.replication_config().unwrap();
    let mut conn = ReplicationConnection::connect(&rc).await?;
    prepare(
        &mut conn,
        &source.source_options().unwrap(),
        SetupMode::Create,
    )
    .await?;
    conn.close().await?;
    Ok(())
}

fn options(source: &SourceConfig) -> PipelineOptions {
    let mut o = PipelineOptions::new(
        source.replication_config().unwrap(),
        &source.slot,
        &source.publication,
    );
    o.status_interval = Duration::from_millis(100);
    o.batch_size = 50;
    o.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(500),
        max_attempts: Some(20),
    };
    o
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pgcdc-pipeline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The file sink at `base`, plain JSON lines, past the page cache.
async fn plain_file_sink(base: &Path, max_file_bytes: u64) -> FileSink {
    FileSink::open(
        FileSinkOptions {
            path: base.to_path_buf(),
            max_file_bytes,
            page_cache_bytes: cdc_runtime::sinks::DEFAULT_PAGE_CACHE_BYTES,
            direct_io: true,
        },
        JsonEncoder::new(JsonFormat::Plain),
    )
    .await
    .unwrap()
}

type RunHandle = (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<Progress, cdc_runtime::pipeline::PipelineError>>,
    watch::Receiver<Progress>,
);

fn spawn(options: PipelineOptions, sinks: Vec<Box<dyn Sink>>) -> RunHandle {
    let pipeline = Pipeline::new(options, sinks);
    let progress = pipeline.progress();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(pipeline.run(async move {
        let _ = stopped.await;
    }));
    (stop, task, progress)
}

/// Waits until `cond` holds for the pipeline's progress.
async fn await_progress(rx: &mut watch::Receiver<Progress>, cond: impl Fn(&Progress) -> bool) {
    tokio::time::timeout(TIMEOUT, rx.wait_for(|p| cond(p)))
        .await
        .expect("timed out waiting for pipeline progress")
        .expect("pipeline ended");
}

/// Polls a server-side condition (there is no notification for these).
async fn await_query<T>(
    mut check: impl FnMut() -> Pin<Box<dyn Future<Output = Option<T>> + Send>>,
) -> T {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for the server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn read_lines(base: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for file in FileSink::files(base).unwrap() {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            out.push(serde_json::from_str(line).unwrap());
        }
    }
    out
}

async fn slot_confirmed(client: &Client, slot: &str) -> Option<Lsn> {
    let row = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    row.get::<_, Option<String>>(0).map(|s| s.parse().unwrap())
}

#[tokio::test]
async fn changes_reach_the_file_sink_and_match_the_table() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE items (id int PRIMARY KEY, name text, qty int);
             CREATE TABLE other (id int PRIMARY KEY);",
        )
        .await
        .unwrap();
    let source = source_config(&db, &["items", "public.other"], "pgcdc_e2e");
    setup(&source).await.unwrap();

    let dir = temp_dir("e2e");
    let base = dir.join("out.jsonl");
    let sink = plain_file_sink(&base, 4096).await;
    let (stop, task, mut progress) = spawn(options(&source), vec![Box::new(sink)]);

    client
        .batch_execute(
            "INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 120) g;
             UPDATE items SET qty = qty * 10 WHERE id % 3 = 0;
             DELETE FROM items WHERE id % 7 = 0;
             INSERT INTO other VALUES (1), (2);
             TRUNCATE other;
             BEGIN; SELECT pg_logical_emit_message(true, 'pgcdc-test', 'hello'); INSERT INTO items VALUES (1000, 'last', 1);",
        )
        .await
        .unwrap();
    // The last transaction's commit record comes after this position, so a
    // confirmed position past it means that commit was processed and flushed
    // (events alone can be counted before their commit arrives).
    let before_last_commit: Lsn = client
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap();
    client.batch_execute("COMMIT").await.unwrap();
    // 120 inserts + 40 updates + 17 deletes + 2 inserts + 1 truncate + 1 message + 1 insert.
    await_progress(&mut progress, |p| {
        p.events >= 182 && p.confirmed > before_last_commit
    })
    .await;
    stop.send(()).unwrap();
    let final_progress = task.await.unwrap().unwrap();
    assert_eq!(final_progress.events, 182);

    let lines = read_lines(&base);
    assert_eq!(lines.len(), 182);
    assert!(
        FileSink::files(&base).unwrap().len() > 1,
        "rotation expected"
    );
    let mut rows: BTreeMap<i64, (String, i64)> = BTreeMap::new();
    let (mut truncates, mut messages) = (0, 0);
    for l in &lines {
        match l["op"].as_str().unwrap() {
            "insert" | "update" if l["table"] == "items" => {
                let after = &l["after"];
                rows.insert(
                    after["id"].as_i64().unwrap(),
                    (
                        after["name"].as_str().unwrap().to_owned(),
                        after["qty"].as_i64().unwrap(),
                    ),
                );
            }
            "delete" if l["table"] == "items" => {
                rows.remove(&l["before"]["id"].as_i64().unwrap());
            }
            "truncate" => {
                assert_eq!(l["table"], "other");
                truncates += 1;
            }
            "message" => {
                assert_eq!(l["message"]["prefix"], "pgcdc-test");
                assert_eq!(l["message"]["transactional"], true);
                messages += 1;
            }
            _ => {}
        }
    }
    assert_eq!((truncates, messages), (1, 1));
    let table: BTreeMap<i64, (String, i64)> = client
        .query("SELECT id, name, qty FROM items", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                i64::from(r.get::<_, i32>(0)),
                (r.get::<_, String>(1), i64::from(r.get::<_, i32>(2))),
            )
        })
        .collect();
    assert_eq!(rows, table);

    // After a clean shutdown the slot is confirmed at the last commit, and
    // nothing after it was skipped.
    let confirmed = slot_confirmed(&client, "pgcdc_e2e").await.unwrap();
    assert_eq!(confirmed, final_progress.confirmed);
    let last_commit: Lsn = lines.last().unwrap()["commit_lsn"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(confirmed > last_commit, "{confirmed} <= {last_commit}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A sink that records events and whose flush waits for a permit.
struct GatedSink {
    events: Arc<Mutex<Vec<ChangeEvent>>>,
    written: watch::Sender<usize>,
    gate: Arc<Semaphore>,
}

impl Sink for GatedSink {
    fn write<'a, 'b, 'c>(
        &'a mut self,
        batch: &'b [ChangeEvent],
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + 'c>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        Box::pin(async move {
            let mut events = self.events.lock().unwrap();
            events.extend_from_slice(batch);
            self.written.send_replace(events.len());
            Ok(())
        })
    }

    fn flush<'a, 'c>(
        &'a mut self,
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + 'c>>
    where
        'a: 'c,
        Self: 'c,
    {
        Box::pin(async move {
            self.gate.acquire().await.unwrap().forget();
            Ok(())
        })
    }

    fn close<'a, 'c>(
        &'a mut self,
    ) -> Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + 'c>>
    where
        'a: 'c,
        Self: 'c,
    {
        Box::pin(async move { Ok(()) })
    }
}

#[tokio::test]
async fn the_slot_is_never_confirmed_past_what_the_sink_flushed() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = Arc::new(db.connect().await.unwrap());
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    let source = source_config(&db, &["t"], "pgcdc_gate");
    setup(&source).await.unwrap();
    let before = slot_confirmed(&client, "pgcdc_gate").await.unwrap();

    let events = Arc::new(Mutex::new(Vec::new()));
    let (written_tx, mut written) = watch::channel(0usize);
    let gate = Arc::new(Semaphore::new(0));
    let sink = GatedSink {
        events: events.clone(),
        written: written_tx,
        gate: gate.clone(),
    };
    let (stop, task, mut progress) = spawn(options(&source), vec![Box::new(sink)]);

    client
        .batch_execute("INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    tokio::time::timeout(TIMEOUT, written.wait_for(|n| *n >= 1))
        .await
        .unwrap()
        .unwrap();
    let commit_lsn = events.lock().unwrap()[0].source.commit_lsn;
    // Wait for a status update sent after the write (reply_time moves on),
    // while the flush is still blocked.
    let t0: std::time::SystemTime = client.query_one("SELECT now()", &[]).await.unwrap().get(0);
    let c = client.clone();
    await_query(move || {
        let c = c.clone();
        Box::pin(async move {
            let row = c
                .query_opt(
                    "SELECT r.reply_time FROM pg_stat_replication r \
                     JOIN pg_replication_slots s ON s.active_pid = r.pid \
                     WHERE s.slot_name = 'pgcdc_gate'",
                    &[],
                )
                .await
                .unwrap()?;
            let reply: Option<std::time::SystemTime> = row.get(0);
            reply.filter(|r| *r > t0).map(|_| ())
        })
    })
    .await;
    let held = slot_confirmed(&client, "pgcdc_gate").await.unwrap();
    assert!(
        held < commit_lsn,
        "confirmed {held} passed the unflushed commit {commit_lsn}"
    );
    // (It may have moved before the insert: other databases' WAL, with no
    // transaction of ours pending, is confirmed as it comes.)
    assert!(held >= before);
    assert!(progress.borrow().confirmed < commit_lsn);

    // Let the flush through: the slot follows, to the transaction's end.
    gate.add_permits(1000);
    await_progress(&mut progress, |p| p.confirmed > commit_lsn).await;
    let c = client.clone();
    let confirmed = await_query(move || {
        let c = c.clone();
        Box::pin(async move {
            slot_confirmed(&c, "pgcdc_gate")
                .await
                .filter(|l| *l > commit_lsn)
        })
    })
    .await;
    assert!(confirmed <= progress.borrow().confirmed);
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}

/// A sink that keeps the size of every batch it is given, and each event's
/// `id` column, in order.
#[derive(Clone, Default)]
struct BatchSink {
    batches: Arc<Mutex<Vec<Vec<i64>>>>,
    written: Arc<AtomicU64>,
}

#[async_trait::async_trait]
impl Sink for BatchSink {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        let ids = batch
            .iter()
            .map(|e| match e.after_values().as_deref() {
                Some([cdc_core::Value::Int8(id), ..]) => *id,
                other => panic!("not a row of the test's table: {other:?}"),
            })
            .collect();
        self.batches.lock().unwrap().push(ids);
        self.written.fetch_add(batch.len() as u64, Ordering::SeqCst);
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// A batch ends at `batch_bytes` of rows before it holds `batch_size`
/// events: 200 rows of 1,000 characters arrive in batches of at most nine
/// (eight rows are under 8 KiB, the ninth takes the batch past it), while 200
/// rows of a few bytes, under both limits, arrive as one batch.
#[tokio::test]
async fn wide_rows_end_a_batch_at_batch_bytes() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE wide (id int8 PRIMARY KEY, pad text)")
        .await
        .unwrap();
    let source = source_config(&db, &["wide"], "pgcdc_batch_bytes");
    setup(&source).await.unwrap();
    let mut opts = options(&source);
    opts.batch_size = 1000;
    opts.batch_bytes = 8192;
    let sink = BatchSink::default();
    let (stop, task, _progress) = spawn(opts, vec![Box::new(sink.clone())]);

    let wait_for = |n: u64| {
        let written = sink.written.clone();
        async move {
            let deadline = tokio::time::Instant::now() + TIMEOUT;
            while written.load(Ordering::SeqCst) < n {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "rows did not arrive"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    client
        .batch_execute(
            "INSERT INTO wide SELECT g, repeat('w', 1000) FROM generate_series(1, 200) g",
        )
        .await
        .unwrap();
    wait_for(200).await;
    client
        .batch_execute("INSERT INTO wide SELECT g, 'n' FROM generate_series(201, 400) g")
        .await
        .unwrap();
    wait_for(400).await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();

    let batches = sink.batches.lock().unwrap().clone();
    let ids: Vec<i64> = batches.iter().flatten().copied().collect();
    assert_eq!(
        ids,
        (1..=400).collect::<Vec<i64>>(),
        "every row once, in order"
    );
    let (wide, narrow): (Vec<_>, Vec<_>) = batches.iter().partition(|b| b[0] <= 200);
    let largest = wide.iter().map(|b| b.len()).max().unwrap();
    assert!(
        largest <= 9,
        "a batch of {largest} rows of 1,000 bytes, past batch_bytes = 8192: {:?}",
        wide.iter().map(|b| b.len()).collect::<Vec<_>>()
    );
    assert!(wide.len() >= 200 / 9, "{} batches", wide.len());
    assert_eq!(
        narrow.iter().map(|b| b.len()).collect::<Vec<_>>(),
        [200],
        "narrow rows under both limits come in one batch"
    );
}

/// A sink that takes `delay` per batch (it is slow, that is all: the sleep is
/// not synchronisation) and counts the events it has finished writing.
struct SlowSink {
    delay: Duration,
    written: Arc<AtomicU64>,
}

#[async_trait::async_trait]
impl Sink for SlowSink {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        tokio::time::sleep(self.delay).await;
        self.written.fetch_add(batch.len() as u64, Ordering::SeqCst);
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// A slow sink holds the pipeline back instead of letting it buffer: while
/// 200k rows are committed much faster than the sink writes them, the events
/// the pipeline holds (decoded, not yet written by the sink) stay within its
/// channel capacity.
///
/// The criterion is a count, not memory: `Progress::events` (events decoded
/// and handed towards the sink) minus the events the sink finished writing.
/// Batches hold at most `batch_size` events (one per row here), the channel
/// `channel_capacity` batches, the sink one more, and the source one it is
/// waiting to send, so the difference can never exceed
/// `(channel_capacity + 2) * batch_size` if backpressure works, and would grow
/// towards the backlog (~200k) if it did not. Process RSS would say the same
/// less exactly: it moves with the allocator, TCP buffers and the other tests
/// running in this process.
#[tokio::test]
async fn a_slow_sink_bounds_the_events_held_in_the_pipeline() {
    const ROWS: u64 = 200_000;
    const PER_TXN: u64 = 10_000;
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE bulk (id int8 PRIMARY KEY, pad text)")
        .await
        .unwrap();
    let source = source_config(&db, &["bulk"], "pgcdc_slow");
    setup(&source).await.unwrap();
    let mut opts = options(&source);
    opts.batch_size = 100;
    opts.channel_capacity = 4;
    let bound = ((opts.channel_capacity + 2) * opts.batch_size) as u64;
    let written = Arc::new(AtomicU64::new(0));
    let sink = SlowSink {
        // At most 10k events/s: far slower than decoding and than the writer.
        delay: Duration::from_millis(10),
        written: written.clone(),
    };
    let (stop, task, progress) = spawn(opts, vec![Box::new(sink)]);

    // Sample on every progress update.
    let max_in_flight = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (written, max) = (written.clone(), max_in_flight.clone());
        let mut progress = progress.clone();
        tokio::spawn(async move {
            while progress.changed().await.is_ok() {
                let events = progress.borrow_and_update().events;
                let in_flight = events.saturating_sub(written.load(Ordering::SeqCst));
                max.fetch_max(in_flight, Ordering::SeqCst);
            }
        })
    };

    // One transaction per 10k rows (not one huge transaction: that would be
    // streamed by the server and buffered whole, which is another test's subject).
    for start in (0..ROWS).step_by(PER_TXN as usize) {
        client
            .batch_execute(&format!(
                "INSERT INTO bulk SELECT g, repeat('x', 100) FROM generate_series({}, {}) g",
                start + 1,
                start + PER_TXN
            ))
            .await
            .unwrap();
    }
    let backlog = ROWS - written.load(Ordering::SeqCst);
    // The sink keeps working in steady state for a while, then stop.
    let target = written.load(Ordering::SeqCst) + 5_000;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while written.load(Ordering::SeqCst) < target {
        assert!(tokio::time::Instant::now() < deadline, "the sink stalled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(()).unwrap();
    let done = task.await.unwrap().unwrap();
    sampler.abort();

    let max = max_in_flight.load(Ordering::SeqCst);
    println!(
        "backlog {backlog} events when the writer finished; at most {max} held (bound {bound})"
    );
    assert!(
        backlog > 10 * bound,
        "the writer did not outrun the sink (backlog {backlog}), the test shows nothing"
    );
    assert!(
        max <= bound,
        "{max} events held in the pipeline, more than {bound}, with a backlog of {backlog}"
    );
    // The channel did fill up: the sink, not the source, set the pace.
    assert!(
        max >= bound / 2,
        "at most {max} events in flight: backpressure never engaged"
    );
    assert!(done.events < ROWS, "{done:?}");
}

#[tokio::test]
async fn wal_level_replica_is_a_clear_error() {
    let cluster = TestPostgres::dedicated(ClusterOptions::new().setting("wal_level", "replica"))
        .await
        .unwrap();
    let db = cluster.create_database().await.unwrap();
    db.connect()
        .await
        .unwrap()
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    let err = setup(&source_config(&db, &["t"], "s")).await.unwrap_err();
    assert!(
        matches!(err, SetupError::WalLevel(ref l) if l == "replica"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "wal_level is 'replica'; set wal_level=logical and restart the server"
    );
}

#[tokio::test]
async fn a_missing_table_is_a_clear_error() {
    let db = TestPostgres::new_database().await.unwrap();
    db.connect()
        .await
        .unwrap()
        .batch_execute("CREATE TABLE present (id int PRIMARY KEY)")
        .await
        .unwrap();
    let source = source_config(&db, &["present", "app.absent"], "pgcdc_missing");
    let err = setup(&source).await.unwrap_err();
    assert!(
        err.to_string().contains("app.absent does not exist"),
        "{err}"
    );
    // Nothing was created on the way.
    let client = db.connect().await.unwrap();
    let n: i64 = client
        .query_one("SELECT count(*) FROM pg_publication", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn reconnects_after_the_walsender_is_terminated_without_losing_commits() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    let source = source_config(&db, &["t"], "pgcdc_reconnect");
    setup(&source).await.unwrap();
    let dir = temp_dir("reconnect");
    let base = dir.join("out.jsonl");
    let sink = plain_file_sink(&base, 0).await;
    let (stop, task, mut progress) = spawn(options(&source), vec![Box::new(sink)]);

    client
        .batch_execute("INSERT INTO t SELECT generate_series(1, 50)")
        .await
        .unwrap();
    await_progress(&mut progress, |p| p.events >= 50).await;
    let killed: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
             WHERE slot_name = 'pgcdc_reconnect' AND active_pid IS NOT NULL) k",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    // Commits made while the pipeline is disconnected.
    client
        .batch_execute("INSERT INTO t SELECT generate_series(51, 100)")
        .await
        .unwrap();
    await_progress(&mut progress, |p| p.reconnects >= 1).await;
    // Any commit ending after `before_last` is the last insert's (or later),
    // so a confirmed position past it means the last insert was flushed.
    let before_last: Lsn = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap();
    client
        .batch_execute("INSERT INTO t SELECT generate_series(101, 150)")
        .await
        .unwrap();
    await_progress(&mut progress, |p| p.confirmed > before_last).await;
    stop.send(()).unwrap();
    let done = task.await.unwrap().unwrap();
    assert!(done.reconnects >= 1);

    let mut ids: Vec<i64> = read_lines(&base)
        .iter()
        .filter(|l| l["op"] == "insert")
        .map(|l| l["after"]["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids, (1..=150).collect::<Vec<i64>>());
    let _ = std::fs::remove_dir_all(dir);
}

/// Spill files of any pipeline in `dir`.
fn spill_files(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("pgcdc-spill-"))
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Polls a local condition (spill files have no notification).
async fn await_condition(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A database whose walsenders stream in-progress transactions as soon as
/// they decode more than 64 kB of them, with table `big`.
async fn streaming_database() -> (TestDatabase, Client) {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE big (id int PRIMARY KEY, pad text);
             ALTER DATABASE \"{}\" SET logical_decoding_work_mem = '64kB';",
            db.name()
        ))
        .await
        .unwrap();
    (db, client)
}

/// A pipeline into a file sink with a 256 KiB byte budget and its own spill
/// directory; returns (run handle, output base path, spill dir, work dir).
async fn spilling_pipeline(
    source: &SourceConfig,
    name: &str,
) -> (RunHandle, PathBuf, PathBuf, PathBuf) {
    let dir = temp_dir(name);
    let base = dir.join("out.jsonl");
    let spill_dir = dir.join("spill");
    let sink = FileSink::open(
        FileSinkOptions {
            path: base.clone(),
            max_file_bytes: 64 * 1024 * 1024,
            page_cache_bytes: cdc_runtime::sinks::DEFAULT_PAGE_CACHE_BYTES,
            direct_io: true,
        },
        JsonEncoder::new(JsonFormat::Plain),
    )
    .await
    .unwrap();
    let mut opts = options(source);
    opts.stream_in_progress = true;
    opts.byte_budget = 256 * 1024;
    opts.spill_dir = spill_dir.clone();
    opts.batch_size = 1000;
    (spawn(opts, vec![Box::new(sink)]), base, spill_dir, dir)
}

fn ids(lines: &[Value]) -> Vec<i64> {
    lines
        .iter()
        .filter(|l| l["op"] == "insert")
        .map(|l| l["after"]["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_streamed_transaction_over_the_byte_budget_is_spilled_and_replayed_exactly() {
    let (db, client) = streaming_database().await;
    let source = source_config(&db, &["big"], "pgcdc_spill_commit");
    setup(&source).await.unwrap();
    let ((stop, task, mut progress), base, spill_dir, dir) =
        spilling_pipeline(&source, "spill-commit").await;

    // 20,000 rows of ~150 bytes: over 4 MB buffered, many times the budget.
    client
        .batch_execute(
            "BEGIN;
             INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g;",
        )
        .await
        .unwrap();
    // Still uncommitted: the server streams it, and the pipeline spills it.
    await_condition("the transaction is spilled", || {
        !spill_files(&spill_dir).is_empty()
    })
    .await;
    // A subtransaction, streamed and then rolled back while spilled.
    client
        .batch_execute(
            "SAVEPOINT s;
             INSERT INTO big SELECT g, repeat('y', 100) FROM generate_series(20001, 30000) g;
             ROLLBACK TO SAVEPOINT s;
             INSERT INTO big SELECT g, repeat('z', 100) FROM generate_series(30001, 32000) g;
             COMMIT;",
        )
        .await
        .unwrap();
    await_progress(&mut progress, |p| p.events >= 22_000).await;
    await_condition("the spill file is removed", || {
        spill_files(&spill_dir).is_empty()
    })
    .await;
    stop.send(()).unwrap();
    let done = task.await.unwrap().unwrap();
    assert_eq!(done.events, 22_000);

    let lines = read_lines(&base);
    let expected: Vec<i64> = (1..=20_000).chain(30_001..=32_000).collect();
    assert_eq!(
        ids(&lines),
        expected,
        "every row, in order, without the rolled-back ones"
    );
    // One transaction, numbered without gaps.
    let commit = &lines[0]["commit_lsn"];
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(&l["commit_lsn"], commit);
        assert_eq!(l["index"].as_u64(), Some(i as u64));
    }
    let pads: Vec<&str> = [0, 19_999, 20_000, 21_999]
        .iter()
        .map(|&i| lines[i]["after"]["pad"].as_str().unwrap())
        .collect();
    assert_eq!(pads, ["x", "x", "z", "z"].map(|c| c.repeat(100)));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_spilled_transaction_that_aborts_leaves_no_events_and_no_file() {
    let (db, client) = streaming_database().await;
    let source = source_config(&db, &["big"], "pgcdc_spill_abort");
    setup(&source).await.unwrap();
    let ((stop, task, mut progress), base, spill_dir, dir) =
        spilling_pipeline(&source, "spill-abort").await;

    client
        .batch_execute(
            "BEGIN;
             INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g;",
        )
        .await
        .unwrap();
    await_condition("the transaction is spilled", || {
        !spill_files(&spill_dir).is_empty()
    })
    .await;
    client.batch_execute("ROLLBACK").await.unwrap();
    await_condition("the spill file is removed", || {
        spill_files(&spill_dir).is_empty()
    })
    .await;
    // A later transaction goes through; the aborted one never shows.
    client
        .batch_execute("INSERT INTO big VALUES (-1, 'after')")
        .await
        .unwrap();
    await_progress(&mut progress, |p| p.events >= 1).await;
    stop.send(()).unwrap();
    let done = task.await.unwrap().unwrap();
    assert_eq!(done.events, 1);
    assert_eq!(ids(&read_lines(&base)), [-1]);
    assert!(spill_files(&spill_dir).is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

/// Peak memory of one big transaction, measured in a child process (VmHWM
/// from `/proc`).
#[cfg(target_os = "linux")]
mod peak_memory {
    use std::process::{Command, Stdio};

    use super::*;

    /// Environment of the child that streams one big transaction.
    const CHILD_CONFIG: &str = "PGCDC_SPILL_CHILD_CONFIG";
    const CHILD_TARGET: &str = "PGCDC_SPILL_CHILD_TARGET";
    const CHILD_SPILL_DIR: &str = "PGCDC_SPILL_CHILD_DIR";
    const CHILD_MARKER: &str = "PGCDC_SPILL_CHILD_RESULT";

    /// Rows of the big transaction.
    const MILLION: u64 = 1_000_000;

    /// Peak resident memory of this process, in kB (Linux: VmHWM).
    fn vm_hwm_kb() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .expect("VmHWM in /proc/self/status");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// The peak memory allowed on top of the byte budget.
    const OVER_BUDGET: u64 = 24 * 1000 * 1000;

    /// Child process of `a_million_row_streamed_transaction_stays_within_the_budget`:
    /// streams the slot with the default options into a file sink writing
    /// Debezium JSON until the target position is confirmed, then prints its
    /// peak memory.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "run as a child process by a_million_row_streamed_transaction_stays_within_the_budget"]
    async fn child_streams_one_big_transaction() {
        let (Ok(text), Ok(target), Ok(spill_dir)) = (
            std::env::var(CHILD_CONFIG),
            std::env::var(CHILD_TARGET),
            std::env::var(CHILD_SPILL_DIR),
        ) else {
            return;
        };
        let target: Lsn = target.parse().unwrap();
        let config = Config::parse(&text).unwrap();
        let source = config.source;
        let mut opts = PipelineOptions::new(
            source.replication_config().unwrap(),
            &source.slot,
            &source.publication,
        );
        opts.spill_dir = spill_dir.clone().into();
        // The path under test: the server streams the transaction and the
        // pipeline holds it (by default the server would hold it).
        opts.stream_in_progress = true;
        // Publish the confirmed position often, so the time measured is the
        // pipeline's and not the status interval's.
        opts.status_interval = Duration::from_millis(100);
        let sink = FileSink::open(
            FileSinkOptions {
                path: std::path::Path::new(&spill_dir).with_file_name("out.jsonl"),
                max_file_bytes: 0,
                page_cache_bytes: cdc_runtime::sinks::DEFAULT_PAGE_CACHE_BYTES,
                direct_io: true,
            },
            JsonEncoder::new(JsonFormat::Debezium(Default::default())),
        )
        .await
        .unwrap();
        let started = std::time::Instant::now();
        let (stop, task, mut progress) = spawn(opts, vec![Box::new(sink)]);
        tokio::time::timeout(
            Duration::from_secs(1200),
            progress.wait_for(|p| p.confirmed > target),
        )
        .await
        .expect("timed out streaming the transaction")
        .expect("pipeline ended");
        let elapsed = started.elapsed();
        stop.send(()).unwrap();
        let done = task.await.unwrap().unwrap();
        println!(
            "{CHILD_MARKER} vmhwm_kb={} elapsed_ms={} events={}",
            vm_hwm_kb(),
            elapsed.as_millis(),
            done.events
        );
    }

    /// One transaction of 1,000,000 typical rows (bigint, int, 100 characters
    /// of text, timestamptz, numeric), streamed by the server, through the
    /// pipeline with the default 64 MiB byte budget into a file sink writing
    /// Debezium JSON, in a child process that does nothing else: its peak
    /// memory stays within the budget plus 24 MB. Held in memory instead of
    /// spilled the transaction takes several hundred MB; the events written
    /// since the sink's last flush, kept for a replay, are bounded by bytes
    /// as well as by count.
    #[tokio::test]
    async fn a_million_row_streamed_transaction_stays_within_the_budget() {
        let (db, client) = streaming_database().await;
        client
            .batch_execute(
                "CREATE TABLE wide (id bigint PRIMARY KEY, k int NOT NULL, v text NOT NULL,
                                    ts timestamptz NOT NULL, n numeric NOT NULL)",
            )
            .await
            .unwrap();
        let source = source_config(&db, &["wide"], "pgcdc_spill_million");
        setup(&source).await.unwrap();
        client
            .batch_execute(
                "BEGIN;
                 INSERT INTO wide SELECT g, g % 1000,
                   rpad('row ' || g || ' ', 100, 'abcdefghijklmnopqrstuvwxyz'),
                   timestamptz '2026-01-01 00:00:00+00' + g * interval '1.25 second',
                   round(g * 3.14159, 4)
                 FROM generate_series(1, 1000000) g;",
            )
            .await
            .unwrap();
        // Inside the transaction: confirmed past it means its commit was flushed.
        let target: String = client
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await
            .unwrap()
            .get(0);
        client.batch_execute("COMMIT").await.unwrap();

        let dir = temp_dir("spill-million");
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "peak_memory::child_streams_one_big_transaction",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CHILD_CONFIG,
                config_text(&db, &["wide"], "pgcdc_spill_million"),
            )
            .env(CHILD_TARGET, &target)
            .env(CHILD_SPILL_DIR, dir.join("spill"))
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "child failed: {:?}", out.status);
        let stdout = String::from_utf8(out.stdout).unwrap();
        let result = stdout
            .lines()
            // libtest prints the test's name on the same line.
            .find_map(|l| l.split_once(CHILD_MARKER).map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("no result from the child:\n{stdout}"));
        let field = |name: &str| -> u64 {
            result
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .unwrap()
                .parse()
                .unwrap()
        };
        let (peak_kb, elapsed_ms, events) =
            (field("vmhwm_kb"), field("elapsed_ms"), field("events"));
        println!(
            "1M-row streamed transaction: peak RSS {} MB, {elapsed_ms} ms",
            peak_kb / 1024
        );
        assert_eq!(events, MILLION);
        let bound = cdc_runtime::pipeline::DEFAULT_BYTE_BUDGET as u64 + OVER_BUDGET;
        assert!(
            peak_kb * 1024 <= bound,
            "peak RSS {peak_kb} kB over the byte budget plus 24 MB ({} kB)",
            bound / 1024
        );
        // The server did stream it (so the pipeline had to hold it until commit).
        let streamed: i64 = client
            .query_one(
                "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = 'pgcdc_spill_million'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(streamed >= 1, "stream_txns = {streamed}");
        assert!(spill_files(&dir.join("spill")).is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test]
async fn proto_version_1_is_asked_for_and_the_server_does_not_stream() {
    let (db, client) = streaming_database().await;
    let source = source_config(&db, &["big"], "pgcdc_proto_one");
    setup(&source).await.unwrap();
    // 20,000 rows of ~150 bytes: far over the 64 kB logical_decoding_work_mem,
    // so protocol 2 would have the server stream it while in progress.
    client
        .batch_execute(
            "INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g",
        )
        .await
        .unwrap();
    let mut opts = options(&source);
    opts.proto_version = Some(1);
    let (stop, task, mut progress) =
        spawn(opts, vec![Box::new(cdc_runtime::sinks::NullSink::new())]);
    await_progress(&mut progress, |p| p.events >= 20_000).await;
    stop.send(()).unwrap();
    assert_eq!(task.await.unwrap().unwrap().events, 20_000);
    let client = Arc::new(client);
    let (total, streamed): (i64, i64) = await_query(|| {
        let client = Arc::clone(&client);
        Box::pin(async move {
            let row = client
                .query_one(
                    "SELECT total_txns, stream_txns FROM pg_stat_replication_slots
                     WHERE slot_name = 'pgcdc_proto_one'",
                    &[],
                )
                .await
                .ok()?;
            let total: i64 = row.get(0);
            (total >= 1).then(|| (total, row.get(1)))
        })
    })
    .await;
    assert_eq!(streamed, 0, "streamed with proto_version 1 ({total} txns)");

    // A version the server does not speak stops the pipeline at once (no retries).
    let mut opts = options(&source);
    opts.proto_version = Some(99);
    let (_stop, task, _) = spawn(opts, vec![Box::new(cdc_runtime::sinks::NullSink::new())]);
    let err = tokio::time::timeout(TIMEOUT, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(!err.is_transient(), "{err}");
    assert!(err.to_string().contains("proto_version 99"), "{err}");
}

/// A real file sink that counts its writes (batches), flushes, and the
/// events written and flushed.
struct CountingSink {
    inner: FileSink,
    counts: Arc<SinkCounts>,
}

#[derive(Default)]
struct SinkCounts {
    writes: AtomicU64,
    flushes: AtomicU64,
    written: AtomicU64,
    flushed: AtomicU64,
}

#[async_trait::async_trait]
impl Sink for CountingSink {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        self.inner.write(batch).await?;
        self.counts.writes.fetch_add(1, Ordering::SeqCst);
        self.counts
            .written
            .fetch_add(batch.len() as u64, Ordering::SeqCst);
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        self.inner.flush().await?;
        self.counts.flushes.fetch_add(1, Ordering::SeqCst);
        let written = self.counts.written.load(Ordering::SeqCst);
        self.counts.flushed.store(written, Ordering::SeqCst);
        Ok(())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.inner.close().await
    }
}

/// A table `paced`, its slot and publication, and a counting file sink in
/// `dir`.
async fn paced_job(name: &str) -> (TestDatabase, Client, SourceConfig, PathBuf, CountingSink) {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE paced (id int8 PRIMARY KEY, v text)")
        .await
        .unwrap();
    let source = source_config(&db, &["paced"], &format!("pgcdc_{name}"));
    setup(&source).await.unwrap();
    let base = temp_dir(name).join("out.jsonl");
    let inner = plain_file_sink(&base, 0).await;
    let sink = CountingSink {
        inner,
        counts: Arc::default(),
    };
    (db, client, source, base, sink)
}

/// A job catching up (its transactions committed more than 100 ms ago)
/// flushes at most once per `min_flush_interval`, unless 16 batches were
/// written since a commit: 2,000 one-row transactions committed before the
/// job starts, in batches of 50 events through the real file sink with a
/// 10 s interval, take about one flush per 16 batches, and every row
/// reaches the file. Without the pacing each batch
/// that finds no other queued behind it is flushed.
#[tokio::test]
async fn a_job_catching_up_shares_its_flushes() {
    let (_db, client, source, base, sink) = paced_job("paced_catch_up").await;
    let counts = Arc::clone(&sink.counts);
    let txns: String = (1..=2000)
        .map(|i| format!("BEGIN; INSERT INTO paced VALUES ({i}, 'row {i}'); COMMIT;"))
        .collect();
    client.batch_execute(&txns).await.unwrap();
    // Not synchronisation: the transactions must be older than 100 ms (the
    // pacing's catching-up age) when the job reads them.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut opts = options(&source);
    opts.min_flush_interval = Duration::from_secs(10);
    let (stop, task, _progress) = spawn(opts, vec![Box::new(sink)]);
    await_condition("all rows written", || {
        counts.written.load(Ordering::SeqCst) >= 2000
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();

    assert_eq!(read_lines(&base).len(), 2000, "every row in the file");
    let writes = counts.writes.load(Ordering::SeqCst);
    let flushes = counts.flushes.load(Ordering::SeqCst);
    eprintln!("{flushes} flushes for {writes} batches");
    assert!(writes >= 40, "{writes} batches of at most 50 events");
    // The first flush, one per 16 batches, the last (at close), and one
    // more should the interval pass on a slow machine.
    assert!(
        flushes <= 3 + writes / 16,
        "{flushes} flushes for {writes} batches"
    );
}

/// A job that keeps up is not paced: with a 10 s `min_flush_interval`, five
/// transactions committed one after the other while the job runs, each as
/// soon as the one before is flushed, are flushed within 5 s (a held flush
/// would wait the 10 s). One may be late: a scheduling stall of over 100 ms
/// on a busy machine makes its commit look caught up with. Paced by mistake,
/// every other one would be.
#[tokio::test]
async fn a_job_that_keeps_up_flushes_each_commit_at_once() {
    let (_db, client, source, base, sink) = paced_job("paced_keep_up").await;
    let counts = Arc::clone(&sink.counts);
    let mut opts = options(&source);
    opts.min_flush_interval = Duration::from_secs(10);
    // The slot exists: rows committed from now on are in its stream.
    let (stop, task, _progress) = spawn(opts, vec![Box::new(sink)]);
    let mut late = Vec::new();
    for i in 1..=5u64 {
        client
            .batch_execute(&format!("INSERT INTO paced VALUES ({i}, 'row {i}')"))
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        await_condition(&format!("row {i} is flushed"), || {
            counts.flushed.load(Ordering::SeqCst) >= i
        })
        .await;
        if started.elapsed() > Duration::from_secs(5) {
            late.push(i);
        }
    }
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(read_lines(&base).len(), 5);
    assert!(
        late.len() <= 1,
        "rows {late:?} waited over 5 s for their flush"
    );
}
