//! Checkpoints end to end: what they cost a running pipeline, and how long a
//! job with a big state takes to resume.
//!
//! Starts its own throwaway server through the test harness.
//!
//! * **Throughput**: one workload (`PGCDC_E2E_TXNS` transactions of
//!   `PGCDC_E2E_ROWS_PER_TXN` rows, default 10,000 × 100, so a run spans
//!   several checkpoints) is written after two pgoutput slots were created,
//!   then streamed from one slot with checkpoints every second
//!   (`PgCheckpointStore`, a `table_counters` operator) and from the other
//!   without, both into the null sink, each until every row has reached the
//!   sinks; the checkpointed run's time includes its final checkpoint. The
//!   order alternates; `PGCDC_BENCH_REPS` (default 3) repetitions, medians
//!   reported (and the range of the per-repetition ratios).
//!   `PGCDC_E2E_OPERATOR_MIB` (default 0) adds an operator holding that many
//!   MiB of random state to both runs, so every checkpoint saves it.
//! * **Recovery**: a job's checkpoint holding 256 MiB of pseudo-random
//!   operator state (`PGCDC_E2E_STATE_MIB`) is saved, one row is committed
//!   after its position, and the time is measured from the start of
//!   recovery (store connection, [`recover`], restoring the operator) to the
//!   first change event reaching a sink. The same is measured with a 1 KiB
//!   state as the baseline: the checkpoint's own WAL (written after its
//!   position) is decoded again by the server before the row is reached.
//!
//! `cargo bench -p pgcdc-benches --bench checkpoint_e2e`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pgcdc_benches::{median, noise};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cdc_core::Lsn;
use cdc_runtime::checkpoint::{recover, slot_state, CheckpointOptions, RecoveryOptions};
use cdc_runtime::event::ChangeEvent;
use cdc_runtime::operators::{CommitContext, Operator, OperatorError, TableCounters};
use cdc_runtime::pipeline::{Pipeline, PipelineOptions, Progress};
use cdc_runtime::replication::{ReplicationConfig, ReplicationConnection};
use cdc_runtime::sinks::{NullSink, Sink, SinkError};
use checkpoint_api::{
    Checkpoint, CheckpointId, CheckpointStore, JobName, OperatorState, OperatorStateError, OwnerId,
    ProtocolOptions, SourcePosition, StatefulOperator, Timestamp,
};
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::{TestDatabase, TestPostgres};
use pgcdc::config::Config;
use tokio::sync::watch;
use tokio_postgres::Client;

const MIB: usize = 1 << 20;
const PUBLICATION: &str = "e2e_pub";
const TIMEOUT: Duration = Duration::from_secs(600);

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The replication settings of `db` (through a `pgcdc.toml`, as `pgcdc run` gets them).
fn replication_config(db: &TestDatabase) -> ReplicationConfig {
    let text = format!(
        "{}\n[[sinks]]\ntype = \"null\"\n",
        db.source_toml(&["public.rows"], "unused", PUBLICATION)
    );
    Config::parse(&text)
        .unwrap()
        .source
        .replication_config()
        .unwrap()
}

async fn current_lsn(client: &Client) -> Lsn {
    let row = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}

async fn create_slot(client: &Client, slot: &str) {
    client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
}

async fn drop_slot(client: &Client, slot: &str) {
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
}

