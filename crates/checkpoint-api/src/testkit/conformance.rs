//! The conformance suite: the [`CheckpointStore`] contract as executable checks.
//!
//! A backend implements [`StoreFactory`] and calls [`run_all`] from one test, in whatever
//! async runtime it uses (the suite only awaits the store):
//!
//! ```
//! # use std::sync::Arc;
//! # use checkpoint_api::{CheckpointError, CheckpointId, CheckpointStore, JobName};
//! use checkpoint_api::testkit::{conformance, MemoryStore};
//!
//! #[derive(Debug, Default)]
//! struct Factory(MemoryStore);
//!
//! #[async_trait::async_trait]
//! impl conformance::StoreFactory for Factory {
//!     async fn open(&self) -> Result<Arc<dyn CheckpointStore>, CheckpointError> {
//!         Ok(Arc::new(self.0.clone()))
//!     }
//!     async fn corrupt(&self, job: &JobName, id: CheckpointId) -> Result<(), CheckpointError> {
//!         self.0.corrupt(job, id);
//!         Ok(())
//!     }
//!     async fn fail_next_save(&self, job: &JobName) -> Result<bool, CheckpointError> {
//!         self.0.fail_next_save(job);
//!         Ok(true)
//!     }
//! }
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! # rt.block_on(async {
//! // In a backend's test: everything but the 256 MiB round trip, to keep the example quick.
//! conformance::fencing_between_two_writers(&Factory::default()).await?;
//! conformance::corrupt_newest_falls_back(&Factory::default()).await?;
//! // conformance::run_all(&Factory::default()).await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every test uses fresh, unique job names, so a backend can run the suite against a shared
//! database that is not empty, and run it again.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use cdc_core::Lsn;

use crate::error::{CheckpointError, NotFound, Regression};
use crate::model::{
    Checkpoint, CheckpointId, JobName, OperatorState, ProtocolOptions, SinkPosition,
    SnapshotProgress, SourcePosition, StreamingMode, TableCursor, TableDone, TableRef, Timestamp,
};
use crate::store::{CheckpointMeta, CheckpointStore, Lease, OwnerId};

/// What the suite needs from a backend besides the store itself.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// Opens a store on the storage under test. Every call must reach the same storage (two
    /// stores opened from one factory see each other's writes, like two processes on one
    /// database); the fencing test relies on it. The storage need not be empty.
    async fn open(&self) -> Result<Arc<dyn CheckpointStore>, CheckpointError>;

    /// Damages the stored bytes of checkpoint `id` of `job` so that they no longer decode
    /// (e.g. flip a byte in the middle of its data), leaving its metadata intact.
    async fn corrupt(&self, job: &JobName, id: CheckpointId) -> Result<(), CheckpointError>;

    /// Makes the next save of `job` fail part-way, after some of its data reached storage
    /// (e.g. abort the transaction after writing the first chunk). Returns `Ok(false)` if the
    /// backend cannot inject failures: atomicity is then checked with saves the store must
    /// reject only.
    async fn fail_next_save(&self, job: &JobName) -> Result<bool, CheckpointError>;
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The test.
    pub test: &'static str,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conformance test `{}` failed: {}",
            self.test, self.message
        )
    }
}

impl std::error::Error for Failure {}

/// Every failed test of a [`run_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failures(pub Vec<Failure>);

