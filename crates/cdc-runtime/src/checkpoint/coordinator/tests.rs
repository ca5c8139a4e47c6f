//! The coordinator against the in-memory store.

#[test]
fn saves_are_summarised_at_most_once_a_minute() {
    let t0 = Instant::now();
    let mut s = SaveSummary::default();
    assert_eq!(s.saved(t0), Some(1), "the first save is reported at once");
    assert_eq!(s.saved(t0 + Duration::from_secs(20)), None);
    assert_eq!(s.saved(t0 + Duration::from_secs(59)), None);
    assert_eq!(s.saved(t0 + Duration::from_secs(60)), Some(3));
    assert_eq!(s.saved(t0 + Duration::from_secs(61)), None);
    assert_eq!(s.saved(t0 + Duration::from_secs(125)), Some(2));
}

use std::time::Duration;

use checkpoint_api::testkit::MemoryStore;
use checkpoint_api::{JobName, OwnerId};

use super::*;
use crate::checkpoint::ConfirmPolicy;
use crate::operators::TableCounters;

fn lsn(v: u64) -> Lsn {
    Lsn::from_u64(v)
}

async fn coordinator(
    store: Arc<MemoryStore>,
    keep: usize,
    confirm: ConfirmPolicy,
) -> (Coordinator, JobName) {
    let job = JobName::new("job").unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("test").unwrap())
        .await
        .unwrap();
    let mut opts = CheckpointOptions::new(store, lease);
    opts.keep = keep;
    opts.confirm = confirm;
    opts.interval = Duration::ZERO;
    (Coordinator::new(opts, "slot", &["pub".to_owned()]), job)
}

async fn take(c: &mut Coordinator, at: u64, ops: &[Box<dyn Operator>]) {
    c.tick();
    assert!(c.wants_capture());
    assert!(c.capture(lsn(at), lsn(at), ops).unwrap().is_none());
    c.poll_acks(lsn(at));
    c.saved().await.unwrap();
}

#[tokio::test]
async fn saves_only_after_every_sink_acknowledged() {
    let store = Arc::new(MemoryStore::new());
    let (mut c, job) = coordinator(store.clone(), 5, ConfirmPolicy::OldestRetained).await;
    let ops: Vec<Box<dyn Operator>> = vec![Box::new(TableCounters::new("counts"))];
    c.tick();
    c.capture(lsn(100), lsn(90), &ops).unwrap();
    assert!(!c.wants_capture(), "one checkpoint at a time");
    c.poll_acks(lsn(89));
    assert!(
        !c.is_saving(),
        "a sink has not flushed what the checkpoint covers"
    );
    assert!(c.is_waiting());
    c.poll_acks(lsn(90));
    assert!(c.is_saving());
    c.saved().await.unwrap();
    assert_eq!(c.confirmable(), lsn(100));
    let stored = store.latest(&job).await.unwrap().checkpoint.unwrap();
    assert_eq!(stored.checkpoint.source.commit_end_lsn, lsn(100));
    assert_eq!(stored.checkpoint.operators.len(), 1);
    assert_eq!(stored.checkpoint.operators[0].id, "counts");
}

/// A coordinator keeping 2 checkpoints over a fresh store, after saves at 100, 200 and 300.
async fn saved_three_times(confirm: ConfirmPolicy) -> (Arc<MemoryStore>, Coordinator, JobName) {
    let store = Arc::new(MemoryStore::new());
    let (mut c, job) = coordinator(store.clone(), 2, confirm).await;
    for at in [100, 200, 300] {
        take(&mut c, at, &[]).await;
    }
    (store, c, job)
}

#[tokio::test]
async fn confirms_the_oldest_retained_or_the_newest() {
    let (store, mut c, job) = saved_three_times(ConfirmPolicy::OldestRetained).await;
    // Retention runs after each save was reported.
    c.settle_retention(Duration::from_secs(5)).await;
    assert_eq!(store.list(&job).await.unwrap().len(), 2);
    assert_eq!(c.confirmable(), lsn(200), "oldest of the two kept");
    assert_eq!(c.stats().saved, 3);

    let (_, c, _) = saved_three_times(ConfirmPolicy::Newest).await;
    assert_eq!(c.confirmable(), lsn(300));
}

