//! Source failover with a failover slot (PostgreSQL 17+; run on 18): a
//! primary and a streaming standby with `sync_replication_slots = on`, the
//! primary's `synchronized_standby_slots` naming the standby's physical
//! slot, and pgcdc given both hosts. Under a steady insert load the primary
//! dies (`pg_ctl stop -m immediate`), the standby is promoted, and pgcdc
//! must find it among its hosts and continue from its checkpoint. A new
//! standby then takes the dead primary's port, and the whole failover is
//! done three times in one test.
//!
//! Checkpoints live in a third cluster, so they survive the failovers; the
//! sink is a file whose events carry unique ids, so lost and duplicated
//! rows are counted exactly.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_runtime::sinks::FileSink;
use cdc_runtime::JobError;
use checkpoint_api::{CheckpointStore, JobName};
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::{ClusterOptions, LocalCluster};
use pgcdc::config::Config;
use pgcdc::RunOptions;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_postgres::{Client, NoTls};

const TIMEOUT: Duration = Duration::from_secs(120);
const FAILOVERS: usize = 3;
const JOB: &str = "failover";
const SLOT: &str = "failover_slot";

fn pg18() -> ClusterOptions {
    ClusterOptions::new()
        .major(18)
        // A dead walsender peer is noticed quickly.
        .setting("wal_sender_timeout", "'10s'")
}

