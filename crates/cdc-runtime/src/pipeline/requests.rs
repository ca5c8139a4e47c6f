//! Tables read while the job runs: on-demand snapshots asked for through
//! the signal table (see [`crate::signal`]), and tables that appear in the
//! publication (a new table of a published schema). Both are noted while a
//! transaction is converted and served between transactions, where the
//! snapshot may take new tables; a checkpoint taken after that records
//! them, and before it the stream brings them again.

use cdc_core::{Lsn, Oid, Xid};

use super::session::Source;
use super::{PipelineError, Shared};
use crate::signal::{self, SignalAction};
use crate::snapshot::{
    published_tables, OnUnreadable, SnapshotError, SnapshotState, SnapshotTable, TableRequest,
};
use crate::source::TableRef;

/// Something to read, noted during conversion.
#[derive(Debug, Clone)]
pub(super) enum Asked {
    /// A signal asked for a table, from its message at `lsn`.
    Signal {
        id: String,
        table: TableRef,
        filter: Option<String>,
        lsn: Lsn,
    },
    /// A change to a table the snapshot does not know, in transaction
    /// `xid`.
    Appeared {
        oid: Oid,
        name: TableRef,
        lsn: Lsn,
        xid: Option<Xid>,
    },
    /// A partition was attached to a published partitioned table.
    Attached(super::partitions::Attached),
    /// A table still to be read changed its schema, or a read failed
    /// (perhaps because it did): the reads take the current columns.
    Refresh,
    /// A column was added with a value per existing row (a volatile
    /// default or an identity column), which the WAL stream does not carry:
    /// the table is read again, once transaction `xid` is visible.
    Rewritten {
        oid: Oid,
        name: TableRef,
        column: String,
        lsn: Lsn,
        xid: Option<Xid>,
    },
}

impl Asked {
    /// The transaction whose changes the read must see.
    fn xid(&self) -> Option<Xid> {
        match self {
            Asked::Appeared { xid, .. } | Asked::Rewritten { xid, .. } => *xid,
            _ => None,
        }
    }
}

