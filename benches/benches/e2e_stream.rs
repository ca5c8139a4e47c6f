//! End to end streaming: pgcdc against `pg_recvlogical`, in the same run, on the same WAL.
//!
//! Starts its own throwaway server through the test harness (autovacuum off, so nothing but
//! the workload writes WAL). For each workload it creates a publication and a pgoutput slot,
//! then writes the workload and records the end LSN (`pg_current_wal_insert_lsn()` inside
//! the last transaction, before its COMMIT, so that only the last commit reaches it). Every
//! run streams from a fresh `pg_copy_logical_replication_slot` copy of that slot, so every
//! contender decodes the same WAL from the same point, and stops once it reaches the end
//! LSN:
//!
//! * `pg_recvlogical --start --endpos <end> -f /dev/null` (pgoutput, `proto_version=1`);
//! * pgcdc (the `cdc-runtime` pipeline, default options, no checkpoints) into the null sink
//!   (decoding to change events only), into the null sink encoding Debezium JSON, into the
//!   file sink writing Debezium JSON lines, and into the NATS JetStream sink publishing
//!   Debezium JSON; for the one-transaction workload also with pgoutput `proto_version` 1
//!   (the server holds the transaction until it commits) next to the default (2 on
//!   PostgreSQL 14+: the server streams it while in progress and pgcdc holds, or spills,
//!   it until it commits).
//!
//! The NATS sink is opened from a `[[sinks]]` entry of a `pgcdc.toml` text, as `pgcdc run`
//! opens it (`type = "nats"`, one subject per table, `[sinks.stream]` with file storage and
//! one replica, created by the sink). Each NATS run gets a `nats-server -js -a 127.0.0.1
//! -p <free port> -sd <fresh directory>` of its own (`nats-server` on the `PATH` or in
//! `/usr/sbin`, or `PGCDC_E2E_NATS_SERVER`) and a fresh stream; afterwards the bench reads
//! the server's CPU (user + system, `/proc/<pid>/stat`) and peak RSS (`VmHWM`), checks
//! that the stream holds exactly one message per row (the run fails otherwise), deletes
//! the stream and stops the server. `PGCDC_E2E_NATS_INFLIGHT` sets the sink's
//! `max_in_flight` (default [`NATS_IN_FLIGHT`]); `PGCDC_E2E_NATS_ARGS` adds arguments to
//! the server's command line (e.g. `--profile 6060` for Go's pprof endpoint). The table
//! gives the NATS rows' events/s against the file sink's on the same protocol.
//!
//! Every contender is a child process under `/usr/bin/time`, so wall time, client CPU
//! (user + system) and peak RSS are measured the same way; pgcdc's child is this bench
//! binary again, with `PGCDC_E2E_CONTENDER` set. The server's side is counted too: the
//! "postgres CPU s" column is the CPU of the backends that served the contender (its
//! walsender, and pgcdc's catalog queries), read from the postmaster once they have
//! exited (see `Postmaster`). Wall time counts from spawn to exit
//! (connecting, streaming, and for the file sink the final fsync, for the NATS sink the
//! last acknowledgement). Each contender runs `PGCDC_BENCH_REPS` times (default 3), the
//! order reversed on every other repetition; medians are printed as a markdown table.
//!
//! `cargo bench -p pgcdc-benches --bench e2e_stream`. Sizes: `PGCDC_E2E_W1_ROWS` (default
//! 1,000,000 rows in one transaction), `PGCDC_E2E_W2_TXNS` and `PGCDC_E2E_W2_ROWS_PER_TXN`
//! (default 20,000 transactions of 10 rows). The same two on a realistic row, `w1r` and
//! `w2r`: `(id bigint PRIMARY KEY, k int, v text /*100 chars*/, ts timestamptz, n
//! numeric)`. W3: `PGCDC_E2E_W3_ROWS` (default 1,000,000) UPDATEs of every column but
//! the key of ~1 KB rows (the same columns, 960 characters of text) in
//! `PGCDC_E2E_W3_TXNS` (default 100) transactions, each updating the same preloaded
//! rows. The pgcdc child runs on one tokio worker
//! thread (`PGCDC_E2E_WORKERS` to change); `PGCDC_E2E_READ_PAUSE_US` overrides
//! `PipelineOptions::read_pause`, `PGCDC_E2E_BATCH` `batch_size`,
//! `PGCDC_E2E_BATCH_BYTES` `batch_bytes`, `PGCDC_E2E_MIN_FLUSH_US` `min_flush_interval` and `PGCDC_E2E_CHANNEL`
//! `channel_capacity` (for experiments). For instruction counts:
//! `PGCDC_E2E_ONLY` (comma-separated labels: `recvlogical`, `null`, `debezium`, `file`,
//! `filemetrics` (the file sink with metrics kept and encoded every second, as a scrape),
//! `filepc` (the file sink through the page cache: `direct_io = false`),
//! `nats`, `null1`, `file1`, `nats1` for proto 1, and `files`, `filens` for the file sink
//! on the newest protocol with in-progress streaming on / off) runs only those contenders,
//! `PGCDC_E2E_WORKLOADS` (comma-separated: `w1`, `w2`, `w1r`, `w2r`, `w3`) runs only those
//! workloads, and `PGCDC_E2E_WRAP` (a command line, e.g. `valgrind
//! --tool=callgrind --callgrind-out-file=/tmp/cg.%p`) runs each pgcdc child under that
//! command.
//!
//! Every contender connects over TCP to 127.0.0.1; with `PGCDC_E2E_UNIX=1`, every one
//! connects through the server's Unix-domain socket instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pgcdc_benches::{clock_ticks, median, uptime};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cdc_core::Lsn;
use cdc_runtime::encoding::{DebeziumOptions, JsonEncoder, JsonFormat};
use cdc_runtime::pipeline::{Pipeline, PipelineOptions};
use cdc_runtime::replication::ReplicationConfig;
use cdc_runtime::sinks::{FileSink, FileSinkOptions, NullSink, Sink};
use integration_tests::{ClusterOptions, TestPostgres};
use tokio_postgres::Client;