impl fmt::Display for Failures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} conformance test(s) failed:", self.0.len())?;
        for failure in &self.0 {
            writeln!(f, "  {failure}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failures {}

/// Runs every test of the suite, in order, and reports all failures.
///
/// Takes a few seconds in memory; [`large_state_256mib`] dominates. Tests are independent:
/// a backend can also call them one by one.
pub async fn run_all(factory: &dyn StoreFactory) -> Result<(), Failures> {
    let mut failures = Vec::new();
    macro_rules! run {
        ($($test:ident),* $(,)?) => {
            $(
                if let Err(failure) = $test(factory).await {
                    failures.push(failure);
                }
            )*
        };
    }
    run!(
        empty_job,
        save_load_round_trip,
        ordering_and_monotonic_ids,
        retention,
        atomic_failed_save,
        corrupt_newest_falls_back,
        fencing_between_two_writers,
        empty_state,
        thousand_operators,
        large_state_256mib,
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failures(failures))
    }
}

/// A test's context: its name, for failure messages.
#[derive(Clone, Copy)]
struct T(&'static str);

impl T {
    fn fail(self, message: impl Into<String>) -> Failure {
        Failure {
            test: self.0,
            message: message.into(),
        }
    }

    fn ensure(self, condition: bool, message: impl FnOnce() -> String) -> Result<(), Failure> {
        if condition {
            Ok(())
        } else {
            Err(self.fail(message()))
        }
    }

    /// The value of a store call that must succeed.
    fn ok<V>(self, what: &str, result: Result<V, CheckpointError>) -> Result<V, Failure> {
        result.map_err(|e| self.fail(format!("{what}: unexpected error: {e}")))
    }

    /// The error of a store call that must fail.
    fn err<V: fmt::Debug>(
        self,
        what: &str,
        result: Result<V, CheckpointError>,
    ) -> Result<CheckpointError, Failure> {
        match result {
            Ok(v) => Err(self.fail(format!("{what}: succeeded with {v:?}, expected an error"))),
            Err(e) => Ok(e),
        }
    }

    async fn job(
        self,
        factory: &dyn StoreFactory,
        suffix: &str,
    ) -> Result<(Arc<dyn CheckpointStore>, JobName, Lease), Failure> {
        let store = self.ok("open", factory.open().await)?;
        let job = fresh_job(self.0, suffix).map_err(|e| self.fail(format!("job name: {e}")))?;
        let owner = OwnerId::new(format!("conformance-{}", self.0))
            .map_err(|e| self.fail(e.to_string()))?;
        let lease = self.ok("acquire_lease", store.acquire_lease(&job, &owner).await)?;
        self.ensure(lease.job() == &job && lease.owner() == &owner, || {
            format!("lease {lease:?} is not for {job} / {owner}")
        })?;
        Ok((store, job, lease))
    }

    fn id(self, id: u64) -> Result<CheckpointId, Failure> {
        CheckpointId::new(id).ok_or_else(|| self.fail("checkpoint id 0"))
    }

    async fn ids(self, store: &dyn CheckpointStore, job: &JobName) -> Result<Vec<u64>, Failure> {
        let list = self.ok("list", store.list(job).await)?;
        Ok(list.iter().map(|m| m.id.get()).collect())
    }
}

/// A job name no earlier run can have used.
fn fresh_job(test: &str, suffix: &str) -> Result<JobName, crate::InvalidCheckpoint> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    JobName::new(format!("conformance-{test}{suffix}-{nanos:x}-{n}"))
}

/// A checkpoint with a bit of everything: operators, snapshot progress, sinks, fingerprint.
pub fn sample_checkpoint(job: &JobName, id: CheckpointId, lsn: Lsn) -> Checkpoint {
    let n = id.get();
    Checkpoint {
        job: job.clone(),
        id,
        created_at: Timestamp::from_unix_micros(1_750_000_000_000_000 + n as i64),
        source: SourcePosition {
            commit_end_lsn: lsn,
            slot: "pgcdc_slot".into(),
            publications: vec!["pub_a".into(), "pub_b".into()],
            protocol: ProtocolOptions {
                proto_version: 4,
                binary: true,
                messages: false,
                streaming: StreamingMode::Parallel,
                two_phase: false,
                origin: Some("none".into()),
            },
        },
        config_fingerprint: Bytes::from(vec![0xAB; 32]),
        operators: vec![
            OperatorState {
                id: "dedup".into(),
                kind: "dedup".into(),
                state_version: 3,
                state: Bytes::from(format!("dedup state of checkpoint {n}").into_bytes()),
            },
            OperatorState {
                id: "count".into(),
                kind: "counter".into(),
                state_version: 1,
                state: Bytes::copy_from_slice(&n.to_le_bytes()),
            },
        ],
        snapshot: Some(SnapshotProgress {
            consistent_point: Lsn::from_u64(0x1000),
            tables_done: vec![TableDone {
                table: TableRef {
                    schema: "public".into(),
                    name: "orders".into(),
                },
                chunks: 12,
                rows: 120_000,
            }],
            in_progress: Some(TableCursor {
                table: TableRef {
                    schema: "public".into(),
                    name: "customers".into(),
                },
                chunks_done: 3,
                rows_done: 30_000,
                cursor: Bytes::from_static(b"\x00\x00\x75\x30"),
            }),
            complete: false,
        }),
        sinks: vec![SinkPosition {
            sink_id: "kafka".into(),
            position: Bytes::from(format!("offset={n}").into_bytes()),
        }],
    }
}

fn lsn(n: u64) -> Lsn {
    Lsn::from_u64(0x16_0000_0000 + n * 0x100)
}

/// Deterministic bytes that do not compress.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut x = seed | 1;
    for word in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        let n = word.len();
        word.copy_from_slice(&bytes[..n]);
    }
    out
}

