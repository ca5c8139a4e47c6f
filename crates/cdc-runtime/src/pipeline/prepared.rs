//! How far prepared (two-phase) transactions let the slot be confirmed,
//! without IO.
//!
//! # The two-phase rule
//!
//! A slot with `two_phase` enabled makes PostgreSQL send a prepared
//! transaction at its PREPARE (Begin Prepare, changes, Prepare) and only its
//! decision at COMMIT PREPARED or ROLLBACK PREPARED, which may come much
//! later. The pipeline holds the prepared changes (the transaction
//! assembler, spilling them past `byte_budget`) and delivers them once, at
//! COMMIT PREPARED, with the commit's LSN and time.
//!
//! After a restart the server decodes from the slot's `restart_lsn`, but it
//! sends a PREPARE again only if the PREPARE record is not before the
//! position streaming starts from: the slot's confirmed position, or the
//! requested start if that is later (`SnapBuildXactNeedsSkip`). A skipped
//! PREPARE is not replayed at its COMMIT PREPARED either
//! (`ReorderBufferFinishPrepared` replays only transactions prepared before
//! the slot's `two_phase_at`): the COMMIT PREPARED arrives alone and the
//! changes are gone. Hence:
//!
//! * **Never confirm past an undecided PREPARE.** While a prepared
//!   transaction waits for its decision, `flush` stays at or before its
//!   prepare LSN (the LSN its Begin Prepare carries).
//! * **Keep that hold until the commit is durable.** When COMMIT PREPARED
//!   arrives the hold stays until what is confirmable without it (the sinks'
//!   acknowledgements, or durable checkpoints) reaches the position after
//!   which the released transaction was processed; a rollback lifts it the
//!   same way (nothing to deliver, so it costs nothing).
//! * **Start where the server will send it again.** A reconnect inside the
//!   process keeps the held prepared transactions, so it may start past
//!   them (the server then sends only their decision). A pipeline resuming
//!   from a checkpoint holds nothing, so on a two-phase slot it starts from
//!   the slot's confirmed position (which the rule kept at or before every
//!   undecided PREPARE) rather than the checkpoint's, skips what the
//!   checkpoint covers, and confirms nothing new until the stream has passed
//!   the checkpoint's position, by which time every such PREPARE has been
//!   received again.
//!
//! The cost: WAL is retained from the oldest undecided PREPARE for as long
//! as it waits, and the prepared transaction's changes are held (on disk
//! once past the budget) as long.

use cdc_core::Lsn;

/// The limits prepared transactions put on the confirmed position (see the
/// module docs). Inputs are the `handle_*` methods; [`cap`](Self::cap)
/// applies them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct PrepareHolds {
    /// The prepare LSN of the oldest prepared transaction held and not yet
    /// decided.
    undecided: Option<Lsn>,
    /// Holds of decided transactions: `(prepare LSN, until)`, lifted once
    /// the position confirmable without holds reaches `until`.
    releasing: Vec<(Lsn, Lsn)>,
    /// Resuming from a checkpoint on a two-phase slot: nothing new may be
    /// confirmed until the stream passes `past`.
    resuming: Option<Resume>,
}

/// A resume from a checkpoint at `past`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resume {
    past: Lsn,
    /// Whether the slot has `two_phase`: only then does the resume hold.
    holds: bool,
}

impl PrepareHolds {
    /// The oldest undecided prepare LSN the assembler holds now, after a
    /// message; `processed` is the end of the last transaction processed
    /// after it. A hold that moved up or went away (its transaction was
    /// decided) stays until `processed` is confirmable.
    pub(super) fn handle_undecided(&mut self, oldest: Option<Lsn>, processed: Lsn) {
        if let Some(previous) = self.undecided {
            if oldest.is_none_or(|o| o > previous) {
                self.releasing.push((previous, processed));
            }
        }
        self.undecided = oldest;
    }

    /// The pipeline resumes from a checkpoint at `past`.
    pub(super) fn handle_resume(&mut self, past: Lsn) {
        self.resuming = Some(Resume { past, holds: false });
    }

