//! Failures do not lose data: a failed save leaves no trace, a corrupt checkpoint is
//! skipped for an older one.

use std::sync::Arc;

use bytes::Bytes;

use super::support::{fresh_job, lsn, noise, sample_checkpoint, save, T};
use super::{Failure, StoreFactory};
use crate::error::CheckpointError;
use crate::model::OperatorState;

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
