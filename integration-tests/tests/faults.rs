//! Fault injection: `pgcdc run` (the real binary) under a steady write
//! workload while the network to the source, the checkpoint store or the
//! PostgreSQL sink drops, blackholes or crawls (through a [`FaultProxy`]),
//! while the source crashes and restarts, the checkpoint database is down
//! for a minute, or the spill directory or the file sink's directory is
//! full. For every case:
//!
//! * no loss: every row committed at the source is delivered;
//! * no phantom: every delivered row is a committed one (the writer also
//!   runs transactions that roll back, with negative ids, which must never
//!   appear);
//! * a WARN (or error) in pgcdc's log while the fault lasts, where pgcdc can
//!   notice it at all (a throttled link is slow, not broken);
//! * automatic recovery, without a restart: a marker row inserted when the
//!   fault ends is delivered, and the time from the fault's end to its
//!   delivery is printed (`FAULT <case>: ... recovery <ms>`; run with
//!   `--nocapture` to see them).
//!
//! The outages are real time (30 s blackholes, 60 s store outage); the
//! cases run as parallel tests.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_core::Lsn;
use cdc_runtime::sinks::FileSink;
use checkpoint_api::{CheckpointStore, JobName};
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::{
    ClusterOptions, ConnectionInfo, FaultProxy, LocalCluster, Pgcdc, TempDir, TestPostgres,
};
use tokio::task::JoinHandle;
use tokio_postgres::{Client, NoTls};

/// How long any awaited condition may take.
const TIMEOUT: Duration = Duration::from_secs(180);
/// How long a blackhole lasts.
const BLACKHOLE: Duration = Duration::from_secs(30);
/// How long a link is throttled.
const THROTTLE: Duration = Duration::from_secs(10);
/// The throttled rate, per direction.
const THROTTLE_BPS: u64 = 1024;
/// The shortened timeouts of these tests (the defaults are 90 s and 120 s).
const SHORT_TIMEOUT_SECS: u64 = 5;

const DDL: &str = "CREATE TABLE t (id bigint PRIMARY KEY, pad text)";

// ---------------------------------------------------------------------------
// The workload.