async fn store(db: &TestDatabase) -> PgCheckpointStore {
    let mut config = PgStoreConfig::default();
    config.keep_on_save = Some(cdc_runtime::checkpoint::DEFAULT_KEEP);
    PgCheckpointStore::connect(db.config(), config)
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------
// Throughput with and without checkpoints.

struct Workload {
    txns: usize,
    rows_per_txn: usize,
}

impl Workload {
    fn rows(&self) -> u64 {
        (self.txns * self.rows_per_txn) as u64
    }

    /// Writes the workload, one transaction per statement, then one more row
    /// in its own transaction; returns the WAL position after the workload's
    /// last commit.
    ///
    /// A run stops once the extra row reached the sinks: events are counted
    /// when they are handed to the sinks, which may be before their commit is
    /// processed, and a checkpoint at shutdown covers only committed
    /// transactions. Stopping at the workload's last row could leave the
    /// final checkpoint one transaction short.
    async fn write(&self, client: &Client, first_id: i64) -> Lsn {
        let insert = client
            .prepare(
                "INSERT INTO rows (id, grp, v) \
                 SELECT g, g % 1000, md5(g::text) FROM generate_series($1::bigint, $2::bigint) g",
            )
            .await
            .unwrap();
        let n = self.rows_per_txn as i64;
        for t in 0..self.txns as i64 {
            let lo = first_id + t * n;
            client
                .execute(&insert, &[&lo, &(lo + n - 1)])
                .await
                .unwrap();
        }
        let end = current_lsn(client).await;
        client
            .execute(
                "INSERT INTO rows (id, grp, v) VALUES ($1, 0, 'end of the workload')",
                &[&-first_id],
            )
            .await
            .unwrap();
        end
    }
}

/// One pipeline run over `slot` until `expected` events reached the sinks.
struct RunResult {
    elapsed: Duration,
    progress: Progress,
}

async fn stream_until(
    rc: &ReplicationConfig,
    slot: &str,
    expected: u64,
    checkpoints: Option<CheckpointOptions>,
    extra_state: &Bytes,
) -> RunResult {
    let options = PipelineOptions::new(rc.clone(), slot, PUBLICATION);
    let sinks: Vec<Box<dyn Sink>> = vec![Box::new(NullSink::new())];
    let mut operators: Vec<Box<dyn Operator>> = vec![Box::new(TableCounters::new("counts"))];
    if !extra_state.is_empty() {
        operators.push(Box::new(Blob {
            state: extra_state.clone(),
            restored: Arc::default(),
        }));
    }
    let mut pipeline = Pipeline::new(options, sinks).with_operators(operators);
    if let Some(c) = checkpoints {
        pipeline = pipeline.with_checkpoints(c);
    }
    let mut progress = pipeline.progress();
    // Events are counted once their batch is handed to the sinks; shutdown
    // then drains and flushes every sink (and takes the final checkpoint).
    let shutdown = async move {
        let _ = progress.wait_for(|p| p.events >= expected).await;
    };
    let start = Instant::now();
    let progress = tokio::time::timeout(TIMEOUT, pipeline.run(shutdown))
        .await
        .expect("the pipeline did not finish in time")
        .unwrap();
    RunResult {
        elapsed: start.elapsed(),
        progress,
    }
}

struct Throughput {
    off: f64,
    on: f64,
    ratio: f64,
    ratio_range: (f64, f64),
    saves: f64,
}

async fn throughput(
    db: &TestDatabase,
    client: &Client,
    reps: usize,
    extra_state: &Bytes,
) -> Throughput {
    let workload = Workload {
        txns: env_or("PGCDC_E2E_TXNS", 10_000),
        rows_per_txn: env_or("PGCDC_E2E_ROWS_PER_TXN", 100),
    };
    let expected = workload.rows();
    // The workload and the row after it.
    let events = expected + 1;
    let rc = replication_config(db);
    let store: Arc<dyn CheckpointStore> = Arc::new(store(db).await);
    let owner = OwnerId::new("bench").unwrap();
    let (mut off, mut on, mut ratios, mut saves) = (vec![], vec![], vec![], vec![]);
    for rep in 0..reps {
        let (slot_off, slot_on) = (format!("e2e_off_{rep}"), format!("e2e_on_{rep}"));
        create_slot(client, &slot_off).await;
        create_slot(client, &slot_on).await;
        let end = workload
            .write(client, (rep as u64 * expected) as i64 + 1)
            .await;
        let job = JobName::new(format!("e2e-{rep}")).unwrap();
        let lease = store.acquire_lease(&job, &owner).await.unwrap();
        let mut copts = CheckpointOptions::new(store.clone(), lease);
        copts.interval = Duration::from_secs(1);

        let checkpoints_first = rep % 2 == 1;
        let mut results = [None, None];
        for with_checkpoints in [checkpoints_first, !checkpoints_first] {
            eprintln!(
                "rep {rep}: {} checkpoints...",
                if with_checkpoints { "with" } else { "without" }
            );
            let r = if with_checkpoints {
                stream_until(&rc, &slot_on, events, Some(copts.clone()), extra_state).await
            } else {
                stream_until(&rc, &slot_off, events, None, extra_state).await
            };
            assert_eq!(r.progress.events, events, "every row exactly once");
            let rate = events as f64 / r.elapsed.as_secs_f64();
            eprintln!(
                "  {:.2} s, {:.0} events/s, confirmed {} (end {end}), {} checkpoints ({} failed)",
                r.elapsed.as_secs_f64(),
                rate,
                r.progress.confirmed,
                r.progress.checkpoints.saved,
                r.progress.checkpoints.failed
            );
            if with_checkpoints {
                let last = r.progress.checkpoints.last_lsn;
                eprintln!("  last checkpoint at {last}");
                assert!(last >= end, "the final checkpoint covers the workload");
                saves.push(r.progress.checkpoints.saved as f64);
            }
            results[usize::from(with_checkpoints)] = Some(rate);
        }
        let (r_off, r_on) = (results[0].unwrap(), results[1].unwrap());
        off.push(r_off);
        on.push(r_on);
        ratios.push(r_on / r_off);
        drop_slot(client, &slot_off).await;
        drop_slot(client, &slot_on).await;
    }
    Throughput {
        off: median(off),
        on: median(on),
        ratio_range: (
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ),
        ratio: median(ratios),
        saves: median(saves),
    }
}

// ---------------------------------------------------------------------------
// Recovery of a big state.

/// Bench-only operator whose state is an opaque blob; records when it was restored.
struct Blob {
    state: Bytes,
    restored: Arc<Mutex<Option<Instant>>>,
}

impl StatefulOperator for Blob {
    fn operator_id(&self) -> &str {
        "blob"
    }

    fn kind(&self) -> &str {
        "bench_blob"
    }

    fn state_version(&self) -> u32 {
        1
    }

    fn snapshot_state(&self) -> Result<Bytes, OperatorStateError> {
        Ok(self.state.clone())
    }

    fn restore_state(&mut self, version: u32, state: Bytes) -> Result<(), OperatorStateError> {
        if version != 1 {
            return Err(OperatorStateError::UnsupportedVersion {
                operator: "blob".into(),
                found: version,
                supported: 1,
            });
        }
        self.state = state;
        *self.restored.lock().unwrap() = Some(Instant::now());
        Ok(())
    }
}

impl Operator for Blob {
    fn on_event(&mut self, _event: &ChangeEvent) -> Result<(), OperatorError> {
        Ok(())
    }

    fn on_commit(
        &mut self,
        _commit: &CommitContext,
        _out: &mut Vec<ChangeEvent>,
    ) -> Result<(), OperatorError> {
        Ok(())
    }

    fn on_abort(&mut self) {}
}

/// A null sink that publishes the instant of its first non-empty write.
struct FirstEvent {
    inner: NullSink,
    first: watch::Sender<Option<Instant>>,
}

#[async_trait::async_trait]
impl Sink for FirstEvent {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        if !batch.is_empty() && self.first.borrow().is_none() {
            self.first.send_replace(Some(Instant::now()));
        }
        self.inner.write(batch).await
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        self.inner.flush().await
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.inner.close().await
    }
}