/// The pgcdc binary's allocator: the system's, or mimalloc with the
/// `mimalloc` feature (`cargo bench -p pgcdc-benches --features mimalloc`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Set in the child: which pgcdc sink to run (`null`, `debezium`, `file`, `nats`).
const CHILD_ENV: &str = "PGCDC_E2E_CONTENDER";
const TIME: &str = "/usr/bin/time";
/// A single run taking longer than this is a failure.
const RUN_TIMEOUT: Duration = Duration::from_secs(900);
/// The NATS contender's subject prefix (its stream takes `e2e.>`).
const NATS_PREFIX: &str = "e2e";
/// The NATS contender's `max_in_flight` unless `PGCDC_E2E_NATS_INFLIGHT` sets it. On the
/// 2-core machine with a local server, 256 to 16,384 streamed equally fast within the
/// noise (64 was slower); 1,024 used slightly less client CPU than 4,096 and 16,384.
const NATS_IN_FLIGHT: usize = 1024;

fn nats_in_flight() -> usize {
    env_usize("PGCDC_E2E_NATS_INFLIGHT", NATS_IN_FLIGHT)
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn child_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

// ---------------------------------------------------------------------------------------
// The pgcdc contender (child process).

/// Streams the slot into the requested sink until `received` or `confirmed` reaches the
/// end LSN, then shuts the pipeline down (flushing the sink) and prints the event count.
async fn pgcdc_contender(kind: &str) {
    let port: u16 = child_env("PGCDC_E2E_PORT").parse().unwrap();
    let end: Lsn = child_env("PGCDC_E2E_END").parse().unwrap();
    let replication = ReplicationConfig::new("postgres")
        .host(child_env("PGCDC_E2E_HOST"))
        .port(port)
        .dbname(child_env("PGCDC_E2E_DB"));
    let mut options = PipelineOptions::new(
        replication,
        child_env("PGCDC_E2E_SLOT"),
        child_env("PGCDC_E2E_PUB"),
    );
    options.proto_version = std::env::var("PGCDC_E2E_PROTO")
        .ok()
        .map(|v| v.parse().unwrap());
    if let Ok(v) = std::env::var("PGCDC_E2E_STREAMING") {
        options.stream_in_progress = v == "on";
    }
    // Experiments only: the read pause (see `PipelineOptions::read_pause`).
    if let Some(us) = std::env::var("PGCDC_E2E_READ_PAUSE_US")
        .ok()
        .map(|v| v.parse().unwrap())
    {
        options.read_pause = Duration::from_micros(us);
    }
    // Experiments only: batch size and batches queued per sink.
    if let Some(n) = std::env::var("PGCDC_E2E_BATCH")
        .ok()
        .map(|v| v.parse().unwrap())
    {
        options.batch_size = n;
    }
    if let Some(n) = std::env::var("PGCDC_E2E_BATCH_BYTES")
        .ok()
        .map(|v| v.parse().unwrap())
    {
        options.batch_bytes = n;
    }
    if let Some(n) = std::env::var("PGCDC_E2E_MIN_FLUSH_US")
        .ok()
        .map(|v| v.parse().unwrap())
    {
        options.min_flush_interval = Duration::from_micros(n);
    }
    if let Some(n) = std::env::var("PGCDC_E2E_CHANNEL")
        .ok()
        .map(|v| v.parse().unwrap())
    {
        options.channel_capacity = n;
    }
    // Only matters if the end LSN is not a commit's (see `stop_condition`).
    options.status_interval = Duration::from_secs(1);
    let work = PathBuf::from(child_env("PGCDC_E2E_WORK"));
    options.spill_dir = work.clone();
    let debezium = || JsonEncoder::new(JsonFormat::Debezium(DebeziumOptions::default()));
    // `filemetrics`: the file sink with the metrics kept and scraped (encoded
    // as for `/metrics`) every second, as Prometheus would.
    let _scraper = (kind == "filemetrics").then(|| {
        let monitor = cdc_runtime::monitor::Monitor::new();
        options.monitor = Some(monitor.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                std::hint::black_box(monitor.metrics.encode());
            }
        })
    });
    let sink: Box<dyn Sink> = match kind {
        "null" => Box::new(NullSink::new()),
        "debezium" => Box::new(NullSink::encoding(debezium())),
        "file" | "filemetrics" | "filepc" => Box::new(
            FileSink::open(
                FileSinkOptions {
                    path: work.join("events.json"),
                    max_file_bytes: 0,
                    page_cache_bytes: cdc_runtime::sinks::DEFAULT_PAGE_CACHE_BYTES,
                    // `filepc`: through the page cache, as before direct I/O.
                    direct_io: kind != "filepc",
                },
                debezium(),
            )
            .await
            .unwrap(),
        ),
        "nats" => nats_sink().await,
        other => panic!("unknown contender {other}"),
    };
    let pipeline = Pipeline::new(options, vec![sink]);
    let mut progress = pipeline.progress();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(pipeline.run(async move {
        let _ = stopped.await;
    }));
    // The XLogData of a commit starts at the commit's end LSN, so `received` reaches the
    // end LSN with the last commit; `confirmed` covers an end LSN past the last commit
    // (reported by keepalives once idle).
    // Watched from a task on the runtime rather than from the main thread that
    // `block_on` parks: the pipeline publishes progress at every batch, and
    // waking the main thread for each would be the bench's cost, not pgcdc's.
    let watcher = tokio::spawn(async move {
        let _ = progress
            .wait_for(|p| p.received >= end || p.confirmed >= end)
            .await;
    });
    watcher.await.unwrap();
    let _ = stop.send(());
    let last = run.await.unwrap().unwrap();
    println!("{}", last.events);
}

