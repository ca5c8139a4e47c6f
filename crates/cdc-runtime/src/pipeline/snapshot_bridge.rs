//! The initial snapshot inside the stream. Before the first transaction
//! that commits at or after the consistent point of the snapshot's
//! consistent read (the fallback reader), that read's rows are emitted as
//! one unit; watermark messages bring a chunk's merged rows into their
//! transaction; changes to tables being read are tracked (and, with
//! checkpoints, changes to keyless tables held back); commits move the
//! snapshot on. Starting the snapshot from the plan and the checkpoint
//! resumed from is here too.

use cdc_core::pgoutput::LogicalDecodingMessage;
use cdc_core::TxnEvent;

use super::session::Source;
use super::{PipelineError, Shared};
use crate::checkpoint::Coordinator;
use crate::event::ChangeEvent;
use crate::replication::ReplicationStream;
use crate::snapshot::{FromFallback, Snapshot, SnapshotPlan, SnapshotState};

/// The snapshot to take: `plan`'s, continuing the progress of the
/// checkpoint `coordinator` resumes from; none without a plan.
pub(super) fn start_snapshot(
    plan: Option<SnapshotPlan>,
    coordinator: Option<&Coordinator>,
) -> Result<Option<Snapshot>, PipelineError> {
    let resumed = coordinator.and_then(Coordinator::resume);
    let resumed_snapshot = resumed.and_then(|c| c.snapshot.as_ref());
    let resumed_at = resumed.map_or(cdc_core::Lsn::INVALID, |c| c.source.commit_end_lsn);
    // Even when the checkpoint's snapshot is complete: tables added since
    // are read, and requests may come.
    let snapshot = match plan {
        Some(plan) => Some(Snapshot::new(plan, resumed_snapshot, resumed_at)?),
        None => None,
    };
    Ok(snapshot)
}

/// The state to report for `snapshot` at the start.
pub(super) fn snapshot_state(snapshot: Option<&Snapshot>) -> SnapshotState {
    match snapshot {
        None => SnapshotState::None,
        Some(s) if s.is_complete() => SnapshotState::Complete,
        Some(_) => SnapshotState::Running,
    }
}