#[tokio::test]
async fn a_clean_stop_with_nothing_new_still_leaves_only_keep_checkpoints() {
    let (store, mut c, job) = saved_three_times(ConfirmPolicy::OldestRetained).await;
    // Nothing moved since the last save, so no final checkpoint: the retention of the
    // saves so far must still be awaited before the stop returns.
    c.finish_final(Some(lsn(300)), &[]).await.unwrap();
    assert_eq!(c.stats().saved, 3, "no final checkpoint at an old position");
    assert_eq!(store.list(&job).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_failed_save_is_retried_and_the_slot_stays() {
    let store = Arc::new(MemoryStore::new());
    let (mut c, job) = coordinator(store.clone(), 5, ConfirmPolicy::Newest).await;
    take(&mut c, 100, &[]).await;
    store.fail_next_save(&job);
    take(&mut c, 200, &[]).await;
    assert_eq!(c.confirmable(), lsn(100), "a failed save moves nothing");
    assert_eq!(c.stats().failed, 1);
    take(&mut c, 300, &[]).await;
    assert_eq!(c.confirmable(), lsn(300));
}

#[tokio::test]
async fn a_fenced_writer_stops() {
    let store = Arc::new(MemoryStore::new());
    let (mut c, job) = coordinator(store.clone(), 5, ConfirmPolicy::Newest).await;
    take(&mut c, 100, &[]).await;
    store
        .acquire_lease(&job, &OwnerId::new("other").unwrap())
        .await
        .unwrap();
    c.tick();
    c.capture(lsn(200), lsn(200), &[]).unwrap();
    c.poll_acks(lsn(200));
    let err = c.saved().await.unwrap_err();
    assert!(matches!(err, CheckpointError::Fenced { .. }), "{err}");
    assert_eq!(c.confirmable(), lsn(100));
}

#[tokio::test]
async fn a_sink_commits_the_checkpoint_and_the_store_is_not_used() {
    let store = Arc::new(MemoryStore::new());
    let (mut c, job) = coordinator(store.clone(), 5, ConfirmPolicy::Newest).await;
    c.commit_in_sink();
    c.tick();
    let save = c
        .capture(lsn(100), lsn(90), &[])
        .unwrap()
        .expect("for the sink");
    assert_eq!(save.needs_ack, lsn(90));
    assert!(
        c.is_saving() && !c.wants_capture(),
        "one checkpoint at a time"
    );
    c.poll_acks(lsn(100));
    // The sink commits it (here: straight into the store) and answers.
    let meta = store.save(&save.lease, &save.checkpoint).await.unwrap();
    save.answer(Ok(meta));
    c.saved().await.unwrap();
    assert_eq!(c.confirmable(), lsn(100));
    assert_eq!(store.list(&job).await.unwrap().len(), 1);

    // A sink that stops without answering: a failed checkpoint, slot stays.
    c.tick();
    let save = c
        .capture(lsn(200), lsn(200), &[])
        .unwrap()
        .expect("for the sink");
    drop(save);
    c.saved().await.unwrap();
    assert_eq!(c.stats().failed, 1);
    assert_eq!(c.confirmable(), lsn(100));

    // Shutdown never saves behind the sink's back (its writes would be
    // rolled back while the checkpoint claims them).
    c.finish_final(Some(lsn(300)), &[]).await.unwrap();
    assert_eq!(store.list(&job).await.unwrap().len(), 1);
    let last = c
        .capture_final_in_sink(Some(lsn(300)), &[])
        .await
        .unwrap()
        .expect("the final checkpoint goes to the sink");
    assert_eq!(last.checkpoint.source.commit_end_lsn, lsn(300));
}

#[tokio::test]
async fn the_final_checkpoint_is_skipped_when_nothing_moved() {
    let store = Arc::new(MemoryStore::new());
    let (mut c, job) = coordinator(store.clone(), 5, ConfirmPolicy::Newest).await;
    take(&mut c, 100, &[]).await;
    c.finish_final(Some(lsn(100)), &[]).await.unwrap();
    assert_eq!(store.list(&job).await.unwrap().len(), 1);
    c.finish_final(Some(lsn(150)), &[]).await.unwrap();
    assert_eq!(store.list(&job).await.unwrap().len(), 2);
    assert_eq!(c.confirmable(), lsn(150));
}
