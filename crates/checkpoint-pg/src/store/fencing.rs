//! Leases, and why a save is refused: the store reads the job's epoch, highest id and
//! newest LSN; the verdict is `checkpoint-api`'s.

use cdc_core::Lsn;
use checkpoint_api::{
    Checkpoint, CheckpointError, CheckpointId, Epoch, JobName, Lease, NotFound, OwnerId, Regression,
};
use tokio_postgres::types::PgLsn;

use super::rows::lease_row;
use super::save::Db;
use super::PgCheckpointStore;
use crate::error::{definite, pg};

impl PgCheckpointStore {
    /// Takes the write lease of `job` ([`CheckpointStore::acquire_lease`]).
    ///
    /// [`CheckpointStore::acquire_lease`]: checkpoint_api::CheckpointStore::acquire_lease
    pub(super) async fn acquire(
        &self,
        job: &JobName,
        owner: &OwnerId,
    ) -> Result<Lease, CheckpointError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&self.sql().acquire)
            .await
            .map_err(|e| pg("acquire lease: prepare", e))?;
        let epoch: i64 = client
            .query_one(&stmt, &[&job.as_str(), &owner.as_str()])
            .await
            .and_then(|r| r.try_get(0))
            .map_err(|e| pg("acquire lease", e))?;
        let epoch = u64::try_from(epoch).map_err(|_| definite("negative epoch in lease table"))?;
        Ok(Lease::new(job.clone(), owner.clone(), Epoch(epoch)))
    }

    /// Why the one-statement save of `checkpoint` inserted nothing, read after the fact.
    pub(super) async fn why_refused(
        &self,
        db: Db<'_>,
        lease: &Lease,
        checkpoint: &Checkpoint,
    ) -> CheckpointError {
        let state = async {
            let stmt = db.prepare(&self.sql().lease_state).await?;
            db.client
                .query_opt(&stmt, &[&checkpoint.job.as_str()])
                .await
        }
        .await
        .map_err(|e| pg("save: reading the lease", e));
        let (epoch, highest, newest) = match state {
            Err(e) => return e,
            Ok(None) => (None, None, None),
            Ok(Some(r)) => match lease_row(&r) {
                Ok(t) => t,
                Err(e) => return e,
            },
        };
        refusal(lease, checkpoint, epoch, highest, newest).unwrap_or_else(|| {
            // The lease or the newest checkpoint changed between the save and this read.
            CheckpointError::Unavailable {
                message: "save: refused, but the lease or the newest checkpoint changed since; \
                          retry"
                    .into(),
                source: None,
            }
        })
    }
}

/// Why a save is refused, given the lease row and the newest stored LSN; `None` if it may
/// proceed.
pub(super) fn refusal(
    lease: &Lease,
    checkpoint: &Checkpoint,
    epoch: Option<i64>,
    highest: Option<i64>,
    newest: Option<PgLsn>,
) -> Option<CheckpointError> {
    let job = lease.job().clone();
    let Some(current) = epoch.and_then(|e| u64::try_from(e).ok()) else {
        return Some(CheckpointError::NotFound {
            job,
            what: NotFound::Lease,
        });
    };
    if current != lease.epoch().0 {
        return Some(CheckpointError::Fenced {
            job,
            held: lease.epoch(),
            current: Epoch(current),
        });
    }
    if let Some(latest) = highest
        .and_then(|h| u64::try_from(h).ok())
        .and_then(CheckpointId::new)
        .filter(|&h| checkpoint.id <= h)
    {
        return Some(CheckpointError::Regressed {
            job,
            regression: Regression::Id {
                latest,
                attempted: checkpoint.id,
            },
        });
    }
    let attempted = checkpoint.source.commit_end_lsn;
    if let Some(latest) = newest.map(|n| Lsn::from_u64(u64::from(n))) {
        if attempted < latest {
            return Some(CheckpointError::Regressed {
                job,
                regression: Regression::Lsn { latest, attempted },
            });
        }
    }
    None
}

pub(super) fn check_epoch(lease: &Lease, epoch: Option<i64>) -> Result<(), CheckpointError> {
    let job = lease.job().clone();
    match epoch.and_then(|e| u64::try_from(e).ok()) {
        None => Err(CheckpointError::NotFound {
            job,
            what: NotFound::Lease,
        }),
        Some(current) if current != lease.epoch().0 => Err(CheckpointError::Fenced {
            job,
            held: lease.epoch(),
            current: Epoch(current),
        }),
        Some(_) => Ok(()),
    }
}
