//! Resuming on another server after a failover, and never from a wrong
//! position.
//!
//! With several source hosts the reconnect loop connects to whichever of
//! them accepts writes (see [`ReplicationConfig`](crate::replication::ReplicationConfig)),
//! which after a failover is the promoted standby, holding a copy of the
//! failover slot. Before streaming from it, each session compares the
//! server with the one the previous session streamed from
//! (`IDENTIFY_SYSTEM`):
//!
//! - another system identifier: another database cluster, whose LSNs mean
//!   nothing for this job's positions: stop.
//! - another timeline: a promotion happened. The new timeline's history
//!   (`TIMELINE_HISTORY`) gives the LSN where it forked from the timeline
//!   streamed before. A transaction pgcdc processed that ends past the fork
//!   never reached the new primary (the standby had not received it), so the
//!   new primary's WAL after the fork is another history: stop, naming
//!   `synchronized_standby_slots`, which makes the primary hold logical
//!   changes back until the standby has them, so this cannot happen.
//! - the slot confirmed past what this job processed: the server would
//!   skip changes this job has not seen: stop.

use cdc_core::Lsn;

use super::PipelineError;
use crate::replication::{quote_literal, ReplicationConnection, ReplicationError};

/// The server a session streamed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ServerIdentity {
    system_id: u64,
    timeline: u32,
}

/// Identifies the server behind `conn` and checks that streaming `slot`
/// from `start` on it continues what the previous session (on `previous`)
/// delivered, up to `processed`. Returns the server's identity for the
/// next check.
pub(super) async fn check_server(
    conn: &mut ReplicationConnection,
    previous: Option<ServerIdentity>,
    slot: &str,
    processed: Lsn,
    start: Lsn,
) -> Result<ServerIdentity, PipelineError> {
    let system = conn.identify_system().await?;
    let now = ServerIdentity {
        system_id: system.system_id,
        timeline: system.timeline,
    };
    let Some(before) = previous else {
        return Ok(now);
    };
    if before.system_id != now.system_id {
        return Err(PipelineError::Diverged(format!(
            "the source is now another database cluster (system identifier {} instead of {}); \
             its positions do not continue this job's: check source.host, or start the job \
             afresh (new slot, new checkpoint job name)",
            now.system_id, before.system_id
        )));
    }
    if before.timeline != now.timeline {
        let fork = fork_point(conn, before.timeline, now.timeline).await?;
        tracing::info!(slot, old_timeline = before.timeline, new_timeline = now.timeline,
            fork = %fork.map(|l| l.to_string()).unwrap_or_default(), processed = %processed,
            "the source failed over to a promoted standby; resuming on it");
        if let Some(fork) = fork {
            // Past the fork the new timeline holds other changes: resuming
            // there would skip them, and what was processed there is lost.
            let resume = processed.max(start);
            if resume > fork {
                return Err(PipelineError::Diverged(format!(
                    "the source failed over to timeline {} which forked from timeline {} at {fork}, \
                     but this job had already processed changes up to {resume} that the new \
                     primary never received; they were delivered to the sinks and the new \
                     primary's history differs from there. Set synchronized_standby_slots on the \
                     primary to the standbys' physical slots so logical changes wait for them, \
                     then re-read the affected tables (pgcdc snapshot signal)",
                    now.timeline, before.timeline
                )));
            }
        }
    }
    check_slot_position(conn, slot, processed.max(start)).await?;
    Ok(now)
}

/// The LSN where timeline `new` (or an ancestor) left timeline `old`;
/// `None` when the history does not mention `old` (then nothing is checked).
async fn fork_point(
    conn: &mut ReplicationConnection,
    old: u32,
    new: u32,
) -> Result<Option<Lsn>, ReplicationError> {
    if new <= 1 {
        return Ok(None);
    }
    let results = conn
        .simple_query(&format!("TIMELINE_HISTORY {new}"))
        .await?;
    let content = results
        .first()
        .and_then(|r| r.get(0, "content"))
        .unwrap_or_default()
        .to_owned();
    Ok(parse_fork(&content, old))
}

/// From a timeline history file (`parentTLI <tab> switchpoint <tab> reason`
/// per line): where timeline `old` ended.
fn parse_fork(history: &str, old: u32) -> Option<Lsn> {
    history.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let tli = fields.next()?.parse::<u32>().ok()?;
        let switch = fields.next()?.parse::<Lsn>().ok()?;
        (tli == old).then_some(switch)
    })
}

/// The slot's `confirmed_flush_lsn`, if it has one.
pub(super) async fn slot_confirmed(
    conn: &mut ReplicationConnection,
    slot: &str,
) -> Result<Option<Lsn>, ReplicationError> {
    let sql = format!(
        "SELECT confirmed_flush_lsn::text FROM pg_catalog.pg_replication_slots WHERE slot_name = {}",
        quote_literal(slot)
    );
    let results = conn.simple_query(&sql).await?;
    Ok(results
        .first()
        .and_then(|r| r.get(0, "confirmed_flush_lsn"))
        .and_then(|s| s.parse::<Lsn>().ok())
        .filter(|l| !l.is_invalid()))
}

/// Fails when the slot is confirmed past `resume`: the server would start
/// after changes this job has not processed.
async fn check_slot_position(
    conn: &mut ReplicationConnection,
    slot: &str,
    resume: Lsn,
) -> Result<(), PipelineError> {
    if let Some(confirmed) = slot_confirmed(conn, slot).await? {
        if !resume.is_invalid() && confirmed > resume {
            return Err(PipelineError::Diverged(format!(
                "replication slot {slot:?} on the source is confirmed up to {confirmed}, past \
                 {resume} where this job resumes; the changes between were never delivered. \
                 Another client moved the slot: re-read the tables (drop the slot and the job's \
                 checkpoints), or set checkpoint.trust_slot = true to accept the gap"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fork_is_where_the_old_timeline_ended() {
        let history = "1\t0/3000000\tno recovery target specified\n\n\
                       2\t0/5A00198\tno recovery target specified\n";
        assert_eq!(parse_fork(history, 1), Some("0/3000000".parse().unwrap()));
        assert_eq!(parse_fork(history, 2), Some("0/5A00198".parse().unwrap()));
        assert_eq!(parse_fork(history, 3), None);
        assert_eq!(parse_fork("", 1), None);
    }
}
