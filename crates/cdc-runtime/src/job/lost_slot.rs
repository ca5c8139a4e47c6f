//! The job's side of a lost slot (see [`crate::checkpoint::SlotLoss`]): at
//! start, an invalidated slot stops the job (`on_slot_lost = "fail"`) or is
//! dropped so the job starts over with a new slot and snapshot
//! (`"resnapshot"`); while streaming, the server's refusal to stream from it
//! becomes [`JobError::SlotLost`].

use crate::checkpoint::{pipeline_slot_lost, SlotLoss, SlotLostError, SlotState};
use crate::pipeline::PipelineError;
use crate::replication::ReplicationConnection;
use crate::source::{OnSlotLost, SourceOptions};

use super::JobError;

/// Whether the slot as found at start is invalidated: an error under
/// `fail`, the loss to start over from under `resnapshot`.
pub(super) fn check(
    source: &SourceOptions,
    slot: Option<&SlotState>,
) -> Result<Option<SlotLoss>, JobError> {
    let Some(s) = slot else { return Ok(None) };
    if let Some(reason) = &s.invalidated {
        return lost(
            source,
            SlotLoss::Invalidated {
                reason: reason.clone(),
            },
        )
        .map(Some);
    }
    if s.wal_status.as_deref() == Some("unreserved") {
        tracing::warn!(slot = %source.slot, "the slot holds more WAL than max_slot_wal_keep_size allows: the server invalidates it at its next checkpoint unless pgcdc catches up");
    }
    Ok(None)
}

/// `loss` under the source's policy: an error under `fail`, else `loss`.
pub(super) fn lost(source: &SourceOptions, loss: SlotLoss) -> Result<SlotLoss, JobError> {
    match source.on_slot_lost {
        OnSlotLost::Fail => Err(JobError::SlotLost(SlotLostError {
            slot: source.slot.clone(),
            loss,
        })),
        OnSlotLost::Resnapshot => Ok(loss),
    }
}

/// Announces starting over and drops the lost slot if it still exists
/// (`exists`), so that set-up creates a new one.
pub(super) async fn start_over(
    conn: &mut ReplicationConnection,
    slot: &str,
    loss: &SlotLoss,
    exists: bool,
) -> Result<(), JobError> {
    tracing::warn!(slot = %slot, reason = %loss,
        "the replication slot is lost; on_slot_lost = \"resnapshot\": creating a new slot and reading every published table again (downstream receives every row again)");
    if exists {
        conn.drop_replication_slot(slot, false).await?;
        tracing::info!(slot = %slot, "dropped the lost replication slot");
    }
    Ok(())
}

/// A pipeline's error, as [`JobError::SlotLost`] when the server refused
/// to stream from the slot because it is invalidated.
pub(super) fn streaming_error(slot: &str, e: PipelineError) -> JobError {
    match pipeline_slot_lost(&e) {
        Some(loss) => JobError::SlotLost(SlotLostError {
            slot: slot.to_owned(),
            loss,
        }),
        None => JobError::Pipeline(e),
    }
}
