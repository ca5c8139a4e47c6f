//! The sink task against fake sinks: retries, replay, give-up, checkpoint commits.

use super::*;
use crate::checkpoint::{CheckpointOptions, Coordinator};
use crate::event::{Operation, SourceInfo};
use crate::pipeline::Backoff;
use checkpoint_api::testkit::MemoryStore;
use checkpoint_api::{
    Checkpoint, CheckpointError, CheckpointMeta, CheckpointStore, JobName, Lease, OwnerId,
};
use std::sync::Mutex;

/// What the fake sink did: `durable` holds the ids (event indexes) of
/// flushed events, `pending` the written ones a reset discards.
#[derive(Default)]
struct State {
    durable: Vec<u32>,
    pending: Vec<u32>,
    writes: u32,
    flushes: u32,
    resets: u32,
    /// Write calls (1-based, replays included) that apply half the
    /// batch and then fail transiently.
    fail_writes: Vec<u32>,
    /// Flush calls that fail transiently.
    fail_flushes: Vec<u32>,
    /// The write call that fails permanently.
    permanent_at: Option<u32>,
    /// Every write fails transiently.
    always_fail: bool,
    /// Whether `reset` works (or is the trait's default).
    can_reset: bool,
    /// Checkpoint commits tried.
    commits: u32,
    /// Commit calls that fail transiently (rolling back).
    fail_commits: Vec<u32>,
    /// Every commit fails permanently.
    permanent_commit: bool,
}

/// A fake sink; with a store, it commits checkpoints (into the store)
/// and makes its writes durable only with them.
struct Fake(Arc<Mutex<State>>, Option<Arc<MemoryStore>>);

fn broken() -> SinkError {
    SinkError::io(
        "writing",
        None,
        std::io::Error::from(std::io::ErrorKind::BrokenPipe),
    )
}

#[async_trait::async_trait]
impl Sink for Fake {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        let mut s = self.0.lock().unwrap();
        s.writes += 1;
        let call = s.writes;
        if s.always_fail {
            return Err(broken());
        }
        if s.permanent_at == Some(call) {
            return Err(SinkError::Malformed("bad event"));
        }
        if s.fail_writes.contains(&call) {
            let half = batch.len() / 2;
            s.pending.extend(batch[..half].iter().map(|e| e.index));
            return Err(broken());
        }
        s.pending.extend(batch.iter().map(|e| e.index));
        Ok(())
    }
    async fn flush(&mut self) -> Result<(), SinkError> {
        let mut s = self.0.lock().unwrap();
        s.flushes += 1;
        if s.fail_flushes.contains(&s.flushes) {
            return Err(broken());
        }
        let pending = std::mem::take(&mut s.pending);
        s.durable.extend(pending);
        Ok(())
    }
    async fn close(&mut self) -> Result<(), SinkError> {
        let mut s = self.0.lock().unwrap();
        let pending = std::mem::take(&mut s.pending);
        if self.1.is_none() {
            s.durable.extend(pending);
        }
        Ok(())
    }
    fn commits_checkpoints(&self) -> bool {
        self.1.is_some()
    }
    async fn commit_checkpoint(
        &mut self,
        checkpoint: &Checkpoint,
        lease: &Lease,
        _keep: usize,
    ) -> Result<CheckpointMeta, CheckpointError> {
        let failure = {
            let mut s = self.0.lock().unwrap();
            s.commits += 1;
            let transient = s.fail_commits.contains(&s.commits);
            if transient || s.permanent_commit {
                s.pending.clear();
            }
            match (transient, s.permanent_commit) {
                (true, _) => Some(CheckpointError::Unavailable {
                    message: "connection lost".into(),
                    source: None,
                }),
                (false, true) => Some(CheckpointError::Backend {
                    message: "bad".into(),
                    source: None,
                }),
                (false, false) => None,
            }
        };
        if let Some(e) = failure {
            return Err(e);
        }
        let store = self.1.clone().unwrap();
        let meta = store.save(lease, checkpoint).await?;
        let mut s = self.0.lock().unwrap();
        let pending = std::mem::take(&mut s.pending);
        s.durable.extend(pending);
        Ok(meta)
    }
    fn can_reset(&self) -> bool {
        self.0.lock().unwrap().can_reset
    }
    async fn reset(&mut self) -> Result<(), SinkError> {
        let mut s = self.0.lock().unwrap();
        if !s.can_reset {
            return Err(SinkError::ResetUnsupported);
        }
        s.resets += 1;
        s.pending.clear();
        Ok(())
    }
}

