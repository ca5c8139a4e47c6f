//! The job only moves forward: ids and LSNs never go back, retention keeps the newest.

use super::support::{lsn, sample_checkpoint, save, T};
use super::{Failure, StoreFactory};
use crate::error::{CheckpointError, Regression};

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
