//! Crash torture for the NATS JetStream sink: `pgcdc run` as a child
//! process under a concurrent write workload, checkpointing into
//! PostgreSQL and publishing into a fresh stream, SIGKILLed 20 times at
//! random moments (each time after it made progress) and restarted.
//! Afterwards the stream holds every committed change exactly once
//! (by `(commit LSN, index)` and by row version), in commit order, with
//! nothing missing: the replays after each kill were dropped by
//! JetStream's dedupe, whose count the logs report.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::nats::{delete_stream, read_stream, stream_len, unique_name, TestNats};
use integration_tests::{eventually, TempDir, TestPostgres};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);
const KILLS: usize = 20;

fn spawn(config: &Path, log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut cmd = Command::new(integration_tests::pgcdc_binary().unwrap());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("PGCDC_")) {
            cmd.env_remove(&name);
        }
    }
    cmd.args(["run", "--config"])
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

/// A committed change as the writer made it: Debezium op, row id, the
/// row's version after it (before it, for a delete).
type Change = (&'static str, i64, i32);

/// The sum of N over the log lines `nats sink: JetStream dropped N
/// duplicate messages`, and how many such lines there are.
fn duplicates_dropped(log: &str) -> (u64, usize) {
    const MARK: &str = "nats sink: JetStream dropped ";
    let mut total = 0;
    let mut lines = 0;
    for line in log.lines() {
        if let Some(at) = line.find(MARK) {
            let rest = &line[at + MARK.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let n: u64 = digits
                .parse()
                .unwrap_or_else(|_| panic!("no count in the log line {line:?}"));
            assert!(
                rest[digits.len()..].starts_with(" duplicate message"),
                "unexpected log line {line:?}"
            );
            total += n;
            lines += 1;
        }
    }
    (total, lines)
}

/// Waits until the instance that started writing `log` at byte `from` logs
/// that it streams: it is past start-up, with its SIGTERM handler
/// installed, so a SIGTERM stops it cleanly.
async fn await_streaming(log: &Path, from: usize) {
    eventually("the last instance to stream", TIMEOUT, || async {
        let text = std::fs::read(log).unwrap_or_default();
        let since = String::from_utf8_lossy(text.get(from..).unwrap_or_default()).into_owned();
        since.contains("starting replication").then_some(())
    })
    .await;
}

/// A xorshift generator seeded by the process id: kill moments that vary
/// between runs.
fn random_below() -> impl FnMut(u64) -> u64 {
    let mut seed = u64::from(std::process::id()) | 1;
    move |max: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % max
    }
}

/// Waits until the stream holds `want` messages, the running instance (`child`, logging
/// to `log`) never exiting meanwhile; then stops it with SIGTERM once it streams (it
/// stops cleanly only once its handler is installed, and the stream may have been
/// complete before the last kill, so before the instance started after it, at log
/// offset `last_start`). Its exit status.
async fn catch_up_and_stop(
    js: &async_nats::jetstream::Context,
    stream: &str,
    want: u64,
    child: &mut Child,
    log: &Path,
    last_start: usize,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + TIMEOUT;
    while stream_len(js, stream).await.unwrap().unwrap_or(0) < want {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "pgcdc exited ({status}) before the stream held {want} messages; see {}",
                log.display()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the stream never reached {want} messages; see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    await_streaming(log, last_start).await;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait().unwrap()
}

/// Waits until the stream holds more than `before` messages (the running
/// instance made progress), then SIGKILLs `child` after up to `max_delay_ms`
/// and starts another instance. Returns the log's length when it started
/// (what follows is the new instance's).
#[allow(clippy::too_many_arguments)]
async fn kill_after_progress(
    js: &async_nats::jetstream::Context,
    stream: &str,
    before: u64,
    child: &mut Child,
    delay_ms: u64,
    config: &Path,
    log: &Path,
    kill: usize,
) -> usize {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "pgcdc exited ({status}) before kill {kill}; see {}",
                log.display()
            );
        }
        if stream_len(js, stream).await.unwrap().unwrap_or(0) > before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no progress before kill {kill}; see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let from = std::fs::metadata(log).map_or(0, |m| m.len() as usize);
    *child = spawn(config, log);
    from
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_sigkill_torture_exactly_once_in_the_stream() {
    let started = Instant::now();
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer int, version int NOT NULL);
             ALTER TABLE orders REPLICA IDENTITY FULL;",
        )
        .await
        .unwrap();

    let name = unique_name("nats_crash");
    let stream = name.to_ascii_uppercase();
    let dir = TempDir::new("nats-crash");
    let log = dir.path().join("pgcdc.log");
    let source = db.source_toml(&["public.orders"], &name, &format!("{name}_pub"));
    let config_text = format!(
        r#"
{source}
[pipeline]
status_interval_secs = 1

# The table starts empty: no snapshot beside the first writes.
[snapshot]
mode = "latest"

[[sinks]]
type = "nats"
servers = [{url:?}]
prefix = {name:?}

[sinks.stream]
name = {stream:?}

[checkpoint]
job = {name:?}
interval_ms = 200
"#,
        url = nats.url(),
    );
    let config = dir.path().join("pgcdc.toml");
    std::fs::write(&config, config_text).unwrap();

    let mut child = spawn(&config, &log);
    let see_log = || format!("see {}", log.display());
    eventually("the job's slot to be active", TIMEOUT, || async {
        client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active \
                 AND confirmed_flush_lsn IS NOT NULL",
                &[&name],
            )
            .await
            .unwrap()
            .map(|_| ())
    })
    .await;

    // The workload: per transaction 3 inserts, an update of a live row
    // and, every third, a delete of another.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let mut client = db.connect().await.unwrap();
        tokio::spawn(async move {
            let mut changes: Vec<Change> = Vec::new();
            let mut live: BTreeMap<i64, i32> = BTreeMap::new();
            let mut next = 1i64;
            let mut round = 0i64;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let mut txn_changes = Vec::new();
                let txn = client.transaction().await.unwrap();
                let ids: Vec<i64> = (next..next + 3).collect();
                next += 3;
                txn.execute(
                    "INSERT INTO orders SELECT g, (g % 11)::int, 1 FROM unnest($1::bigint[]) g",
                    &[&ids],
                )
                .await
                .unwrap();
                txn_changes.extend(ids.iter().map(|&id| ("c", id, 1)));
                if !live.is_empty() {
                    let keys: Vec<i64> = live.keys().copied().collect();
                    let id = keys[(round * 7919) as usize % keys.len()];
                    let v: i32 = txn
                        .query_one(
                            "UPDATE orders SET version = version + 1 WHERE id = $1 RETURNING version",
                            &[&id],
                        )
                        .await
                        .unwrap()
                        .get(0);
                    txn_changes.push(("u", id, v));
                    if round % 3 == 0 {
                        let id = keys[(round * 104_729) as usize % keys.len()];
                        let v: i32 = txn
                            .query_one("DELETE FROM orders WHERE id = $1 RETURNING version", &[&id])
                            .await
                            .unwrap()
                            .get(0);
                        txn_changes.push(("d", id, v));
                    }
                }
                txn.commit().await.unwrap();
                for &(op, id, v) in &txn_changes {
                    if op == "d" {
                        live.remove(&id);
                    } else {
                        live.insert(id, v);
                    }
                }
                changes.extend(txn_changes);
            }
            changes
        })
    };

    // SIGKILL at random moments, each after the instance published
    // something; restart each time.
    let mut random = random_below();
    let mut last_start = 0;
    for kill in 0..KILLS {
        let before = stream_len(&js, &stream).await.unwrap().unwrap_or(0);
        let delay = random(800);
        last_start =
            kill_after_progress(&js, &stream, before, &mut child, delay, &config, &log, kill).await;
    }
    stop.store(true, Ordering::Relaxed);
    let changes = writer.await.unwrap();

    // The last instance catches up, then stops cleanly.
    let want = changes.len() as u64;
    let exit = catch_up_and_stop(&js, &stream, want, &mut child, &log, last_start).await;
    assert!(exit.success(), "pgcdc exited with {exit}; {}", see_log());

    let messages = read_stream(&js, &stream).await.unwrap();
    let log_text = std::fs::read_to_string(&log).unwrap();
    let (dropped, dropped_lines) = duplicates_dropped(&log_text);

    // Every message once by its id, by (commit LSN, index) and by row
    // version; the stream in commit order.
    let mut ids = HashSet::new();
    let mut positions: Vec<(u64, u32)> = Vec::new();
    let mut got: Vec<Change> = Vec::new();
    for m in &messages {
        let id = m
            .header("Nats-Msg-Id")
            .unwrap_or_else(|| panic!("message {} has no Nats-Msg-Id", m.sequence));
        assert!(
            ids.insert(id.to_owned()),
            "Nats-Msg-Id {id} twice in the stream"
        );
        let rest = id
            .strip_prefix(&format!("{name}:"))
            .unwrap_or_else(|| panic!("Nats-Msg-Id {id} does not start with the job"));
        let (lsn, index) = rest
            .split_once(':')
            .unwrap_or_else(|| panic!("Nats-Msg-Id {id}: no index"));
        assert_eq!(m.header("Pgcdc-Commit-Lsn"), Some(lsn), "{id}");
        let (hi, lo) = lsn.split_once('/').unwrap();
        let lsn =
            (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap();
        let index: u32 = index
            .parse()
            .unwrap_or_else(|_| panic!("Nats-Msg-Id {id}: the index is no number"));
        positions.push((lsn, index));
        let v: Value = m.json();
        let (op, row) = match v["op"].as_str() {
            Some("c") => ("c", &v["after"]),
            Some("u") => ("u", &v["after"]),
            Some("d") => ("d", &v["before"]),
            _ => panic!("message {id} is no change record: {v}"),
        };
        got.push((
            op,
            row["id"].as_i64().unwrap(),
            row["version"].as_i64().unwrap() as i32,
        ));
    }
    let out_of_order: Vec<_> = positions
        .windows(2)
        .filter(|w| w[0] >= w[1])
        .take(5)
        .collect();
    assert!(
        out_of_order.is_empty(),
        "(commit LSN, index) not strictly increasing in stream order (so repeated or reordered): \
         {out_of_order:?}"
    );
    let mut versions = HashSet::new();
    let repeated: Vec<&Change> = got.iter().filter(|c| !versions.insert(**c)).collect();
    assert!(
        repeated.is_empty(),
        "row versions stored twice: {repeated:?}"
    );
    let committed: HashSet<&Change> = changes.iter().collect();
    let stored: HashSet<&Change> = got.iter().collect();
    let missing: Vec<_> = changes
        .iter()
        .filter(|c| !stored.contains(c))
        .take(10)
        .collect();
    assert!(missing.is_empty(), "committed changes missing: {missing:?}");
    let extra: Vec<_> = got
        .iter()
        .filter(|c| !committed.contains(c))
        .take(10)
        .collect();
    assert!(extra.is_empty(), "changes nobody committed: {extra:?}");
    assert_eq!(got, changes, "the stream holds the changes in commit order");
    // Per key (row), its versions in commit order.
    let mut last: HashMap<i64, i32> = HashMap::new();
    for &(op, id, v) in &got {
        if let Some(prev) = last.insert(id, v) {
            assert!(
                prev < v || (op == "d" && prev == v),
                "row {id}: version {v} ({op}) after {prev}"
            );
        }
    }
    assert!(
        dropped > 0,
        "no replay was dropped as duplicates by JetStream after {KILLS} kills (log lines \
         `nats sink: JetStream dropped N duplicate messages`: {dropped_lines}); {}",
        see_log()
    );
    eprintln!(
        "nats crash: {KILLS} kills, {} changes, {} messages in the stream, {dropped} duplicates \
         dropped by JetStream ({dropped_lines} log lines), {:?} ({})",
        changes.len(),
        messages.len(),
        started.elapsed(),
        if nats.is_own() {
            "a nats-server of its own"
        } else {
            "the shared nats-server"
        }
    );
    assert!(delete_stream(&js, &stream).await.unwrap());
    let _ = client
        .execute("SELECT pg_drop_replication_slot($1)", &[&name])
        .await;
    if std::env::var_os("PGCDC_KEEP_TEST_DIRS").is_some() {
        let kept = std::env::temp_dir().join(format!("pgcdc-nats-crash-{name}"));
        let _ = std::fs::rename(dir.path(), &kept);
        eprintln!("kept {}", kept.display());
    }
}