/// The NATS JetStream sink as `pgcdc run` opens it: from a `[[sinks]]` entry of a
/// `pgcdc.toml` (Debezium JSON, one subject per table, a fresh file-storage stream of
/// one replica that the sink creates). `max_in_flight` is `PGCDC_E2E_NATS_INFLIGHT`; the
/// message ids start with the slot's name, as a job without checkpoints has them.
async fn nats_sink() -> Box<dyn Sink> {
    let text = format!(
        r#"
[source]
host = "{host}"
port = {port}
user = "postgres"
database = "{db}"
slot = "{slot}"
publication = "{publication}"
tables = ["{table}"]

[[sinks]]
type = "nats"
servers = ["{url}"]
subject = "{{prefix}}.{{schema}}.{{table}}"
prefix = "{NATS_PREFIX}"
format = "debezium"
max_in_flight = {in_flight}
job = "{slot}"

[sinks.stream]
name = "{stream}"
create = true
subjects = ["{NATS_PREFIX}.>"]
storage = "file"
replicas = 1
"#,
        host = child_env("PGCDC_E2E_HOST"),
        port = child_env("PGCDC_E2E_PORT"),
        db = child_env("PGCDC_E2E_DB"),
        slot = child_env("PGCDC_E2E_SLOT"),
        publication = child_env("PGCDC_E2E_PUB"),
        table = child_env("PGCDC_E2E_TABLE"),
        url = child_env("PGCDC_E2E_NATS_URL"),
        stream = child_env("PGCDC_E2E_NATS_STREAM"),
        in_flight = nats_in_flight(),
    );
    let config = pgcdc::config::Config::parse(&text).unwrap();
    config.check().unwrap();
    let options = config.sinks[0]
        .options(&config.debezium.options().unwrap())
        .unwrap();
    cdc_runtime::sinks::open_sink(&options, &child_env("PGCDC_E2E_SLOT"), None)
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// The parent: workloads, contenders, measurement.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Recvlogical,
    Pgcdc {
        sink: &'static str,
        proto: Option<u32>,
        /// In-progress streaming: `None` the pipeline's default.
        streaming: Option<bool>,
    },
}

impl Contender {
    /// The short name `PGCDC_E2E_ONLY` selects by.
    fn key(self) -> String {
        match self {
            Contender::Recvlogical => "recvlogical".into(),
            Contender::Pgcdc {
                sink,
                proto,
                streaming,
            } => {
                let proto = proto.map(|v| v.to_string()).unwrap_or_default();
                let streaming = match streaming {
                    None => "",
                    Some(true) => "s",
                    Some(false) => "ns",
                };
                format!("{sink}{proto}{streaming}")
            }
        }
    }

    fn is_nats(self) -> bool {
        matches!(self, Contender::Pgcdc { sink: "nats", .. })
    }

    fn label(self) -> String {
        match self {
            Contender::Recvlogical => "pg_recvlogical (proto 1, to /dev/null)".into(),
            Contender::Pgcdc {
                sink,
                proto,
                streaming,
            } => {
                let what = match sink {
                    "null" => "null sink (decode only)".to_owned(),
                    "debezium" => "null sink, Debezium JSON encoded".to_owned(),
                    "file" => "file sink, Debezium JSON".to_owned(),
                    "filemetrics" => "file sink, Debezium JSON, metrics scraped every 1 s".to_owned(),
                    "filepc" => "file sink, Debezium JSON, through the page cache (direct_io = false)".to_owned(),
                    "nats" => format!(
                        "NATS JetStream sink (file storage, 1 replica), Debezium JSON, max_in_flight {}",
                        nats_in_flight()
                    ),
                    other => other.to_owned(),
                };
                let streaming = match streaming {
                    None => "",
                    Some(true) => ", streaming on",
                    Some(false) => ", streaming off",
                };
                match proto {
                    Some(v) => format!("pgcdc {what}, proto {v}{streaming}"),
                    None => format!("pgcdc {what}, proto default{streaming}"),
                }
            }
        }
    }
}

/// One measured run.
#[derive(Debug, Clone, Copy)]
struct Sample {
    wall: f64,
    cpu: f64,
    /// The system (kernel) part of `cpu`: reads, writes and wake-ups, whose cost
    /// depends on the machine far more than the user part's does.
    sys: f64,
    peak_kb: f64,
    /// The median of the contender's resident memory sampled every 5 ms while it
    /// runs (see [`rss_kb`]): its steady level, where `peak_kb` is the high-water mark.
    steady_kb: f64,
    /// The NATS contender's server: CPU seconds and peak RSS over its life.
    server: Option<(f64, f64)>,
    /// CPU seconds of the PostgreSQL backends that served the contender (see
    /// [`Postmaster`]); `None` where they could not be counted.
    postgres: Option<f64>,
}

struct Target<'a> {
    /// 127.0.0.1, or the socket directory (`PGCDC_E2E_UNIX`).
    host: &'a str,
    port: u16,
    /// The server's postmaster, for counting its backends' CPU.
    postmaster: Option<Postmaster>,
    db: &'a str,
    publication: &'a str,
    end: Lsn,
    recvlogical: &'a Path,
    work: &'a Path,
    /// The captured table (`public.<table>`).
    table: &'a str,
}

