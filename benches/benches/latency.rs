//! Commit → sink latency of a real job, at a steady rate of single-row transactions.
//!
//! Starts its own throwaway server through the test harness (autovacuum off; the
//! harness runs it with `fsync=off`, which only speeds up the server's commits). For
//! every run it creates a fresh table and starts pgcdc as a child process (this bench
//! binary again, with `PGCDC_LATENCY_CONFIG` set to a `pgcdc.toml`), which runs
//! [`pgcdc::run`] as `pgcdc run` does: the configuration text parsed by
//! [`pgcdc::config::Config`], the runtime threads it says (`[pipeline] worker_threads`
//! unset, so `TOKIO_WORKER_THREADS` or min(cores, 2)), and its allocator (see `GLOBAL`). The job
//! creates its slot and publication, takes the (empty) initial snapshot, writes plain
//! JSON lines to a `file` sink (fsynced at each flush) and saves a checkpoint every
//! second (`[checkpoint] interval_ms = 1000`) into the source database.
//!
//! Once a warm-up row has come through, a writer thread in the parent commits single-row
//! `INSERT`s (autocommit: one transaction each) at a fixed rate, paced on absolute
//! deadlines (`start + i / rate`, so a slow commit does not shift the rest; a writer
//! behind schedule sends at once), each row carrying its id. A tailer thread reads the
//! sink's file every `PGCDC_LATENCY_POLL_US` (default 200 µs); when a read brings in
//! complete lines it calls `fdatasync` on the file itself (returning once the lines are
//! on disk, whether pgcdc's own fsync already did it or is still running), then takes
//! the time. Per row, latency = that time − the transaction's commit timestamp from its
//! line (`commit_time`, the server's commit time in microseconds; same host, same clock).
//! So the figure covers decoding in the server, pgcdc, the file write and fsync, and at
//! most one poll interval plus the tailer's fsync call. The time `INSERT` returned to
//! the writer is recorded too; latency from it is shown beside (p50/p99).
//!
//! pgcdc's CPU (user + system, from `/proc/<pid>/stat`) is taken over the measured
//! window (first row written to last row seen), its peak RSS from `VmHWM` in
//! `/proc/<pid>/status` at the end of the run (whole life: start-up, snapshot,
//! checkpoints). Every (shape, rate) runs `PGCDC_BENCH_REPS` times (default 3, a fresh
//! table and child each); medians are printed as a markdown table.
//!
//! Row shapes: `wide` = `bigint` id, `timestamptz`, `numeric(12,2)`, 100 characters of
//! `text`; `narrow` = `int` id and 8 characters of `text`.
//!
//! `cargo bench -p pgcdc-benches --bench latency`. `PGCDC_LATENCY_SECS` (default 20 s
//! per run), `PGCDC_LATENCY_RATES` (default `200,2000` transactions/s),
//! `PGCDC_LATENCY_SHAPES` (default `wide,narrow`), `PGCDC_BENCH_REPS`,
//! `PGCDC_LATENCY_POLL_US`; `PGCDC_BENCH_LOG` (a `RUST_LOG`-style filter) logs the
//! child's pipeline on its stderr, a file in the run's directory, which
//! `PGCDC_LATENCY_KEEP=1` keeps (with the sink's output and the configuration).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pgcdc_benches::{clock_ticks, median, uptime};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use integration_tests::{ClusterOptions, TestDatabase, TestPostgres};

/// The pgcdc binary's allocator: the system's, or mimalloc with the
/// `mimalloc` feature (`cargo bench -p pgcdc-benches --features mimalloc`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Set in the child: the path of its `pgcdc.toml`.
const CHILD_ENV: &str = "PGCDC_LATENCY_CONFIG";
/// Waiting longer than this for the warm-up row, the last row or the child's exit fails.
const WAIT: Duration = Duration::from_secs(120);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

// ---------------------------------------------------------------------------------------
// The child: pgcdc.