/// The initial snapshot of a table SIGKILLed several times while it runs:
/// a chunk delivered before a kill but not covered by a checkpoint is read
/// again after the restart, and its rows carry the same `Nats-Msg-Id`s
/// (the snapshot's epoch and the row's key), so the stream holds every row
/// as one read, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_sigkill_during_the_snapshot_reads_every_row_once() {
    const ROWS: i64 = 60_000;
    const SNAPSHOT_KILLS: usize = 6;
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE items (id bigint PRIMARY KEY, v int NOT NULL);
             INSERT INTO items SELECT g, (g % 97)::int FROM generate_series(1, {ROWS}) g;"
        ))
        .await
        .unwrap();

    let name = unique_name("nats_snap_crash");
    let stream = name.to_ascii_uppercase();
    let dir = TempDir::new("nats-snap-crash");
    let log = dir.path().join("pgcdc.log");
    let source = db.source_toml(&["public.items"], &name, &format!("{name}_pub"));
    // Small chunks read one at a time: the snapshot takes long enough to be
    // killed in the middle, many times.
    let config_text = format!(
        r#"
{source}
[pipeline]
status_interval_secs = 1

[snapshot]
mode = "initial"
chunk_size = 500
readers = 1

[[sinks]]
type = "nats"
servers = [{url:?}]
prefix = {name:?}

[sinks.stream]
name = {stream:?}

[checkpoint]
job = {name:?}
interval_ms = 200
"#,
        url = nats.url(),
    );
    let config = dir.path().join("pgcdc.toml");
    std::fs::write(&config, config_text).unwrap();

    let mut child = spawn(&config, &log);
    let mut random = random_below();
    let mut kills = 0;
    let mut last_start = 0;
    while kills < SNAPSHOT_KILLS {
        let before = stream_len(&js, &stream).await.unwrap().unwrap_or(0);
        if before >= ROWS as u64 {
            break;
        }
        let delay = random(400);
        last_start = kill_after_progress(
            &js, &stream, before, &mut child, delay, &config, &log, kills,
        )
        .await;
        kills += 1;
    }

    // The last instance finishes the snapshot.
    let exit = catch_up_and_stop(&js, &stream, ROWS as u64, &mut child, &log, last_start).await;
    let log_text = std::fs::read_to_string(&log).unwrap();
    let tail: Vec<&str> = log_text.lines().rev().take(30).collect();
    assert!(
        exit.success(),
        "pgcdc exited with {exit}; the log's end (newest first): {tail:#?}"
    );

    let messages = read_stream(&js, &stream).await.unwrap();
    let (dropped, _) = duplicates_dropped(&log_text);
    let mut reads: HashMap<i64, usize> = HashMap::new();
    for m in &messages {
        let v: Value = m.json();
        assert_eq!(v["op"], "r", "message {} is no read: {v}", m.sequence);
        *reads.entry(v["after"]["id"].as_i64().unwrap()).or_default() += 1;
    }
    let twice: Vec<_> = reads.iter().filter(|(_, n)| **n > 1).take(10).collect();
    if let Some((id, _)) = twice.first() {
        let ids: Vec<_> = messages
            .iter()
            .filter(|m| m.json()["after"]["id"].as_i64() == Some(**id))
            .map(|m| m.header("Nats-Msg-Id").unwrap_or_default().to_owned())
            .collect();
        panic!("rows read into the stream more than once: {twice:?}; the ids of row {id}: {ids:?}");
    }
    let missing: Vec<i64> = (1..=ROWS)
        .filter(|id| !reads.contains_key(id))
        .take(10)
        .collect();
    assert!(missing.is_empty(), "rows missing: {missing:?}");
    assert_eq!(messages.len() as i64, ROWS);
    eprintln!(
        "nats snapshot crash: {kills} kills during the snapshot, {ROWS} rows, {} messages, {dropped} duplicates dropped by JetStream",
        messages.len()
    );
    assert!(delete_stream(&js, &stream).await.unwrap());
    let _ = client
        .execute("SELECT pg_drop_replication_slot($1)", &[&name])
        .await;
}