struct RecoveryTimes {
    /// Store connection, lease, list and load of the checkpoint (`recover`).
    load: Duration,
    /// Restoring the operator (pipeline start until its state is in place).
    restore: Duration,
    /// From restored to the first event at the sink (replication connection,
    /// START_REPLICATION, decoding).
    stream: Duration,
}

impl RecoveryTimes {
    fn total(&self) -> Duration {
        self.load + self.restore + self.stream
    }
}

async fn recovery_once(
    db: &TestDatabase,
    client: &Client,
    name: &str,
    state: &Bytes,
) -> RecoveryTimes {
    let rc = replication_config(db);
    let slot = format!("e2e_recover_{name}");
    let job = JobName::new(format!("recover-{name}")).unwrap();
    create_slot(client, &slot).await;
    // The checkpoint sits at the current position; one row commits after it.
    let position = current_lsn(client).await;
    {
        let store = store(db).await;
        let lease = store
            .acquire_lease(&job, &OwnerId::new("writer").unwrap())
            .await
            .unwrap();
        let mut cp = Checkpoint::new(
            job.clone(),
            CheckpointId::FIRST,
            Timestamp::from_unix_micros(0),
            SourcePosition {
                commit_end_lsn: position,
                slot: slot.clone(),
                publications: vec![PUBLICATION.into()],
                protocol: ProtocolOptions::default(),
            },
        );
        cp.operators.push(
            OperatorState::capture(&Blob {
                state: state.clone(),
                restored: Arc::default(),
            })
            .unwrap(),
        );
        store.save(&lease, &cp).await.unwrap();
    }
    client
        .execute(
            "INSERT INTO rows (id, grp, v) \
             VALUES ((SELECT coalesce(min(id), 0) - 1 FROM rows), 0, 'after the checkpoint')",
            &[],
        )
        .await
        .unwrap();
    let wal = current_lsn(client)
        .await
        .as_u64()
        .saturating_sub(position.as_u64());
    eprintln!(
        "  {:.0} MiB of WAL between the checkpoint's position and the row",
        wal as f64 / MIB as f64
    );

    // A new process from here on.
    let start = Instant::now();
    let store = store(db).await;
    let mut conn = ReplicationConnection::connect(&rc).await.unwrap();
    let slot_before = slot_state(&mut conn, &slot).await.unwrap();
    let _ = conn.close().await;
    let recovered = recover(
        &store,
        &slot,
        slot_before.as_ref(),
        &RecoveryOptions {
            job,
            owner: OwnerId::new("bench").unwrap(),
            from_checkpoint: None,
            trust_slot: false,
        },
    )
    .await
    .unwrap();
    let loaded = Instant::now();
    let resume = recovered.checkpoint.map(|c| c.checkpoint);
    assert_eq!(
        resume.as_ref().map(|c| c.state_len()),
        Some(state.len() as u64)
    );
    let mut options = PipelineOptions::new(rc, &slot, PUBLICATION);
    options.start_lsn = recovered.start_lsn;
    let copts = CheckpointOptions {
        interval: Duration::from_secs(3600),
        resume,
        next_id: recovered.next_id,
        ..CheckpointOptions::new(Arc::new(store), recovered.lease)
    };
    let restored = Arc::new(Mutex::new(None));
    let (first_tx, mut first_rx) = watch::channel(None);
    let sink = FirstEvent {
        inner: NullSink::new(),
        first: first_tx,
    };
    let blob = Blob {
        state: Bytes::new(),
        restored: restored.clone(),
    };
    let pipeline = Pipeline::new(options, vec![Box::new(sink)])
        .with_operators(vec![Box::new(blob)])
        .with_checkpoints(copts);
    let first = first_rx.clone();
    // Stop right after the first write (the final checkpoint that follows
    // is not part of the measurement).
    let shutdown = async move {
        let _ = first_rx.wait_for(Option::is_some).await;
    };
    let progress = tokio::time::timeout(TIMEOUT, pipeline.run(shutdown))
        .await
        .expect("recovery did not deliver the row in time")
        .unwrap();
    assert_eq!(progress.events, 1, "only the row after the checkpoint");
    let first = first.borrow().expect("the sink saw the row");
    let restored = restored.lock().unwrap().expect("the operator was restored");
    drop_slot(client, &slot).await;
    RecoveryTimes {
        load: loaded - start,
        restore: restored - loaded,
        stream: first - restored,
    }
}