/// Connects with `info` over TCP, driving the connection on a task.
async fn connect(info: &ConnectionInfo) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = info.config().connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// Connects, retrying while the server is down.
async fn connect_retrying(info: &ConnectionInfo) -> Client {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match connect(info).await {
            Ok(c) => return c,
            Err(e) => {
                assert!(Instant::now() < deadline, "cannot connect: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// A writer committing 5 rows per transaction (unique increasing ids) and
/// rolling back every fourth transaction (negative ids), reconnecting after
/// any error. `big` rows per transaction instead make large transactions
/// that the server streams.
struct Writer {
    stop: Arc<AtomicBool>,
    task: JoinHandle<u64>,
}

impl Writer {
    fn start(info: ConnectionInfo, ids: Arc<AtomicI64>, rows: i64, pause: Duration) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut txns = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let Ok(client) = connect(&info).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                while !flag.load(Ordering::Relaxed) {
                    txns += 1;
                    let first = ids.fetch_add(rows, Ordering::SeqCst);
                    let last = first + rows - 1;
                    let sql = if txns % 4 == 0 {
                        format!(
                            "BEGIN; INSERT INTO t SELECT -g, repeat('x', 100) FROM generate_series({first}, {last}) g; ROLLBACK"
                        )
                    } else {
                        format!(
                            "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series({first}, {last}) g"
                        )
                    };
                    if client.batch_execute(&sql).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(pause).await;
                }
            }
            txns
        });
        Writer { stop, task }
    }

    /// The usual small transactions.
    fn small(info: ConnectionInfo, ids: Arc<AtomicI64>) -> Writer {
        Writer::start(info, ids, 5, Duration::from_millis(20))
    }

    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// Inserts one row with the next id (retrying while the server is down) and
/// returns the id.
async fn insert_marker(info: &ConnectionInfo, ids: &AtomicI64) -> i64 {
    let id = ids.fetch_add(1, Ordering::SeqCst);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let client = connect_retrying(info).await;
        match client
            .execute("INSERT INTO t VALUES ($1, 'marker')", &[&id])
            .await
        {
            Ok(_) => return id,
            // Lost with the connection: committed or not, the id is retried.
            Err(e) if e.as_db_error().is_none() => {}
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
                return id
            }
            Err(e) => panic!("inserting marker {id}: {e}"),
        }
        assert!(Instant::now() < deadline, "cannot insert marker {id}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The ids the source table holds: the truth to compare with.
async fn source_ids(info: &ConnectionInfo, table: &str) -> BTreeSet<i64> {
    let client = connect_retrying(info).await;
    client
        .query(&format!("SELECT id FROM {table}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn current_lsn(info: &ConnectionInfo) -> Lsn {
    let client = connect_retrying(info).await;
    let row = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}

// ---------------------------------------------------------------------------
// What pgcdc delivered.

/// Reads the file sink's output as it grows: only whole lines, each of
/// which must be valid JSON (a partial or corrupt line fails the test).
struct Output {
    base: PathBuf,
    offsets: HashMap<PathBuf, u64>,
    delivered: HashMap<i64, u32>,
}

impl Output {
    fn new(base: PathBuf) -> Output {
        Output {
            base,
            offsets: HashMap::new(),
            delivered: HashMap::new(),
        }
    }

    fn poll(&mut self) {
        let Ok(files) = FileSink::files(&self.base) else {
            return;
        };
        for path in files {
            let Ok(mut file) = std::fs::File::open(&path) else {
                continue;
            };
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let offset = self.offsets.entry(path.clone()).or_insert(0);
            if len < *offset {
                // Cut by the sink after a failed write: read it again
                // (delivery counts are only used for duplicates).
                *offset = 0;
            }
            file.seek(SeekFrom::Start(*offset)).unwrap();
            let mut text = Vec::new();
            file.read_to_end(&mut text).unwrap();
            let Some(end) = text.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            for line in text[..end].split(|&b| b == b'\n') {
                let value: serde_json::Value = serde_json::from_slice(line).unwrap_or_else(|e| {
                    panic!(
                        "a partial or corrupt line in {}: {e}: {:?}",
                        path.display(),
                        String::from_utf8_lossy(line)
                    )
                });
                if let Some(id) = value["after"]["id"].as_i64() {
                    *self.delivered.entry(id).or_default() += 1;
                }
            }
            *offset += end as u64 + 1;
        }
    }

    fn has(&mut self, id: i64) -> bool {
        self.poll();
        self.delivered.contains_key(&id)
    }

    fn ids(&mut self) -> BTreeSet<i64> {
        self.poll();
        self.delivered.keys().copied().collect()
    }

    fn events(&mut self) -> u64 {
        self.poll();
        self.delivered.values().map(|&n| u64::from(n)).sum()
    }
}

/// Loss and phantoms of `delivered` against `committed`; fails on either.
fn assert_exact(case: &str, committed: &BTreeSet<i64>, delivered: &BTreeSet<i64>, events: u64) {
    let lost: Vec<_> = committed.difference(delivered).take(10).collect();
    let phantom: Vec<_> = delivered.difference(committed).take(10).collect();
    println!(
        "FAULT {case}: committed rows {}, delivered rows {}, events {events} ({} duplicates), lost {}, phantom {}",
        committed.len(),
        delivered.len(),
        events.saturating_sub(delivered.len() as u64),
        committed.difference(delivered).count(),
        delivered.difference(committed).count(),
    );
    assert!(
        lost.is_empty(),
        "{case}: committed rows never delivered: {lost:?}"
    );
    assert!(
        phantom.is_empty(),
        "{case}: delivered rows that were never committed: {phantom:?}"
    );
    assert!(
        committed.iter().all(|&id| id > 0),
        "{case}: a rolled-back row is in the source"
    );
}

/// Waits until `delivered(marker)` and returns the time since `since`.
async fn delivered_within<F: std::future::Future<Output = bool>>(
    what: &str,
    since: Instant,
    mut delivered: impl FnMut() -> F,
) -> Duration {
    integration_tests::eventually(what, TIMEOUT, || {
        let f = delivered();
        async move { f.await.then_some(()) }
    })
    .await;
    since.elapsed()
}

/// The log lines pgcdc wrote after byte `from` that are WARN or ERROR.
fn warnings_since(pgcdc: &Pgcdc, from: usize) -> Vec<String> {
    let log = pgcdc.stderr();
    log.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(str::to_owned)
        .collect()
}

/// Waits (up to `within`) for a WARN or ERROR line after byte `from`
/// containing every one of `needles`; returns it.
async fn await_warning(pgcdc: &Pgcdc, from: usize, needles: &[&str], within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Some(line) = warnings_since(pgcdc, from)
            .into_iter()
            .find(|l| needles.iter().all(|n| l.contains(n)))
        {
            return line;
        }
        if Instant::now() >= deadline {
            // The whole log, so that what pgcdc was doing before is there too.
            let log = pgcdc.stderr();
            let tail: Vec<&str> = log.lines().rev().take(200).collect();
            panic!(
                "no WARN/ERROR with {needles:?} in pgcdc's log after byte {from} of {}; its last lines:\n{}",
                log.len(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("pgcdc.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `info`'s connection string with `port` instead of its own.
fn via_port(info: &ConnectionInfo, port: u16) -> String {
    info.connection_string()
        .replace(&format!("port={} ", info.port()), &format!("port={port} "))
}

/// `info`'s `[source]` section with `port` instead of its own, plus `extra`
/// lines.
fn source_section(info: &ConnectionInfo, port: u16, name: &str, extra: &str) -> String {
    let text = info
        .source_toml(
            &["public.t"],
            &format!("{name}_slot"),
            &format!("{name}_pub"),
        )
        .replace(
            &format!("port = {}\n", info.port()),
            &format!("port = {port}\n"),
        );
    format!("{text}{extra}\n")
}

async fn proxy_to(info: &ConnectionInfo) -> FaultProxy {
    let target = tokio::net::lookup_host((info.host(), info.port()))
        .await
        .unwrap()
        .next()
        .unwrap();
    FaultProxy::start(target).await.unwrap()
}

/// Starts pgcdc and waits until it delivers (a marker row reaches
/// `delivered`).
async fn start_pgcdc<F: std::future::Future<Output = bool>>(
    config: &Path,
    source: &ConnectionInfo,
    ids: &AtomicI64,
    mut delivered: impl FnMut(i64) -> F,
) -> Pgcdc {
    let pgcdc = Pgcdc::run(config).unwrap();
    let marker = insert_marker(source, ids).await;
    delivered_within("pgcdc to start delivering", Instant::now(), || {
        delivered(marker)
    })
    .await;
    pgcdc
}

/// Stops pgcdc cleanly (it must still be running: it recovered by itself).
async fn stop_pgcdc(pgcdc: &mut Pgcdc) {
    assert!(
        pgcdc.try_status().unwrap().is_none(),
        "pgcdc exited during the faults:\n{}",
        pgcdc.stderr()
    );
    let status = pgcdc.terminate(Duration::from_secs(60)).await.unwrap();
    assert!(status.success(), "pgcdc failed:\n{}", pgcdc.stderr());
}

fn init_table_sql() -> String {
    format!("{DDL}; ALTER TABLE t REPLICA IDENTITY FULL")
}

// ---------------------------------------------------------------------------
// Network faults between pgcdc and one of its servers.

/// Which of pgcdc's connections goes through the proxy.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Link {
    Source,
    Store,
    Sink,
}

/// Drop, then blackhole for [`BLACKHOLE`], then throttle to 1 KiB/s for
/// [`THROTTLE`], on `link`; after each, recovery is measured and at the end
/// loss and phantoms counted.
async fn network_faults(link: Link) {
    let case = format!("{link:?}").to_lowercase();
    let db = TestPostgres::new_database().await.unwrap();
    let source = db.connection_info().clone();
    connect(&source)
        .await
        .unwrap()
        .batch_execute(&init_table_sql())
        .await
        .unwrap();
    let target = match link {
        Link::Sink => {
            let target = TestPostgres::shared()
                .await
                .unwrap()
                .create_database()
                .await
                .unwrap();
            connect(target.connection_info())
                .await
                .unwrap()
                .batch_execute(DDL)
                .await
                .unwrap();
            Some(target.connection_info().clone())
        }
        _ => None,
    };
    let proxy = proxy_to(target.as_ref().unwrap_or(&source)).await;
    let dir = TempDir::new(&format!("faults-{case}"));
    let events = dir.path().join("events.jsonl");
    let source_port = if link == Link::Source {
        proxy.port()
    } else {
        source.port()
    };
    let store_port = if link == Link::Store {
        proxy.port()
    } else {
        source.port()
    };
    let mut text = source_section(
        &source,
        source_port,
        &format!("net_{case}"),
        &format!("receive_timeout_secs = {SHORT_TIMEOUT_SECS}"),
    );
    text.push_str(&format!(
        "[pipeline]\nsink_timeout_secs = {SHORT_TIMEOUT_SECS}\n\
         [checkpoint]\njob = \"net_{case}\"\nurl = {:?}\ninterval_ms = 200\n\
         store_timeout_secs = {SHORT_TIMEOUT_SECS}\n\
         [[sinks]]\ntype = \"file\"\npath = {:?}\n",
        via_port(&source, store_port),
        events.display().to_string(),
    ));
    if let Some(target) = &target {
        text.push_str(&format!(
            "[[sinks]]\ntype = \"postgres\"\nurl = {:?}\nexactly_once = true\n\
             tables = {{ \"public.t\" = \"public.t\" }}\n",
            format!(
                "{} application_name=pgcdc_fault_sink",
                via_port(target, proxy.port())
            ),
        ));
    }
    let config = write_config(dir.path(), &text);
    let ids = Arc::new(AtomicI64::new(1));
    let output = std::sync::Mutex::new(Output::new(events.clone()));
    // Delivered: in the file, and with a sink under test in its target.
    let delivered = |id: i64| {
        let in_file = output.lock().unwrap().has(id);
        let target = target.clone();
        async move {
            if !in_file {
                return false;
            }
            match &target {
                None => true,
                Some(t) => {
                    let Ok(c) = connect(t).await else {
                        return false;
                    };
                    c.query_opt("SELECT 1 FROM t WHERE id = $1", &[&id])
                        .await
                        .is_ok_and(|r| r.is_some())
                }
            }
        }
    };
    let mut pgcdc = start_pgcdc(&config, &source, &ids, &delivered).await;
    let store = PgCheckpointStore::connect(source.config(), PgStoreConfig::default())
        .await
        .unwrap();
    let job = JobName::new(format!("net_{case}")).unwrap();
    let writer = Writer::small(source.clone(), ids.clone());

    // What pgcdc says when it notices each fault.
    let noticed: &[&str] = match link {
        Link::Source => &["replication interrupted"],
        Link::Store => &["checkpoint failed"],
        Link::Sink => &["transient sink error"],
    };
    for fault in ["drop", "blackhole", "throttle"] {
        let log_from = pgcdc.stderr().len();
        let started = Instant::now();
        let warning = match fault {
            "drop" => {
                proxy.drop_all();
                // Dropped connections to the store are replaced before a
                // save fails: nothing to warn about there.
                if link == Link::Store {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    warnings_since(&pgcdc, log_from).into_iter().next()
                } else {
                    Some(await_warning(&pgcdc, log_from, noticed, TIMEOUT).await)
                }
            }
            "blackhole" => {
                proxy.blackhole(BLACKHOLE);
                let line = await_warning(&pgcdc, log_from, noticed, BLACKHOLE).await;
                tokio::time::sleep(BLACKHOLE.saturating_sub(started.elapsed())).await;
                Some(line)
            }
            _ => {
                proxy.throttle(THROTTLE_BPS);
                tokio::time::sleep(THROTTLE).await;
                proxy.pass();
                // Slow is not broken: a WARN is possible, not required.
                warnings_since(&pgcdc, log_from).into_iter().next()
            }
        };
        let ended = Instant::now();
        let lsn = current_lsn(&source).await;
        let marker = insert_marker(&source, &ids).await;
        let recovery =
            delivered_within("the marker after the fault", ended, || delivered(marker)).await;
        let checkpointed = delivered_within("a checkpoint after the fault", ended, || async {
            store
                .list(&job)
                .await
                .is_ok_and(|l| l.iter().any(|m| m.commit_end_lsn >= lsn))
        })
        .await;
        println!(
            "FAULT {case}/{fault}: lasted {:.1} s, recovery (fault end -> marker delivered) {} ms, next checkpoint {} ms, log: {}",
            ended.duration_since(started).as_secs_f64(),
            recovery.as_millis(),
            checkpointed.as_millis(),
            warning.as_deref().unwrap_or("(no WARN)")
        );
    }
    let txns = writer.stop().await;
    let last = insert_marker(&source, &ids).await;
    delivered_within("the last marker", Instant::now(), || delivered(last)).await;
    stop_pgcdc(&mut pgcdc).await;
    let committed = source_ids(&source, "t").await;
    let mut output = output.into_inner().unwrap();
    let delivered_ids = output.ids();
    assert_exact(&case, &committed, &delivered_ids, output.events());
    if let Some(target) = &target {
        let in_target = source_ids(target, "t").await;
        assert_exact(
            &format!("{case} (target table)"),
            &committed,
            &in_target,
            in_target.len() as u64,
        );
    }
    println!("FAULT {case}: writer transactions {txns}");
}

#[tokio::test]
async fn source_connection_drop_blackhole_throttle() {
    network_faults(Link::Source).await;
}

#[tokio::test]
async fn checkpoint_store_connection_drop_blackhole_throttle() {
    network_faults(Link::Store).await;
}

#[tokio::test]
async fn postgres_sink_connection_drop_blackhole_throttle() {
    network_faults(Link::Sink).await;
}

// ---------------------------------------------------------------------------
// Servers going away.

/// The source crashes (`pg_ctl stop -m immediate`) and starts again, 10
/// times, mid-stream; the checkpoints live in the same database.
#[tokio::test]
async fn source_restarted_immediate_10_times() {
    const RESTARTS: usize = 10;
    let cluster = LocalCluster::create(ClusterOptions::new()).await.unwrap();
    let db = cluster.create_database().await.unwrap();
    let source = db.connection_info().clone();
    connect(&source)
        .await
        .unwrap()
        .batch_execute(&init_table_sql())
        .await
        .unwrap();
    let dir = TempDir::new("faults-restarts");
    let events = dir.path().join("events.jsonl");
    let text = format!(
        "{}[checkpoint]\njob = \"restarts\"\ninterval_ms = 200\n\
         [[sinks]]\ntype = \"file\"\npath = {:?}\n",
        source_section(&source, source.port(), "restarts", ""),
        events.display().to_string(),
    );
    let config = write_config(dir.path(), &text);
    let ids = Arc::new(AtomicI64::new(1));
    let output = std::sync::Mutex::new(Output::new(events));
    let delivered = |id: i64| {
        let has = output.lock().unwrap().has(id);
        async move { has }
    };
    let mut pgcdc = start_pgcdc(&config, &source, &ids, &delivered).await;
    let writer = Writer::small(source.clone(), ids.clone());
    let mut recoveries = Vec::new();
    for round in 1..=RESTARTS {
        // Some streaming before each crash.
        let before = output.lock().unwrap().events();
        integration_tests::eventually("events before the crash", TIMEOUT, || {
            let n = output.lock().unwrap().events();
            async move { (n > before + 50).then_some(()) }
        })
        .await;
        let log_from = pgcdc.stderr().len();
        let killed = Instant::now();
        cluster.kill().await.unwrap();
        let warning = await_warning(&pgcdc, log_from, &["replication interrupted"], TIMEOUT).await;
        cluster.start().await.unwrap();
        let up = Instant::now();
        let marker = insert_marker(&source, &ids).await;
        let recovery =
            delivered_within("the marker after the restart", up, || delivered(marker)).await;
        println!(
            "FAULT source_restart/{round}: down {} ms, recovery (server up -> marker delivered) {} ms, log: {warning}",
            up.duration_since(killed).as_millis(),
            recovery.as_millis()
        );
        recoveries.push(recovery);
    }
    let txns = writer.stop().await;
    let last = insert_marker(&source, &ids).await;
    delivered_within("the last marker", Instant::now(), || delivered(last)).await;
    stop_pgcdc(&mut pgcdc).await;
    let committed = source_ids(&source, "t").await;
    let mut output = output.into_inner().unwrap();
    let delivered_ids = output.ids();
    assert_exact(
        "source_restart",
        &committed,
        &delivered_ids,
        output.events(),
    );
    recoveries.sort();
    println!(
        "FAULT source_restart: {RESTARTS} restarts, recovery median {} ms, max {} ms; writer transactions {txns}",
        recoveries[recoveries.len() / 2].as_millis(),
        recoveries.last().unwrap().as_millis()
    );
}

/// The checkpoint database (a cluster of its own) is down for 60 s: the
/// stream goes on, checkpoints fail with a WARN and resume afterwards.
#[tokio::test]
async fn checkpoint_database_down_60s() {
    const DOWN: Duration = Duration::from_secs(60);
    let db = TestPostgres::new_database().await.unwrap();
    let source = db.connection_info().clone();
    connect(&source)
        .await
        .unwrap()
        .batch_execute(&init_table_sql())
        .await
        .unwrap();
    let store_cluster = LocalCluster::create(ClusterOptions::new()).await.unwrap();
    let store_db = store_cluster.create_database().await.unwrap();
    let store_info = store_db.connection_info().clone();
    let dir = TempDir::new("faults-store-down");
    let events = dir.path().join("events.jsonl");
    let text = format!(
        "{}[checkpoint]\njob = \"store_down\"\nurl = {:?}\ninterval_ms = 200\n\
         store_timeout_secs = {SHORT_TIMEOUT_SECS}\n\
         [[sinks]]\ntype = \"file\"\npath = {:?}\n",
        source_section(&source, source.port(), "store_down", ""),
        store_info.connection_string(),
        events.display().to_string(),
    );
    let config = write_config(dir.path(), &text);
    let ids = Arc::new(AtomicI64::new(1));
    let output = std::sync::Mutex::new(Output::new(events));
    let delivered = |id: i64| {
        let has = output.lock().unwrap().has(id);
        async move { has }
    };
    let mut pgcdc = start_pgcdc(&config, &source, &ids, &delivered).await;
    let writer = Writer::small(source.clone(), ids.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;

    let log_from = pgcdc.stderr().len();
    let stopped = Instant::now();
    store_cluster.stop().await.unwrap();
    let warning = await_warning(&pgcdc, log_from, &["checkpoint failed"], DOWN).await;
    // The stream keeps going meanwhile.
    let during = insert_marker(&source, &ids).await;
    let while_down = delivered_within("a marker while the store is down", Instant::now(), || {
        delivered(during)
    })
    .await;
    tokio::time::sleep(DOWN.saturating_sub(stopped.elapsed())).await;
    store_cluster.start().await.unwrap();
    let up = Instant::now();
    let lsn = current_lsn(&source).await;
    let store = PgCheckpointStore::connect(store_info.config(), PgStoreConfig::default())
        .await
        .unwrap();
    let job = JobName::new("store_down").unwrap();
    let checkpointed = delivered_within("a checkpoint after the outage", up, || async {
        store
            .list(&job)
            .await
            .is_ok_and(|l| l.iter().any(|m| m.commit_end_lsn >= lsn))
    })
    .await;
    let marker = insert_marker(&source, &ids).await;
    let recovery = delivered_within("the marker after the outage", up, || delivered(marker)).await;
    println!(
        "FAULT store_down: down {} ms, marker delivered while down in {} ms, recovery (store up -> checkpoint covering it saved) {} ms, marker {} ms, log: {warning}",
        up.duration_since(stopped).as_millis(),
        while_down.as_millis(),
        checkpointed.as_millis(),
        recovery.as_millis()
    );
    let txns = writer.stop().await;
    stop_pgcdc(&mut pgcdc).await;
    let committed = source_ids(&source, "t").await;
    let mut output = output.into_inner().unwrap();
    let delivered_ids = output.ids();
    assert_exact("store_down", &committed, &delivered_ids, output.events());
    println!("FAULT store_down: writer transactions {txns}");
}

// ---------------------------------------------------------------------------
// Full file systems.

/// A size-limited tmpfs mounted on a fresh directory, unmounted when
/// dropped.
struct SmallFs {
    dir: TempDir,
}

impl SmallFs {
    fn mount(tag: &str, size: &str) -> SmallFs {
        let dir = TempDir::new(tag);
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "this test needs a small file system it can fill: `mount -t tmpfs` failed ({}); run the tests as root (or with CAP_SYS_ADMIN)",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        SmallFs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the file system with a ballast file until `leave` bytes are
    /// free.
    fn fill(&self, leave: u64) -> PathBuf {
        let ballast = self.path().join("ballast");
        let out = std::process::Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(self.path())
            .output()
            .unwrap();
        let avail: u64 = String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let size = avail.saturating_sub(leave);
        std::fs::write(&ballast, vec![0u8; usize::try_from(size).unwrap()]).unwrap();
        ballast
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// `pipeline.spill_dir` on a full file system: big streamed transactions
/// cannot be spilled; pgcdc says so and reconnects with backoff until the
/// ballast is deleted, then delivers everything.
#[tokio::test]
async fn spill_dir_full_then_freed() {
    let fs = SmallFs::mount("faults-spill", "2m");
    // Transactions over 64 kB are streamed by the server while in progress.
    let cluster =
        LocalCluster::create(ClusterOptions::new().setting("logical_decoding_work_mem", "64kB"))
            .await
            .unwrap();
    let db = cluster.create_database().await.unwrap();
    let source = db.connection_info().clone();
    connect(&source)
        .await
        .unwrap()
        .batch_execute(&init_table_sql())
        .await
        .unwrap();
    let dir = TempDir::new("faults-spill-out");
    let events = dir.path().join("events.jsonl");
    let text = format!(
        "{}[pipeline]\nstream_in_progress = true\nbyte_budget = 65536\nspill_dir = {:?}\n\
         [checkpoint]\njob = \"spill_full\"\ninterval_ms = 200\n\
         [[sinks]]\ntype = \"file\"\npath = {:?}\n",
        source_section(&source, source.port(), "spill_full", ""),
        fs.path().display().to_string(),
        events.display().to_string(),
    );
    let config = write_config(dir.path(), &text);
    let ids = Arc::new(AtomicI64::new(1));
    let output = std::sync::Mutex::new(Output::new(events));
    let delivered = |id: i64| {
        let has = output.lock().unwrap().has(id);
        async move { has }
    };
    let mut pgcdc = start_pgcdc(&config, &source, &ids, &delivered).await;
    // 1,000 rows of ~130 bytes a transaction: streamed, spilled past 64 KiB;
    // every fourth rolls back.
    let writer = Writer::start(
        source.clone(),
        ids.clone(),
        1_000,
        Duration::from_millis(500),
    );
    let before = output.lock().unwrap().events();
    integration_tests::eventually("big transactions delivered", TIMEOUT, || {
        let n = output.lock().unwrap().events();
        async move { (n > before + 2_000).then_some(()) }
    })
    .await;

    let log_from = pgcdc.stderr().len();
    let ballast = fs.fill(32 << 10);
    let filled = Instant::now();
    let dir_name = fs.path().display().to_string();
    let warning = await_warning(
        &pgcdc,
        log_from,
        &[dir_name.as_str(), "No space left on device"],
        TIMEOUT,
    )
    .await;
    // Full for a few seconds more: retried, not given up.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let failures = warnings_since(&pgcdc, log_from).len();
    std::fs::remove_file(&ballast).unwrap();
    let freed = Instant::now();
    let marker = insert_marker(&source, &ids).await;
    let recovery = delivered_within("the marker after freeing space", freed, || {
        delivered(marker)
    })
    .await;
    println!(
        "FAULT spill_dir_full: full {} ms ({failures} WARN lines), recovery (space freed -> marker delivered) {} ms, log: {warning}",
        freed.duration_since(filled).as_millis(),
        recovery.as_millis()
    );
    let txns = writer.stop().await;
    let last = insert_marker(&source, &ids).await;
    delivered_within("the last marker", Instant::now(), || delivered(last)).await;
    stop_pgcdc(&mut pgcdc).await;
    let committed = source_ids(&source, "t").await;
    let mut output = output.into_inner().unwrap();
    let delivered_ids = output.ids();
    assert_exact(
        "spill_dir_full",
        &committed,
        &delivered_ids,
        output.events(),
    );
    println!("FAULT spill_dir_full: writer transactions {txns}");
}

/// The file sink's directory on a full file system: the sink says so,
/// retries with backoff (no partial line left in its output), and goes on
/// once the ballast is deleted.
#[tokio::test]
async fn file_sink_dir_full_then_freed() {
    let fs = SmallFs::mount("faults-sinkfs", "16m");
    let db = TestPostgres::new_database().await.unwrap();
    let source = db.connection_info().clone();
    connect(&source)
        .await
        .unwrap()
        .batch_execute(&init_table_sql())
        .await
        .unwrap();
    let dir = TempDir::new("faults-sink-full");
    let events = fs.path().join("events.jsonl");
    let text = format!(
        "{}[checkpoint]\njob = \"sink_full\"\ninterval_ms = 200\n\
         [[sinks]]\ntype = \"file\"\npath = {:?}\n",
        source_section(&source, source.port(), "sink_full", ""),
        events.display().to_string(),
    );
    let config = write_config(dir.path(), &text);
    let ids = Arc::new(AtomicI64::new(1));
    let output = std::sync::Mutex::new(Output::new(events));
    let delivered = |id: i64| {
        let has = output.lock().unwrap().has(id);
        async move { has }
    };
    let mut pgcdc = start_pgcdc(&config, &source, &ids, &delivered).await;
    let writer = Writer::small(source.clone(), ids.clone());
    tokio::time::sleep(Duration::from_secs(1)).await;

    let log_from = pgcdc.stderr().len();
    let ballast = fs.fill(16 << 10);
    let filled = Instant::now();
    let dir_name = fs.path().display().to_string();
    let warning = await_warning(
        &pgcdc,
        log_from,
        &[dir_name.as_str(), "No space left on device"],
        TIMEOUT,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // No partial line while it is full (Output fails on one).
    output.lock().unwrap().poll();
    let failures = warnings_since(&pgcdc, log_from).len();
    std::fs::remove_file(&ballast).unwrap();
    let freed = Instant::now();
    let marker = insert_marker(&source, &ids).await;
    let recovery = delivered_within("the marker after freeing space", freed, || {
        delivered(marker)
    })
    .await;
    println!(
        "FAULT file_sink_dir_full: full {} ms ({failures} WARN lines), recovery (space freed -> marker delivered) {} ms, log: {warning}",
        freed.duration_since(filled).as_millis(),
        recovery.as_millis()
    );
    let txns = writer.stop().await;
    let last = insert_marker(&source, &ids).await;
    delivered_within("the last marker", Instant::now(), || delivered(last)).await;
    stop_pgcdc(&mut pgcdc).await;
    let committed = source_ids(&source, "t").await;
    let mut output = output.into_inner().unwrap();
    let delivered_ids = output.ids();
    assert_exact(
        "file_sink_dir_full",
        &committed,
        &delivered_ids,
        output.events(),
    );
    println!("FAULT file_sink_dir_full: writer transactions {txns}");
}