impl Source<'_> {
    /// A signal message (at `lsn`): noted, or logged if it asks for
    /// nothing pgcdc does. Never an error: a bad row in the signal table
    /// must not stop the job.
    pub(super) fn on_signal(&mut self, content: &[u8], lsn: Lsn) {
        let signal = match signal::parse(content) {
            Ok(s) => s,
            Err((id, e)) => {
                tracing::warn!(signal = id.as_deref().unwrap_or("?"), error = %e, "signal ignored");
                return;
            }
        };
        match signal.action {
            SignalAction::Snapshot(asks) => {
                for (i, ask) in asks.into_iter().enumerate() {
                    // One request per table; the first keeps the signal's id.
                    let id = match i {
                        0 => signal.id.clone(),
                        i => format!("{}#{i}", signal.id),
                    };
                    tracing::info!(signal = %signal.id, table = %ask.table, filter = ask.filter.as_deref().unwrap_or(""), %lsn, "signal: snapshot requested");
                    self.asked.push(Asked::Signal {
                        id,
                        table: ask.table,
                        filter: ask.filter,
                        lsn,
                    });
                }
            }
            SignalAction::Other(kind) => {
                tracing::warn!(signal = %signal.id, r#type = %kind, "signal ignored: pgcdc acts on type 'execute-snapshot' only");
            }
        }
    }

    /// The pending events from `start` on: a change to a table the
    /// snapshot does not know is a table that appeared in the publication;
    /// a schema change of a table still to be read changes its reads.
    pub(super) fn note_new_tables(&mut self, start: usize, lsn: Lsn) {
        let Some(s) = self.snapshot.as_ref() else {
            return;
        };
        for ev in &self.pending.events[start..] {
            if let (Some(t), Some(_)) = (&ev.table, &ev.schema_change) {
                if s.reads_pending(t.oid) && !self.asked.iter().any(|a| matches!(a, Asked::Refresh))
                {
                    self.asked.push(Asked::Refresh);
                }
            }
        }
        for ev in &self.pending.events[start..] {
            let Some(t) = ev.table.as_ref() else {
                continue;
            };
            if s.knows(t.oid) || self.appeared.contains(&t.oid) {
                continue;
            }
            self.appeared.insert(t.oid);
            self.asked.push(Asked::Appeared {
                oid: t.oid,
                name: TableRef::new(&*t.schema, &*t.table),
                lsn,
                xid: self.converter.open_transaction(),
            });
        }
    }

    /// Whether [`serve_requests`](Self::serve_requests) has work now:
    /// something noted, and no transaction open. Tested after each message
    /// without building that call's future, which costs more than the test.
    #[inline]
    pub(super) fn requests_due(&self) -> bool {
        !self.asked.is_empty() && self.converter.open_transaction().is_none() && !self.skipping
    }

    /// Serves what was noted, between transactions.
    pub(super) async fn serve_requests(
        &mut self,
        shared: &mut Shared,
    ) -> Result<(), PipelineError> {
        if !self.requests_due() {
            return Ok(());
        }
        let Some(s) = self.snapshot.as_mut() else {
            for a in std::mem::take(&mut self.asked) {
                if let Asked::Signal { id, table, .. } = a {
                    tracing::warn!(signal = %id, %table, "signal ignored: this pipeline was built without a snapshot plan, so it cannot read tables");
                }
            }
            return Ok(());
        };
        // What was noted stays noted until it is served: after an error the
        // stream goes on past the signal, which would not come again.
        let client = crate::snapshot::connect(s.client_settings()).await?;
        // The catalog and the reads must see the transactions that asked.
        let mut xids: Vec<Xid> = self.asked.iter().filter_map(Asked::xid).collect();
        xids.dedup();
        for xid in xids {
            super::visibility::wait_visible(&client, xid).await?;
        }
        let published = published_tables(&client, &self.options.publications).await?;
        let mut added = false;
        while !self.asked.is_empty() {
            let a = self.asked.remove(0);
            let retry = a.clone();
            match a {
                Asked::Signal {
                    id,
                    table,
                    filter,
                    lsn,
                } => {
                    if s.has_request(&id) {
                        tracing::debug!(signal = %id, "signal already taken");
                        continue;
                    }
                    let Some(t) = published
                        .iter()
                        .find(|t| t.schema == table.schema && t.name == table.table)
                    else {
                        tracing::warn!(signal = %id, %table, publications = ?self.options.publications,
                            "snapshot request ignored: this job does not capture the table");
                        continue;
                    };
                    if t.key.is_empty() {
                        tracing::warn!(signal = %id, %table,
                            "snapshot request ignored: the table has no primary key or replica identity index, so its rows cannot be read while the stream runs");
                        continue;
                    }
                    if let Some(f) = &filter {
                        if let Err(e) = check_filter(&client, t, f).await {
                            tracing::warn!(signal = %id, %table, filter = %f, error = %crate::pg_error::describe(&e),
                                "snapshot request ignored: the condition is not a valid SQL condition on the table");
                            continue;
                        }
                    }
                    let readable = match may_select(&client, t.oid).await {
                        Ok(r) => r,
                        Err(e) => {
                            self.asked.insert(0, retry);
                            return Err(e.into());
                        }
                    };
                    if !readable {
                        tracing::warn!(signal = %id, %table, "snapshot request ignored: the job's role may not SELECT from the table");
                        continue;
                    }
                    s.add(t.for_request(TableRequest { id, filter, lsn }));
                    added = true;
                }
                Asked::Appeared { oid, name, lsn, .. } => {
                    if s.knows(oid) {
                        continue;
                    }
                    let Some(t) = published.iter().find(|t| t.oid == oid) else {
                        // Gone again (dropped); nothing to read.
                        tracing::debug!(table = %name, "a table that appeared is no longer published");
                        continue;
                    };
                    match read_new_table(s, &client, t, lsn).await {
                        Ok(read) => added |= read,
                        Err(e) => {
                            if e.is_transient() {
                                self.asked.insert(0, retry);
                            }
                            return Err(e);
                        }
                    }
                }
                Asked::Refresh => {
                    let failure = self.snapshot_failure.take();
                    if !s.refresh(&published) {
                        if let Some(e) = failure {
                            // Not a schema change: the read failed for good.
                            return Err(PipelineError::Snapshot(e));
                        }
                    } else if let Some(e) = failure {
                        tracing::info!(error = %e, "a snapshot read failed because its table's schema changed; the chunks are read again");
                    }
                }
                Asked::Rewritten {
                    oid,
                    name,
                    column,
                    lsn,
                    ..
                } => {
                    let id = format!("ddl-{lsn}-{oid}");
                    if s.has_request(&id) {
                        continue;
                    }
                    let Some(t) = published.iter().find(|t| t.oid == oid) else {
                        continue;
                    };
                    if t.key.is_empty() {
                        tracing::warn!(table = %name, %column,
                            "a column was added with a value per row, but the table has no primary key or replica identity index, so its rows cannot be read again while the stream runs; targets hold NULL in the column for rows that existed before");
                        continue;
                    }
                    tracing::info!(table = %name, %column, %lsn,
                        "a column was added with a value per row (volatile default or identity): reading the table again");
                    s.add(t.for_request(TableRequest {
                        id,
                        filter: None,
                        lsn,
                    }));
                    added = true;
                }
                Asked::Attached(a) => {
                    let id = format!("attach-{}-{}", a.root, a.leaf);
                    let Some(root) = published.iter().find(|t| t.oid == a.root) else {
                        continue;
                    };
                    if s.has_request(&id) {
                        continue;
                    }
                    tracing::info!(partition = %a.name, table = %root.display_name(),
                        "a partition was attached: reading its rows as rows of the partitioned table");
                    s.add(root.for_request(TableRequest {
                        id,
                        filter: Some(format!("tableoid = {}::oid", a.leaf)),
                        lsn: Lsn::INVALID,
                    }));
                    added = true;
                }
            }
        }
        if added {
            shared.snapshot = SnapshotState::Running;
            shared.publish();
        }
        Ok(())
    }
}

