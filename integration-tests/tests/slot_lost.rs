//! A slot the server invalidated while pgcdc was stopped (`max_slot_wal_keep_size`
//! exceeded): `pgcdc run` with `source.on_slot_lost = "fail"` stops with the reason
//! and the way out; with `"resnapshot"` it warns, creates a new slot, reads the
//! whole table again (rows written while it was stopped included) and streams on.
//!
//! Needs the binary (`cargo build -p pgcdc --bin pgcdc`). `PGCDC_TEST_PG=18`
//! runs it on PostgreSQL 18.

// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cdc_runtime::sinks::FileSink;
use integration_tests::{
    eventually, run_pgcdc, ClusterOptions, LocalCluster, Pgcdc, TempDir, TestDatabase, TestPostgres,
};
use serde_json::Value as Json;
use tokio_postgres::Client;

const TIMEOUT: Duration = Duration::from_secs(60);
const SLOT: &str = "lost_slot";

/// A `pgcdc.toml` for table `t` into the file sink `out`, with checkpoints.
fn write_config(dir: &Path, db: &TestDatabase, policy: &str, out: &Path) -> PathBuf {
    let text = format!(
        "{source}on_slot_lost = {policy:?}\n\n\
         [pipeline]\nstatus_interval_secs = 1\n\n\
         [[sinks]]\ntype = \"file\"\npath = {out:?}\nformat = \"debezium\"\n\n\
         [checkpoint]\ninterval_ms = 200\n",
        source = db.source_toml(&["public.t"], SLOT, "lost_pub"),
    );
    let path = dir.join(format!("pgcdc-{policy}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Every complete line the file sink wrote under `base`.
fn lines(base: &Path) -> Vec<Json> {
    let mut out = Vec::new();
    for file in FileSink::files(base).unwrap_or_default() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        out.extend(
            complete
                .lines()
                .map(|l| serde_json::from_str::<Json>(l).unwrap()),
        );
    }
    out
}

/// The ids of events with operation `op` (`r`: snapshot, `c`: insert).
fn ids(base: &Path, op: &str) -> BTreeSet<i64> {
    lines(base)
        .iter()
        .filter(|l| l["op"] == op)
        .filter_map(|l| l["after"]["id"].as_i64())
        .collect()
}

/// Waits for `cond`, failing with pgcdc's stderr if it exits or time runs out.
async fn await_cond(pgcdc: &mut Pgcdc, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !cond() {
        if let Some(status) = pgcdc.try_status().unwrap() {
            panic!(
                "pgcdc exited ({status}) while waiting for {what}; stderr:\n{}",
                pgcdc.stderr()
            );
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; stderr:\n{}",
            pgcdc.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn max_checkpoint_id(client: &Client) -> Option<i64> {
    client
        .query_one(
            "SELECT max(checkpoint_id) FROM pgcdc.checkpoints WHERE job = $1",
            &[&SLOT],
        )
        .await
        .unwrap()
        .get(0)
}

async fn wal_status(client: &Client) -> Option<String> {
    client
        .query_opt(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1",
            &[&SLOT],
        )
        .await
        .unwrap()
        .and_then(|r| r.get(0))
}

fn all(range: std::ops::RangeInclusive<i64>) -> BTreeSet<i64> {
    range.collect()
}

#[tokio::test]
async fn an_invalidated_slot_fails_or_is_resnapshotted() {
    let cluster = LocalCluster::create(
        ClusterOptions::new()
            .setting("max_slot_wal_keep_size", "1MB")
            .setting("wal_keep_size", "0")
            .setting("max_wal_size", "32MB")
            .setting("min_wal_size", "32MB"),
    )
    .await
    .unwrap();
    eprintln!("PostgreSQL {}", cluster.server_version());
    let db = cluster.create_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE t (id bigint PRIMARY KEY, note text);
             CREATE TABLE filler (pad text);
             INSERT INTO t SELECT g, 'first' FROM generate_series(1, 100) g",
        )
        .await
        .unwrap();
    let dir = TempDir::new("slot-lost");

    // 1. A job with checkpoints: snapshot and some streamed rows, then a clean stop.
    let out1 = dir.path().join("first.jsonl");
    let config = write_config(dir.path(), &db, "fail", &out1);
    let mut pgcdc = Pgcdc::run(&config).unwrap();
    await_cond(&mut pgcdc, "the snapshot", || {
        ids(&out1, "r") == all(1..=100)
    })
    .await;
    client
        .batch_execute("INSERT INTO t SELECT g, 'streamed' FROM generate_series(101, 150) g")
        .await
        .unwrap();
    await_cond(&mut pgcdc, "the streamed rows", || {
        ids(&out1, "c") == all(101..=150)
    })
    .await;
    pgcdc.terminate(TIMEOUT).await.unwrap();
    let old_newest = max_checkpoint_id(&client).await.expect("a checkpoint");

    // 2. Stopped: rows the job has not seen, then WAL until the slot is lost.
    client
        .batch_execute("INSERT INTO t SELECT g, 'while stopped' FROM generate_series(151, 200) g")
        .await
        .unwrap();
    let started = Instant::now();
    let mut switches = 0;
    eventually("the stopped slot to be invalidated", TIMEOUT, || {
        switches += 1;
        let client = &client;
        async move {
            client
                .batch_execute(
                    "INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 300);
                     SELECT pg_switch_wal(); CHECKPOINT;",
                )
                .await
                .unwrap();
            (wal_status(client).await.as_deref() == Some("lost")).then_some(())
        }
    })
    .await;
    eprintln!(
        "slot invalidated after {switches} WAL switches and checkpoints ({} ms)",
        started.elapsed().as_millis()
    );
    if cluster.major_version() >= 17 {
        let reason: Option<String> = client
            .query_one(
                "SELECT invalidation_reason FROM pg_replication_slots WHERE slot_name = $1",
                &[&SLOT],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(reason.as_deref(), Some("wal_removed"));
    }

    // 3. on_slot_lost = "fail": stops with the reason and the way out, changes nothing.
    let mut failing = Pgcdc::run(&config).unwrap();
    let status = failing.wait(TIMEOUT).await.unwrap();
    let stderr = failing.stderr();
    assert_eq!(status.code(), Some(4), "{stderr}");
    for needle in [
        "replication slot \"lost_slot\" is lost",
        "the server invalidated it",
        "on_slot_lost = \"resnapshot\"",
        "pg_drop_replication_slot('lost_slot')",
        "max_slot_wal_keep_size",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in:\n{stderr}");
    }
    let reason = if cluster.major_version() >= 17 {
        "(wal_removed)"
    } else {
        "wal_status = lost"
    };
    assert!(stderr.contains(reason), "{reason:?} not in:\n{stderr}");
    assert_eq!(wal_status(&client).await.as_deref(), Some("lost"));
    assert_eq!(max_checkpoint_id(&client).await, Some(old_newest));
    // `pgcdc validate` says the same.
    let validate = |config: PathBuf| async move {
        let out = run_pgcdc(&["validate", "--config", config.to_str().unwrap()], TIMEOUT)
            .await
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let (code, text) = validate(config.clone()).await;
    assert_eq!(code, Some(4), "{text}");
    assert!(
        text.contains("replication slot \"lost_slot\" is lost"),
        "{text}"
    );

    // 4. on_slot_lost = "resnapshot": a new slot, every row again, then streaming.
    let out2 = dir.path().join("second.jsonl");
    let config = write_config(dir.path(), &db, "resnapshot", &out2);
    let (code, text) = validate(config.clone()).await;
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("is lost") && text.contains("will drop it"),
        "{text}"
    );
    let restarted = Instant::now();
    let mut pgcdc = Pgcdc::run(&config).unwrap();
    await_cond(&mut pgcdc, "every row again", || {
        ids(&out2, "r") == all(1..=200)
    })
    .await;
    eprintln!(
        "resnapshot: all 200 rows delivered again {} ms after the start",
        restarted.elapsed().as_millis()
    );
    client
        .batch_execute("INSERT INTO t SELECT g, 'after' FROM generate_series(201, 210) g")
        .await
        .unwrap();
    await_cond(&mut pgcdc, "new changes", || {
        ids(&out2, "c") == all(201..=210)
    })
    .await;
    // Nothing came from the old slot's position: rows up to 200 only as snapshot rows.
    assert_eq!(ids(&out2, "c"), all(201..=210));
    let stderr = pgcdc.stderr();
    assert!(
        stderr.contains("WARN") && stderr.contains("the replication slot is lost"),
        "{stderr}"
    );
    let status = wal_status(&client).await;
    assert!(
        status.is_some() && status.as_deref() != Some("lost"),
        "{status:?}"
    );
    // Checkpoint ids keep increasing across the new slot.
    eventually("a checkpoint of the new slot", TIMEOUT, || async {
        max_checkpoint_id(&client)
            .await
            .filter(|id| *id > old_newest)
    })
    .await;
    pgcdc.terminate(TIMEOUT).await.unwrap();
}

/// Sends `signal` (`STOP`, `CONT`) to pgcdc.
fn signal(pgcdc: &Pgcdc, signal: &str) {
    let pid = pgcdc.id().expect("pgcdc runs").to_string();
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// The slot is invalidated while pgcdc streams from it (pgcdc frozen with
/// SIGSTOP, so the server terminates its walsender): on waking, the
/// reconnect is refused, and with `on_slot_lost = "resnapshot"` pgcdc
/// starts the job again with a new slot and reads every row again.
#[tokio::test]
async fn a_slot_lost_while_streaming_is_resnapshotted() {
    let cluster = LocalCluster::create(
        ClusterOptions::new()
            .setting("max_slot_wal_keep_size", "1MB")
            .setting("wal_keep_size", "0")
            .setting("max_wal_size", "32MB")
            .setting("min_wal_size", "32MB"),
    )
    .await
    .unwrap();
    let db = cluster.create_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE t (id bigint PRIMARY KEY, note text);
             CREATE TABLE filler (pad text);
             INSERT INTO t SELECT g, 'first' FROM generate_series(1, 50) g",
        )
        .await
        .unwrap();
    let dir = TempDir::new("slot-lost-streaming");
    let out = dir.path().join("out.jsonl");
    let config = write_config(dir.path(), &db, "resnapshot", &out);
    let mut pgcdc = Pgcdc::run(&config).unwrap();
    await_cond(&mut pgcdc, "the snapshot", || ids(&out, "r") == all(1..=50)).await;
    let active = || async {
        client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active",
                &[&SLOT],
            )
            .await
            .unwrap()
            .is_some()
    };
    eventually("the slot to be active", TIMEOUT, || async {
        active().await.then_some(())
    })
    .await;

    signal(&pgcdc, "STOP");
    client
        .batch_execute("INSERT INTO t SELECT g, 'while frozen' FROM generate_series(51, 80) g")
        .await
        .unwrap();
    let frozen = Instant::now();
    eventually("the active slot to be invalidated", TIMEOUT, || {
        let client = &client;
        async move {
            client
                .batch_execute(
                    "INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 300);
                     SELECT pg_switch_wal(); CHECKPOINT;",
                )
                .await
                .unwrap();
            (wal_status(client).await.as_deref() == Some("lost")).then_some(())
        }
    })
    .await;
    eprintln!(
        "active slot invalidated {} ms after freezing pgcdc",
        frozen.elapsed().as_millis()
    );
    signal(&pgcdc, "CONT");
    let woke = Instant::now();
    await_cond(&mut pgcdc, "every row again", || {
        let lines = lines(&out);
        (1..=80).all(|id| {
            let snapshots = lines
                .iter()
                .filter(|l| l["op"] == "r" && l["after"]["id"] == id)
                .count();
            // 1..=50 were read by the first snapshot already.
            snapshots == if id <= 50 { 2 } else { 1 }
        })
    })
    .await;
    eprintln!(
        "resnapshot after a loss while streaming: all 80 rows delivered again {} ms after waking",
        woke.elapsed().as_millis()
    );
    let stderr = pgcdc.stderr();
    assert!(
        stderr.contains("lost while streaming") && stderr.contains("the replication slot is lost"),
        "{stderr}"
    );
    client
        .batch_execute("INSERT INTO t VALUES (81, 'after')")
        .await
        .unwrap();
    await_cond(&mut pgcdc, "new changes", || ids(&out, "c").contains(&81)).await;
    pgcdc.terminate(TIMEOUT).await.unwrap();
}

/// The slot is gone while the job has a checkpoint (dropped, or not
/// synchronized to a promoted standby): `fail` refuses and names both ways
/// out; `resnapshot` creates a new slot and reads every row again.
#[tokio::test]
async fn a_vanished_slot_fails_or_is_resnapshotted() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE t (id bigint PRIMARY KEY, note text);
             INSERT INTO t SELECT g, 'first' FROM generate_series(1, 40) g",
        )
        .await
        .unwrap();
    let dir = TempDir::new("slot-vanished");
    let out1 = dir.path().join("first.jsonl");
    let config = write_config(dir.path(), &db, "fail", &out1);
    let mut pgcdc = Pgcdc::run(&config).unwrap();
    await_cond(&mut pgcdc, "the snapshot", || {
        ids(&out1, "r") == all(1..=40)
    })
    .await;
    pgcdc.terminate(TIMEOUT).await.unwrap();
    let old_newest = max_checkpoint_id(&client).await.expect("a checkpoint");
    client
        .batch_execute(&format!(
            "SELECT pg_drop_replication_slot('{SLOT}');
             INSERT INTO t SELECT g, 'while gone' FROM generate_series(41, 60) g"
        ))
        .await
        .unwrap();

    let mut failing = Pgcdc::run(&config).unwrap();
    let status = failing.wait(TIMEOUT).await.unwrap();
    let stderr = failing.stderr();
    assert_eq!(status.code(), Some(4), "{stderr}");
    for needle in ["does not exist, but job", "on_slot_lost = \"resnapshot\""] {
        assert!(stderr.contains(needle), "{needle:?} not in:\n{stderr}");
    }
    assert_eq!(
        wal_status(&client).await,
        None,
        "fail must not create a slot"
    );

    let out2 = dir.path().join("second.jsonl");
    let config = write_config(dir.path(), &db, "resnapshot", &out2);
    let mut pgcdc = Pgcdc::run(&config).unwrap();
    await_cond(&mut pgcdc, "every row again", || {
        ids(&out2, "r") == all(1..=60)
    })
    .await;
    assert!(
        pgcdc.stderr().contains("the replication slot is lost"),
        "{}",
        pgcdc.stderr()
    );
    client
        .batch_execute("INSERT INTO t VALUES (61, 'after')")
        .await
        .unwrap();
    await_cond(&mut pgcdc, "new changes", || {
        ids(&out2, "c") == all(61..=61)
    })
    .await;
    eventually("a checkpoint of the new slot", TIMEOUT, || async {
        max_checkpoint_id(&client)
            .await
            .filter(|id| *id > old_newest)
    })
    .await;
    pgcdc.terminate(TIMEOUT).await.unwrap();
}
