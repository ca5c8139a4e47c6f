//! Two-phase slots on a real PostgreSQL: a slot created with `two_phase =
//! true` makes the server send Begin Prepare, Prepare, Commit Prepared and
//! Rollback Prepared whatever protocol version pgcdc asks for. A prepared
//! transaction is delivered once, at COMMIT PREPARED; a rolled-back one
//! never; other transactions flow meanwhile; and a restart (clean, or
//! SIGKILL) between PREPARE and COMMIT PREPARED still delivers its rows
//! exactly once, because the slot is never confirmed past an undecided
//! PREPARE.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use cdc_core::Lsn;
use cdc_runtime::encoding::{JsonEncoder, JsonFormat};
use cdc_runtime::pipeline::{Backoff, Pipeline, PipelineOptions, Progress};
use cdc_runtime::sinks::{FileSink, FileSinkOptions, Sink};
use checkpoint_api::{CheckpointStore, JobName};
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::{eventually, Pgcdc, TestDatabase, TestPostgres};
use pgcdc::config::Config;
use serde_json::Value;
use tokio::sync::{oneshot, watch};
use tokio_postgres::Client;

/// How long any awaited condition may take before the test fails.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A table, a publication and a slot created by hand with `two_phase = true`
/// (as another tool would), named after `name`.
async fn two_phase_database(name: &str) -> (TestDatabase, Client) {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE ledger (id int PRIMARY KEY, note text);
             CREATE PUBLICATION {name}_pub FOR TABLE ledger;"
        ))
        .await
        .unwrap();
    // Its own statement: not in a transaction that has written.
    client
        .batch_execute(&format!(
            "SELECT pg_create_logical_replication_slot('{name}', 'pgoutput', false, true)"
        ))
        .await
        .unwrap();
    let two_phase: bool = client
        .query_one(
            "SELECT two_phase FROM pg_replication_slots WHERE slot_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(two_phase, "the slot must have two_phase enabled");
    (db, client)
}

async fn lsn(client: &Client, sql: &str) -> Lsn {
    let row = client.query_one(sql, &[]).await.unwrap();
    row.get::<_, Option<String>>(0)
        .map(|s| s.parse().unwrap())
        .unwrap_or(Lsn::INVALID)
}

async fn current_lsn(client: &Client) -> Lsn {
    lsn(client, "SELECT pg_current_wal_insert_lsn()::text").await
}

async fn slot_confirmed(client: &Client, slot: &str) -> Lsn {
    lsn(
        client,
        &format!(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '{slot}'"
        ),
    )
    .await
}

/// Prepares a transaction inserting `id` as `gid`; returns the WAL position
/// right after the PREPARE (the PREPARE record is before it).
async fn prepare(client: &Client, id: i32, gid: &str) -> Lsn {
    client
        .batch_execute(&format!(
            "BEGIN; INSERT INTO ledger VALUES ({id}, 'prepared {gid}'); PREPARE TRANSACTION '{gid}';"
        ))
        .await
        .unwrap();
    current_lsn(client).await
}