/// Runs the job of the configuration file until stdin closes, as `pgcdc run` does until
/// SIGTERM.
fn child(config_path: &str) {
    if let Ok(filter) = std::env::var("PGCDC_BENCH_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
    let text = std::fs::read_to_string(config_path).unwrap();
    let config = pgcdc::config::Config::parse(&text).unwrap();
    let tokio_env = std::env::var("TOKIO_WORKER_THREADS").ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.pipeline.runtime_threads(tokio_env.as_deref()))
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            let _ = stop.send(());
        });
        pgcdc::run(&config, &pgcdc::RunOptions::default(), async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
}

// ---------------------------------------------------------------------------------------
// The parent.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Wide,
    Narrow,
}

impl Shape {
    fn key(self) -> &'static str {
        match self {
            Shape::Wide => "wide",
            Shape::Narrow => "narrow",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Shape::Wide => "wide (bigint, timestamptz, numeric(12,2), text 100)",
            Shape::Narrow => "narrow (int, text 8)",
        }
    }

    fn create(self, table: &str) -> String {
        match self {
            Shape::Wide => format!(
                "CREATE TABLE {table} (id bigint PRIMARY KEY, created timestamptz NOT NULL,
                 amount numeric(12,2) NOT NULL, note text NOT NULL)"
            ),
            Shape::Narrow => format!("CREATE TABLE {table} (id int PRIMARY KEY, t text NOT NULL)"),
        }
    }

    /// One row of id `$1` (a bigint parameter).
    fn insert(self, table: &str) -> String {
        match self {
            Shape::Wide => format!(
                "INSERT INTO {table} VALUES ($1::bigint, now(), ($1::bigint % 1000000) / 100.0,
                 lpad($1::bigint::text, 100, 'lorem ipsum dolor sit amet '))"
            ),
            Shape::Narrow => {
                format!(
                    "INSERT INTO {table} VALUES ($1::bigint::int, lpad($1::bigint::text, 8, 'x'))"
                )
            }
        }
    }
}

/// One row's line as the tailer saw it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    id: i64,
    commit_us: Option<i64>,
    seen_us: i64,
}

/// Microseconds since the Unix epoch of `2026-12-01T20:47:28.123456+00:00` (the plain
/// format's `commit_time`; the fraction may be shorter or absent, the offset is UTC).
fn parse_commit_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut micros = 0i64;
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let mut scale = 100_000;
        while let Some(c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            micros += i64::from(c - b'0') * scale;
            scale /= 10;
            i += 1;
        }
    }
    if s.get(i..)? != "+00:00" && s.get(i..)? != "Z" {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec) * 1_000_000) + micros)
}

/// The text after `key` up to the next `end` byte.
fn field<'a>(line: &'a str, key: &str, end: u8) -> Option<&'a str> {
    let start = line.find(key)? + key.len();
    let rest = &line[start..];
    let len = rest.bytes().position(|c| c == end)?;
    Some(&rest[..len])
}

fn parse_line(line: &str, seen_us: i64) -> Option<Seen> {
    let id: i64 = field(line, "\"after\":{\"id\":", b',')?.parse().ok()?;
    let commit_us = field(line, "\"commit_time\":\"", b'"').and_then(parse_commit_time);
    Some(Seen {
        id,
        commit_us,
        seen_us,
    })
}