fn init_logging() {
    if let Ok(filter) = std::env::var("PGCDC_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

async fn connect(port: u16, dbname: &str) -> Client {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user("postgres")
        .dbname(dbname)
        .connect_timeout(Duration::from_secs(5));
    let (client, conn) = config.connect(NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// The writer: one row per transaction, ids from 1 up, into whichever of
/// `ports` accepts writes, reconnecting when its server dies. Returns the
/// ids whose commit was acknowledged.
struct Writer {
    next: Arc<AtomicI64>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<BTreeSet<i64>>,
}

impl Writer {
    fn start(ports: [u16; 2]) -> Writer {
        let next = Arc::new(AtomicI64::new(1));
        let stop = Arc::new(AtomicBool::new(false));
        let (n, s) = (Arc::clone(&next), Arc::clone(&stop));
        let task = tokio::spawn(async move {
            let mut acked = BTreeSet::new();
            let mut config = tokio_postgres::Config::new();
            for port in ports {
                config.host("127.0.0.1").port(port);
            }
            config
                .user("postgres")
                .dbname("app")
                .connect_timeout(Duration::from_secs(2))
                .target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
            let mut client: Option<Client> = None;
            while !s.load(Ordering::SeqCst) {
                let c = match &client {
                    Some(c) if !c.is_closed() => c,
                    _ => match config.connect(NoTls).await {
                        Ok((c, conn)) => {
                            tokio::spawn(async move {
                                let _ = conn.await;
                            });
                            client.insert(c)
                        }
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    },
                };
                let id = n.load(Ordering::SeqCst);
                match c
                    .execute("INSERT INTO items (id) VALUES ($1)", &[&id])
                    .await
                {
                    Ok(_) => {
                        acked.insert(id);
                        n.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    Err(_) => {
                        // Commit unknown: never reuse the id.
                        n.fetch_add(1, Ordering::SeqCst);
                        client = None;
                    }
                }
            }
            acked
        });
        Writer { next, stop, task }
    }

    fn next_id(&self) -> i64 {
        self.next.load(Ordering::SeqCst)
    }

    async fn stop(self) -> BTreeSet<i64> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

/// One event of the file sink: the row id and its transaction's commit LSN.
#[derive(Debug, Clone, Copy)]
struct Event {
    id: i64,
    commit_lsn: u64,
}

fn events(path: &Path) -> Vec<Event> {
    let mut out = Vec::new();
    for file in FileSink::files(path).unwrap() {
        let text = std::fs::read_to_string(file).unwrap();
        // Only complete lines are events yet.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        for line in complete.lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            if e["op"] != "insert" || e["table"] != "items" {
                continue;
            }
            // The plain form names the commit LSN (Debezium's records do
            // not: their `sequence` starts with the previous commit's).
            let commit_lsn: cdc_core::Lsn = e["commit_lsn"].as_str().unwrap().parse().unwrap();
            out.push(Event {
                id: e["after"]["id"].as_i64().unwrap(),
                commit_lsn: commit_lsn.as_u64(),
            });
        }
    }
    out
}

fn config(ports: [u16; 2], store: &LocalCluster, dir: &Path) -> Config {
    let text = format!(
        r#"
        [source]
        host = ["127.0.0.1", "127.0.0.1"]
        port = [{p0}, {p1}]
        database = "app"
        user = "postgres"
        sslmode = "disable"
        tables = ["public.items"]
        slot = "{SLOT}"
        publication = "failover_pub"

        [pipeline]
        status_interval_secs = 1

        [snapshot]
        mode = "latest"

        [[sinks]]
        type = "file"
        path = {path:?}
        format = "plain"

        [checkpoint]
        job = "{JOB}"
        url = {url:?}
        interval_ms = 200
        "#,
        p0 = ports[0],
        p1 = ports[1],
        path = dir.join("events.jsonl").display().to_string(),
        url = store.admin().connection_string(),
    );
    let config = Config::parse(&text).unwrap();
    config.check().unwrap();
    config
}

/// A new standby of `primary` (on `port` when given) through the physical
/// slot `slot`, which `primary` then names in `synchronized_standby_slots`:
/// it holds logical changes back until the standby has them.
async fn add_standby(primary: &LocalCluster, slot: &str, port: Option<u16>) -> LocalCluster {
    let mut options = pg18();
    if let Some(port) = port {
        options = options.port(port);
    }
    let standby = primary.create_standby(options, slot).await.unwrap();
    let admin = connect(primary.port(), "postgres").await;
    admin
        .batch_execute(&format!(
            "ALTER SYSTEM SET synchronized_standby_slots = '{slot}'"
        ))
        .await
        .unwrap();
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    standby
}

/// The newest checkpoint's position.
async fn newest_checkpoint(store: &PgCheckpointStore) -> u64 {
    let list = store.list(&JobName::new(JOB).unwrap()).await.unwrap();
    list.iter()
        .map(|m| m.commit_end_lsn.as_u64())
        .max()
        .unwrap_or(0)
}

/// Waits until the standby holds a usable copy of the failover slot that
/// a checkpoint taken since `since` covers: synchronised, persistent, and
/// confirmed past `since` on the primary's side as well.
async fn await_slot_synced(standby: &LocalCluster, primary: &LocalCluster, since: u64) {
    let s = connect(standby.port(), "app").await;
    let p = connect(primary.port(), "app").await;
    integration_tests::eventually(
        "the failover slot synchronised to the standby",
        TIMEOUT,
        || async {
            let row = s
                .query_opt(
                    "SELECT synced, temporary, (confirmed_flush_lsn - '0/0')::bigint \
                 FROM pg_replication_slots WHERE slot_name = $1",
                    &[&SLOT],
                )
                .await
                .unwrap()?;
            let (synced, temporary, confirmed): (bool, bool, Option<i64>) =
                (row.get(0), row.get(1), row.get(2));
            let primary_failover: bool = p
                .query_one(
                    "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
                    &[&SLOT],
                )
                .await
                .unwrap()
                .get(0);
            assert!(primary_failover, "pgcdc created a failover slot");
            (synced && !temporary && confirmed.unwrap_or(0) as u64 > since).then_some(())
        },
    )
    .await;
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

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pgcdc-failover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_failovers_under_load_lose_nothing() {
    init_logging();
    let store_cluster = LocalCluster::create(pg18()).await.unwrap();
    let mut primary = LocalCluster::create(pg18()).await.unwrap();
    {
        let admin = connect(primary.port(), "postgres").await;
        admin.batch_execute("CREATE DATABASE app").await.unwrap();
        let app = connect(primary.port(), "app").await;
        app.batch_execute(
            "CREATE TABLE items (id bigint PRIMARY KEY, at timestamptz DEFAULT now())",
        )
        .await
        .unwrap();
    }
    let mut standby = add_standby(&primary, "phys_1", None).await;
    // pgcdc's host list: these two ports, whichever is primary.
    let ports = [primary.port(), standby.port()];
    let dir = temp_dir();
    let config = config(ports, &store_cluster, &dir);
    let (stop, task) = spawn(&config);
    let store =
        PgCheckpointStore::connect(store_cluster.admin().config(), PgStoreConfig::default())
            .await
            .unwrap();
    // The slot exists (streamed from now on, no snapshot): then the load.
    let p = connect(primary.port(), "app").await;
    integration_tests::eventually("the job's slot", TIMEOUT, || async {
        assert!(!task.is_finished(), "the job stopped");
        let n: i64 = p
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active",
                &[&SLOT],
            )
            .await
            .unwrap()
            .get(0);
        (n == 1).then_some(())
    })
    .await;
    drop(p);
    let writer = Writer::start(ports);
    let events_path = dir.join("events.jsonl");

    // Per failover: the checkpoint before the kill, the number of events
    // the sink held then, and the time to the first event written after it.
    let mut at_kill: Vec<(u64, usize)> = Vec::new();
    let mut times = Vec::new();
    for round in 1..=FAILOVERS {
        // Streaming and checkpointing under load, with the slot synced.
        let before = writer.next_id();
        integration_tests::eventually("the load reaching the sink", TIMEOUT, || async {
            assert!(!task.is_finished(), "the job stopped");
            events(&events_path)
                .iter()
                .any(|e| e.id > before + 200)
                .then_some(())
        })
        .await;
        let checkpoint = newest_checkpoint(&store).await;
        await_slot_synced(&standby, &primary, checkpoint).await;

        let checkpoint = newest_checkpoint(&store).await;
        let held = events(&events_path).len();
        at_kill.push((checkpoint, held));
        let died = Instant::now();
        primary.kill().await.unwrap();
        let after_death = writer.next_id() + 1;
        standby.promote().await.unwrap();
        // The promoted standby inherited synchronized_standby_slots naming a
        // slot it does not have: reset it, as an operator would.
        let new_primary = connect(standby.port(), "postgres").await;
        new_primary
            .batch_execute("ALTER SYSTEM RESET synchronized_standby_slots")
            .await
            .unwrap();
        new_primary
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .unwrap();
        integration_tests::eventually("an event written on the new primary", TIMEOUT, || async {
            assert!(!task.is_finished(), "the job stopped");
            events(&events_path)
                .iter()
                .any(|e| e.id >= after_death)
                .then_some(())
        })
        .await;
        let took = died.elapsed();
        println!("failover {round}: {took:?} from the primary's death to the first event from the new primary");
        times.push(took);

        // The dead primary's place: a new standby of the new primary.
        let dead_port = primary.port();
        drop(primary);
        primary = standby;
        standby = add_standby(&primary, &format!("phys_{}", round + 1), Some(dead_port)).await;
    }

    // Let the load run into one more checkpoint, then stop.
    let acked = writer.stop().await;
    let app = connect(primary.port(), "app").await;
    let written: BTreeSet<i64> = app
        .query("SELECT id FROM items", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let last = *written.iter().next_back().unwrap();
    integration_tests::eventually("the last row in the sink", TIMEOUT, || async {
        events(&events_path)
            .iter()
            .any(|e| e.id >= last)
            .then_some(())
    })
    .await;
    let _ = stop.send(());
    let progress = tokio::time::timeout(TIMEOUT, task)
        .await
        .expect("the job did not stop")
        .unwrap()
        .expect("the job failed");

    let all = events(&events_path);
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    let mut duplicates = Vec::new();
    for (i, e) in all.iter().enumerate() {
        let n = seen.entry(e.id).or_default();
        *n += 1;
        if *n > 1 {
            duplicates.push((i, *e));
        }
    }
    let delivered: BTreeSet<i64> = seen.keys().copied().collect();
    let lost: Vec<_> = written.difference(&delivered).collect();
    let phantoms: Vec<_> = delivered.difference(&written).collect();
    // Acknowledged commits the new primaries lack: the physical standby is
    // asynchronous, so the last commits before a kill may not have reached
    // it. They never reached pgcdc either (synchronized_standby_slots).
    let not_replicated = acked.difference(&written).count();
    // A duplicate is delivered again only after a failover, and only when
    // its transaction comes after the checkpoint taken before that kill.
    for (line, e) in &duplicates {
        let (checkpoint, _) = at_kill
            .iter()
            .rev()
            .find(|(_, held)| held <= line)
            .copied()
            .unwrap_or_else(|| panic!("id {} delivered twice before any failover", e.id));
        assert!(
            e.commit_lsn >= checkpoint,
            "id {} delivered again though the checkpoint at {checkpoint} covers it (commit {})",
            e.id,
            e.commit_lsn
        );
    }
    println!(
        "failover: {FAILOVERS} failovers, times {times:?}; {} rows written ({} acknowledged commits \
         the standby never received), {} events, {} lost, {} duplicates (all after the checkpoint), \
         {} phantoms; {} reconnects",
        written.len(),
        not_replicated,
        all.len(),
        lost.len(),
        duplicates.len(),
        phantoms.len(),
        progress.reconnects
    );
    assert!(lost.is_empty(), "rows never delivered: {lost:?}");
    assert!(
        phantoms.is_empty(),
        "delivered rows the new primary lacks: {phantoms:?}"
    );
    assert!(progress.reconnects >= FAILOVERS as u32, "{progress:?}");
    drop(standby);
    drop(primary);
    drop(store_cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[source]` settings for `ports`, as the library takes them.
fn source_options(ports: &[u16], slot: &str) -> cdc_runtime::source::SourceOptions {
    use cdc_runtime::replication::ReplicationConfig;
    use cdc_runtime::source::{Capture, SourceOptions, TableRef};
    let replication = ReplicationConfig::new("postgres")
        .hosts(ports.iter().map(|p| ("127.0.0.1", *p)))
        .dbname("app")
        .sslmode(cdc_runtime::replication::SslMode::Disable);
    SourceOptions::new(
        replication,
        slot,
        format!("{slot}_pub"),
        Capture::Tables(vec![TableRef::new("public", "items")]),
    )
}

async fn failover(client: &Client, slot: &str) -> bool {
    client
        .query_one(
            "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0)
}

async fn in_recovery(conn: &mut cdc_runtime::replication::ReplicationConnection) -> String {
    let r = conn
        .simple_query("SELECT pg_is_in_recovery()::text AS r")
        .await
        .unwrap();
    r[0].get(0, "r").unwrap().to_owned()
}

/// Every kind of source connection skips a standby for the primary, the
/// standby's refusal is transient, and the failover slot is created, or an
/// existing slot is made one.
#[tokio::test]
async fn connections_go_to_the_read_write_host_and_slots_fail_over() {
    use cdc_runtime::replication::{ReplicationConnection, TargetSessionAttrs};
    use cdc_runtime::setup::{prepare, SetupMode};
    use cdc_runtime::tls_connect::PgClientSettings;
    init_logging();
    let primary = LocalCluster::create(pg18()).await.unwrap();
    {
        let admin = connect(primary.port(), "postgres").await;
        admin.batch_execute("CREATE DATABASE app").await.unwrap();
        let app = connect(primary.port(), "app").await;
        app.batch_execute("CREATE TABLE items (id bigint PRIMARY KEY)")
            .await
            .unwrap();
    }
    let standby = primary.create_standby(pg18(), "phys_rw").await.unwrap();

    // Standby first: skipped (in_hot_standby), for replication and SQL sessions.
    let both = source_options(&[standby.port(), primary.port()], "rw_slot");
    let mut conn = ReplicationConnection::connect(&both.replication)
        .await
        .unwrap();
    assert_eq!(in_recovery(&mut conn).await, "false");
    let settings = PgClientSettings::new(&both.replication).unwrap();
    let client = settings.connect("test").await.unwrap();
    let row = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap();
    assert!(!row.get::<_, bool>(0));

    // The standby alone: any server is fine by default, read-write refuses it.
    let alone = source_options(&[standby.port()], "rw_slot").replication;
    let mut on_standby = ReplicationConnection::connect(&alone).await.unwrap();
    assert_eq!(in_recovery(&mut on_standby).await, "true");
    let err = ReplicationConnection::connect(
        &alone
            .clone()
            .target_session_attrs(TargetSessionAttrs::ReadWrite),
    )
    .await
    .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains("hot standby"), "{err}");
    // Several hosts and none usable: every host's failure, transient.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let none = source_options(&[dead, standby.port()], "rw_slot").replication;
    let err = ReplicationConnection::connect(&none).await.unwrap_err();
    let text = err.to_string();
    assert!(err.is_transient(), "{text}");
    assert!(text.contains("no usable server among 2 hosts"), "{text}");
    assert!(
        text.contains(&format!("[1] 127.0.0.1 port {dead}")),
        "{text}"
    );
    assert!(text.contains("hot standby"), "{text}");

    // A new slot is a failover slot by default on 18.
    let report = prepare(&mut conn, &both, SetupMode::Create).await.unwrap();
    assert!(report.created_slot);
    assert!(failover(&client, "rw_slot").await);
    // An existing slot without failover is altered.
    client
        .batch_execute("SELECT pg_create_logical_replication_slot('plain_slot', 'pgoutput')")
        .await
        .unwrap();
    assert!(!failover(&client, "plain_slot").await);
    let plain = source_options(&[standby.port(), primary.port()], "plain_slot");
    prepare(&mut conn, &plain, SetupMode::Create).await.unwrap();
    assert!(failover(&client, "plain_slot").await);
    // Off when asked.
    let mut off = source_options(&[primary.port()], "off_slot");
    off.failover_slot = Some(false);
    prepare(&mut conn, &off, SetupMode::Create).await.unwrap();
    assert!(!failover(&client, "off_slot").await);
}

/// Below PostgreSQL 17 the option is off by default, and on it is an error
/// that names the version.
#[tokio::test]
async fn failover_slot_on_an_older_server_is_a_clear_error() {
    use cdc_runtime::replication::ReplicationConnection;
    use cdc_runtime::setup::{prepare, SetupError, SetupMode};
    let cluster = LocalCluster::create(ClusterOptions::new().major(15))
        .await
        .unwrap();
    {
        let admin = connect(cluster.port(), "postgres").await;
        admin.batch_execute("CREATE DATABASE app").await.unwrap();
        let app = connect(cluster.port(), "app").await;
        app.batch_execute("CREATE TABLE items (id bigint PRIMARY KEY)")
            .await
            .unwrap();
    }
    let mut source = source_options(&[cluster.port()], "old_slot");
    let mut conn = ReplicationConnection::connect(&source.replication)
        .await
        .unwrap();
    source.failover_slot = Some(true);
    let err = prepare(&mut conn, &source, SetupMode::Create)
        .await
        .unwrap_err();
    assert!(
        matches!(err, SetupError::FailoverSlotNeedsPg17(v) if v / 10_000 == 15),
        "{err}"
    );
    assert!(err.to_string().contains("PostgreSQL 17"), "{err}");
    source.failover_slot = None;
    let report = prepare(&mut conn, &source, SetupMode::Create)
        .await
        .unwrap();
    assert!(report.created_slot);
}