fn ev(id: u32) -> ChangeEvent {
    ChangeEvent {
        op: Operation::Message,
        table: None,
        before: None,
        after: None,
        message: None,
        schema_change: None,
        source: SourceInfo {
            commit_lsn: Lsn::from_u64(1),
            lsn: Lsn::from_u64(1),
            xid: 0,
            commit_time: None,
            database: "d".into(),
            slot: "s".into(),
        },
        index: id,
        position: Default::default(),
        boundary: None,
    }
}

/// A batch of events `ids`, ending a transaction at `commit` if given.
fn batch(ids: Range<u32>, commit: Option<u64>) -> Arc<Batch> {
    Arc::new(Batch {
        commit_times: Vec::new(),
        commit_time: None,
        events: ids.map(ev).collect(),
        commit_end: commit.map(Lsn::from_u64),
        checkpoint: None,
    })
}

fn fast(max_attempts: u32, max_retained_events: usize) -> SinkRetry {
    SinkRetry {
        backoff: Backoff {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(2),
            max_attempts: Some(max_attempts),
        },
        max_retained_events,
        max_retained_bytes: usize::MAX,
        operation_timeout: None,
    }
}

/// Runs a sink task over `batches`; after a batch with a commit, waits
/// until the task acknowledged it (so flushes happen between them).
async fn run(
    state: &Arc<Mutex<State>>,
    batches: Vec<Arc<Batch>>,
    retry: SinkRetry,
) -> (Result<(), SinkError>, Lsn) {
    let (tx, rx) = mpsc::channel(4);
    let (ack_tx, mut ack_rx) = watch::channel(Lsn::INVALID);
    let task = tokio::spawn(run_sink_with(
        Box::new(Fake(Arc::clone(state), None)),
        rx,
        ack_tx,
        Arc::new(Notify::new()),
        retry,
        None,
        Duration::ZERO,
    ));
    for b in batches {
        let commit = b.commit_end;
        if tx.send(b).await.is_err() {
            break;
        }
        if let Some(end) = commit {
            if ack_rx.wait_for(|a| *a >= end).await.is_err() {
                break;
            }
        }
    }
    drop(tx);
    let result = task.await.unwrap();
    let acked = *ack_rx.borrow();
    (result, acked)
}

fn state(f: impl FnOnce(&mut State)) -> Arc<Mutex<State>> {
    let mut s = State {
        can_reset: true,
        ..State::default()
    };
    f(&mut s);
    Arc::new(Mutex::new(s))
}

/// Two transactions of three batches each: 0..15 and 15..30.
fn two_transactions() -> Vec<Arc<Batch>> {
    vec![
        batch(0..5, None),
        batch(5..10, None),
        batch(10..15, Some(100)),
        batch(15..20, None),
        batch(20..25, None),
        batch(25..30, Some(200)),
    ]
}

#[tokio::test]
async fn transient_errors_are_retried_by_a_reset_and_a_replay_without_loss_or_duplicates() {
    // Write 3 is the end of the first transaction: the replay must bring
    // back the two batches before it too (a reset discarded them). The
    // first flush fails, so its transaction is replayed once more.
    let s = state(|s| {
        s.fail_writes = vec![3, 9];
        s.fail_flushes = vec![1];
    });
    let (result, acked) = run(&s, two_transactions(), fast(3, 1000)).await;
    result.unwrap();
    let s = s.lock().unwrap();
    assert_eq!(s.durable, (0..30).collect::<Vec<_>>());
    assert_eq!(s.resets, 3);
    assert_eq!(acked, Lsn::from_u64(200));
}

