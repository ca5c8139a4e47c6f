//! Two-phase transactions in the assembler: Begin Prepare .. Prepare (or a
//! streamed transaction's Stream Prepare) puts the transaction on hold;
//! Commit Prepared releases it as one committed transaction, at the commit's
//! LSN and time; Rollback Prepared drops it.
//!
//! The server sends these on any protocol version once the slot has
//! `two_phase` enabled. A prepared transaction can wait for its decision
//! for a long time, while other transactions go on; it is held like a
//! streamed one (in memory, or spilled by the caller).
//!
//! # Restarts
//!
//! After a restart PostgreSQL decodes from the slot's `restart_lsn` but
//! sends a PREPARE again only if it is not before the position streaming
//! starts from (the slot's confirmed position, or the requested start if
//! later): `SnapBuildXactNeedsSkip`. If it is skipped, its COMMIT PREPARED
//! comes alone (`ReorderBufferFinishPrepared` replays the transaction only
//! if it was prepared before the slot's `two_phase_at`). So whoever confirms
//! must not confirm past [`TxnAssembler::oldest_undecided_prepare`] while it
//! is `Some`, and must not ask to start past it: see the pipeline's
//! two-phase rule in `cdc-runtime`.
//!
//! Prepared transactions survive [`TxnAssembler::reset`]: after a reconnect
//! the server either skips their PREPARE (they were prepared before the
//! start position) and sends only the decision, or sends them again, which
//! replaces what is held under that xid.

use super::held::{owned_origin, HeldTxn, Phase, PrepareInfo};
use super::spilling::PendingSpill;
use super::{OpenTxn, TxnAssembler, TxnBegin, TxnCommit, TxnEvent, TxnKind};
use crate::error::ProtocolError;
use crate::pgoutput::{BeginPrepare, CommitPrepared, Origin, Prepare, RollbackPrepared};
use crate::{Lsn, Xid};

impl TxnAssembler {
    /// The prepare LSN of the oldest two-phase transaction that is prepared
    /// (or being received between Begin Prepare and Prepare) and not yet
    /// committed or rolled back. `None` when there is none.
    ///
    /// While this is `Some(lsn)`, a client must not confirm a flush position
    /// past `lsn` nor start streaming past it: the server would not send that
    /// transaction again after a restart, and its changes would be lost.
    pub fn oldest_undecided_prepare(&self) -> Option<Lsn> {
        self.held
            .values()
            .filter_map(|t| t.phase.prepare())
            .map(|p| p.prepare_lsn)
            .min()
    }

    /// The number of prepared transactions waiting for Commit Prepared or
    /// Rollback Prepared.
    pub fn prepared_waiting(&self) -> usize {
        self.held
            .values()
            .filter(|t| matches!(t.phase, Phase::Prepared { .. }))
            .count()
    }

    /// Forgets the held transaction `xid`, deleting its spill file if it has
    /// one.
    pub(super) fn drop_held(&mut self, xid: Xid) -> Option<HeldTxn> {
        let txn = self.held.remove(&xid)?;
        if txn.spill.is_some() {
            self.spilled = self.spilled.saturating_sub(1);
            self.pending_spill.push_back(PendingSpill::Discard(xid));
        }
        Some(txn)
    }

    pub(super) fn begin_prepare(&mut self, b: BeginPrepare<'_>) -> Result<(), ProtocolError> {
        self.begin(b.xid, "Begin Prepare")?;
        match self.held.get(&b.xid).map(|t| &t.phase) {
            None => {}
            // Sent again after a reconnect: the new copy replaces the old.
            Some(Phase::Prepared { .. }) => {
                self.drop_held(b.xid);
            }
            Some(_) => return Err(ProtocolError::DuplicateStreamedTransaction { xid: b.xid }),
        }
        let gid = b.gid.into_owned();
        self.held.insert(
            b.xid,
            HeldTxn::new(Phase::Preparing(PrepareInfo {
                gid: gid.clone(),
                prepare_lsn: b.prepare_lsn,
            })),
        );
        self.open = Some(OpenTxn {
            xid: b.xid,
            final_lsn: b.prepare_lsn,
            gid: Some(gid),
        });
        Ok(())
    }