/// Follows the sink's numbered files (`<base>.000001`, …), recording every line once it
/// is durable, until `stop`.
fn tail(base: PathBuf, poll: Duration, seen: Arc<Mutex<Vec<Seen>>>, stop: Arc<AtomicBool>) {
    let file_name = |seq: u32| {
        let mut name = base.clone().into_os_string();
        name.push(format!(".{seq:06}"));
        PathBuf::from(name)
    };
    let mut seq = 1;
    let mut file: Option<std::fs::File> = None;
    let mut buf = vec![0u8; 1 << 20];
    let mut partial: Vec<u8> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let Some(f) = file.as_mut() else {
            file = std::fs::File::open(file_name(seq)).ok();
            if file.is_none() {
                std::thread::sleep(poll);
            }
            continue;
        };
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            // Drained: go on with the next file once it exists (the sink fsyncs a file
            // before it creates the next, so nothing more comes to this one).
            if partial.is_empty() && file_name(seq + 1).exists() {
                let n = f.read(&mut buf).unwrap();
                if n == 0 {
                    seq += 1;
                    file = None;
                    continue;
                }
                partial.extend_from_slice(&buf[..n]);
            } else {
                std::thread::sleep(poll);
                continue;
            }
        } else {
            partial.extend_from_slice(&buf[..n]);
        }
        let Some(last_nl) = partial.iter().rposition(|&c| c == b'\n') else {
            continue;
        };
        // The lines are on disk once this returns.
        f.sync_data().unwrap();
        let seen_us = now_us();
        let text = std::str::from_utf8(&partial[..last_nl]).unwrap();
        let mut got: Vec<Seen> = text
            .lines()
            .filter_map(|l| parse_line(l, seen_us))
            .collect();
        seen.lock().unwrap().append(&mut got);
        partial.drain(..=last_nl);
    }
}

/// User + system CPU seconds of process `pid` (all threads).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / clock_ticks()
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