#[tokio::test]
async fn a_permanent_error_stops_the_task_without_a_retry() {
    let s = state(|s| s.permanent_at = Some(2));
    let (result, acked) = run(&s, two_transactions(), fast(3, 1000)).await;
    assert!(
        matches!(result, Err(SinkError::Malformed("bad event"))),
        "{result:?}"
    );
    let s = s.lock().unwrap();
    assert_eq!(s.resets, 0);
    assert!(s.durable.is_empty());
    assert_eq!(acked, Lsn::INVALID);
}

#[tokio::test]
async fn consecutive_failures_give_up_after_max_attempts() {
    let s = state(|s| s.always_fail = true);
    let (result, _) = run(&s, two_transactions(), fast(3, 1000)).await;
    match result {
        Err(SinkError::RetriesExhausted { attempts: 3, last }) => {
            assert!(last.is_retryable(), "{last}");
        }
        other => panic!("expected RetriesExhausted after 3 attempts: {other:?}"),
    }
    assert_eq!(s.lock().unwrap().resets, 3);
}

#[tokio::test]
async fn a_sink_that_cannot_reset_stops_on_its_first_error() {
    let s = state(|s| {
        s.can_reset = false;
        s.fail_writes = vec![2];
    });
    let (result, _) = run(&s, two_transactions(), fast(3, 1000)).await;
    assert!(matches!(result, Err(SinkError::Io { .. })), "{result:?}");
    assert_eq!(s.lock().unwrap().writes, 2);
}

#[tokio::test]
async fn past_the_retained_bound_a_transient_error_stops_the_task() {
    // 10 events since the last flush when write 2 fails, 8 kept at most.
    let s = state(|s| s.fail_writes = vec![2]);
    let (result, _) = run(&s, two_transactions(), fast(3, 8)).await;
    assert!(matches!(result, Err(SinkError::Io { .. })), "{result:?}");
    assert_eq!(s.lock().unwrap().resets, 0);
    // Within the bound the same failure is retried.
    let s = state(|s| s.fail_writes = vec![2]);
    let (result, _) = run(&s, two_transactions(), fast(3, 15)).await;
    result.unwrap();
    let s = s.lock().unwrap();
    assert_eq!(s.resets, 1);
    assert_eq!(s.durable, (0..30).collect::<Vec<_>>());
}

#[tokio::test]
async fn past_the_retained_bytes_a_transient_error_stops_the_task() {
    // The same 10 events as above, bounded by their memory instead: 8 events'
    // worth is not enough to keep them, 15 events' worth is.
    let size = ev(0).approx_size();
    let bytes = |events: usize| SinkRetry {
        max_retained_bytes: events * size,
        ..fast(3, 1000)
    };
    let s = state(|s| s.fail_writes = vec![2]);
    let (result, _) = run(&s, two_transactions(), bytes(8)).await;
    assert!(matches!(result, Err(SinkError::Io { .. })), "{result:?}");
    assert_eq!(s.lock().unwrap().resets, 0);
    let s = state(|s| s.fail_writes = vec![2]);
    let (result, _) = run(&s, two_transactions(), bytes(15)).await;
    result.unwrap();
    let s = s.lock().unwrap();
    assert_eq!(s.resets, 1);
    assert_eq!(s.durable, (0..30).collect::<Vec<_>>());
}

#[test]
fn an_events_size_counts_its_rows_and_message() {
    let bare = ev(0).approx_size();
    assert_eq!(bare, std::mem::size_of::<ChangeEvent>());
    let mut e = ev(0);
    e.after = Some(crate::event::Row::from_values(vec![
        cdc_core::Value::Int8(1),
        cdc_core::Value::Text("x".repeat(100).into()),
    ]));
    e.message = Some(crate::event::MessagePayload {
        transactional: true,
        prefix: "p".into(),
        content: vec![0; 50],
    });
    let values = 2 * std::mem::size_of::<cdc_core::Value<'static>>();
    assert_eq!(e.approx_size(), bare + values + 100 + 1 + 50);
}