fn check_meta(t: T, meta: &CheckpointMeta, cp: &Checkpoint) -> Result<(), Failure> {
    t.ensure(meta.describes(cp), || {
        format!("metadata {meta:?} do not describe checkpoint {}", cp.id)
    })?;
    t.ensure(meta.stored_bytes > 0, || {
        format!("stored_bytes is 0 for checkpoint {}", cp.id)
    })
}

async fn save(
    t: T,
    store: &dyn CheckpointStore,
    lease: &Lease,
    cp: &Checkpoint,
) -> Result<CheckpointMeta, Failure> {
    let meta = t.ok(&format!("save {}", cp.id), store.save(lease, cp).await)?;
    check_meta(t, &meta, cp)?;
    Ok(meta)
}

/// A job with no checkpoints: nothing found, nothing skipped, nothing to delete.
pub async fn empty_job(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("empty_job");
    let (store, job, lease) = t.job(factory, "").await?;
    let latest = t.ok("latest", store.latest(&job).await)?;
    t.ensure(
        latest.checkpoint.is_none() && latest.skipped.is_empty(),
        || format!("latest of an empty job: {latest:?}"),
    )?;
    t.ensure(t.ids(&*store, &job).await?.is_empty(), || {
        "list of an empty job is not empty".into()
    })?;
    let e = t.err("load", store.load(&job, CheckpointId::FIRST).await)?;
    t.ensure(is_missing_checkpoint(&e), || {
        format!("load: {e:?}, expected NotFound")
    })?;
    let e = t.err("delete", store.delete(&lease, CheckpointId::FIRST).await)?;
    t.ensure(is_missing_checkpoint(&e), || {
        format!("delete: {e:?}, expected NotFound")
    })?;
    let deleted = t.ok("retain", store.retain(&lease, 0).await)?;
    t.ensure(deleted == 0, || {
        format!("retain deleted {deleted} of nothing")
    })
}

/// A saved checkpoint loads back equal, by id and as the latest, with matching metadata.
pub async fn save_load_round_trip(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("save_load_round_trip");
    let (store, job, lease) = t.job(factory, "").await?;
    let cp = sample_checkpoint(&job, t.id(1)?, lsn(1));
    let meta = save(t, &*store, &lease, &cp).await?;
    let loaded = t.ok("load", store.load(&job, cp.id).await)?;
    t.ensure(loaded.checkpoint == cp, || {
        "loaded checkpoint differs from the saved one".into()
    })?;
    t.ensure(loaded.meta == meta, || {
        format!("load metadata {:?} != save metadata {meta:?}", loaded.meta)
    })?;
    let latest = t.ok("latest", store.latest(&job).await)?;
    t.ensure(latest.skipped.is_empty(), || {
        format!("latest skipped {:?}", latest.skipped)
    })?;
    t.ensure(latest.checkpoint.as_ref() == Some(&loaded), || {
        format!("latest: {:?}", latest.checkpoint.map(|c| c.meta))
    })?;
    let list = t.ok("list", store.list(&job).await)?;
    t.ensure(list == vec![meta], || format!("list: {list:?}"))
}