impl Source<'_> {
    /// A snapshot watermark: never passed on; a high watermark brings its
    /// chunk's rows into this transaction. Returns how many events it added.
    pub(super) fn on_watermark(
        &mut self,
        m: &LogicalDecodingMessage<'_>,
    ) -> Result<usize, PipelineError> {
        let merged = match (self.snapshot.as_mut(), m.transactional) {
            (Some(s), true) => s
                .on_watermark(&m.prefix, &m.content)
                .map_err(PipelineError::Snapshot)?,
            _ => None,
        };
        match merged {
            Some((table, rows, marks)) => {
                Ok(self
                    .converter
                    .push_reads(&table, rows, marks, &mut self.pending.events)?)
            }
            None => Ok(0),
        }
    }

    /// The pending events from `start` on came from a change: the snapshot
    /// tracks them, and holds back those it holds. Returns how many it
    /// removed from the pending batch.
    pub(super) fn snapshot_on_changes(&mut self, shared: &Shared, start: usize) -> usize {
        let Some(s) = self.snapshot.as_mut() else {
            return 0;
        };
        let mut removed = 0;
        // Held back only with checkpoints: they restart an
        // interrupted consistent read, which then contains the
        // held changes. Without, the slot would move past them
        // and a crash would lose them, so they are passed on
        // (and may arrive again in the read).
        if shared.coordinator.is_some() && s.holds_keyless() {
            let mut i = start;
            while i < self.pending.events.len() {
                if s.holds(&self.pending.events[i]) {
                    self.pending.events.remove(i);
                    removed += 1;
                } else {
                    i += 1;
                }
            }
        }
        for ev in &self.pending.events[start..] {
            s.on_change(ev);
        }
        removed
    }

    /// A transaction committed: the snapshot moves on, and may be complete.
    pub(super) fn snapshot_on_commit(&mut self, shared: &mut Shared) {
        if let Some(s) = self.snapshot.as_mut() {
            s.on_commit();
            if s.is_complete() && shared.snapshot != SnapshotState::Complete {
                shared.snapshot = SnapshotState::Complete;
            }
        }
    }

    /// Whether [`before_event`](Self::before_event) may have work at
    /// `event`: a Begin not yet processed while the fallback snapshot's
    /// consistent read runs. Tested before each event without building
    /// that call's future, which costs more than the test.
    #[inline]
    pub(super) fn reads_before(&self, event: &TxnEvent<'_>) -> bool {
        matches!(event, TxnEvent::Begin(b) if b.final_lsn >= self.processed)
            && self
                .snapshot
                .as_ref()
                .is_some_and(Snapshot::fallback_running)
    }

    /// Before a transaction that commits at or after the consistent point
    /// of the snapshot's consistent read, emits the rows of that read.
    pub(super) async fn before_event(
        &mut self,
        shared: &mut Shared,
        stream: &mut ReplicationStream,
        ticker: &mut tokio::time::Interval,
        event: &TxnEvent<'_>,
    ) -> Result<(), PipelineError> {
        let TxnEvent::Begin(begin) = event else {
            return Ok(());
        };
        if !self.reads_before(event) {
            return Ok(());
        }
        // Wait for the consistent point (the reader is creating its slot).
        let point = loop {
            if let Some(p) = self.snapshot.as_ref().and_then(Snapshot::fallback_point) {
                break p;
            }
            self.fallback_message(shared, stream, ticker).await?;
        };
        if begin.final_lsn < point {
            return Ok(());
        }
        tracing::info!(consistent_point = %point, "snapshot: emitting the consistent read");
        let mut ctx = crate::operators::CommitContext {
            source: self.converter.snapshot_source(point),
            next_index: 0,
        };
        let mut added = 0u64;
        loop {
            let Some(msg) = self.fallback_message(shared, stream, ticker).await? else {
                break;
            };
            let Some(s) = self.snapshot.as_mut() else {
                break;
            };
            match msg {
                FromFallback::Rows { table, rows } => {
                    let schema = s.fallback_schema(table).map_err(PipelineError::Snapshot)?;
                    let start = self.pending.events.len();
                    for row in rows {
                        self.pending.events.push(ChangeEvent {
                            op: crate::event::Operation::Read,
                            table: Some(schema.clone()),
                            before: None,
                            after: Some(row),
                            message: None,
                            schema_change: None,
                            source: ctx.source.clone(),
                            index: ctx.next_index,
                            position: Default::default(),
                            boundary: None,
                        });
                        ctx.next_index = ctx.next_index.saturating_add(1);
                    }
                    for ev in &self.pending.events[start..] {
                        for op in self.operators.iter_mut() {
                            op.on_event(ev).map_err(PipelineError::Operator)?;
                        }
                    }
                    added += (self.pending.events.len() - start) as u64;
                    // The rows are one unit with no commit until the end.
                    self.pending.committed = self.pending.events.len();
                    if self.batch_full() {
                        self.ship(shared, stream, ticker).await?;
                    }
                }
                FromFallback::TableDone { table, rows } => s.fallback_table_done(table, rows),
                FromFallback::Point(_) => {}
                FromFallback::Done => {
                    s.fallback_finished();
                    if s.is_complete() {
                        shared.snapshot = SnapshotState::Complete;
                    }
                    added += self.commit_operators(&mut ctx)? as u64;
                    self.pending.committed = self.pending.events.len();
                    self.pending.commit_end = Some(point);
                    self.processed = self.processed.max(point);
                    break;
                }
            }
        }
        shared.events = shared.events.saturating_add(added);
        Ok(())
    }

    /// The next message of the consistent read, sending status updates
    /// while waiting; `None` once it is over.
    pub(super) async fn fallback_message(
        &mut self,
        shared: &mut Shared,
        stream: &mut ReplicationStream,
        ticker: &mut tokio::time::Interval,
    ) -> Result<Option<FromFallback>, PipelineError> {
        let Some(s) = self.snapshot.as_mut() else {
            return Ok(None);
        };
        loop {
            tokio::select! {
                msg = s.fallback_next() => return Ok(Some(msg.map_err(PipelineError::Snapshot)?)),
                _ = ticker.tick() => shared.send_status(stream).await?,
            }
        }
    }
}