async fn insert(client: &Client, id: i32) {
    client
        .execute("INSERT INTO ledger VALUES ($1, 'plain')", &[&id])
        .await
        .unwrap();
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pgcdc-2pc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every line the file sink wrote under `base` (none if nothing yet).
fn read_lines(base: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for file in FileSink::files(base).unwrap_or_default() {
        for line in std::fs::read_to_string(file).unwrap_or_default().lines() {
            // A line being written may be incomplete: the next read sees it.
            if let Ok(v) = serde_json::from_str(line) {
                out.push(v);
            }
        }
    }
    out
}

/// The ids of ledger rows inserted, in file order.
fn inserted_ids(lines: &[Value]) -> Vec<i64> {
    lines
        .iter()
        .filter(|l| l["op"] == "insert" && l["table"] == "ledger")
        .map(|l| l["after"]["id"].as_i64().unwrap())
        .collect()
}

fn count(ids: &[i64], id: i64) -> usize {
    ids.iter().filter(|&&i| i == id).count()
}

/// The commit LSN the file sink recorded for the insert of `id`.
fn commit_lsn_of(lines: &[Value], id: i64) -> Lsn {
    lines
        .iter()
        .find(|l| l["op"] == "insert" && l["after"]["id"] == id)
        .map(|l| l["commit_lsn"].as_str().unwrap().parse().unwrap())
        .unwrap()
}

async fn await_ids(base: &Path, what: &str, cond: impl Fn(&[i64]) -> bool) {
    eventually(what, TIMEOUT, || {
        let ids = inserted_ids(&read_lines(base));
        std::future::ready(cond(&ids).then_some(()))
    })
    .await;
}

type RunHandle = (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<Progress, cdc_runtime::pipeline::PipelineError>>,
    watch::Receiver<Progress>,
);

/// Runs a pipeline on `slot` (asking for pgoutput `proto_version`) into a
/// file sink at `base`.
async fn run_pipeline(db: &TestDatabase, slot: &str, proto_version: u32, base: &Path) -> RunHandle {
    run_pipeline_tuned(db, slot, proto_version, base, |_| {}).await
}

/// [`run_pipeline`] with options changed by `tune`.
async fn run_pipeline_tuned(
    db: &TestDatabase,
    slot: &str,
    proto_version: u32,
    base: &Path,
    tune: impl FnOnce(&mut PipelineOptions),
) -> RunHandle {
    let text = format!(
        "{}\n[[sinks]]\ntype = \"null\"\n",
        db.source_toml(&["ledger"], slot, &format!("{slot}_pub"))
    );
    let config = Config::parse(&text).unwrap();
    config.check().unwrap();
    let source = config.source;
    let mut o = PipelineOptions::new(
        source.replication_config().unwrap(),
        &source.slot,
        &source.publication,
    );
    o.status_interval = Duration::from_millis(100);
    o.proto_version = Some(proto_version);
    o.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(500),
        max_attempts: Some(20),
    };
    tune(&mut o);
    let sink = FileSink::open(
        FileSinkOptions {
            path: base.to_owned(),
            max_file_bytes: 1 << 20,
            page_cache_bytes: cdc_runtime::sinks::DEFAULT_PAGE_CACHE_BYTES,
            direct_io: true,
        },
        JsonEncoder::new(JsonFormat::Plain),
    )
    .await
    .unwrap();
    let pipeline = Pipeline::new(o, vec![Box::new(sink) as Box<dyn Sink>]);
    let progress = pipeline.progress();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(pipeline.run(async move {
        let _ = stopped.await;
    }));
    (stop, task, progress)
}

async fn await_progress(rx: &mut watch::Receiver<Progress>, cond: impl Fn(&Progress) -> bool) {
    tokio::time::timeout(TIMEOUT, rx.wait_for(|p| cond(p)))
        .await
        .expect("timed out waiting for pipeline progress")
        .expect("pipeline ended");
}

