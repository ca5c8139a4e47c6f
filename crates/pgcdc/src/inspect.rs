//! What `pgcdc checkpoints list|show` and `pgcdc slot status` print: text
//! for people, or (`--json`) one JSON document for scripts. Times are
//! RFC 3339 UTC ([`rfc3339_micros`]).

use cdc_core::Lsn;
use cdc_runtime::checkpoint::SlotState;
use checkpoint_api::{CheckpointMeta, JobName, SnapshotProgress, StorageKind, StoredCheckpoint};
use serde_json::{json, Value};

use crate::timefmt::rfc3339_micros;

fn time(ts: checkpoint_api::Timestamp) -> String {
    rfc3339_micros(ts.as_unix_micros())
}

fn lsn_or_dash(lsn: Lsn) -> String {
    if lsn.is_invalid() {
        "-".to_owned()
    } else {
        lsn.to_string()
    }
}

fn lsn_or_null(lsn: Lsn) -> Value {
    if lsn.is_invalid() {
        Value::Null
    } else {
        Value::String(lsn.to_string())
    }
}

fn storage_text(s: &StorageKind) -> String {
    match s {
        StorageKind::Memory => "memory".to_owned(),
        StorageKind::Inline => "inline".to_owned(),
        StorageKind::Chunked { chunks } => format!("chunked ({chunks} chunks)"),
        other => format!("{other:?}"),
    }
}

fn storage_json(s: &StorageKind) -> Value {
    match s {
        StorageKind::Memory => json!({ "kind": "memory" }),
        StorageKind::Inline => json!({ "kind": "inline" }),
        StorageKind::Chunked { chunks } => json!({ "kind": "chunked", "chunks": chunks }),
        other => json!({ "kind": format!("{other:?}") }),
    }
}

fn meta_json(m: &CheckpointMeta) -> Value {
    json!({
        "id": m.id.get(),
        "lsn": m.commit_end_lsn.to_string(),
        "created_at": time(m.created_at),
        "stored_bytes": m.stored_bytes,
        "storage": storage_json(&m.storage),
    })
}

/// `pgcdc checkpoints list`: one line per checkpoint, oldest first.
pub fn list_text(job: &JobName, list: &[CheckpointMeta]) -> String {
    let mut out = format!(
        "{:>8}  {:>18}  {:>27}  {:>12}  storage\n",
        "id", "lsn", "created (UTC)", "bytes"
    );
    for m in list {
        out.push_str(&format!(
            "{:>8}  {:>18}  {:>27}  {:>12}  {}\n",
            m.id.get(),
            m.commit_end_lsn.to_string(),
            time(m.created_at),
            m.stored_bytes,
            storage_text(&m.storage)
        ));
    }
    out.push_str(&format!("{} checkpoint(s) of job {job}\n", list.len()));
    out
}

/// `pgcdc checkpoints list --json`.
pub fn list_json(job: &JobName, list: &[CheckpointMeta]) -> Value {
    json!({
        "job": job.as_str(),
        "checkpoints": list.iter().map(meta_json).collect::<Vec<_>>(),
    })
}

/// `pgcdc checkpoints show`.
pub fn show_text(stored: &StoredCheckpoint) -> String {
    let c = &stored.checkpoint;
    let mut out = String::new();
    out.push_str(&format!("job:          {}\n", c.job));
    out.push_str(&format!("id:           {}\n", c.id));
    out.push_str(&format!("created:      {}\n", time(c.created_at)));
    out.push_str(&format!("position:     {}\n", c.source.commit_end_lsn));
    out.push_str(&format!("slot:         {}\n", c.source.slot));
    out.push_str(&format!(
        "publications: {}\n",
        c.source.publications.join(", ")
    ));
    out.push_str(&format!(
        "protocol:     v{}\n",
        c.source.protocol.proto_version
    ));
    out.push_str(&format!(
        "stored:       {} bytes ({})\n",
        stored.meta.stored_bytes,
        storage_text(&stored.meta.storage)
    ));
    out.push_str(&format!("operators:    {}\n", c.operators.len()));
    for op in &c.operators {
        out.push_str(&format!(
            "  {} ({} v{}): {} bytes of state\n",
            op.id,
            op.kind,
            op.state_version,
            op.state.len()
        ));
    }
    out.push_str(&snapshot_text(c.snapshot.as_ref()));
    out
}