#[tokio::test]
async fn the_bound_applies_between_durable_points_only() {
    // Each transaction has 15 events, the bound is 15: a failure in the
    // second transaction is retried because the first was flushed.
    let s = state(|s| s.fail_writes = vec![6]);
    let (result, _) = run(&s, two_transactions(), fast(3, 15)).await;
    result.unwrap();
    let s = s.lock().unwrap();
    assert_eq!(s.resets, 1);
    assert_eq!(s.durable, (0..30).collect::<Vec<_>>());
}

/// A coordinator committing in the sink, with one checkpoint captured
/// at 100 that needs the sink to acknowledge 90.
async fn committing_checkpoint() -> (Coordinator, Arc<MemoryStore>, JobName, Arc<InSinkSave>) {
    let store = Arc::new(MemoryStore::new());
    let job = JobName::new("job").unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("test").unwrap())
        .await
        .unwrap();
    let mut opts = CheckpointOptions::new(store.clone(), lease);
    opts.interval = Duration::ZERO;
    let mut c = Coordinator::new(opts, "slot", &["pub".to_owned()]);
    c.commit_in_sink();
    c.tick();
    let save = c
        .capture(Lsn::from_u64(100), Lsn::from_u64(90), &[])
        .unwrap()
        .expect("a checkpoint for the sink");
    (c, store, job, save)
}

/// Runs the committing sink task over events 0..5, then 5..12 with the
/// checkpoint after event 10.
async fn run_committing(
    state: &Arc<Mutex<State>>,
    store: &Arc<MemoryStore>,
    save: Arc<InSinkSave>,
) -> (Result<(), SinkError>, Lsn) {
    let (tx, rx) = mpsc::channel(4);
    let (ack_tx, ack_rx) = watch::channel(Lsn::INVALID);
    let task = tokio::spawn(run_committing_sink_with(
        Box::new(Fake(Arc::clone(state), Some(store.clone()))),
        rx,
        ack_tx,
        Arc::new(Notify::new()),
        0,
        fast(3, 1000),
        None,
    ));
    tx.send(batch(0..5, None)).await.unwrap();
    tx.send(Arc::new(Batch {
        commit_times: Vec::new(),
        commit_time: None,
        events: (5..12).map(ev).collect(),
        commit_end: Some(Lsn::from_u64(100)),
        checkpoint: Some((5, save)),
    }))
    .await
    .unwrap();
    drop(tx);
    let result = task.await.unwrap();
    let acked = *ack_rx.borrow();
    (result, acked)
}

#[tokio::test]
async fn a_failed_checkpoint_commit_is_replayed_and_retried_and_answered_once() {
    let (mut c, store, job, save) = committing_checkpoint().await;
    // The write before the checkpoint fails, then two commits do.
    let s = state(|s| {
        s.fail_writes = vec![2];
        s.fail_commits = vec![1, 2];
    });
    let (result, acked) = run_committing(&s, &store, save).await;
    result.unwrap();
    c.poll_acks(Lsn::from_u64(100));
    c.saved().await.unwrap();
    assert_eq!(c.stats().saved, 1);
    assert_eq!(c.stats().failed, 0);
    assert_eq!(store.list(&job).await.unwrap().len(), 1);
    assert_eq!(acked, Lsn::from_u64(90));
    let s = s.lock().unwrap();
    // Exactly the events the checkpoint covers, once; those after it
    // were rolled back at close.
    assert_eq!(s.durable, (0..10).collect::<Vec<_>>());
    assert_eq!((s.resets, s.commits), (3, 3));
}

#[tokio::test]
async fn a_permanent_commit_failure_stops_the_task_and_answers_the_coordinator() {
    let (mut c, store, job, save) = committing_checkpoint().await;
    let s = state(|s| s.permanent_commit = true);
    let (result, acked) = run_committing(&s, &store, save).await;
    assert!(
        matches!(result, Err(SinkError::Checkpoint(_))),
        "{result:?}"
    );
    let _ = c.saved().await;
    assert_eq!(c.stats().saved, 0);
    assert!(store.list(&job).await.unwrap().is_empty());
    assert_eq!(acked, Lsn::INVALID);
    let s = s.lock().unwrap();
    assert_eq!((s.resets, s.commits), (0, 1));
    assert!(s.durable.is_empty());
}
