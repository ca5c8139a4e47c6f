//! The conformance suite against the in-memory store, and against deliberately broken
//! stores to show the suite catches what it claims to.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use checkpoint_api::testkit::conformance::{self, StoreFactory};
use checkpoint_api::testkit::MemoryStore;
use checkpoint_api::{
    Checkpoint, CheckpointError, CheckpointId, CheckpointMeta, CheckpointStore, JobName, Latest,
    Lease, OwnerId, StoredCheckpoint,
};

#[derive(Debug, Default)]
struct MemoryFactory {
    store: MemoryStore,
}

#[async_trait]
impl StoreFactory for MemoryFactory {
    async fn open(&self) -> Result<Arc<dyn CheckpointStore>, CheckpointError> {
        Ok(Arc::new(self.store.clone()))
    }
    async fn corrupt(&self, job: &JobName, id: CheckpointId) -> Result<(), CheckpointError> {
        assert!(self.store.corrupt(job, id), "no checkpoint {id} to corrupt");
        Ok(())
    }
    async fn fail_next_save(&self, job: &JobName) -> Result<bool, CheckpointError> {
        self.store.fail_next_save(job);
        Ok(true)
    }
}

#[tokio::test]
async fn memory_store_passes_the_whole_suite() {
    let factory = MemoryFactory::default();
    if let Err(failures) = conformance::run_all(&factory).await {
        panic!("{failures}");
    }
}

#[tokio::test]
async fn memory_store_passes_with_tiny_chunks() {
    // Small chunks: every checkpoint spans many chunks, blocks span chunk boundaries.
    let factory = MemoryFactory {
        store: MemoryStore::new().with_chunk_size(777),
    };
    for result in [
        conformance::save_load_round_trip(&factory).await,
        conformance::atomic_failed_save(&factory).await,
        conformance::corrupt_newest_falls_back(&factory).await,
        conformance::thousand_operators(&factory).await,
    ] {
        result.unwrap();
    }
}

/// Which contract a [`Broken`] store breaks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Bug {
    /// Writes with whatever lease the store handed out last, ignoring the caller's.
    NoFencing,
    /// On an injected failure, keeps the checkpoint anyway and reports an error.
    PartialSave,
    /// `latest` fails on a corrupt newest checkpoint instead of falling back.
    NoFallback,
    /// `list` returns newest first.
    ReverseList,
}

#[derive(Debug)]
struct Broken {
    inner: MemoryStore,
    bug: Bug,
    leases: Arc<Mutex<HashMap<JobName, Lease>>>,
    fail_next: Arc<AtomicBool>,
}

impl Broken {
    fn lease_for(&self, lease: &Lease) -> Lease {
        if self.bug == Bug::NoFencing {
            if let Some(current) = self
                .leases
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(lease.job())
            {
                return current.clone();
            }
        }
        lease.clone()
    }
}

#[async_trait]
impl CheckpointStore for Broken {
    async fn acquire_lease(
        &self,
        job: &JobName,
        owner: &OwnerId,
    ) -> Result<Lease, CheckpointError> {
        let lease = self.inner.acquire_lease(job, owner).await?;
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(job.clone(), lease.clone());
        Ok(lease)
    }
    async fn save(
        &self,
        lease: &Lease,
        cp: &Checkpoint,
    ) -> Result<CheckpointMeta, CheckpointError> {
        let meta = self.inner.save(&self.lease_for(lease), cp).await?;
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err(CheckpointError::Unavailable {
                message: "lost connection after commit".into(),
                source: None,
            });
        }
        Ok(meta)
    }
    async fn latest(&self, job: &JobName) -> Result<Latest, CheckpointError> {
        let latest = self.inner.latest(job).await?;
        if self.bug == Bug::NoFallback {
            if let Some(skipped) = latest.skipped.first() {
                return self.inner.load(job, skipped.meta.id).await.map(|c| Latest {
                    checkpoint: Some(c),
                    skipped: vec![],
                });
            }
        }
        Ok(latest)
    }
    async fn load(
        &self,
        job: &JobName,
        id: CheckpointId,
    ) -> Result<StoredCheckpoint, CheckpointError> {
        self.inner.load(job, id).await
    }
    async fn list(&self, job: &JobName) -> Result<Vec<CheckpointMeta>, CheckpointError> {
        let mut list = self.inner.list(job).await?;
        if self.bug == Bug::ReverseList {
            list.reverse();
        }
        Ok(list)
    }
    async fn delete(&self, lease: &Lease, id: CheckpointId) -> Result<(), CheckpointError> {
        self.inner.delete(&self.lease_for(lease), id).await
    }
    async fn retain(&self, lease: &Lease, keep: usize) -> Result<usize, CheckpointError> {
        self.inner.retain(&self.lease_for(lease), keep).await
    }
}

struct BrokenFactory {
    store: MemoryStore,
    bug: Bug,
    leases: Arc<Mutex<HashMap<JobName, Lease>>>,
    fail_next: Arc<AtomicBool>,
}

impl BrokenFactory {
    fn new(bug: Bug) -> Self {
        BrokenFactory {
            store: MemoryStore::new(),
            bug,
            leases: Arc::default(),
            fail_next: Arc::default(),
        }
    }
}

#[async_trait]
impl StoreFactory for BrokenFactory {
    async fn open(&self) -> Result<Arc<dyn CheckpointStore>, CheckpointError> {
        Ok(Arc::new(Broken {
            inner: self.store.clone(),
            bug: self.bug,
            leases: Arc::clone(&self.leases),
            fail_next: Arc::clone(&self.fail_next),
        }))
    }
    async fn corrupt(&self, job: &JobName, id: CheckpointId) -> Result<(), CheckpointError> {
        self.store.corrupt(job, id);
        Ok(())
    }
    async fn fail_next_save(&self, job: &JobName) -> Result<bool, CheckpointError> {
        if self.bug == Bug::PartialSave {
            self.fail_next.store(true, Ordering::SeqCst);
        } else {
            self.store.fail_next_save(job);
        }
        Ok(true)
    }
}

#[tokio::test]
async fn the_suite_catches_broken_stores() {
    let f = BrokenFactory::new(Bug::NoFencing);
    let failure = conformance::fencing_between_two_writers(&f)
        .await
        .unwrap_err();
    assert!(
        failure.message.contains("save by the fenced writer"),
        "{failure}"
    );
    conformance::save_load_round_trip(&f).await.unwrap();

    let f = BrokenFactory::new(Bug::PartialSave);
    let failure = conformance::atomic_failed_save(&f).await.unwrap_err();
    assert!(
        failure.message.contains("after an injected failure"),
        "{failure}"
    );
    conformance::retention(&f).await.unwrap();

    let f = BrokenFactory::new(Bug::NoFallback);
    let failure = conformance::corrupt_newest_falls_back(&f)
        .await
        .unwrap_err();
    assert_eq!(failure.test, "corrupt_newest_falls_back");
    conformance::ordering_and_monotonic_ids(&f).await.unwrap();

    let f = BrokenFactory::new(Bug::ReverseList);
    let failure = conformance::ordering_and_monotonic_ids(&f)
        .await
        .unwrap_err();
    assert!(failure.message.contains("[1, 2, 5]"), "{failure}");
}

#[test]
fn suite_futures_are_send() {
    // So a backend can run the suite inside `tokio::spawn` or any multi-threaded executor.
    fn assert_send<F: std::future::Future + Send>(f: F) -> F {
        f
    }
    let factory = MemoryFactory::default();
    drop(assert_send(conformance::run_all(&factory)));
    drop(assert_send(conformance::large_state_256mib(&factory)));
}