    /// The position streaming resumed from a checkpoint must pass before
    /// anything new is confirmed (`None` once passed, or when not resuming).
    pub(super) fn resuming(&self) -> Option<Lsn> {
        self.resuming.map(|r| r.past)
    }

    /// The slot has `two_phase`: while resuming, hold what is confirmed.
    pub(super) fn handle_two_phase_slot(&mut self) {
        if let Some(r) = self.resuming.as_mut() {
            r.holds = true;
        }
    }

    /// The server has sent everything before `position` (a keepalive's
    /// position, or the end of a transaction processed).
    pub(super) fn handle_stream_position(&mut self, position: Lsn) {
        if self.resuming.is_some_and(|r| position > r.past) {
            self.resuming = None;
        }
    }

    /// The prepare LSN that holds the confirmed position, if any.
    pub(super) fn floor(&self, allowed: Lsn) -> Option<Lsn> {
        if self.resuming.is_some_and(|r| r.holds) {
            return Some(Lsn::INVALID);
        }
        self.releasing
            .iter()
            .filter(|&&(_, until)| allowed < until)
            .map(|&(floor, _)| floor)
            .chain(self.undecided)
            .min()
    }

    /// `allowed` (what is confirmable without holds) as far as the holds
    /// allow.
    pub(super) fn cap(&self, allowed: Lsn) -> Lsn {
        match self.floor(allowed) {
            Some(floor) => allowed.min(floor),
            None => allowed,
        }
    }

    /// Forgets holds of decided transactions that `allowed` covers.
    pub(super) fn prune(&mut self, allowed: Lsn) {
        self.releasing.retain(|&(_, until)| allowed < until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lsn(n: u64) -> Lsn {
        Lsn::from_u64(n)
    }

    #[test]
    fn an_undecided_prepare_holds_the_position() {
        let mut h = PrepareHolds::default();
        assert_eq!(h.cap(lsn(500)), lsn(500));
        h.handle_undecided(Some(lsn(400)), lsn(300));
        assert_eq!(h.cap(lsn(500)), lsn(400));
        assert_eq!(h.cap(lsn(350)), lsn(350));
    }

    #[test]
    fn a_decided_prepare_holds_until_its_commit_is_confirmable() {
        let mut h = PrepareHolds::default();
        h.handle_undecided(Some(lsn(400)), lsn(300));
        // Commit Prepared processed, ending at 608.
        h.handle_undecided(None, lsn(608));
        assert_eq!(h.cap(lsn(600)), lsn(400), "not yet flushed");
        assert_eq!(h.cap(lsn(608)), lsn(608));
        h.prune(lsn(608));
        assert_eq!(h, PrepareHolds::default());
    }

    #[test]
    fn the_oldest_of_several_holds() {
        let mut h = PrepareHolds::default();
        h.handle_undecided(Some(lsn(100)), lsn(50));
        h.handle_undecided(Some(lsn(100)), lsn(250));
        // The younger one (200) is decided first: 100 still holds.
        assert_eq!(h.cap(lsn(900)), lsn(100));
        // Now 100 is decided (at 700), 200 was never the oldest.
        h.handle_undecided(None, lsn(708));
        assert_eq!(h.cap(lsn(700)), lsn(100));
        assert_eq!(h.cap(lsn(708)), lsn(708));
    }

    #[test]
    fn a_resume_on_a_two_phase_slot_confirms_nothing_new_until_past() {
        let mut h = PrepareHolds::default();
        h.handle_resume(lsn(1000));
        // Not a two-phase slot: no hold.
        assert_eq!(h.cap(lsn(1000)), lsn(1000));
        h.handle_two_phase_slot();
        assert_eq!(h.cap(lsn(1000)), Lsn::INVALID);
        h.handle_stream_position(lsn(1000));
        assert_eq!(h.resuming(), Some(lsn(1000)));
        assert_eq!(h.cap(lsn(1000)), Lsn::INVALID);
        h.handle_stream_position(lsn(1001));
        assert_eq!(h.resuming(), None);
        assert_eq!(h.cap(lsn(1000)), lsn(1000));
    }
}