/// Ids only go forward: lists are in id order, an id not above every id ever saved (even a
/// deleted one) is refused, and so is an LSN before the newest checkpoint's.
pub async fn ordering_and_monotonic_ids(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("ordering_and_monotonic_ids");
    let (store, job, lease) = t.job(factory, "").await?;
    for n in [1, 2, 5] {
        save(
            t,
            &*store,
            &lease,
            &sample_checkpoint(&job, t.id(n)?, lsn(n)),
        )
        .await?;
    }
    t.ensure(t.ids(&*store, &job).await? == [1, 2, 5], || {
        "list is not [1, 2, 5]".into()
    })?;
    for n in [5, 3, 1] {
        let e = t.err(
            "save of an old id",
            store
                .save(&lease, &sample_checkpoint(&job, t.id(n)?, lsn(9)))
                .await,
        )?;
        t.ensure(
            matches!(&e, CheckpointError::Regressed { regression: Regression::Id { latest, attempted }, .. }
                if latest.get() == 5 && attempted.get() == n),
            || format!("save of id {n} after 5: {e:?}, expected Regressed::Id"),
        )?;
        t.ensure(!e.is_retryable(), || "Regressed is retryable".into())?;
    }
    t.ensure(t.ids(&*store, &job).await? == [1, 2, 5], || {
        "refused saves changed the list".into()
    })?;
    let latest = t.ok("latest", store.latest(&job).await)?;
    t.ensure(
        latest.checkpoint.map(|c| c.meta.id.get()) == Some(5),
        || "latest is not 5".into(),
    )?;

    t.ok("delete 5", store.delete(&lease, t.id(5)?).await)?;
    let e = t.err(
        "save of a deleted id",
        store
            .save(&lease, &sample_checkpoint(&job, t.id(5)?, lsn(5)))
            .await,
    )?;
    t.ensure(matches!(e, CheckpointError::Regressed { .. }), || {
        format!("re-save of deleted id 5: {e:?}")
    })?;
    let e = t.err(
        "save below the newest LSN",
        store
            .save(&lease, &sample_checkpoint(&job, t.id(6)?, lsn(1)))
            .await,
    )?;
    t.ensure(
        matches!(&e, CheckpointError::Regressed { regression: Regression::Lsn { latest, attempted }, .. }
            if *latest == lsn(2) && *attempted == lsn(1)),
        || format!("save with an LSN before the newest: {e:?}, expected Regressed::Lsn"),
    )?;
    // The same LSN is fine: a checkpoint taken when no transaction committed since.
    save(
        t,
        &*store,
        &lease,
        &sample_checkpoint(&job, t.id(6)?, lsn(2)),
    )
    .await?;
    t.ensure(t.ids(&*store, &job).await? == [1, 2, 6], || {
        "list is not [1, 2, 6]".into()
    })
}

/// `retain` keeps the newest N and reports how many it deleted.
pub async fn retention(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("retention");
    let (store, job, lease) = t.job(factory, "").await?;
    for n in 1..=5 {
        save(
            t,
            &*store,
            &lease,
            &sample_checkpoint(&job, t.id(n)?, lsn(n)),
        )
        .await?;
    }
    for (keep, deleted, left) in [
        (3, 2, vec![3, 4, 5]),
        (10, 0, vec![3, 4, 5]),
        (1, 2, vec![5]),
        (0, 1, vec![]),
    ] {
        let n = t.ok("retain", store.retain(&lease, keep).await)?;
        t.ensure(n == deleted, || {
            format!("retain({keep}) deleted {n}, expected {deleted}")
        })?;
        let ids = t.ids(&*store, &job).await?;
        t.ensure(ids == left, || {
            format!("after retain({keep}): {ids:?}, expected {left:?}")
        })?;
    }
    let e = t.err(
        "load of a deleted checkpoint",
        store.load(&job, t.id(1)?).await,
    )?;
    t.ensure(matches!(e, CheckpointError::NotFound { .. }), || {
        format!("load of deleted 1: {e:?}")
    })?;
    let latest = t.ok("latest", store.latest(&job).await)?;
    t.ensure(latest.checkpoint.is_none(), || {
        "latest after retain(0) is not empty".into()
    })?;
    let e = t.err(
        "save of a retained-away id",
        store
            .save(&lease, &sample_checkpoint(&job, t.id(5)?, lsn(5)))
            .await,
    )?;
    t.ensure(matches!(e, CheckpointError::Regressed { .. }), || {
        format!("re-save of id 5: {e:?}")
    })?;
    save(
        t,
        &*store,
        &lease,
        &sample_checkpoint(&job, t.id(6)?, lsn(6)),
    )
    .await?;
    Ok(())
}

