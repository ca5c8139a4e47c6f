//! A lost replication slot: one the server invalidated, or one that is gone
//! while the job has a checkpoint. Its position cannot be streamed from, so
//! the job either stops and says why ([`OnSlotLost::Fail`]) or starts over
//! with a new slot and a new snapshot ([`OnSlotLost::Resnapshot`]).
//!
//! The server invalidates a slot when it held more WAL than
//! `max_slot_wal_keep_size` (`wal_removed`), when it was idle longer than
//! `idle_replication_slot_timeout` (PostgreSQL 18, `idle_timeout`), and on a
//! standby when recovery conflicts with it (`rows_removed`,
//! `wal_level_insufficient`). `pg_replication_slots` shows it as
//! `wal_status = 'lost'` (PostgreSQL 13+), `conflicting` (16+) and
//! `invalidation_reason` (17+); `START_REPLICATION` on it fails with
//! SQLSTATE 55000 ("can no longer get changes from replication slot", or
//! "can no longer access replication slot" on 18).
//!
//! [`OnSlotLost::Fail`]: crate::source::OnSlotLost::Fail
//! [`OnSlotLost::Resnapshot`]: crate::source::OnSlotLost::Resnapshot

use std::fmt;

use cdc_core::sql::quote_literal;
use cdc_core::Lsn;
use checkpoint_api::CheckpointId;

use crate::pipeline::PipelineError;
use crate::replication::ReplicationError;

/// How the slot was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotLoss {
    /// `pg_replication_slots` shows the slot invalidated.
    Invalidated {
        /// `invalidation_reason` (`wal_removed`, `rows_removed`,
        /// `wal_level_insufficient`, `idle_timeout`), or what older servers
        /// show instead (`wal_status = lost`, `conflicting`).
        reason: String,
    },
    /// The slot does not exist, but the job has a checkpoint: it was
    /// dropped, or not synchronized to a standby that was promoted.
    Missing {
        /// The newest checkpoint.
        checkpoint: CheckpointId,
        /// Its position.
        lsn: Lsn,
    },
    /// `START_REPLICATION` was refused because the slot is invalidated
    /// (found while streaming, on a reconnect).
    Refused {
        /// The server's message and detail.
        message: String,
    },
}

impl fmt::Display for SlotLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotLoss::Invalidated { reason } => {
                write!(f, "the server invalidated it ({reason})")
            }
            SlotLoss::Missing { checkpoint, lsn } => write!(
                f,
                "it does not exist, but the job has checkpoint {checkpoint} at {lsn} \
                 (the slot was dropped, or not synchronized to a standby that was promoted)"
            ),
            SlotLoss::Refused { message } => {
                write!(f, "the server refused to stream from it: {message}")
            }
        }
    }
}

impl SlotLoss {
    /// What keeps it from happening again, by reason.
    fn prevention(&self) -> &'static str {
        let text = match self {
            SlotLoss::Invalidated { reason } => reason.as_str(),
            SlotLoss::Refused { message } => message.as_str(),
            SlotLoss::Missing { .. } => {
                return "to keep a slot through a failover, use a failover slot (PostgreSQL 17+) \
                        synchronized to the standby"
            }
        };
        if text.contains("idle_timeout") || text.contains("inactive") {
            "to keep it from happening again, raise the server's idle_replication_slot_timeout \
             or keep pgcdc running"
        } else if text.contains("rows_removed") || text.contains("conflict") {
            "to keep it from happening again, set hot_standby_feedback = on and primary_slot_name \
             on the standby"
        } else if text.contains("wal_level") {
            "to keep it from happening again, keep wal_level = logical on the primary"
        } else {
            "to keep it from happening again, raise the server's max_slot_wal_keep_size \
             (or set it to -1) and do not leave pgcdc stopped for long"
        }
    }
}

/// The job's slot is lost and `source.on_slot_lost = "fail"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "replication slot {slot:?} is lost: {loss}. The changes after its position cannot be streamed \
     any more. To start over, set source.on_slot_lost = \"resnapshot\": pgcdc then drops the slot, \
     creates a new one and reads every published table again (the sinks receive every row again); \
     or drop it yourself with SELECT pg_drop_replication_slot({literal}) and delete the job's \
     checkpoints (`pgcdc checkpoints prune --keep 0`). {prevention}",
    literal = quote_literal(slot),
    prevention = loss.prevention()
)]
pub struct SlotLostError {
    /// The slot.
    pub slot: String,
    /// How it was lost.
    pub loss: SlotLoss,
}