struct Recovery {
    load: f64,
    restore: f64,
    stream: f64,
    total: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn recovery(db: &TestDatabase, client: &Client, reps: usize, size: usize) -> Recovery {
    let state = Bytes::from(noise(size, 42));
    let (mut load, mut restore, mut stream, mut total) = (vec![], vec![], vec![], vec![]);
    for rep in 0..reps {
        eprintln!("recovery rep {rep} ({size} bytes of state)...");
        let t = recovery_once(db, client, &format!("{size}_{rep}"), &state).await;
        eprintln!(
            "  load {:.0} ms, restore {:.1} ms, stream {:.0} ms, total {:.0} ms",
            ms(t.load),
            ms(t.restore),
            ms(t.stream),
            ms(t.total())
        );
        load.push(ms(t.load));
        restore.push(ms(t.restore));
        stream.push(ms(t.stream));
        total.push(ms(t.total()));
    }
    Recovery {
        load: median(load),
        restore: median(restore),
        stream: median(stream),
        total: median(total),
    }
}

async fn run() {
    let reps = env_or("PGCDC_BENCH_REPS", 3);
    let state_mib = env_or("PGCDC_E2E_STATE_MIB", 256);
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE rows (id bigint PRIMARY KEY, grp int NOT NULL, v text NOT NULL);
             CREATE PUBLICATION {PUBLICATION} FOR TABLE rows;"
        ))
        .await
        .unwrap();
    let started = Instant::now();
    let operator_mib = env_or("PGCDC_E2E_OPERATOR_MIB", 0);
    let extra_state = Bytes::from(noise(operator_mib * MIB, 7));
    let t = throughput(&db, &client, reps, &extra_state).await;
    let r = recovery(&db, &client, reps, state_mib * MIB).await;
    let base = recovery(&db, &client, reps, 1024).await;

    let operators = match operator_mib {
        0 => "table_counters".to_owned(),
        n => format!("table_counters, {n} MiB operator state"),
    };
    println!(
        "| checkpoints (null sink, {operators}) | events/s (median of {reps}) | ratio (range) |"
    );
    println!("|---|---|---|");
    println!("| off | {:.0} | |", t.off);
    println!(
        "| every 1 s ({:.0} saves per run) | {:.0} | {:.3} ({:.2}–{:.2}) |",
        t.saves, t.on, t.ratio, t.ratio_range.0, t.ratio_range.1
    );
    println!();
    println!(
        "| recovery to first event (median of {reps}) | load (connect, recover) | restore | streaming start | total |"
    );
    println!("|---|---|---|---|---|");
    for (what, r) in [
        (format!("{state_mib} MiB state"), r),
        ("1 KiB state".into(), base),
    ] {
        println!(
            "| {what} | {:.0} ms | {:.1} ms | {:.0} ms | {:.0} ms |",
            r.load, r.restore, r.stream, r.total
        );
    }
    eprintln!("bench took {:.0} s", started.elapsed().as_secs_f64());
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}