/// A table that appeared while the job runs: read it (`true`), take it as
/// it is, or skip it as configured.
async fn read_new_table(
    s: &mut crate::snapshot::Snapshot,
    client: &tokio_postgres::Client,
    t: &SnapshotTable,
    lsn: Lsn,
) -> Result<bool, PipelineError> {
    let name = t.display_name();
    if !s.read_new_tables {
        tracing::info!(table = %name, "a table appeared in the publication; with this snapshot mode its existing rows are not read (`pgcdc snapshot` reads them on request)");
        s.skip_as_is(t);
        return Ok(false);
    }
    if t.key.is_empty() {
        // Not recorded as read: the next start reads it in one consistent read.
        tracing::warn!(table = %name, "a table without a primary key or replica identity index appeared in the publication: its changes stream, and its existing rows are read at the next start of the job (they cannot be merged with the stream while it runs)");
        s.defer(t);
        return Ok(false);
    }
    if !may_select(client, t.oid).await? {
        match s.on_unreadable {
            OnUnreadable::Stop => {
                return Err(SnapshotError::Unreadable {
                    table: name,
                    reason:
                        "it appeared in the publication, and the job's role may not SELECT from it"
                            .into(),
                    fix: format!(
                        "GRANT SELECT ON {} TO the job's role and start the job again",
                        t.quoted()
                    ),
                }
                .into())
            }
            OnUnreadable::Warn => {
                tracing::warn!(table = %name, "a table appeared in the publication, and the job's role may not SELECT from it: its existing rows are NOT read (snapshot.on_unreadable_table = \"warn\"); its changes stream");
                s.skip(t);
                return Ok(false);
            }
        }
    }
    tracing::info!(table = %name, %lsn, "a table appeared in the publication; reading its existing rows");
    s.add(t.clone());
    Ok(true)
}

/// Whether the job's role may read the table.
async fn may_select(client: &tokio_postgres::Client, oid: Oid) -> Result<bool, SnapshotError> {
    let row = client
        .query_one(
            "SELECT pg_catalog.has_table_privilege($1::oid, 'SELECT')",
            &[&oid],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// Checks that `filter` is one SQL condition on `t`: prepared (never run)
/// through the extended protocol, which refuses more than one statement.
pub(crate) async fn check_filter(
    client: &tokio_postgres::Client,
    t: &SnapshotTable,
    filter: &str,
) -> Result<(), tokio_postgres::Error> {
    client
        .prepare(&format!("SELECT 1 FROM {} WHERE ({filter})", t.quoted()))
        .await
        .map(drop)
}