/// A failed save leaves no trace: not listed, not loadable, not latest, id not consumed.
pub async fn atomic_failed_save(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("atomic_failed_save");
    let (store, job, lease) = t.job(factory, "").await?;
    let first = sample_checkpoint(&job, t.id(1)?, lsn(1));
    save(t, &*store, &lease, &first).await?;

    // A checkpoint of several MiB, so a chunking backend writes several chunks.
    let mut big = sample_checkpoint(&job, t.id(2)?, lsn(2));
    big.operators.push(OperatorState {
        id: "big".into(),
        kind: "blob".into(),
        state_version: 1,
        state: Bytes::from(noise(5 << 20, 2)),
    });
    let assert_untouched = |what: &'static str| {
        let store = Arc::clone(&store);
        let job = job.clone();
        let first = first.clone();
        async move {
            t.ensure(t.ids(&*store, &job).await? == [1], || {
                format!("{what}: list is not [1]")
            })?;
            let latest = t.ok("latest", store.latest(&job).await)?;
            t.ensure(
                latest.checkpoint.map(|c| c.checkpoint) == Some(first) && latest.skipped.is_empty(),
                || format!("{what}: latest is not checkpoint 1"),
            )?;
            let e = t.err("load 2", store.load(&job, t.id(2)?).await)?;
            t.ensure(matches!(e, CheckpointError::NotFound { .. }), || {
                format!("{what}: load 2: {e:?}")
            })
        }
    };

    if t.ok("fail_next_save", factory.fail_next_save(&job).await)? {
        t.err(
            "save with an injected failure",
            store.save(&lease, &big).await,
        )?;
        assert_untouched("after an injected failure").await?;
    }

    // Saves the store must refuse up front.
    let other = fresh_job(t.0, "-other").map_err(|e| t.fail(e.to_string()))?;
    let foreign = sample_checkpoint(&other, t.id(2)?, lsn(2));
    let e = t.err(
        "save of another job's checkpoint",
        store.save(&lease, &foreign).await,
    )?;
    t.ensure(matches!(e, CheckpointError::Rejected { .. }), || {
        format!("foreign save: {e:?}, expected Rejected")
    })?;
    t.ensure(t.ids(&*store, &other).await?.is_empty(), || {
        "a foreign save left a checkpoint".into()
    })?;
    let mut invalid = big.clone();
    invalid.operators.push(invalid.operators[0].clone());
    let e = t.err(
        "save of an invalid checkpoint",
        store.save(&lease, &invalid).await,
    )?;
    t.ensure(matches!(e, CheckpointError::Rejected { .. }), || {
        format!("invalid save: {e:?}, expected Rejected")
    })?;
    assert_untouched("after refused saves").await?;

    // Nothing was consumed: id 2 is still free.
    save(t, &*store, &lease, &big).await?;
    let loaded = t.ok("load 2", store.load(&job, t.id(2)?).await)?;
    t.ensure(loaded.checkpoint == big, || {
        "checkpoint 2 differs after a clean save".into()
    })
}

/// A corrupt newest checkpoint is skipped (and reported) by `latest`, and `load` of it says
/// corrupt.
pub async fn corrupt_newest_falls_back(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("corrupt_newest_falls_back");
    let (store, job, lease) = t.job(factory, "").await?;
    let mut saved = Vec::new();
    for n in 1..=3 {
        let cp = sample_checkpoint(&job, t.id(n)?, lsn(n));
        save(t, &*store, &lease, &cp).await?;
        saved.push(cp);
    }
    for (corrupted, expect_latest, expect_skipped) in [
        (3, Some(2), vec![3]),
        (2, Some(1), vec![3, 2]),
        (1, None, vec![3, 2, 1]),
    ] {
        t.ok("corrupt", factory.corrupt(&job, t.id(corrupted)?).await)?;
        let e = t.err(
            "load of a corrupt checkpoint",
            store.load(&job, t.id(corrupted)?).await,
        )?;
        t.ensure(
            matches!(&e, CheckpointError::Corrupt { id, .. } if id.get() == corrupted)
                && !e.is_retryable(),
            || format!("load of corrupt {corrupted}: {e:?}, expected Corrupt"),
        )?;
        let latest = t.ok("latest", store.latest(&job).await)?;
        let got = latest.checkpoint.as_ref().map(|c| c.meta.id.get());
        t.ensure(got == expect_latest, || {
            format!("latest is {got:?}, expected {expect_latest:?}")
        })?;
        if let (Some(c), Some(n)) = (&latest.checkpoint, expect_latest) {
            let original = saved.get(n as usize - 1);
            t.ensure(Some(&c.checkpoint) == original, || {
                format!("fallback checkpoint {n} differs")
            })?;
        }
        let skipped: Vec<u64> = latest.skipped.iter().map(|s| s.meta.id.get()).collect();
        t.ensure(skipped == expect_skipped, || {
            format!("skipped {skipped:?}, expected {expect_skipped:?}")
        })?;
        t.ensure(
            latest
                .skipped
                .iter()
                .all(|s| !s.reason.to_string().is_empty()),
            || "a skip has no reason".into(),
        )?;
        t.ensure(t.ids(&*store, &job).await? == [1, 2, 3], || {
            "corrupt checkpoints vanished from list".into()
        })?;
    }
    // Recovery: drop the bad ones and go on.
    t.ok("retain", store.retain(&lease, 0).await)?;
    let next = sample_checkpoint(&job, t.id(4)?, lsn(4));
    save(t, &*store, &lease, &next).await?;
    let latest = t.ok("latest", store.latest(&job).await)?;
    t.ensure(
        latest.checkpoint.map(|c| c.checkpoint) == Some(next) && latest.skipped.is_empty(),
        || "latest after recovery is not checkpoint 4".into(),
    )
}

