//! The embedding API (`Job::builder`) against a real server: a job with an
//! operator and a sink of the embedder's own, no configuration file. The
//! operator's state is checkpointed and restored by a second run of the job,
//! and every insert is counted exactly once across the two runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cdc_runtime::snapshot::StartupMode;
use cdc_runtime::{
    Capture, ChangeEvent, CheckpointSettings, CommitContext, Job, Operation, Operator,
    OperatorError, Progress, ReplicationConfig, Sink, SinkError, SnapshotSettings, SourceOptions,
    StoreOptions, TableRef,
};
use checkpoint_api::{OperatorStateError, StatefulOperator};
use integration_tests::{eventually, TestDatabase, TestPostgres};
use tokio::sync::{oneshot, watch};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Counts committed inserts; the open transaction's share is kept apart.
#[derive(Default)]
struct InsertCounter {
    committed: u64,
    open: u64,
    restored: Arc<Mutex<Option<u64>>>,
}

impl StatefulOperator for InsertCounter {
    fn operator_id(&self) -> &str {
        "inserts"
    }
    fn kind(&self) -> &str {
        "test.insert_counter"
    }
    fn state_version(&self) -> u32 {
        1
    }
    fn snapshot_state(&self) -> Result<Bytes, OperatorStateError> {
        Ok(Bytes::copy_from_slice(&self.committed.to_le_bytes()))
    }
    fn restore_state(&mut self, _: u32, state: Bytes) -> Result<(), OperatorStateError> {
        let bytes: [u8; 8] =
            state
                .as_ref()
                .try_into()
                .map_err(|_| OperatorStateError::Invalid {
                    operator: "inserts".into(),
                    reason: "not 8 bytes".into(),
                })?;
        self.committed = u64::from_le_bytes(bytes);
        *self.restored.lock().unwrap() = Some(self.committed);
        Ok(())
    }
}

impl Operator for InsertCounter {
    fn on_event(&mut self, event: &ChangeEvent) -> Result<(), OperatorError> {
        self.open += u64::from(matches!(event.op, Operation::Create | Operation::Read));
        Ok(())
    }
    fn on_commit(
        &mut self,
        _: &CommitContext,
        _: &mut Vec<ChangeEvent>,
    ) -> Result<(), OperatorError> {
        self.committed += std::mem::take(&mut self.open);
        Ok(())
    }
    fn on_abort(&mut self) {
        self.open = 0;
    }
}

/// Keeps the ids of the rows it was given, in order.
#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<i64>>>);

#[async_trait::async_trait]
impl Sink for Collect {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        let mut ids = self.0.lock().unwrap();
        for e in batch {
            if let Some(values) = e.after_values() {
                if let Some(cdc_core::Value::Int8(id)) = values.first() {
                    ids.push(*id);
                }
            }
        }
        Ok(())
    }
    async fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
    async fn close(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<Progress, cdc_runtime::JobError>>,
    progress: watch::Receiver<Progress>,
}

fn start(db: &TestDatabase, counter: InsertCounter, sink: Collect) -> Running {
    let rc: ReplicationConfig = db.replication_connection_string().parse().unwrap();
    let tables = Capture::Tables(vec![TableRef::parse("public.items").unwrap()]);
    let mut checkpoints = CheckpointSettings::new(StoreOptions::new(rc.clone()));
    checkpoints.interval = Duration::from_millis(100);
    let job = Job::builder(SourceOptions::new(rc, "embed_slot", "embed_pub", tables))
        .operator(counter)
        .custom_sink(sink)
        .checkpoints(checkpoints)
        .snapshot(SnapshotSettings {
            mode: StartupMode::Initial,
            ..SnapshotSettings::default()
        })
        .build()
        .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let (tx, progress) = watch::channel(Progress::default());
    let task = tokio::spawn(job.run_with_progress(
        async move {
            let _ = stopped.await;
        },
        tx,
    ));
    Running {
        stop,
        task,
        progress,
    }
}