/// The invalidation `pg_replication_slots` shows, from its columns
/// `wal_status`, `conflicting` and `invalidation_reason` (`None` where the
/// server has no such column). `None`: the slot is usable.
pub(crate) fn invalidation(
    wal_status: Option<&str>,
    conflicting: Option<&str>,
    invalidation_reason: Option<&str>,
) -> Option<String> {
    if let Some(reason) = invalidation_reason.filter(|r| !r.is_empty()) {
        return Some(reason.to_owned());
    }
    if matches!(conflicting, Some("t" | "true")) {
        return Some("conflicting with recovery".to_owned());
    }
    if wal_status == Some("lost") {
        return Some("wal_status = lost: the WAL it needs was removed".to_owned());
    }
    None
}

/// The server's refusal to stream from an invalidated slot, if `e` is one
/// (SQLSTATE 55000: "can no longer get changes from / access replication
/// slot" on 16+, "cannot read from logical replication slot" with the
/// detail "This slot has been invalidated ..." on 15).
pub fn refused_as_lost(e: &ReplicationError) -> Option<SlotLoss> {
    let db = e.as_db_error()?;
    if !is_invalidated_refusal(db.code(), db.message(), db.detail()) {
        return None;
    }
    let message = match db.detail() {
        Some(detail) => format!("{}; {detail}", db.message()),
        None => db.message().to_owned(),
    };
    Some(SlotLoss::Refused { message })
}

/// Whether a server error says the slot is invalidated.
pub(crate) fn is_invalidated_refusal(code: &str, message: &str, detail: Option<&str>) -> bool {
    code == "55000"
        && message.contains("replication slot")
        && (message.contains("can no longer")
            || detail.is_some_and(|d| d.contains("has been invalidated")))
}

/// [`refused_as_lost`] for a pipeline's error (also when reconnects gave up).
pub fn pipeline_slot_lost(e: &PipelineError) -> Option<SlotLoss> {
    match e {
        PipelineError::Replication(e) => refused_as_lost(e),
        PipelineError::RetriesExhausted { last, .. } => pipeline_slot_lost(last),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::DbError;

    #[test]
    fn invalidation_reads_each_servers_columns() {
        // PostgreSQL 15: only wal_status.
        assert_eq!(invalidation(Some("reserved"), None, None), None);
        assert_eq!(invalidation(Some("unreserved"), None, None), None);
        assert!(invalidation(Some("lost"), None, None)
            .unwrap()
            .contains("wal_status = lost"));
        // 16: conflicting.
        assert_eq!(invalidation(Some("reserved"), Some("false"), None), None);
        assert_eq!(
            invalidation(Some("reserved"), Some("true"), None).as_deref(),
            Some("conflicting with recovery")
        );
        // 17+: invalidation_reason wins.
        assert_eq!(
            invalidation(Some("lost"), Some("false"), Some("wal_removed")).as_deref(),
            Some("wal_removed")
        );
        assert_eq!(
            invalidation(Some("reserved"), Some("false"), Some("idle_timeout")).as_deref(),
            Some("idle_timeout")
        );
    }

    #[test]
    fn the_error_gives_the_reason_and_the_way_out() {
        let e = SlotLostError {
            slot: "it's".into(),
            loss: SlotLoss::Invalidated {
                reason: "wal_removed".into(),
            },
        };
        let text = e.to_string();
        assert!(text.contains("(wal_removed)"), "{text}");
        assert!(text.contains("on_slot_lost = \"resnapshot\""), "{text}");
        assert!(text.contains("pg_drop_replication_slot('it''s')"), "{text}");
        assert!(text.contains("max_slot_wal_keep_size"), "{text}");
        let idle = SlotLostError {
            slot: "s".into(),
            loss: SlotLoss::Invalidated {
                reason: "idle_timeout".into(),
            },
        };
        assert!(idle.to_string().contains("idle_replication_slot_timeout"));
    }

    #[test]
    fn start_replication_refusals_are_recognised() {
        let refused = |message: &str, code: &str| DbError {
            severity: "ERROR".into(),
            code: code.into(),
            message: message.into(),
            detail: Some(
                "This slot has been invalidated because it exceeded the maximum reserved size."
                    .into(),
            ),
            hint: None,
            where_: None,
            routine: None,
        };
        for message in [
            "cannot read from logical replication slot \"s\"",
            "can no longer get changes from replication slot \"s\"",
            "can no longer access replication slot \"s\"",
        ] {
            let e = ReplicationError::from(refused(message, "55000"));
            assert!(!e.is_transient());
            let loss = refused_as_lost(&e).unwrap();
            assert!(loss.to_string().contains("maximum reserved size"), "{loss}");
            let p = PipelineError::RetriesExhausted {
                attempts: 1,
                last: Box::new(PipelineError::Replication(e)),
            };
            assert!(pipeline_slot_lost(&p).is_some());
        }
        let wal_level = ReplicationError::from(refused(
            "logical decoding requires wal_level >= logical",
            "55000",
        ));
        assert_eq!(refused_as_lost(&wal_level), None);
    }
}