/// Runs `cmd` under `/usr/bin/time`, waiting at most [`RUN_TIMEOUT`]; returns the sample
/// and the child's stdout.
fn measure(cmd: Command, label: &str) -> (Sample, String) {
    let stats = std::env::temp_dir().join(format!("pgcdc-e2e-time-{}", std::process::id()));
    let mut timed = Command::new(TIME);
    timed.arg("-f").arg("%e %U %S %M").arg("-o").arg(&stats);
    timed.arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    timed.stdout(std::process::Stdio::piped());
    let start = Instant::now();
    let mut child = timed.spawn().expect("spawn /usr/bin/time");
    let mut rss = Vec::new();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if let Some(kb) = rss_kb(child.id()) {
            rss.push(kb);
        }
        if start.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            panic!("{label}: no end after {RUN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let wall = start.elapsed().as_secs_f64();
    let out = child.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&stats).unwrap();
    let _ = std::fs::remove_file(&stats);
    assert!(out.status.success(), "{label} failed: {text}");
    // The last line holds the format (earlier ones: "Command exited with ..." etc.).
    let f: Vec<f64> = text
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let sample = Sample {
        wall,
        cpu: f[1] + f[2],
        sys: f[2],
        peak_kb: f[3],
        // A run too short to sample has only its peak.
        steady_kb: if rss.is_empty() { f[3] } else { median(rss) },
        server: None,
        postgres: None,
    };
    (sample, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn contender_command(c: Contender, t: &Target<'_>, slot: &str) -> Command {
    match c {
        Contender::Recvlogical => {
            let mut cmd = Command::new(t.recvlogical);
            cmd.arg("-d")
                .arg(format!(
                    "host={} port={} user=postgres dbname={}",
                    t.host, t.port, t.db
                ))
                .arg("--slot")
                .arg(slot)
                .arg("--start")
                .arg("-o")
                .arg("proto_version=1")
                .arg("-o")
                .arg(format!("publication_names={}", t.publication))
                .arg("--endpos")
                .arg(t.end.to_string())
                .arg("--no-loop")
                .arg("-f")
                .arg("/dev/null");
            cmd
        }
        Contender::Pgcdc {
            sink,
            proto,
            streaming,
        } => {
            let exe = std::env::current_exe().unwrap();
            let wrap = std::env::var("PGCDC_E2E_WRAP").unwrap_or_default();
            let mut wrap = wrap.split_whitespace();
            let mut cmd = match wrap.next() {
                Some(program) => {
                    let mut cmd = Command::new(program);
                    cmd.args(wrap).arg(exe);
                    cmd
                }
                None => Command::new(exe),
            };
            cmd.env(CHILD_ENV, sink)
                .env("PGCDC_E2E_HOST", t.host)
                .env("PGCDC_E2E_PORT", t.port.to_string())
                .env("PGCDC_E2E_DB", t.db)
                .env("PGCDC_E2E_SLOT", slot)
                .env("PGCDC_E2E_PUB", t.publication)
                .env("PGCDC_E2E_END", t.end.to_string())
                .env("PGCDC_E2E_WORK", t.work)
                .env("PGCDC_E2E_TABLE", t.table);
            match proto {
                Some(v) => cmd.env("PGCDC_E2E_PROTO", v.to_string()),
                None => cmd.env_remove("PGCDC_E2E_PROTO"),
            };
            match streaming {
                Some(on) => cmd.env("PGCDC_E2E_STREAMING", if on { "on" } else { "off" }),
                None => cmd.env_remove("PGCDC_E2E_STREAMING"),
            };
            cmd
        }
    }
}

// ---------------------------------------------------------------------------------------
// The NATS contender's server.

/// A `nats-server -js` of the bench's own, started for one NATS run with a fresh store
/// directory, so each run's server CPU, peak RSS and disk start from nothing. Killed
/// (and its directory removed) on drop.
struct NatsServer {
    child: std::process::Child,
    port: u16,
    dir: PathBuf,
}

impl NatsServer {
    fn start(dir: PathBuf) -> NatsServer {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.join("nats-server.log")).unwrap();
        let child = Command::new(nats_server_path())
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.join("store"))
            .args(
                std::env::var("PGCDC_E2E_NATS_ARGS")
                    .unwrap_or_default()
                    .split_whitespace(),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn nats-server");
        let mut server = NatsServer { child, port, dir };
        // Up once it accepts connections (JetStream is enabled before the client
        // listener opens).
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let exited = server.child.try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                let log =
                    std::fs::read_to_string(server.dir.join("nats-server.log")).unwrap_or_default();
                panic!("nats-server on port {port} did not start ({exited:?}):\n{log}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.child.id())
    }

    /// Peak resident memory so far (`VmHWM`), kB.
    fn peak_kb(&self) -> f64 {
        status_kb(self.child.id(), "VmHWM")
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `PGCDC_E2E_NATS_SERVER`, else `nats-server` on the `PATH` or in `/usr/sbin`.
fn nats_server_path() -> PathBuf {
    if let Some(path) = std::env::var_os("PGCDC_E2E_NATS_SERVER") {
        return path.into();
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join("nats-server"))
        .find(|path| path.exists())
        .expect(
            "nats-server not found: install it, set PGCDC_E2E_NATS_SERVER, \
             or leave the nats contenders out with PGCDC_E2E_ONLY",
        )
}

/// User + system CPU seconds of process `pid` (all threads), from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let f = stat_fields(pid).unwrap();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / clock_ticks()
}

/// The fields of `/proc/<pid>/stat` after the command name in parentheses: `[0]`
/// is the state (field 3), `[1]` the parent's pid, `[11]` and `[12]` utime and
/// stime, `[13]` and `[14]` the reaped children's cutime and cstime.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The local server's postmaster, through which the bench counts the CPU of the
/// backends that serve one contender (its walsender, and pgcdc's catalog
/// queries): the postmaster's children that were not there before the run, each
/// counted once it has exited and been reaped, when the kernel adds its CPU to the
/// postmaster's `cutime` and `cstime`. The server's long-lived processes
/// (checkpointer, WAL writer, the bench's own session) are not counted: they were
/// there before.
#[derive(Debug, Clone, Copy)]
struct Postmaster {
    pid: u32,
}

impl Postmaster {
    /// The postmaster of the backend serving `client` (the server is local).
    async fn of(client: &Client) -> Option<Postmaster> {
        let backend: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .ok()?
            .get(0);
        let f = stat_fields(u32::try_from(backend).ok()?)?;
        let pid: u32 = f.get(1)?.parse().ok()?;
        // A server elsewhere (another machine, a container) has no such process
        // here, or the pid is another program's.
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        name.trim()
            .starts_with("postgres")
            .then_some(Postmaster { pid })
    }

    /// The postmaster's live children.
    fn children(self) -> std::collections::HashSet<u32> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Default::default();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| {
                stat_fields(pid)
                    .is_some_and(|f| f.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(self.pid))
            })
            .collect()
    }

    /// CPU seconds of the postmaster's reaped children so far.
    fn reaped_seconds(self) -> Option<f64> {
        let f = stat_fields(self.pid)?;
        let ticks = f.get(13)?.parse::<f64>().ok()? + f.get(14)?.parse::<f64>().ok()?;
        Some(ticks / clock_ticks())
    }

    /// The CPU seconds of the children started since `before` was taken (with the
    /// reaped seconds `reaped` then), once all of them have exited; `None` if one
    /// is still running after 10 s.
    fn spent_since(self, before: &std::collections::HashSet<u32>, reaped: f64) -> Option<f64> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.children().is_subset(before) {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Some(self.reaped_seconds()? - reaped)
    }
}

/// The resident memory (`VmRSS`, kB) of the contender that `/usr/bin/time` (`time_pid`)
/// runs, once it has replaced its forked self with the contender's program (before
/// that, and after it ended, `None`).
fn rss_kb(time_pid: u32) -> Option<f64> {
    let children =
        std::fs::read_to_string(format!("/proc/{time_pid}/task/{time_pid}/children")).ok()?;
    let pid: u32 = children.split_whitespace().next()?.parse().ok()?;
    let time_exe = std::fs::read_link(format!("/proc/{time_pid}/exe")).ok()?;
    if std::fs::read_link(format!("/proc/{pid}/exe")).ok()? == time_exe {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A `/proc/<pid>/status` value in kB (`VmHWM`, `VmRSS`).
fn status_kb(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Deletes the run's stream after checking that it holds exactly one message per row
/// (panics if not); returns the bytes it held.
async fn check_stream(url: &str, stream: &str, rows: usize, label: &str) -> u64 {
    let client = async_nats::connect(url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let state = js
        .get_stream(stream)
        .await
        .unwrap_or_else(|e| panic!("{label}: stream {stream}: {e}"))
        .info()
        .await
        .unwrap()
        .state
        .clone();
    js.delete_stream(stream).await.unwrap();
    assert_eq!(
        state.messages, rows as u64,
        "{label}: stream {stream} holds {} messages for {rows} rows",
        state.messages
    );
    state.bytes
}

async fn end_lsn(client: &Client) -> Lsn {
    let row = client
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await
        .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}

struct Row {
    workload: String,
    contender: Contender,
    wall: f64,
    cpu: f64,
    peak_mb: f64,
    steady_mb: f64,
    /// The NATS contender's server: CPU seconds and peak MB.
    server: Option<(f64, f64)>,
    /// The PostgreSQL backends that served the contender: CPU seconds.
    postgres: Option<f64>,
}

/// Runs every contender `reps` times on copies of `slot`; returns the medians.
async fn compare(
    client: &Client,
    workload: &str,
    rows: usize,
    slot: &str,
    t: &Target<'_>,
    contenders: &[Contender],
    reps: usize,
) -> Vec<Row> {
    let only = std::env::var("PGCDC_E2E_ONLY").ok();
    let contenders: Vec<Contender> = contenders
        .iter()
        .copied()
        .filter(|c| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|k| k == c.key()))
        })
        .collect();
    let contenders = &contenders[..];
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); contenders.len()];
    let mut runs = 0;
    for rep in 0..reps {
        let mut order: Vec<usize> = (0..contenders.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let c = contenders[i];
            let copy = format!("{slot}_copy");
            client
                .execute(
                    "SELECT pg_copy_logical_replication_slot($1, $2)",
                    &[&slot, &copy],
                )
                .await
                .unwrap();
            let _ = std::fs::remove_dir_all(t.work);
            std::fs::create_dir_all(t.work).unwrap();
            let label = format!("{workload} / {}", c.label());
            eprintln!("{label}: rep {}", rep + 1);
            let mut cmd = contender_command(c, t, &copy);
            // A server of its own for each NATS run, with a fresh stream (the sink
            // creates it).
            let nats = c.is_nats().then(|| {
                let stream = format!("E2E_{}_{}_{runs}", t.table, std::process::id());
                let server = NatsServer::start(t.work.with_extension("nats"));
                cmd.env("PGCDC_E2E_NATS_URL", server.url())
                    .env("PGCDC_E2E_NATS_STREAM", &stream);
                (server, stream)
            });
            runs += 1;
            let backends = t
                .postmaster
                .and_then(|pm| Some((pm, pm.children(), pm.reaped_seconds()?)));
            let (mut sample, out) = tokio::task::block_in_place(|| {
                let (mut sample, out) = measure(cmd, &label);
                sample.postgres =
                    backends.and_then(|(pm, before, reaped)| pm.spent_since(&before, reaped));
                (sample, out)
            });
            if let Contender::Pgcdc { .. } = c {
                let events: usize = out.trim().parse().unwrap();
                assert_eq!(events, rows, "{label}: every row is one event");
            }
            eprintln!(
                "  {:.2} s, {:.2} s CPU ({:.2} s system), {:.0} MB peak, {:.1} MB steady; postgres {} s CPU",
                sample.wall,
                sample.cpu,
                sample.sys,
                sample.peak_kb / 1024.0,
                sample.steady_kb / 1024.0,
                sample.postgres.map_or("-".to_owned(), |s| format!("{s:.2}")),
            );
            if let Some((server, stream)) = nats {
                // Read before the checks below add their own work.
                let (cpu, peak_kb) = (server.cpu_seconds(), server.peak_kb());
                sample.server = Some((cpu, peak_kb));
                let bytes = check_stream(&server.url(), &stream, rows, &label).await;
                eprintln!(
                    "  nats-server: {cpu:.2} s CPU, {:.0} MB; stream {stream}: {rows} messages, {:.0} MB",
                    peak_kb / 1024.0,
                    bytes as f64 / 1e6
                );
            }
            samples[i].push(sample);
            client
                .execute("SELECT pg_drop_replication_slot($1)", &[&copy])
                .await
                .unwrap();
            let _ = std::fs::remove_dir_all(t.work);
        }
    }
    contenders
        .iter()
        .zip(samples)
        .map(|(&contender, s)| Row {
            workload: workload.to_owned(),
            contender,
            wall: median(s.iter().map(|x| x.wall).collect()),
            cpu: median(s.iter().map(|x| x.cpu).collect()),
            peak_mb: median(s.iter().map(|x| x.peak_kb / 1024.0).collect()),
            steady_mb: median(s.iter().map(|x| x.steady_kb / 1024.0).collect()),
            postgres: s
                .iter()
                .map(|x| x.postgres)
                .collect::<Option<Vec<f64>>>()
                .map(median),
            server: s.iter().all(|x| x.server.is_some()).then(|| {
                let server = || s.iter().filter_map(|x| x.server);
                (
                    median(server().map(|(cpu, _)| cpu).collect()),
                    median(server().map(|(_, kb)| kb / 1024.0).collect()),
                )
            }),
        })
        .collect()
}