/// `pgcdc checkpoints show --json`.
pub fn show_json(stored: &StoredCheckpoint) -> Value {
    let c = &stored.checkpoint;
    json!({
        "job": c.job.as_str(),
        "id": c.id.get(),
        "created_at": time(c.created_at),
        "position": c.source.commit_end_lsn.to_string(),
        "slot": c.source.slot,
        "publications": c.source.publications,
        "protocol_version": c.source.protocol.proto_version,
        "stored_bytes": stored.meta.stored_bytes,
        "storage": storage_json(&stored.meta.storage),
        "operators": c.operators.iter().map(|op| json!({
            "id": op.id,
            "kind": op.kind,
            "state_version": op.state_version,
            "state_bytes": op.state.len(),
        })).collect::<Vec<_>>(),
        "snapshot": snapshot_json(c.snapshot.as_ref()),
    })
}

/// The job's checkpoints as `pgcdc slot status` compares them with the slot.
#[derive(Debug, Clone)]
pub struct JobCheckpoints {
    /// The job.
    pub job: JobName,
    /// Its checkpoints, oldest first.
    pub list: Vec<CheckpointMeta>,
    /// The newest readable checkpoint's snapshot progress.
    pub snapshot: Option<SnapshotProgress>,
}

/// `pgcdc slot status`.
pub fn slot_text(slot: &SlotState, job: Option<&JobCheckpoints>) -> String {
    let mut out = String::new();
    out.push_str(&format!("slot:             {}\n", slot.name));
    out.push_str(&format!(
        "confirmed_flush:  {}\n",
        lsn_or_dash(slot.confirmed_flush)
    ));
    out.push_str(&format!(
        "restart_lsn:      {}\n",
        lsn_or_dash(slot.restart_lsn)
    ));
    out.push_str(&format!(
        "server WAL:       {}\n",
        lsn_or_dash(slot.current_wal)
    ));
    out.push_str(&format!("lag:              {} bytes\n", slot.lag_bytes()));
    match slot.active_pid {
        Some(pid) => out.push_str(&format!("active:           yes (walsender pid {pid})\n")),
        None => out.push_str("active:           no\n"),
    }
    let Some(j) = job else {
        return out;
    };
    match (j.list.first(), j.list.last()) {
        (Some(oldest), Some(newest)) => {
            out.push_str(&format!(
                "job:              {} ({} checkpoint(s))\n",
                j.job,
                j.list.len()
            ));
            out.push_str(&format!(
                "newest:           {} at {}, {}\n",
                newest.id,
                newest.commit_end_lsn,
                time(newest.created_at)
            ));
            out.push_str(&format!(
                "oldest retained:  {} at {}, {}\n",
                oldest.id,
                oldest.commit_end_lsn,
                time(oldest.created_at)
            ));
            if slot.confirmed_flush > newest.commit_end_lsn {
                out.push_str("WARNING: the slot is confirmed past the newest checkpoint; `pgcdc run` will refuse to resume unless checkpoint.trust_slot = true\n");
            } else {
                out.push_str(&format!(
                    "checkpoint ahead of slot by {} bytes (confirmed only up to what retained checkpoints cover)\n",
                    newest
                        .commit_end_lsn
                        .as_u64()
                        .saturating_sub(slot.confirmed_flush.as_u64())
                ));
            }
        }
        _ => out.push_str(&format!(
            "job:              {} (no checkpoints yet)\n",
            j.job
        )),
    }
    if !j.list.is_empty() {
        out.push_str(&snapshot_text(j.snapshot.as_ref()));
    }
    out
}

