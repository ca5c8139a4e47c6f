//! Conversion: decoded transaction events become change events in the
//! pending batch. Transactions processed before (ahead of a reconnect or
//! the checkpoint resumed from) are skipped, heartbeats dropped, operators
//! see every event and each commit, and checkpoints are captured at commits
//! or between transactions. Operators are restored from the checkpoint
//! resumed from here too.

use cdc_core::{Lsn, TxnEvent};

use super::session::Source;
use super::{PipelineError, Shared};
use crate::ddl::DDL_PREFIX;
use crate::operators::Operator;
use crate::signal::SIGNAL_PREFIX;
use crate::snapshot::WATERMARK_PREFIX;

/// The prefix of the heartbeat messages `source.heartbeat_interval_ms`
/// writes; the pipeline drops them before operators and sinks.
pub const HEARTBEAT_PREFIX: &str = "pgcdc.heartbeat";

impl Source<'_> {
    /// Tells every operator the transaction of `ctx` committed; their
    /// derived events follow its events, numbered on. Returns how many.
    pub(super) fn commit_operators(
        &mut self,
        ctx: &mut crate::operators::CommitContext,
    ) -> Result<usize, PipelineError> {
        let mut added = 0;
        for op in self.operators.iter_mut() {
            let before = self.pending.events.len();
            op.on_commit(ctx, &mut self.pending.events)
                .map_err(PipelineError::Operator)?;
            let derived = self.pending.events.len() - before;
            ctx.next_index = ctx.next_index.saturating_add(derived as u32);
            added += derived;
        }
        Ok(added)
    }

    /// Converts `event` (from the XLogData at `lsn`) into the pending
    /// batch, running the operators over it.
    pub(super) fn convert(
        &mut self,
        shared: &mut Shared,
        event: &TxnEvent<'_>,
        lsn: Lsn,
    ) -> Result<(), PipelineError> {
        // Transactions the pipeline already processed (before a reconnect
        // or up to the checkpoint it resumed from) are skipped: a commit
        // record that starts before `processed` ends at or before it.
        match event {
            // The assembler holds no changes of this prepared transaction: its
            // PREPARE came before where the stream started. Before
            // `processed` it was delivered already; after, its changes were
            // never received (the slot was confirmed past its PREPARE by
            // someone else, or before pgcdc held prepared transactions).
            TxnEvent::CommitPrepared(c) => {
                if c.commit_lsn >= self.processed {
                    tracing::warn!(slot = %self.options.slot, gid = %c.gid, xid = c.xid, commit_lsn = %c.commit_lsn,
                        "COMMIT PREPARED of a transaction whose changes were not received (its PREPARE is before the slot's confirmed position); they cannot be delivered");
                }
                return Ok(());
            }
            TxnEvent::RollbackPrepared(r) => {
                tracing::debug!(slot = %self.options.slot, gid = %r.gid, xid = r.xid, "prepared transaction rolled back; nothing delivered");
                return Ok(());
            }
            TxnEvent::Begin(b) if b.final_lsn < self.processed => {
                self.skipping = true;
                return Ok(());
            }
            TxnEvent::Message(m) if m.lsn < self.processed => return Ok(()),
            _ if self.skipping => {
                if matches!(event, TxnEvent::Commit(_)) {
                    self.skipping = false;
                }
                return Ok(());
            }
            _ => {}
        }
        let commit = match event {
            TxnEvent::Commit(_) => self.converter.open_commit_context(),
            _ => None,
        };
        // At a commit the operators' derived events come first, as events
        // of the transaction (its END boundary, if any, follows them).
        let first = self.pending.events.len();
        let mut derived = 0;
        if let Some(mut ctx) = commit {
            derived = self.commit_operators(&mut ctx)?;
            derived += self.converter.adopt(&mut self.pending.events, first);
        }
        let start = self.pending.events.len();
        let n = match event {
            // The snapshot's watermarks: never passed on; a high watermark
            // brings its chunk's rows into this transaction.
            // Heartbeats only move the stream on.
            TxnEvent::Change(cdc_core::Change::Message(m)) | TxnEvent::Message(m)
                if m.prefix == HEARTBEAT_PREFIX =>
            {
                0
            }
            TxnEvent::Change(cdc_core::Change::Message(m)) | TxnEvent::Message(m)
                if m.prefix == WATERMARK_PREFIX =>
            {
                self.on_watermark(m)?
            }
            // A signal: noted, served between transactions, never passed on.
            TxnEvent::Change(cdc_core::Change::Message(m)) | TxnEvent::Message(m)
                if m.prefix == SIGNAL_PREFIX =>
            {
                self.on_signal(&m.content, m.lsn);
                0
            }
            // Captured DDL: schema-change events at the statement's LSN.
            TxnEvent::Change(cdc_core::Change::Message(m)) if m.prefix == DDL_PREFIX => {
                self.on_ddl(&m.content, lsn)?
            }
            TxnEvent::Message(m) if m.prefix == DDL_PREFIX => 0,
            _ => {
                let mut n = self.converter.handle(
                    event,
                    self.assembler.relations(),
                    Some(lsn),
                    &mut self.pending.events,
                )?;
                if let TxnEvent::Change(_) = event {
                    self.note_new_tables(start, lsn);
                    n -= self.snapshot_on_changes(shared, start);
                }
                n
            }
        };
        let in_txn = self.converter.open_transaction().is_some();
        if in_txn || matches!(event, TxnEvent::Commit(_)) {
            for ev in &self.pending.events[start..] {
                for op in self.operators.iter_mut() {
                    op.on_event(ev).map_err(PipelineError::Operator)?;
                }
            }
        }
        // Transaction boundaries are not events to count.
        let boundaries = self.pending.events[first..]
            .iter()
            .filter(|e| e.op == crate::event::Operation::Transaction)
            .count();
        let added = (n + derived).saturating_sub(boundaries);
        if let TxnEvent::Commit(c) = event {
            self.pending.commit_end = Some(c.end_lsn);
            self.pending.commit_time = Some(c.commit_time);
            if shared.monitor.is_some() {
                self.pending.commit_times.push(c.commit_time);
            }
            self.processed = self.processed.max(c.end_lsn);
            self.snapshot_on_commit(shared);
            // Requests noted in this transaction are served after it; a
            // checkpoint here would record a position past them without
            // them, so the next boundary after serving captures instead.
            let requests_waiting = !self.asked.is_empty();
            if let Some(coord) = shared.coordinator.as_mut().filter(|_| !requests_waiting) {
                if coord.wants_capture() {
                    if let Some(s) = &self.snapshot {
                        coord.set_snapshot(s.progress());
                    }
                    coord.set_relations(self.converter.relation_versions());
                    let save = coord
                        .capture(c.end_lsn, c.end_lsn, &self.operators)
                        .map_err(PipelineError::Checkpoint)?;
                    self.pending.checkpoint_here(save);
                }
            }
        }
        if !in_txn {
            self.pending.committed = self.pending.events.len();
        }
        shared.events = shared.events.saturating_add(added as u64);
        Ok(())
    }

    /// On a checkpoint tick: between transactions, capture right away (at
    /// the idle position if the server reported a newer one); inside one the
    /// next commit captures.
    pub(super) fn checkpoint_between_transactions(
        &mut self,
        shared: &mut Shared,
    ) -> Result<(), PipelineError> {
        let Some(coord) = shared.coordinator.as_mut() else {
            return Ok(());
        };
        coord.tick();
        if coord.wants_capture()
            && self.converter.open_transaction().is_none()
            && !self.skipping
            && self.asked.is_empty()
        {
            let position = self.processed.max(self.idle_position);
            if !position.is_invalid() {
                if let Some(s) = &self.snapshot {
                    coord.set_snapshot(s.progress());
                }
                coord.set_relations(self.converter.relation_versions());
                let save = coord
                    .capture(position, self.processed, &self.operators)
                    .map_err(PipelineError::Checkpoint)?;
                self.pending.checkpoint_here(save);
            }
        }
        Ok(())
    }

    /// The connection dropped: the server will send the open transaction
    /// again, so forget its events that are not shipped yet and its effect
    /// on the operators. Events of committed transactions stay pending, and
    /// prepared transactions waiting for their decision stay held (the
    /// server may start past their PREPARE).
    pub(super) fn abort_open_transaction(&mut self) {
        if self.converter.open_transaction().is_some() {
            for op in self.operators.iter_mut() {
                op.on_abort();
            }
        }
        self.pending.events.truncate(self.pending.committed);
        self.assembler.reset();
        // Prepared transactions waiting for their decision stay held.
        let assembler = &self.assembler;
        self.spill.retain(|xid| assembler.is_spilled(xid));
        self.converter.reset();
        self.skipping = false;
        if let Some(s) = self.snapshot.as_mut() {
            s.restart();
        }
    }

    /// Where a final checkpoint may be taken: the last commit, or the idle
    /// position when no transaction is open.
    pub(super) fn final_position(&self) -> Option<Lsn> {
        let open = self.converter.open_transaction().is_some() || self.skipping;
        let position = if open {
            self.processed
        } else {
            self.processed.max(self.idle_position)
        };
        (!position.is_invalid()).then_some(position)
    }
}

/// Restores every operator from `resume`; an operator without state starts
/// empty, state without an operator is dropped (both logged).
pub(super) fn restore_operators(
    resume: &checkpoint_api::Checkpoint,
    operators: &mut [Box<dyn Operator>],
) -> Result<(), PipelineError> {
    for op in operators.iter_mut() {
        match resume.operator(op.operator_id()) {
            Some(state) => state
                .restore_into(op.as_mut())
                .map_err(PipelineError::Restore)?,
            None => tracing::warn!(operator = op.operator_id(), checkpoint = %resume.id,
                "the checkpoint holds no state for this operator; it starts empty"),
        }
    }
    for state in &resume.operators {
        if !operators.iter().any(|o| o.operator_id() == state.id) {
            tracing::warn!(operator = %state.id, kind = %state.kind, checkpoint = %resume.id,
                "the checkpoint holds state of an operator that is no longer configured; dropping it");
        }
    }
    Ok(())
}