/// A workload's row shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `(id bigint PRIMARY KEY, n int, t text)`, 30 characters of text: about 60 bytes.
    Narrow,
    /// `(id bigint PRIMARY KEY, k int, v text, ts timestamptz, n numeric)`, 100
    /// characters of text: a typical row, about 150 bytes.
    Realistic,
    /// The realistic columns with 960 characters of text: about 1 KB.
    Kilobyte,
}

impl Shape {
    fn columns(self) -> &'static str {
        match self {
            Shape::Narrow => "id bigint PRIMARY KEY, n int NOT NULL, t text NOT NULL",
            Shape::Realistic | Shape::Kilobyte => {
                "id bigint PRIMARY KEY, k int NOT NULL, v text NOT NULL, \
                 ts timestamptz NOT NULL, n numeric NOT NULL"
            }
        }
    }

    /// The `SELECT` list of row `g` (a `generate_series` value).
    fn values(self) -> &'static str {
        match self {
            Shape::Narrow => "g, g % 1000, 'row ' || lpad(g::text, 26, '0')",
            Shape::Realistic => {
                "g, g % 1000, rpad('row ' || g || ' ', 100, 'abcdefghijklmnopqrstuvwxyz'), \
                 timestamptz '2026-01-01 00:00:00+00' + g * interval '1.25 second', \
                 round(g * 3.14159, 4)"
            }
            Shape::Kilobyte => {
                "g, g % 1000, repeat(md5(g::text), 30), \
                 timestamptz '2026-01-01 00:00:00+00' + g * interval '1.25 second', \
                 round(g * 3.14159, 4)"
            }
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Shape::Narrow => "bigint, int, text 30",
            Shape::Realistic => "bigint, int, text 100, timestamptz, numeric",
            Shape::Kilobyte => "bigint, int, text 960, timestamptz, numeric; ~1 KB",
        }
    }
}