    /// The Origin of the open prepared transaction: kept for its release.
    pub(super) fn hold_origin(&mut self, xid: Xid, o: Origin<'_>) -> Result<(), ProtocolError> {
        let txn = self
            .held
            .get_mut(&xid)
            .ok_or(ProtocolError::ChangeOutsideTransaction { what: "Origin" })?;
        txn.origin = Some(owned_origin(o));
        Ok(())
    }

    pub(super) fn prepare(&mut self, p: Prepare<'_>) -> Result<(), ProtocolError> {
        self.not_in_stream("Prepare")?;
        let open = self
            .open
            .as_ref()
            .ok_or(ProtocolError::EndWithoutBegin { what: "Prepare" })?;
        let Some(gid) = &open.gid else {
            return Err(ProtocolError::MismatchedEnd {
                what: "Prepare",
                opened_by: "Begin",
            });
        };
        if p.xid != open.xid || *gid != p.gid {
            return Err(ProtocolError::PrepareMismatch { xid: open.xid });
        }
        if p.prepare_lsn != open.final_lsn {
            return Err(ProtocolError::CommitLsnMismatch {
                xid: open.xid,
                expected: open.final_lsn,
                actual: p.prepare_lsn,
            });
        }
        let xid = open.xid;
        let txn = self
            .held
            .get_mut(&xid)
            .ok_or(ProtocolError::EndWithoutBegin { what: "Prepare" })?;
        if let Phase::Preparing(info) = &txn.phase {
            txn.phase = Phase::Prepared {
                info: info.clone(),
                streamed: false,
            };
        }
        self.open = None;
        Ok(())
    }

    pub(super) fn stream_prepare(&mut self, p: Prepare<'_>) -> Result<(), ProtocolError> {
        self.not_in_stream("Stream Prepare")?;
        self.not_in_txn("Stream Prepare")?;
        let txn = self
            .held
            .get_mut(&p.xid)
            .filter(|t| t.phase == Phase::Streaming)
            .ok_or(ProtocolError::UnknownStreamedTransaction { xid: p.xid })?;
        txn.phase = Phase::Prepared {
            info: PrepareInfo {
                gid: p.gid.into_owned(),
                prepare_lsn: p.prepare_lsn,
            },
            streamed: true,
        };
        Ok(())
    }

    /// Whether `xid` is held as prepared under `gid`; an error if it is held
    /// otherwise.
    fn is_prepared(&self, xid: Xid, gid: &str, what: &'static str) -> Result<bool, ProtocolError> {
        match self.held.get(&xid).map(|t| &t.phase) {
            None => Ok(false),
            Some(Phase::Prepared { info, .. }) if info.gid == gid => Ok(true),
            Some(_) => Err(ProtocolError::NotPrepared { what, xid }),
        }
    }

    pub(super) fn commit_prepared<'a>(
        &mut self,
        c: CommitPrepared<'a>,
    ) -> Result<Option<TxnEvent<'a>>, ProtocolError> {
        self.not_in_stream("Commit Prepared")?;
        self.not_in_txn("Commit Prepared")?;
        if !self.is_prepared(c.xid, &c.gid, "Commit Prepared")? {
            // Its changes never reached us (prepared before where the stream
            // started): the caller decides what that means.
            return Ok(self.emit(TxnEvent::CommitPrepared(c)));
        }
        let Some(txn) = self.held.remove(&c.xid) else {
            return Ok(None);
        };
        let kind = match txn.phase {
            Phase::Prepared { streamed: true, .. } => TxnKind::StreamedPrepared,
            _ => TxnKind::Prepared,
        };
        self.release(
            TxnBegin {
                xid: c.xid,
                final_lsn: c.commit_lsn,
                timestamp: c.commit_time,
                kind,
            },
            txn,
            TxnEvent::Commit(TxnCommit {
                xid: c.xid,
                commit_lsn: c.commit_lsn,
                end_lsn: c.end_lsn,
                commit_time: c.commit_time,
            }),
        );
        Ok(None)
    }

    pub(super) fn rollback_prepared<'a>(
        &mut self,
        r: RollbackPrepared<'a>,
    ) -> Result<Option<TxnEvent<'a>>, ProtocolError> {
        self.not_in_stream("Rollback Prepared")?;
        self.not_in_txn("Rollback Prepared")?;
        if self.is_prepared(r.xid, &r.gid, "Rollback Prepared")? {
            self.drop_held(r.xid);
        }
        Ok(self.emit(TxnEvent::RollbackPrepared(r)))
    }
}