async fn insert(db: &TestDatabase, from: i64, to: i64) {
    let client = db.connect().await.unwrap();
    client
        .execute(
            "INSERT INTO items SELECT g FROM generate_series($1::bigint, $2) g",
            &[&from, &to],
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_job_restores_its_own_operator_and_counts_each_insert_once() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE items (id bigint PRIMARY KEY)")
        .await
        .unwrap();
    insert(&db, 1, 10).await; // read by the initial snapshot

    let first = Collect::default();
    let run = start(&db, InsertCounter::default(), first.clone());
    insert(&db, 11, 25).await;
    let mut progress = run.progress.clone();
    // Stop once a checkpoint covers all 25 rows (the sink has them all).
    eventually("the first run's 25 rows", TIMEOUT, || async {
        (first.0.lock().unwrap().len() >= 25).then_some(())
    })
    .await;
    let saved = progress.borrow().checkpoints.saved;
    tokio::time::timeout(TIMEOUT, progress.wait_for(|p| p.checkpoints.saved > saved))
        .await
        .unwrap()
        .unwrap();
    run.stop.send(()).unwrap();
    let done = run.task.await.unwrap().unwrap();
    assert!(done.checkpoints.saved >= 1, "{done:?}");
    let mut ids = first.0.lock().unwrap().clone();
    ids.sort_unstable();
    assert_eq!(ids, (1..=25).collect::<Vec<i64>>());

    // While stopped, more rows; the second run resumes from the final checkpoint.
    insert(&db, 26, 40).await;
    let restored = Arc::new(Mutex::new(None));
    let counter = InsertCounter {
        restored: restored.clone(),
        ..InsertCounter::default()
    };
    let second = Collect::default();
    let run = start(&db, counter, second.clone());
    eventually("the second run's 15 rows", TIMEOUT, || async {
        (second.0.lock().unwrap().len() >= 15).then_some(())
    })
    .await;
    run.stop.send(()).unwrap();
    let done = run.task.await.unwrap().unwrap();
    assert_eq!(
        *restored.lock().unwrap(),
        Some(25),
        "the operator resumes from the final checkpoint"
    );
    // Nothing the first run's final checkpoint covered comes again.
    let ids = second.0.lock().unwrap().clone();
    assert_eq!(ids, (26..=40).collect::<Vec<i64>>(), "{done:?}");

    // The operator's state is in the newest checkpoint: 40 inserts, each once.
    let store = StoreOptions::new(db.replication_connection_string().parse().unwrap())
        .open()
        .await
        .unwrap();
    let latest = checkpoint_api::CheckpointStore::latest(
        &store,
        &checkpoint_api::JobName::new("embed_slot").unwrap(),
    )
    .await
    .unwrap();
    let cp = latest.checkpoint.expect("a checkpoint").checkpoint;
    let state = cp.operator("inserts").expect("the operator's state");
    assert_eq!(state.state.as_ref(), 40u64.to_le_bytes());
    assert_eq!(
        cp.config_fingerprint.len(),
        32,
        "the job's configuration fingerprint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_stops_at_once_when_shut_down_while_starting() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE items (id bigint PRIMARY KEY)")
        .await
        .unwrap();
    // Another instance holds the job's lock: starting waits for it
    // (up to LOCK_WAIT) before it could fail.
    let rc: ReplicationConfig = db.replication_connection_string().parse().unwrap();
    let holder = StoreOptions::new(rc.clone()).open().await.unwrap();
    let _held = cdc_runtime::job::JobLock::acquire(holder.pool(), "embed_slot")
        .await
        .unwrap();

    let run = start(&db, InsertCounter::default(), Collect::default());
    let started = std::time::Instant::now();
    eventually("the job waiting for its lock", TIMEOUT, || async {
        let waiting: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        (waiting > 0).then_some(())
    })
    .await;
    run.stop.send(()).unwrap();
    let progress = tokio::time::timeout(cdc_runtime::job::LOCK_WAIT, run.task)
        .await
        .expect("the job heard the shutdown while waiting for the lock")
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() < cdc_runtime::job::LOCK_WAIT,
        "{:?}",
        started.elapsed()
    );
    assert_eq!(progress, Progress::default(), "nothing streamed");
}