/// Creates `table` of `shape`, inserts `preload` rows (before the slot exists, so they
/// are not streamed), then the publication and the slot.
async fn prepare(client: &Client, table: &str, shape: Shape, preload: usize) -> (String, String) {
    let publication = format!("{table}_pub");
    let slot = format!("{table}_slot");
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} ({columns});
             CREATE PUBLICATION {publication} FOR TABLE {table};",
            columns = shape.columns()
        ))
        .await
        .unwrap();
    if preload > 0 {
        client
            .execute(
                &format!(
                    "INSERT INTO {table} SELECT {values} FROM generate_series(1, $1::bigint) g",
                    values = shape.values()
                ),
                &[&(preload as i64)],
            )
            .await
            .unwrap();
        // One statement each: VACUUM cannot run in the implicit transaction of a
        // multi-statement query.
        for sql in [format!("VACUUM ANALYZE {table}"), "CHECKPOINT".to_owned()] {
            client.batch_execute(&sql).await.unwrap();
        }
    }
    client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    (publication, slot)
}

/// Runs `statement` (with `$i` standing for the transaction's number) in transactions
/// `0..txns`: all but the last in one server-side loop (so the client's round trips
/// do not pace it), the last one from here, which returns the WAL insert position inside
/// it just before its COMMIT. Every contender stops once it has that position: only the
/// last commit's message starts past it. (The position after the commit may lie past
/// the last commit when the server writes WAL of its own afterwards, such as a
/// running-transactions record, and a client that has confirmed all it was sent then
/// hears of that position only from a keepalive, up to `wal_sender_timeout / 2` later.)
async fn in_transactions(client: &Client, statement: &str, txns: usize) -> Lsn {
    let last = txns.max(1) - 1;
    if last > 0 {
        client
            .batch_execute(&format!(
                "DO $$ BEGIN
                   FOR i IN 0..{before} LOOP
                     {body};
                     COMMIT;
                   END LOOP;
                 END $$",
                before = last - 1,
                body = statement.replace("$i", "i"),
            ))
            .await
            .unwrap();
    }
    client.batch_execute("BEGIN").await.unwrap();
    client
        .batch_execute(&statement.replace("$i", &last.to_string()))
        .await
        .unwrap();
    let end = end_lsn(client).await;
    client.batch_execute("COMMIT").await.unwrap();
    end
}

