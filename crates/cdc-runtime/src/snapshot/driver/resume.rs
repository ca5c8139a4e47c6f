//! Starting a snapshot: the tables to read, continuing a checkpoint's
//! progress, and the epoch that identifies the snapshot across restarts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use checkpoint_api::{SnapshotProgress, TableDone};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::super::catalog::{SnapshotTable, TableRequest};
use super::super::merge::Merger;
use super::super::progress::Display;
use super::super::reader::PlanCursor;
use super::super::{OnUnreadable, SnapshotError, SnapshotPlan};
use super::consistent_read::Fallback;
use super::{table_ref, Snapshot};
use crate::tls_connect::PgClientSettings;

impl Snapshot {
    /// A snapshot of the published `tables`, continuing `resume` if given.
    /// Tables `resume` records as read are not read again; tables it does
    /// not know (added since) are, and so are its pending requests. Tables
    /// no longer published are forgotten, so they are read again if they
    /// come back. Nothing is read until [`restart`](Self::restart).
    pub(crate) fn new(
        plan: SnapshotPlan,
        resume: Option<&SnapshotProgress>,
        resumed_at: cdc_core::Lsn,
    ) -> Result<Self, SnapshotError> {
        let SnapshotPlan {
            tables,
            replication,
            options,
            read_unrecorded,
            read_new_tables,
            unreadable,
        } = plan;
        let on_unreadable = options.on_unreadable;
        let settings = PgClientSettings::new(&replication)
            .map_err(|e| SnapshotError::Connect(e.to_string()))?;
        let catalog = tables.clone();
        let known = catalog.iter().map(|t| t.oid).collect();
        let mut done: Vec<TableDone> = Vec::new();
        for d in resume.map(|p| p.tables_done.as_slice()).unwrap_or_default() {
            // Known by oid first (a renamed table stays read), else by name.
            let published = tables
                .iter()
                .find(|t| d.oid != 0 && t.oid == d.oid)
                .or_else(|| tables.iter().find(|t| table_ref(t) == d.table));
            match published {
                Some(t) => done.push(TableDone {
                    table: table_ref(t),
                    oid: t.oid,
                    ..d.clone()
                }),
                None => {
                    tracing::info!(table = %format_args!("{}.{}", d.table.schema, d.table.name),
                    "snapshot: the table is no longer published; if it is published again, it is read again")
                }
            }
        }
        let is_done = |done: &[TableDone], t: &SnapshotTable| {
            done.iter()
                .any(|d| (d.oid != 0 && d.oid == t.oid) || d.table == table_ref(t))
        };
        if !read_unrecorded {
            // Taken as they are: their rows are not read, later changes stream.
            for t in &tables {
                if !is_done(&done, t) {
                    tracing::info!(table = %t.display_name(), "snapshot: the table is taken as it is (its existing rows are not read; `pgcdc snapshot` reads them on request)");
                    done.push(TableDone {
                        table: table_ref(t),
                        oid: t.oid,
                        ..TableDone::default()
                    });
                }
            }
        }
        // Tables the role may not read: stop, or go on without them.
        for t in tables.iter().filter(|t| unreadable.contains(&t.oid)) {
            if is_done(&done, t) {
                continue;
            }
            let name = t.display_name();
            match on_unreadable {
                OnUnreadable::Stop => {
                    return Err(SnapshotError::Unreadable {
                        reason: "the job's role may not SELECT from it".into(),
                        fix: format!("GRANT SELECT ON {} TO the job's role", t.quoted()),
                        table: name,
                    })
                }
                OnUnreadable::Warn => {
                    tracing::warn!(table = %name, "snapshot: the job's role may not SELECT from the table; its existing rows are NOT read (snapshot.on_unreadable_table = \"warn\"); its changes stream");
                    done.push(TableDone {
                        table: table_ref(t),
                        oid: t.oid,
                        skipped: true,
                        ..TableDone::default()
                    });
                }
            }
        }
        let (mut keyed, keyless): (Vec<_>, Vec<_>) = tables
            .into_iter()
            .filter(|t| !is_done(&done, t))
            .partition(|t| !t.key.is_empty());
        if resume.is_some_and(|p| p.complete) {
            // Tables added since the snapshot finished.
            for t in keyed.iter().chain(&keyless) {
                tracing::info!(table = %t.display_name(), "snapshot: the table has not been read yet; reading it while the stream runs");
            }
        }
        // Requests asked for before the checkpoint, read after the tables.
        for r in resume.map(|p| p.requests.as_slice()).unwrap_or_default() {
            let found = catalog.iter().find(|t| table_ref(t) == r.table);
            match found {
                Some(t) if !t.key.is_empty() => keyed.push(t.for_request(TableRequest {
                    id: r.id.clone(),
                    filter: r.filter.clone(),
                    lsn: r.lsn,
                })),
                _ => {
                    tracing::warn!(request = %r.id, table = %format_args!("{}.{}", r.table.schema, r.table.name),
                    "snapshot request dropped: the table is no longer published, or has no key")
                }
            }
        }
        let initial = if resume.is_some_and(|p| p.complete) {
            0
        } else {
            keyed.len()
        };
        let fresh = resume.is_none_or(|p| {
            p.tables_done.iter().all(|d| d.rows == 0 && d.chunks == 0)
                && p.in_progress.as_ref().is_none_or(|c| c.chunks_done == 0)
        });
        let fallback = if keyless.is_empty() {
            Fallback::Done
        } else {
            Fallback::Idle
        };
        // The table a checkpoint was reading goes first, so its cursor holds.
        if let Some(c) = resume.and_then(|p| p.in_progress.as_ref()) {
            let at = keyed.iter().position(|t| {
                table_ref(t) == c.table
                    && t.request.as_ref().map(|r| &r.id) == c.request_id.as_ref()
            });
            if let Some(i) = at {
                let t = keyed.remove(i);
                keyed.insert(0, t);
            }
        }
        let table = 0;
        let mut cursor = PlanCursor::default();
        let (mut chunks_done, mut rows_done) = (0, 0);
        if let (Some(t), Some(c)) = (
            keyed.get(table),
            resume.and_then(|p| p.in_progress.as_ref()),
        ) {
            let request = t.request.as_ref().map(|r| &r.id);
            if c.table == table_ref(t) && c.request_id.as_ref() == request {
                cursor = serde_json::from_slice(&c.cursor)
                    .map_err(|e| SnapshotError::Cursor(e.to_string()))?;
                chunks_done = c.chunks_done;
                rows_done = c.rows_done;
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let (done_tx, _) = watch::channel(table);
        let now = Instant::now();
        let display = Display::new(options.log_interval);
        let s = Snapshot {
            read_new_tables,
            on_unreadable,
            catalog,
            known,
            tables: Arc::new(keyed),
            generation_end: 0,
            fallback_tables: Arc::new(keyless),
            fallback,
            replication,
            settings,
            options,
            merger: Merger::new(),
            tx,
            rx,
            readers: JoinSet::new(),
            token: Arc::from(""),
            next_chunk: 1,
            chunks: HashMap::new(),
            emitted: Vec::new(),
            redo: std::mem::take(&mut cursor.redo),
            table,
            cursor,
            planned_all: false,
            chunks_done,
            rows_done,
            tables_done: done,
            requests_done: resume.map(|p| p.requests_done.clone()).unwrap_or_default(),
            done_tx,
            monitor: None,
            initial,
            fresh,
            epoch: resume
                .map(|p| p.consistent_point)
                .filter(|l| *l != cdc_core::Lsn::INVALID)
                .unwrap_or(resumed_at),
            table_emitted: 0,
            rows_reported: 0,
            stream_keys: HashMap::new(),
            started_at: now,
            display,
            rows_total: 0,
        };
        // Readers start with the stream (see `restart`).
        if !s.is_complete() {
            s.log_start();
        }
        Ok(s)
    }
}