/// PREPARE, plain transactions, COMMIT PREPARED; PREPARE, ROLLBACK PREPARED;
/// under `proto_version`.
async fn prepared_rows_arrive_once_at_commit_prepared(proto_version: u32) {
    let slot = format!("twophase_v{proto_version}");
    let (db, client) = two_phase_database(&slot).await;
    let dir = temp_dir(&slot);
    let base = dir.join("out.jsonl");
    let (stop, task, mut progress) = run_pipeline(&db, &slot, proto_version, &base).await;

    let before_prepare = current_lsn(&client).await;
    let after_prepare = prepare(&client, 1, &format!("{slot}_commit")).await;
    insert(&client, 2).await;
    insert(&client, 3).await;
    let after_plain = current_lsn(&client).await;
    // Ordinary transactions flow past the prepared one...
    await_ids(&base, "the plain rows", |ids| ids == [2, 3]).await;
    // ...and are flushed, yet the slot stays at the PREPARE.
    await_progress(&mut progress, |p| p.confirmed >= before_prepare).await;
    let p = *progress.borrow();
    assert!(
        p.confirmed < after_prepare,
        "confirmed {} passed the undecided PREPARE (before {after_prepare})",
        p.confirmed
    );

    client
        .batch_execute(&format!("COMMIT PREPARED '{slot}_commit'"))
        .await
        .unwrap();
    let after_commit = current_lsn(&client).await;
    await_ids(&base, "the prepared row", |ids| ids.contains(&1)).await;
    // Decided and flushed: the slot moves on.
    await_progress(&mut progress, |p| p.confirmed >= after_commit).await;

    prepare(&client, 4, &format!("{slot}_rollback")).await;
    client
        .batch_execute(&format!("ROLLBACK PREPARED '{slot}_rollback'"))
        .await
        .unwrap();
    insert(&client, 5).await;
    await_ids(&base, "the row after the rollback", |ids| ids.contains(&5)).await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();

    let lines = read_lines(&base);
    assert_eq!(
        inserted_ids(&lines),
        [2, 3, 1, 5],
        "once each, in commit order"
    );
    // The prepared row carries the COMMIT PREPARED's position.
    let at = commit_lsn_of(&lines, 1);
    assert!(
        at >= after_plain && at < after_commit,
        "{at} not at the commit"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn protocol_1_on_a_two_phase_slot() {
    prepared_rows_arrive_once_at_commit_prepared(1).await;
}

#[tokio::test]
async fn protocol_2_on_a_two_phase_slot() {
    prepared_rows_arrive_once_at_commit_prepared(2).await;
}

#[tokio::test]
async fn protocol_3_on_a_two_phase_slot() {
    prepared_rows_arrive_once_at_commit_prepared(3).await;
}

/// A prepared transaction larger than the server's
/// `logical_decoding_work_mem`: under protocol 1 the server spills it and
/// sends it whole; under 2 and 3 it streams it in blocks, which pgcdc
/// holds (spilling to its own files past a small `byte_budget`) until
/// COMMIT PREPARED. Every row arrives once, after the plain row committed
/// in between.
async fn a_large_prepared_transaction_arrives_once(proto_version: u32) {
    let slot = format!("twophase_big_v{proto_version}");
    let (db, client) = two_phase_database(&slot).await;
    client
        .batch_execute(&format!(
            "ALTER DATABASE \"{}\" SET logical_decoding_work_mem = '64kB'",
            db.name()
        ))
        .await
        .unwrap();
    let dir = temp_dir(&slot);
    let base = dir.join("out.jsonl");
    let spill = dir.join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let spill_dir = spill.clone();
    let (stop, task, _progress) = run_pipeline_tuned(&db, &slot, proto_version, &base, |o| {
        o.stream_in_progress = true;
        o.byte_budget = 16 * 1024;
        o.spill_dir = spill_dir;
    })
    .await;
    let rows = 3_000;
    client
        .batch_execute(&format!(
            "BEGIN; INSERT INTO ledger SELECT 1000 + i, repeat('x', 200) FROM generate_series(1, {rows}) i; \
             PREPARE TRANSACTION '{slot}_big';"
        ))
        .await
        .unwrap();
    insert(&client, 2).await;
    await_ids(&base, "the plain row", |ids| ids.contains(&2)).await;
    assert!(
        !inserted_ids(&read_lines(&base)).contains(&1001),
        "a prepared row arrived before COMMIT PREPARED"
    );
    client
        .batch_execute(&format!("COMMIT PREPARED '{slot}_big'"))
        .await
        .unwrap();
    await_ids(&base, "the prepared rows", |ids| {
        ids.contains(&(1000 + rows))
    })
    .await;
    // The server did stream it (2, 3) or spill it (1).
    let column = if proto_version >= 2 {
        "stream_txns"
    } else {
        "spill_txns"
    };
    eventually("the slot's statistics", TIMEOUT, || async {
        let n: i64 = client
            .query_one(
                &format!("SELECT {column} FROM pg_stat_replication_slots WHERE slot_name = $1"),
                &[&slot],
            )
            .await
            .unwrap()
            .get(0);
        (n > 0).then_some(())
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    let ids = inserted_ids(&read_lines(&base));
    assert_eq!(ids.len(), rows as usize + 1, "every row once");
    assert_eq!(ids[0], 2, "the plain row committed first");
    assert!(ids[1..].iter().copied().eq(1001..=(1000 + rows)));
    let _ = std::fs::remove_dir_all(dir);
}

/// The connection drops between PREPARE and COMMIT PREPARED and the
/// pipeline reconnects in the same process: the prepared row arrives once.
#[tokio::test]
async fn a_reconnect_between_prepare_and_commit_prepared_delivers_once() {
    let slot = "twophase_reconnect";
    let (db, client) = two_phase_database(slot).await;
    let dir = temp_dir(slot);
    let base = dir.join("out.jsonl");
    let (stop, task, _progress) = run_pipeline(&db, slot, 3, &base).await;
    prepare(&client, 1, "reconnect_commit").await;
    insert(&client, 2).await;
    await_ids(&base, "the plain row", |ids| ids == [2]).await;
    let pid: i32 = client
        .query_one(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0);
    client
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    eventually("the pipeline to reconnect", TIMEOUT, || async {
        let row = client
            .query_one(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap();
        row.get::<_, Option<i32>>(0)
            .filter(|p| *p != pid)
            .map(|_| ())
    })
    .await;
    client
        .batch_execute("COMMIT PREPARED 'reconnect_commit'")
        .await
        .unwrap();
    insert(&client, 3).await;
    await_ids(&base, "the row after the commit", |ids| ids.contains(&3)).await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(inserted_ids(&read_lines(&base)), [2, 1, 3], "once each");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_large_prepared_transaction_under_protocol_1() {
    a_large_prepared_transaction_arrives_once(1).await;
}

#[tokio::test]
async fn a_large_prepared_transaction_streamed_under_protocol_2() {
    a_large_prepared_transaction_arrives_once(2).await;
}

#[tokio::test]
async fn a_large_prepared_transaction_streamed_under_protocol_3() {
    a_large_prepared_transaction_arrives_once(3).await;
}

#[tokio::test]
async fn a_clean_restart_between_prepare_and_commit_prepared_delivers_once() {
    let slot = "twophase_restart";
    let (db, client) = two_phase_database(slot).await;
    let dir = temp_dir(slot);
    let first = dir.join("first.jsonl");
    let second = dir.join("second.jsonl");

    let (stop, task, mut progress) = run_pipeline(&db, slot, 1, &first).await;
    let after_prepare = prepare(&client, 10, "restart_commit").await;
    prepare(&client, 11, "restart_rollback").await;
    insert(&client, 12).await;
    let after_plain = current_lsn(&client).await;
    await_ids(&first, "the plain row", |ids| ids == [12]).await;
    await_progress(&mut progress, |p| p.confirmed > Lsn::INVALID).await;
    stop.send(()).unwrap();
    let stopped = task.await.unwrap().unwrap();
    // The final status update kept the slot at the first PREPARE, though
    // the plain transaction after it was flushed.
    let confirmed = slot_confirmed(&client, slot).await;
    assert_eq!(confirmed, stopped.confirmed);
    assert!(confirmed < after_prepare, "{confirmed} >= {after_prepare}");

    let (stop, task, _) = run_pipeline(&db, slot, 1, &second).await;
    // Each on its own: neither may run inside a transaction block.
    client
        .batch_execute("COMMIT PREPARED 'restart_commit'")
        .await
        .unwrap();
    client
        .batch_execute("ROLLBACK PREPARED 'restart_rollback'")
        .await
        .unwrap();
    insert(&client, 13).await;
    await_ids(&second, "the rows after the decisions", |ids| {
        ids.contains(&13)
    })
    .await;
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();

    let first_ids = inserted_ids(&read_lines(&first));
    let second_lines = read_lines(&second);
    let second_ids = inserted_ids(&second_lines);
    assert_eq!(first_ids, [12], "nothing prepared before its decision");
    // Without checkpoints the plain row may come again (at least once); the
    // prepared one comes exactly once, the rolled-back one never.
    assert_eq!(count(&second_ids, 10), 1, "{second_ids:?}");
    assert_eq!(count(&second_ids, 11), 0, "{second_ids:?}");
    let at = commit_lsn_of(&second_lines, 10);
    assert!(at >= after_plain, "{at} < {after_plain}: {second_lines:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `pgcdc run` with checkpoints: SIGKILLed, then stopped cleanly, each time
/// between PREPARE and its decision, while checkpoints past the PREPARE
/// exist. The prepared row is delivered exactly once, the rolled-back one
/// never, and the slot is never confirmed past the undecided PREPARE.
#[tokio::test]
async fn pgcdc_run_killed_and_restarted_between_prepare_and_commit_prepared() {
    let slot = "twophase_kill";
    let (db, client) = two_phase_database(slot).await;
    let dir = temp_dir(slot);
    let events = dir.join("events.jsonl");
    let config_text = format!(
        r#"
        {source}
        [pipeline]
        status_interval_secs = 1

        [snapshot]
        mode = "latest"

        [[sinks]]
        type = "file"
        path = {events:?}
        format = "plain"

        [checkpoint]
        job = "twophase_kill"
        interval_ms = 100
        keep = 2
        "#,
        source = db.source_toml(&["public.ledger"], slot, &format!("{slot}_pub")),
        events = events.display().to_string(),
    );
    let config = dir.join("pgcdc.toml");
    std::fs::write(&config, config_text).unwrap();
    let store = PgCheckpointStore::connect(db.connection_info().config(), PgStoreConfig::default())
        .await
        .unwrap();
    let job = JobName::new("twophase_kill").unwrap();
    // Waits until a checkpoint covers `position`.
    let checkpointed = |position: Lsn| {
        let store = &store;
        let job = &job;
        async move {
            eventually("a checkpoint past the position", TIMEOUT, || async move {
                store
                    .list(job)
                    .await
                    .unwrap()
                    .iter()
                    .any(|m| m.commit_end_lsn >= position)
                    .then_some(())
            })
            .await
        }
    };

    let mut pgcdc = Pgcdc::run(&config).unwrap();
    insert(&client, 1).await;
    await_ids(&events, "the first row", |ids| ids.contains(&1)).await;
    let after_prepare = prepare(&client, 20, "kill_commit").await;
    prepare(&client, 21, "kill_rollback").await;
    insert(&client, 2).await;
    checkpointed(current_lsn(&client).await).await;

    // SIGKILL with a checkpoint past the undecided PREPARE.
    let pid = pgcdc.id().unwrap().to_string();
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    pgcdc.wait(TIMEOUT).await.unwrap();
    assert!(slot_confirmed(&client, slot).await < after_prepare);

    // Back up: plain rows flow and newer checkpoints are taken, the slot
    // stays held.
    let mut pgcdc = Pgcdc::run(&config).unwrap();
    insert(&client, 3).await;
    await_ids(&events, "the row after the kill", |ids| ids.contains(&3)).await;
    checkpointed(current_lsn(&client).await).await;
    assert!(slot_confirmed(&client, slot).await < after_prepare);

    // A clean stop, with the transactions still undecided.
    pgcdc.terminate(TIMEOUT).await.unwrap();
    let confirmed = slot_confirmed(&client, slot).await;
    assert!(
        confirmed < after_prepare,
        "{confirmed} >= {after_prepare}; stderr:\n{}",
        pgcdc.stderr()
    );
    let ids = inserted_ids(&read_lines(&events));
    assert_eq!((count(&ids, 20), count(&ids, 21)), (0, 0), "{ids:?}");

    let mut pgcdc = Pgcdc::run(&config).unwrap();
    // Each on its own: neither may run inside a transaction block.
    client
        .batch_execute("COMMIT PREPARED 'kill_commit'")
        .await
        .unwrap();
    client
        .batch_execute("ROLLBACK PREPARED 'kill_rollback'")
        .await
        .unwrap();
    insert(&client, 4).await;
    await_ids(&events, "the rows after the decisions", |ids| {
        ids.contains(&4)
    })
    .await;
    let decided = current_lsn(&client).await;
    checkpointed(decided).await;
    // Decided, flushed and checkpointed: the slot moves past the PREPARE.
    eventually("the slot to move past the PREPARE", TIMEOUT, || {
        let client = &client;
        async move { (slot_confirmed(client, slot).await > after_prepare).then_some(()) }
    })
    .await;
    pgcdc.terminate(TIMEOUT).await.unwrap();

    let ids = inserted_ids(&read_lines(&events));
    assert_eq!(count(&ids, 20), 1, "the prepared row exactly once: {ids:?}");
    assert_eq!(count(&ids, 21), 0, "the rolled-back row never: {ids:?}");
    for id in [1, 2, 3, 4] {
        assert!(count(&ids, id) >= 1, "row {id} missing: {ids:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