/// Inserts `rows` rows of `shape` into `table` in `txns` transactions; returns the end
/// position (see [`in_transactions`]).
async fn insert_rows(client: &Client, table: &str, shape: Shape, rows: usize, txns: usize) -> Lsn {
    let per_txn = rows.div_ceil(txns.max(1));
    let statement = format!(
        "INSERT INTO {table} SELECT {values}
         FROM generate_series($i::bigint * {per_txn} + 1, least(($i + 1)::bigint * {per_txn}, {rows})) g",
        values = shape.values(),
    );
    in_transactions(client, &statement, txns).await
}

/// Updates every column but the key of `rows` preloaded rows in `txns` transactions
/// (rows `1..=rows/txns` in each, so each transaction changes the same rows again);
/// returns the end position (see [`in_transactions`]).
async fn update_rows(
    client: &Client,
    table: &str,
    rows: usize,
    txns: usize,
    preloaded: usize,
) -> Lsn {
    let per_txn = rows.div_ceil(txns.max(1)).min(preloaded);
    let statement = format!(
        "UPDATE {table} SET k = k + 1, v = repeat(md5((id + $i + 1)::text), 30),
           ts = ts + interval '1 second', n = n + 0.5
         WHERE id <= {per_txn}"
    );
    in_transactions(client, &statement, txns).await
}

/// One workload of the bench.
struct Workload {
    /// `PGCDC_E2E_WORKLOADS` selects by this (`w1`, `w2`, `w1r`, `w2r`, `w3`).
    key: &'static str,
    name: String,
    shape: Shape,
    /// Rows in the table before the slot is created.
    preload: usize,
    /// The events it streams (one per inserted or updated row).
    events: usize,
    /// Inserts (`false`) or updates (`true`) of `events` rows in `txns` transactions.
    updates: bool,
    txns: usize,
    contenders: Vec<Contender>,
}

fn recvlogical_path(major: u32) -> PathBuf {
    let path = PathBuf::from(format!("/usr/lib/postgresql/{major}/bin/pg_recvlogical"));
    assert!(path.exists(), "{} not found", path.display());
    path
}