/// Two writers of one job: each new lease fences the previous one, whose writes then fail
/// with `Fenced` and change nothing.
pub async fn fencing_between_two_writers(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("fencing_between_two_writers");
    let (a, job, lease_a) = t.job(factory, "").await?;
    let b = t.ok("open", factory.open().await)?;
    save(t, &*a, &lease_a, &sample_checkpoint(&job, t.id(1)?, lsn(1))).await?;

    let owner_b = OwnerId::new("writer-b").map_err(|e| t.fail(e.to_string()))?;
    let lease_b = t.ok("acquire_lease b", b.acquire_lease(&job, &owner_b).await)?;
    t.ensure(lease_b.epoch() > lease_a.epoch(), || {
        format!(
            "second lease epoch {} is not above {}",
            lease_b.epoch(),
            lease_a.epoch()
        )
    })?;
    let fenced = |e: &CheckpointError, held| {
        matches!(e, CheckpointError::Fenced { held: h, current, .. } if *h == held && *current > held)
            && !e.is_retryable()
    };
    let e = t.err(
        "save by the fenced writer",
        a.save(&lease_a, &sample_checkpoint(&job, t.id(2)?, lsn(2)))
            .await,
    )?;
    t.ensure(fenced(&e, lease_a.epoch()), || {
        format!("stale save: {e:?}, expected Fenced")
    })?;
    let e = t.err(
        "delete by the fenced writer",
        a.delete(&lease_a, t.id(1)?).await,
    )?;
    t.ensure(fenced(&e, lease_a.epoch()), || {
        format!("stale delete: {e:?}, expected Fenced")
    })?;
    let e = t.err("retain by the fenced writer", a.retain(&lease_a, 0).await)?;
    t.ensure(fenced(&e, lease_a.epoch()), || {
        format!("stale retain: {e:?}, expected Fenced")
    })?;
    t.ensure(t.ids(&*b, &job).await? == [1], || {
        "fenced writes changed the job".into()
    })?;

    save(t, &*b, &lease_b, &sample_checkpoint(&job, t.id(2)?, lsn(2))).await?;
    // Writer a takes the job back; now b is the stale one.
    let lease_a2 = t.ok("re-acquire a", a.acquire_lease(&job, lease_a.owner()).await)?;
    t.ensure(lease_a2.epoch() > lease_b.epoch(), || {
        "re-acquired epoch did not increase".into()
    })?;
    let e = t.err(
        "save by the newly fenced writer",
        b.save(&lease_b, &sample_checkpoint(&job, t.id(3)?, lsn(3)))
            .await,
    )?;
    t.ensure(fenced(&e, lease_b.epoch()), || {
        format!("stale save of b: {e:?}, expected Fenced")
    })?;
    save(
        t,
        &*a,
        &lease_a2,
        &sample_checkpoint(&job, t.id(3)?, lsn(3)),
    )
    .await?;
    t.ensure(t.ids(&*a, &job).await? == [1, 2, 3], || {
        "list is not [1, 2, 3]".into()
    })?;

    // Leases are per job.
    let (_, other, other_lease) = t.job(factory, "-other").await?;
    save(
        t,
        &*a,
        &other_lease,
        &sample_checkpoint(&other, t.id(1)?, lsn(1)),
    )
    .await?;
    save(
        t,
        &*a,
        &lease_a2,
        &sample_checkpoint(&job, t.id(4)?, lsn(4)),
    )
    .await?;
    Ok(())
}

