//! Leases, and why a save is refused: the store reads the job's epoch, highest id and
//! newest LSN; the verdict is `checkpoint-api`'s.

use cdc_core::Lsn;
use checkpoint_api::fencing;
use checkpoint_api::{Checkpoint, CheckpointError, CheckpointId, Epoch, JobName, Lease, OwnerId};
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
        let row = self
            .under_lease_lock(
                "acquire lease",
                job,
                &self.sql().acquire,
                &[&job.as_str(), &owner.as_str()],
            )
            .await?;
        let epoch: i64 = row.try_get(0).map_err(|e| pg("acquire lease", e))?;
        let epoch = u64::try_from(epoch).map_err(|_| definite("negative epoch in lease table"))?;
        Ok(Lease::new(job.clone(), owner.clone(), Epoch(epoch)))
    }

    /// Runs `sql` (`$1` is `job`) on a pooled connection, in a `READ COMMITTED`
    /// transaction that first locks the job's lease row, and returns its one row.
    ///
    /// The lock waits for every save, delete and retention of the job in flight (each
    /// locks or updates that row), and `sql`'s snapshot is taken after it is granted, so
    /// `sql` sees all they wrote. In one statement the snapshot would come first: a
    /// delete of the newest row that waited for a save would not see the saved row, and
    /// would move the lease's newest LSN below it.
    ///
    /// `BEGIN`, the lock, `sql` and `COMMIT` go out together, in one round trip: each
    /// request is sent when its future is first polled, and `join4` polls them in
    /// order. The server still runs them one after the other, so the order above
    /// holds, and the lease row is locked only while `sql` runs, not across three
    /// round trips (which kept saves of the job waiting that long). An error aborts the
    /// transaction, and the `COMMIT` after it then rolls back; the first error is
    /// returned. (`sql` must return exactly one row whatever it finds, as every caller's
    /// does: a wrong count, found by the client, would not stop the `COMMIT`.) A call
    /// dropped once polled (a timeout) still runs to its end on the server, as one whose
    /// `COMMIT` was already sent always did. Both requests are prepared statements, so
    /// neither waits for a round trip before it is sent; the race tests of this lock
    /// fail if the statement goes out first.
    pub(super) async fn under_lease_lock(
        &self,
        what: &str,
        job: &JobName,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<tokio_postgres::Row, CheckpointError> {
        let err = |e| pg(what, e);
        let client = self.client().await?;
        let lock = client
            .prepare_cached(&self.sql().lock_lease)
            .await
            .map_err(err)?;
        let stmt = client.prepare_cached(sql).await.map_err(err)?;
        let job = job.as_str();
        let (begin, locked, row, commit) = futures_util::future::join4(
            client.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED"),
            client.execute(&lock, &[&job]),
            client.query_one(&stmt, params),
            client.batch_execute("COMMIT"),
        )
        .await;
        begin.map_err(err)?;
        locked.map_err(err)?;
        let row = row.map_err(err)?;
        commit.map_err(err)?;
        Ok(row)
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

/// The job's current epoch from a lease row's `epoch` column (`None`: no lease row, or a
/// negative epoch, which no lease can hold).
fn current_epoch(epoch: Option<i64>) -> Option<Epoch> {
    epoch.and_then(|e| u64::try_from(e).ok()).map(Epoch)
}

/// Why a save is refused, given the lease row and the newest stored LSN; `None` if it may
/// proceed. The rules are [`fencing::check_save`]'s.
pub(super) fn refusal(
    lease: &Lease,
    checkpoint: &Checkpoint,
    epoch: Option<i64>,
    highest: Option<i64>,
    newest: Option<PgLsn>,
) -> Option<CheckpointError> {
    let highest = highest
        .and_then(|h| u64::try_from(h).ok())
        .and_then(CheckpointId::new);
    let newest = newest.map(|n| Lsn::from_u64(u64::from(n)));
    fencing::check_save(lease, checkpoint, current_epoch(epoch), highest, newest).err()
}

/// Whether a delete or retain under `lease` was allowed, given the epoch its statement
/// read ([`fencing::check_lease`]).
pub(super) fn check_epoch(lease: &Lease, epoch: Option<i64>) -> Result<(), CheckpointError> {
    fencing::check_lease(lease, current_epoch(epoch))
}