async fn run() {
    assert!(
        Path::new(TIME).exists(),
        "{TIME} is needed to measure the contenders"
    );
    let reps = env_usize("PGCDC_BENCH_REPS", 3).max(1);
    let w1_rows = env_usize("PGCDC_E2E_W1_ROWS", 1_000_000);
    let w2_txns = env_usize("PGCDC_E2E_W2_TXNS", 20_000);
    let w2_per_txn = env_usize("PGCDC_E2E_W2_ROWS_PER_TXN", 10);
    let w2_rows = w2_txns * w2_per_txn;
    let w3_rows = env_usize("PGCDC_E2E_W3_ROWS", 1_000_000);
    let w3_txns = env_usize("PGCDC_E2E_W3_TXNS", 100).max(1);
    let selected = std::env::var("PGCDC_E2E_WORKLOADS").ok();
    let began = Instant::now();
    eprintln!("load before: {}", uptime());

    let pgcdc = |sink, proto| Contender::Pgcdc {
        sink,
        proto,
        streaming: None,
    };
    // The newest protocol with in-progress streaming set either way.
    let streaming = |sink, on| Contender::Pgcdc {
        sink,
        proto: None,
        streaming: Some(on),
    };
    let big_txn = vec![
        Contender::Recvlogical,
        pgcdc("null", None),
        pgcdc("debezium", None),
        pgcdc("file", None),
        pgcdc("nats", None),
        pgcdc("null", Some(1)),
        pgcdc("file", Some(1)),
        pgcdc("nats", Some(1)),
        streaming("file", true),
        streaming("file", false),
    ];
    let small_txns = vec![
        Contender::Recvlogical,
        pgcdc("null", None),
        pgcdc("debezium", None),
        pgcdc("file", None),
        pgcdc("filemetrics", None),
        pgcdc("nats", None),
    ];
    // The realistic shapes: the peer, decoding alone, and the file sink on both
    // protocols (which one the default should be is measured here).
    let realistic = vec![
        Contender::Recvlogical,
        pgcdc("null", None),
        pgcdc("file", None),
        pgcdc("filepc", None),
        pgcdc("null", Some(1)),
        pgcdc("file", Some(1)),
        streaming("file", true),
        streaming("file", false),
    ];
    let per_txn = w3_rows.div_ceil(w3_txns);
    let workloads = [
        Workload {
            key: "w1",
            name: format!("W1: {w1_rows} rows, 1 txn"),
            shape: Shape::Narrow,
            preload: 0,
            events: w1_rows,
            updates: false,
            txns: 1,
            contenders: big_txn,
        },
        Workload {
            key: "w2",
            name: format!("W2: {w2_rows} rows, {w2_txns} txns"),
            shape: Shape::Narrow,
            preload: 0,
            events: w2_rows,
            updates: false,
            txns: w2_txns,
            contenders: small_txns,
        },
        Workload {
            key: "w1r",
            name: format!("W1 realistic: {w1_rows} rows, 1 txn"),
            shape: Shape::Realistic,
            preload: 0,
            events: w1_rows,
            updates: false,
            txns: 1,
            contenders: realistic.clone(),
        },
        Workload {
            key: "w2r",
            name: format!("W2 realistic: {w2_rows} rows, {w2_txns} txns"),
            shape: Shape::Realistic,
            preload: 0,
            events: w2_rows,
            updates: false,
            txns: w2_txns,
            contenders: realistic.clone(),
        },
        Workload {
            key: "w3",
            name: format!(
                "W3: {} UPDATEs of ~1 KB rows, {w3_txns} txns",
                per_txn * w3_txns
            ),
            shape: Shape::Kilobyte,
            preload: per_txn,
            events: per_txn * w3_txns,
            updates: true,
            txns: w3_txns,
            contenders: realistic,
        },
    ];

    let cluster = TestPostgres::dedicated(ClusterOptions::new().setting("autovacuum", "off"))
        .await
        .unwrap();
    let recvlogical = recvlogical_path(cluster.major_version());
    let db = cluster.create_database().await.unwrap();
    let client = db.connect().await.unwrap();
    let postmaster = Postmaster::of(&client).await;
    let work = std::env::temp_dir().join(format!("pgcdc-e2e-{}", std::process::id()));
    let host = match std::env::var("PGCDC_E2E_UNIX").as_deref() {
        Ok("1") => db
            .connection_info()
            .socket_dir()
            .expect("the cluster listens on a Unix-domain socket")
            .display()
            .to_string(),
        _ => "127.0.0.1".to_owned(),
    };
    let mut table = Vec::new();
    let mut ran = Vec::new();
    for w in &workloads {
        if selected
            .as_deref()
            .is_some_and(|s| !s.split(',').any(|k| k == w.key))
        {
            continue;
        }
        let (publication, slot) = prepare(&client, w.key, w.shape, w.preload).await;
        eprintln!("{}: writing ({})...", w.name, w.shape.describe());
        let end = if w.updates {
            update_rows(&client, w.key, w.events, w.txns, w.preload).await
        } else {
            insert_rows(&client, w.key, w.shape, w.events, w.txns).await
        };
        let target = Target {
            host: &host,
            port: cluster.port(),
            postmaster,
            db: db.name(),
            publication: &publication,
            end,
            recvlogical: &recvlogical,
            work: &work,
            table: w.key,
        };
        table.extend(
            compare(
                &client,
                &w.name,
                w.events,
                &slot,
                &target,
                &w.contenders,
                reps,
            )
            .await,
        );
        client
            .batch_execute(&format!(
                "SELECT pg_drop_replication_slot('{slot}'); DROP TABLE {table} CASCADE; \
                 DROP PUBLICATION {publication}; CHECKPOINT",
                table = w.key
            ))
            .await
            .unwrap();
        ran.push(w);
    }

    let load = uptime();
    println!();
    println!("| workload | row | contender | events/s | vs pg_recvlogical | vs file sink | client CPU s | vs pg_recvlogical | peak MB | steady MB | postgres CPU s | nats-server CPU s | nats-server peak MB |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for w in ran {
        let ours: Vec<&Row> = table.iter().filter(|r| r.workload == w.name).collect();
        let base = ours.iter().find(|r| r.contender == Contender::Recvlogical);
        // Without pg_recvlogical in the run (`PGCDC_E2E_ONLY`) there are no ratios.
        let ratio = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.2}x"));
        let either =
            |x: Option<f64>, digits: usize| x.map_or("-".to_owned(), |x| format!("{x:.digits$}"));
        for r in &ours {
            // The NATS sink against the file sink on the same protocol.
            let file = match r.contender {
                Contender::Pgcdc {
                    sink: "nats",
                    proto,
                    streaming,
                } => ours.iter().find(|f| {
                    f.contender
                        == Contender::Pgcdc {
                            sink: "file",
                            proto,
                            streaming,
                        }
                }),
                _ => None,
            };
            println!(
                "| {} | {} | {} | {:.0} | {} | {} | {:.2} | {} | {:.0} | {:.1} | {} | {} | {} |",
                r.workload,
                w.shape.describe(),
                r.contender.label(),
                w.events as f64 / r.wall,
                ratio(base.map(|b| b.wall / r.wall)),
                ratio(file.map(|f| f.wall / r.wall)),
                r.cpu,
                ratio(base.map(|b| r.cpu / b.cpu)),
                r.peak_mb,
                r.steady_mb,
                either(r.postgres, 2),
                either(r.server.map(|(cpu, _)| cpu), 2),
                either(r.server.map(|(_, mb)| mb), 0),
            );
        }
    }
    println!();
    println!("medians of {reps}; load after: {load}");
    println!("bench took {:.0} s", began.elapsed().as_secs_f64());
}

fn main() {
    // As `pgcdc` does (the children are this binary again).
    pgcdc::allocator::tune();
    let child = std::env::var(CHILD_ENV).ok();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if child.is_some() {
        // The pgcdc child runs its tasks on one worker thread (as
        // `TOKIO_WORKER_THREADS=1 pgcdc run` does): the source task and the
        // sink task then hand batches over without waking another thread
        // each time, which measured 20-50% less client CPU on the 2-core
        // machine. `PGCDC_E2E_WORKERS` overrides it.
        builder.worker_threads(env_usize("PGCDC_E2E_WORKERS", 1).max(1));
    }
    let rt = builder.enable_all().build().unwrap();
    match child {
        Some(kind) => rt.block_on(pgcdc_contender(&kind)),
        None => rt.block_on(run()),
    }
}