/// The least a checkpoint can hold round-trips: no operators, sinks, snapshot or
/// fingerprint; then empty operator state and sink position.
pub async fn empty_state(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("empty_state");
    let (store, job, lease) = t.job(factory, "").await?;
    let bare = Checkpoint::new(
        job.clone(),
        t.id(1)?,
        Timestamp::UNIX_EPOCH,
        SourcePosition {
            commit_end_lsn: Lsn::INVALID,
            slot: String::new(),
            publications: Vec::new(),
            protocol: ProtocolOptions::default(),
        },
    );
    let mut empties = bare.clone();
    empties.id = t.id(2)?;
    empties.operators.push(OperatorState {
        id: "idle".into(),
        kind: "noop".into(),
        state_version: 0,
        state: Bytes::new(),
    });
    empties.sinks.push(SinkPosition {
        sink_id: "stdout".into(),
        position: Bytes::new(),
    });
    empties.snapshot = Some(SnapshotProgress::default());
    for cp in [&bare, &empties] {
        save(t, &*store, &lease, cp).await?;
        let loaded = t.ok("load", store.load(&job, cp.id).await)?;
        t.ensure(&loaded.checkpoint == cp, || {
            format!("checkpoint {} differs after the round trip", cp.id)
        })?;
    }
    Ok(())
}

/// 1000 operators round-trip, in order.
pub async fn thousand_operators(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("thousand_operators");
    let (store, job, lease) = t.job(factory, "").await?;
    let mut cp = sample_checkpoint(&job, t.id(1)?, lsn(1));
    cp.operators = (0..1000u32)
        .map(|i| OperatorState {
            id: format!("op-{i:04}"),
            kind: ["map", "filter", "dedup", "window"][i as usize % 4].into(),
            state_version: i % 7,
            state: Bytes::from(noise(i as usize % 300, u64::from(i) + 1)),
        })
        .collect();
    save(t, &*store, &lease, &cp).await?;
    let loaded = t.ok("load", store.load(&job, cp.id).await)?;
    t.ensure(loaded.checkpoint.operators.len() == 1000, || {
        format!("{} operators came back", loaded.checkpoint.operators.len())
    })?;
    t.ensure(loaded.checkpoint == cp, || {
        "checkpoint with 1000 operators differs after the round trip".into()
    })
}

/// A 256 MiB operator state (half incompressible, half compressible) round-trips.
pub async fn large_state_256mib(factory: &dyn StoreFactory) -> Result<(), Failure> {
    const HALF: usize = 128 << 20;
    let t = T("large_state_256mib");
    let (store, job, lease) = t.job(factory, "").await?;
    let mut state = noise(HALF, 0x256);
    let line = b"INSERT INTO orders VALUES (42, 'compressible text, over and over'); ";
    let mut page = Vec::with_capacity(64 << 10);
    while page.len() + line.len() <= 64 << 10 {
        page.extend_from_slice(line);
    }
    page.resize(64 << 10, b' ');
    state.reserve(HALF);
    for i in 0..HALF / page.len() {
        // Number the pages so a reordering of blocks cannot go unnoticed.
        let at = state.len();
        state.extend_from_slice(&page);
        if let Some(tag) = state.get_mut(at..at + 8) {
            tag.copy_from_slice(&(i as u64).to_le_bytes());
        }
    }
    let mut cp = sample_checkpoint(&job, t.id(1)?, lsn(1));
    cp.operators.push(OperatorState {
        id: "large".into(),
        kind: "join".into(),
        state_version: 1,
        state: Bytes::from(state),
    });
    let meta = save(t, &*store, &lease, &cp).await?;
    t.ensure(meta.stored_bytes >= HALF as u64, || {
        format!("{} bytes stored for 128 MiB of noise", meta.stored_bytes)
    })?;
    let latest = t.ok("latest", store.latest(&job).await)?;
    let Some(found) = latest.checkpoint else {
        return Err(t.fail("latest found nothing"));
    };
    t.ensure(found.checkpoint == cp, || {
        "256 MiB checkpoint differs after the round trip".into()
    })?;
    t.ensure(
        found.checkpoint.operator("large").map(|o| o.state.len()) == Some(2 * HALF),
        || "large state has the wrong length".into(),
    )
}

fn is_missing_checkpoint(e: &CheckpointError) -> bool {
    matches!(
        e,
        CheckpointError::NotFound {
            what: NotFound::Checkpoint(_),
            ..
        }
    )
}