/// `pgcdc slot status --json`.
pub fn slot_json(slot: &SlotState, job: Option<&JobCheckpoints>) -> Value {
    let slot_value = json!({
        "name": slot.name,
        "confirmed_flush": lsn_or_null(slot.confirmed_flush),
        "restart_lsn": lsn_or_null(slot.restart_lsn),
        "server_wal": lsn_or_null(slot.current_wal),
        "lag_bytes": slot.lag_bytes(),
        "active_pid": slot.active_pid,
    });
    let job_value = job.map(|j| {
        let newest = j.list.last();
        json!({
            "name": j.job.as_str(),
            "checkpoints": j.list.len(),
            "newest": newest.map(meta_json),
            "oldest": j.list.first().map(meta_json),
            "slot_past_newest_checkpoint":
                newest.is_some_and(|n| slot.confirmed_flush > n.commit_end_lsn),
            "snapshot": snapshot_json(j.snapshot.as_ref()),
        })
    });
    json!({ "slot": slot_value, "job": job_value })
}

/// The snapshot's progress as the newest checkpoint records it: the
/// initial snapshot, tables read since (added, or on request), and what is
/// still to read.
fn snapshot_text(progress: Option<&SnapshotProgress>) -> String {
    let Some(p) = progress else {
        return "snapshot:         none recorded\n".to_owned();
    };
    let read: Vec<_> = p.tables_done.iter().filter(|t| !t.skipped).collect();
    let rows: u64 = read.iter().map(|t| t.rows).sum();
    let mut out = if p.complete {
        format!(
            "snapshot:         complete ({} table(s), {rows} rows)\n",
            read.len()
        )
    } else {
        format!(
            "snapshot:         running; {} table(s) done ({rows} rows)\n",
            read.len()
        )
    };
    if let Some(c) = &p.in_progress {
        let request = c
            .request_id
            .as_ref()
            .map(|r| format!(" (request {r})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "snapshot table:   {}.{}{request}: {} chunks, {} rows done\n",
            c.table.schema, c.table.name, c.chunks_done, c.rows_done
        ));
    }
    for t in p.tables_done.iter().filter(|t| t.skipped) {
        out.push_str(&format!(
            "snapshot skipped: {}.{} (could not be read; its existing rows are missing)\n",
            t.table.schema, t.table.name
        ));
    }
    for r in &p.requests {
        let filter = r
            .filter
            .as_ref()
            .map(|f| format!(" where {f}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "snapshot request: {} {}.{}{filter}: queued\n",
            r.id, r.table.schema, r.table.name
        ));
    }
    for d in p.requests_done.iter().rev().take(5) {
        out.push_str(&format!(
            "snapshot request: {} {}.{}: done ({} rows)\n",
            d.request_id.as_deref().unwrap_or("?"),
            d.table.schema,
            d.table.name,
            d.rows
        ));
    }
    out
}

fn snapshot_json(progress: Option<&SnapshotProgress>) -> Value {
    let Some(p) = progress else {
        return Value::Null;
    };
    json!({
        "complete": p.complete,
        "consistent_point": lsn_or_null(p.consistent_point),
        "tables_done": p.tables_done.iter().map(done_json).collect::<Vec<_>>(),
        "in_progress": p.in_progress.as_ref().map(|c| json!({
            "table": format!("{}.{}", c.table.schema, c.table.name),
            "chunks_done": c.chunks_done,
            "rows_done": c.rows_done,
            "request": c.request_id,
        })),
        "requests": p.requests.iter().map(|r| json!({
            "id": r.id,
            "table": format!("{}.{}", r.table.schema, r.table.name),
            "filter": r.filter,
            "lsn": lsn_or_null(r.lsn),
        })).collect::<Vec<_>>(),
        "requests_done": p.requests_done.iter().map(done_json).collect::<Vec<_>>(),
    })
}

fn done_json(t: &checkpoint_api::TableDone) -> Value {
    json!({
        "table": format!("{}.{}", t.table.schema, t.table.name),
        "chunks": t.chunks,
        "rows": t.rows,
        "skipped": t.skipped,
        "request": t.request_id,
    })
}
