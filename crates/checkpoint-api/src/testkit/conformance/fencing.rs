//! One writer per job: a new lease fences the previous holder.

use super::support::{lsn, sample_checkpoint, save, T};
use super::{Failure, StoreFactory};
use crate::error::CheckpointError;
use crate::store::OwnerId;

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