/// Nearest-rank percentile of sorted `v`.
fn pct(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// One run's results; latencies in ms.
#[derive(Debug, Clone, Copy)]
struct Sample {
    achieved_rate: f64,
    writer_max_behind_ms: f64,
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
    client_p50: f64,
    client_p99: f64,
    cpu_s: f64,
    cpu_pct: f64,
    hwm_mb: f64,
    rss_mb: f64,
}

/// Writes `rows` single-row transactions at `rate`/s on absolute deadlines; returns the
/// time each `INSERT` returned (µs since the epoch, index = id - 1), the seconds taken and
/// how far the writer fell behind its schedule at most.
fn write_rows(db: &TestDatabase, insert: &str, rows: usize, rate: usize) -> (Vec<i64>, f64, f64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(db.connect()).unwrap();
    let stmt = rt.block_on(client.prepare(insert)).unwrap();
    let mut returned = Vec::with_capacity(rows);
    let mut behind = Duration::ZERO;
    let start = Instant::now();
    for i in 0..rows {
        let due = start + Duration::from_nanos((i as u64) * 1_000_000_000 / rate as u64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        } else {
            behind = behind.max(now - due);
        }
        let id = (i + 1) as i64;
        rt.block_on(client.execute(&stmt, &[&id])).unwrap();
        returned.push(now_us());
    }
    (
        returned,
        start.elapsed().as_secs_f64(),
        behind.as_secs_f64() * 1e3,
    )
}

/// Waits until `seen` holds the line of row `last` (rows commit in id order).
fn wait_for_ids(seen: &Mutex<Vec<Seen>>, last: i64, what: &str) {
    let start = Instant::now();
    loop {
        if seen.lock().unwrap().iter().any(|x| x.id == last) {
            return;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn spawn_child(config: &Path, work: &Path) -> Child {
    let stderr = std::fs::File::create(work.join("pgcdc.stderr")).unwrap();
    Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, config)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

#[allow(clippy::too_many_arguments)]
async fn run_once(
    db: &TestDatabase,
    client: &tokio_postgres::Client,
    shape: Shape,
    rate: usize,
    secs: f64,
    rep: usize,
    poll: Duration,
    root: &Path,
) -> Sample {
    let name = format!("lat_{}_{rate}_{rep}", shape.key());
    let (slot, publication) = (format!("{name}_slot"), format!("{name}_pub"));
    client.batch_execute(&shape.create(&name)).await.unwrap();
    let work = root.join(&name);
    std::fs::create_dir_all(&work).unwrap();
    let sink_path = work.join("events.jsonl");
    let config_text = format!(
        "{source}\n[pipeline]\nspill_dir = {spill:?}\n\n\
         [[sinks]]\ntype = \"file\"\npath = {sink:?}\nformat = \"plain\"\n\n\
         [checkpoint]\njob = {name:?}\ninterval_ms = 1000\n",
        source = db.source_toml(&[&format!("public.{name}")], &slot, &publication),
        spill = work.display().to_string(),
        sink = sink_path.display().to_string(),
    );
    let config_path = work.join("pgcdc.toml");
    std::fs::write(&config_path, &config_text).unwrap();

    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let tailer = {
        let (seen, stop, base) = (Arc::clone(&seen), Arc::clone(&stop), sink_path.clone());
        std::thread::spawn(move || tail(base, poll, seen, stop))
    };
    let mut child = spawn_child(&config_path, &work);
    let pid = child.id();

    // Warm-up: row 0 comes through once the job streams.
    let insert = shape.insert(&name);
    let warm = client.prepare(&insert).await.unwrap();
    client.execute(&warm, &[&0i64]).await.unwrap();
    tokio::task::block_in_place(|| wait_for_ids(&seen, 0, "the warm-up row"));

    let rows = ((rate as f64) * secs).round().max(1.0) as usize;
    let cpu_before = cpu_seconds(pid);
    let window = Instant::now();
    let (returned, write_secs, behind_ms) =
        tokio::task::block_in_place(|| write_rows(db, &insert, rows, rate));
    tokio::task::block_in_place(|| wait_for_ids(&seen, rows as i64, "the last row"));
    let window_s = window.elapsed().as_secs_f64();
    let cpu_s = cpu_seconds(pid) - cpu_before;
    let hwm_kb = status_kb(pid, "VmHWM");
    let rss_kb = status_kb(pid, "VmRSS");

    // Stop pgcdc (closing its stdin) and the tailer.
    drop(child.stdin.take());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < WAIT, "pgcdc did not stop");
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = std::fs::read_to_string(work.join("pgcdc.stderr")).unwrap_or_default();
    assert!(status.success(), "pgcdc failed: {status}\n{stderr}");
    stop.store(true, Ordering::Relaxed);
    tailer.join().unwrap();

    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let mut first: Vec<Option<Seen>> = vec![None; rows + 1];
    for s in seen {
        if let Some(slot) = usize::try_from(s.id).ok().and_then(|i| first.get_mut(i)) {
            // At least once: a line seen again (none expected here) does not count.
            slot.get_or_insert(s);
        }
    }
    let mut lat = Vec::with_capacity(rows);
    let mut client_lat = Vec::with_capacity(rows);
    for (i, s) in first.iter().enumerate().skip(1) {
        let s = s.unwrap_or_else(|| panic!("row {i} never reached the file"));
        let commit = s.commit_us.expect("a streamed row has a commit time");
        lat.push((s.seen_us - commit) as f64 / 1e3);
        client_lat.push((s.seen_us - returned[i - 1]) as f64 / 1e3);
    }
    lat.sort_by(f64::total_cmp);
    client_lat.sort_by(f64::total_cmp);

    client
        .batch_execute(&format!(
            "SELECT pg_drop_replication_slot('{slot}');
             DROP PUBLICATION {publication}; DROP TABLE {name};"
        ))
        .await
        .unwrap();
    if std::env::var_os("PGCDC_LATENCY_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }

    Sample {
        achieved_rate: rows as f64 / write_secs,
        writer_max_behind_ms: behind_ms,
        p50: pct(&lat, 0.50),
        p95: pct(&lat, 0.95),
        p99: pct(&lat, 0.99),
        max: pct(&lat, 1.0),
        client_p50: pct(&client_lat, 0.50),
        client_p99: pct(&client_lat, 0.99),
        cpu_s,
        cpu_pct: 100.0 * cpu_s / window_s,
        hwm_mb: hwm_kb / 1024.0,
        rss_mb: rss_kb / 1024.0,
    }
}

async fn run() {
    let reps = env_usize("PGCDC_BENCH_REPS", 3).max(1);
    let secs = env_usize("PGCDC_LATENCY_SECS", 20).max(1) as f64;
    let poll = Duration::from_micros(env_usize("PGCDC_LATENCY_POLL_US", 200) as u64);
    let rates: Vec<usize> = std::env::var("PGCDC_LATENCY_RATES")
        .unwrap_or_else(|_| "200,2000".into())
        .split(',')
        .map(|r| r.trim().replace('_', "").parse().unwrap())
        .collect();
    let shapes: Vec<Shape> = std::env::var("PGCDC_LATENCY_SHAPES")
        .unwrap_or_else(|_| "wide,narrow".into())
        .split(',')
        .map(|s| match s.trim() {
            "wide" => Shape::Wide,
            "narrow" => Shape::Narrow,
            other => panic!("unknown shape {other}"),
        })
        .collect();
    assert_eq!(
        parse_commit_time("2026-12-01T20:47:28.123456+00:00"),
        Some(1_796_158_048_123_456)
    );
    assert_eq!(
        parse_commit_time("2000-01-01T00:00:01.5Z"),
        Some(946_684_801_500_000)
    );
    let began = Instant::now();
    eprintln!("load before: {}", uptime());

    let cluster = TestPostgres::dedicated(ClusterOptions::new().setting("autovacuum", "off"))
        .await
        .unwrap();
    let db = cluster.create_database().await.unwrap();
    let client = db.connect().await.unwrap();
    let root = std::env::temp_dir().join(format!("pgcdc-latency-{}", std::process::id()));

    let cases: Vec<(Shape, usize)> = shapes
        .iter()
        .flat_map(|&s| rates.iter().map(move |&r| (s, r)))
        .collect();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); cases.len()];
    for rep in 0..reps {
        for (i, &(shape, rate)) in cases.iter().enumerate() {
            eprintln!("{} at {rate}/s: rep {}", shape.key(), rep + 1);
            let s = run_once(&db, &client, shape, rate, secs, rep, poll, &root).await;
            eprintln!(
                "  {:.0}/s (behind ≤ {:.1} ms); p50 {:.2} p95 {:.2} p99 {:.2} max {:.2} ms; \
                 from INSERT's return p50 {:.2} p99 {:.2} ms; CPU {:.2} s ({:.1}%); \
                 RSS peak {:.1} MB, end {:.1} MB",
                s.achieved_rate,
                s.writer_max_behind_ms,
                s.p50,
                s.p95,
                s.p99,
                s.max,
                s.client_p50,
                s.client_p99,
                s.cpu_s,
                s.cpu_pct,
                s.hwm_mb,
                s.rss_mb
            );
            samples[i].push(s);
        }
    }
    if std::env::var_os("PGCDC_LATENCY_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&root);
    } else {
        eprintln!("kept {}", root.display());
    }

    let load = uptime();
    let m = |s: &[Sample], f: fn(&Sample) -> f64| median(s.iter().map(f).collect());
    println!();
    println!(
        "| row shape | txns/s (achieved) | p50 ms | p95 ms | p99 ms | max ms | \
         from INSERT's return p50 / p99 ms | pgcdc CPU s ({secs:.0} s) | CPU % of a core | \
         peak RSS MB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (&(shape, rate), s) in cases.iter().zip(&samples) {
        println!(
            "| {} | {rate} ({:.0}) | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} / {:.1} | {:.2} | {:.1} | {:.1} |",
            shape.describe(),
            m(s, |x| x.achieved_rate),
            m(s, |x| x.p50),
            m(s, |x| x.p95),
            m(s, |x| x.p99),
            m(s, |x| x.max),
            m(s, |x| x.client_p50),
            m(s, |x| x.client_p99),
            m(s, |x| x.cpu_s),
            m(s, |x| x.cpu_pct),
            m(s, |x| x.hwm_mb),
        );
    }
    println!();
    println!(
        "medians of {reps} runs of {secs:.0} s each; tail poll {} µs; load after: {load}",
        poll.as_micros()
    );
    println!("bench took {:.0} s", began.elapsed().as_secs_f64());
    let _ = std::io::stdout().flush();
}

fn main() {
    // As `pgcdc` does (the children are this binary again).
    pgcdc::allocator::tune();
    match std::env::var(CHILD_ENV) {
        Ok(config) => child(&config),
        Err(_) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(run()),
    }
}
