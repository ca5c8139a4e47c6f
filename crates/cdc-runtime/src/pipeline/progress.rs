//! Which LSN may be confirmed when, without IO.
//!
//! [`LsnProgress`] takes what the server sent (XLogData, keepalives between
//! transactions), what each sink acknowledged and what durable checkpoints
//! allow, and answers: given these commits, flushes and checkpoints, what is
//! confirmable, and what does a standby status update report. No sockets,
//! no tokio, no clock (the caller passes the time); the session feeds it and
//! sends what it says. See the module docs of [`crate::pipeline`] for what
//! each LSN means, and the `prepared` module for how prepared transactions
//! hold the confirmed position back.

use cdc_core::{Lsn, PgTimestamp, StandbyStatusUpdate};

use super::prepared::PrepareHolds;

/// The LSN accounting of a pipeline: received, acknowledged per sink, the
/// idle keepalive position, what checkpoints allow, and confirmed.
///
/// Inputs are the `handle_*` methods; [`poll_confirmed`](Self::poll_confirmed)
/// moves `confirmed` as far as the inputs so far allow, and the getters
/// read the outcome. `confirmed` never moves backward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LsnProgress {
    /// The highest `wal_start` of an XLogData seen.
    received: Lsn,
    /// What each sink acknowledged (flushed), by sink index.
    acked: Vec<Lsn>,
    /// Without checkpoints: the server's position from a keepalive between
    /// transactions, and the commit every sink must have flushed before it
    /// may be confirmed (so quiet tables do not hold WAL back).
    idle: Option<Idle>,
    /// With checkpoints: the position durable checkpoints allow, as the
    /// coordinator last reported it. `None`: the pipeline takes no
    /// checkpoints, so acknowledgements decide.
    checkpoints: Option<Lsn>,
    /// What prepared (two-phase) transactions forbid confirming.
    holds: PrepareHolds,
    /// The position confirmed so far; monotonic.
    confirmed: Lsn,
}

/// A keepalive's position between transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Idle {
    /// The server's position.
    position: Lsn,
    /// The last commit before it, which every sink must have flushed.
    needs_ack: Lsn,
}

impl LsnProgress {
    /// Progress of a pipeline with `sinks` sinks, nothing received or
    /// acknowledged yet. With `checkpoints`, only what durable checkpoints
    /// allow may be confirmed (see
    /// [`handle_checkpoint_confirmable`](Self::handle_checkpoint_confirmable)).
    pub(super) fn new(sinks: usize, checkpoints: bool) -> Self {
        LsnProgress {
            received: Lsn::INVALID,
            acked: vec![Lsn::INVALID; sinks],
            idle: None,
            checkpoints: checkpoints.then_some(Lsn::INVALID),
            holds: PrepareHolds::default(),
            confirmed: Lsn::INVALID,
        }
    }

    /// An XLogData starting at `wal_start` arrived.
    pub(super) fn handle_xlog_data(&mut self, wal_start: Lsn) {
        if wal_start > self.received {
            self.received = wal_start;
        }
    }

    /// A keepalive between transactions reported the server at `position`;
    /// everything before it has been sent, and `last_commit` is the end of
    /// the last transaction processed. Without checkpoints, `position` may
    /// be confirmed once every sink acknowledged `last_commit`.
    pub(super) fn handle_idle_keepalive(&mut self, position: Lsn, last_commit: Lsn) {
        self.idle = Some(Idle {
            position,
            needs_ack: last_commit,
        });
    }

    /// Sink `sink` has made everything up to `acked` durable. An unknown
    /// sink index is ignored.
    pub(super) fn handle_ack(&mut self, sink: usize, acked: Lsn) {
        if let Some(a) = self.acked.get_mut(sink) {
            *a = acked;
        }
    }

    /// The checkpoint coordinator allows confirming up to `position`.
    /// Ignored by a pipeline without checkpoints.
    pub(super) fn handle_checkpoint_confirmable(&mut self, position: Lsn) {
        if let Some(c) = self.checkpoints.as_mut() {
            *c = position;
        }
    }

    /// After a message: `oldest` is the prepare LSN of the oldest prepared
    /// transaction still undecided (from the assembler), `processed` the end
    /// of the last transaction processed. Nothing past an undecided prepare
    /// is confirmed, nor past a decided one until `processed` is.
    pub(super) fn handle_prepared(&mut self, oldest: Option<Lsn>, processed: Lsn) {
        self.holds.handle_undecided(oldest, processed);
        self.holds.handle_stream_position(processed);
    }

    /// The pipeline resumes from a checkpoint at `position`.
    pub(super) fn handle_resume(&mut self, position: Lsn) {
        self.holds.handle_resume(position);
    }

    /// While resuming from a checkpoint: the position the stream must pass
    /// (see [`handle_two_phase_slot`](Self::handle_two_phase_slot)).
    pub(super) fn resuming(&self) -> Option<Lsn> {
        self.holds.resuming()
    }

    /// The slot has `two_phase`: while resuming, nothing new is confirmed
    /// (prepared transactions before the checkpoint are being sent again).
    pub(super) fn handle_two_phase_slot(&mut self) {
        self.holds.handle_two_phase_slot();
    }

    /// A keepalive: the server has sent everything before `position`.
    pub(super) fn handle_keepalive(&mut self, position: Lsn) {
        self.holds.handle_stream_position(position);
    }

    /// The highest WAL position received.
    pub(super) fn received(&self) -> Lsn {
        self.received
    }

    /// The minimum acknowledged position over all sinks
    /// ([`Lsn::INVALID`] without sinks).
    pub(super) fn acked(&self) -> Lsn {
        self.acked.iter().copied().min().unwrap_or(Lsn::INVALID)
    }

    /// The position confirmed so far.
    pub(super) fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    /// What the inputs allow now, which may be behind
    /// [`confirmed`](Self::confirmed): with checkpoints what they allow (a
    /// checkpoint is saved only once every sink acknowledged the
    /// transactions it covers, and an idle position beyond the last commit
    /// has nothing to flush); without, the minimum acknowledged position
    /// over all sinks, or the idle position once every sink flushed the
    /// commit before it.
    ///
    /// Prepared transactions hold it back further (see the `prepared`
    /// module).
    pub(super) fn confirmable(&self) -> Lsn {
        self.holds.cap(self.unheld())
    }

    /// [`confirmable`](Self::confirmable) without the prepared transactions'
    /// holds.
    fn unheld(&self) -> Lsn {
        if let Some(c) = self.checkpoints {
            return c;
        }
        let acked = self.acked();
        match self.idle {
            Some(idle) if acked >= idle.needs_ack => acked.max(idle.position),
            _ => acked,
        }
    }

    /// Moves `confirmed` as far as the inputs allow (never backward) and
    /// returns it.
    pub(super) fn poll_confirmed(&mut self) -> Lsn {
        self.holds.prune(self.unheld());
        let allowed = self.confirmable();
        if allowed > self.confirmed {
            self.confirmed = allowed;
        }
        self.confirmed
    }

    /// The standby status update reporting the current state at `now`:
    /// `write` is what was received (at least what is confirmed), `flush`
    /// and `apply` what is confirmed. Call
    /// [`poll_confirmed`](Self::poll_confirmed) first to report the newest.
    pub(super) fn status_update(&self, now: PgTimestamp) -> StandbyStatusUpdate {
        StandbyStatusUpdate {
            write: self.received.max(self.confirmed),
            flush: self.confirmed,
            apply: self.confirmed,
            send_time: now,
            reply_requested: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lsn(n: u64) -> Lsn {
        Lsn::from_u64(n)
    }

    #[test]
    fn nothing_is_confirmed_before_any_ack() {
        let mut p = LsnProgress::new(2, false);
        p.handle_xlog_data(lsn(100));
        assert_eq!(p.poll_confirmed(), Lsn::INVALID);
        assert_eq!(p.received(), lsn(100));
    }

    #[test]
    fn received_is_the_highest_wal_start() {
        let mut p = LsnProgress::new(1, false);
        p.handle_xlog_data(lsn(50));
        p.handle_xlog_data(lsn(30));
        assert_eq!(p.received(), lsn(50));
    }

    #[test]
    fn confirmed_is_the_minimum_over_sinks() {
        let mut p = LsnProgress::new(3, false);
        p.handle_ack(0, lsn(30));
        p.handle_ack(1, lsn(10));
        p.handle_ack(2, lsn(20));
        assert_eq!(p.acked(), lsn(10));
        assert_eq!(p.poll_confirmed(), lsn(10));
        p.handle_ack(1, lsn(40));
        assert_eq!(p.poll_confirmed(), lsn(20));
    }

    #[test]
    fn an_unknown_sink_is_ignored() {
        let mut p = LsnProgress::new(1, false);
        p.handle_ack(5, lsn(10));
        assert_eq!(p.poll_confirmed(), Lsn::INVALID);
    }

    #[test]
    fn without_sinks_nothing_is_acknowledged() {
        let p = LsnProgress::new(0, false);
        assert_eq!(p.acked(), Lsn::INVALID);
    }

    #[test]
    fn confirmed_never_moves_backward() {
        let mut p = LsnProgress::new(1, false);
        p.handle_ack(0, lsn(50));
        assert_eq!(p.poll_confirmed(), lsn(50));
        p.handle_ack(0, lsn(20));
        assert_eq!(p.confirmable(), lsn(20));
        assert_eq!(p.poll_confirmed(), lsn(50));
        assert_eq!(p.confirmed(), lsn(50));
    }

    #[test]
    fn confirmed_moves_only_when_polled() {
        let mut p = LsnProgress::new(1, false);
        p.handle_ack(0, lsn(50));
        assert_eq!(p.confirmed(), Lsn::INVALID);
        p.poll_confirmed();
        assert_eq!(p.confirmed(), lsn(50));
    }

    #[test]
    fn the_idle_position_waits_until_every_sink_flushed_the_last_commit() {
        let mut p = LsnProgress::new(2, false);
        p.handle_ack(0, lsn(100));
        p.handle_ack(1, lsn(80));
        p.handle_idle_keepalive(lsn(500), lsn(100));
        // Sink 1 has not flushed the commit ending at 100 yet.
        assert_eq!(p.poll_confirmed(), lsn(80));
        p.handle_ack(1, lsn(100));
        assert_eq!(p.poll_confirmed(), lsn(500));
    }

    #[test]
    fn a_later_idle_keepalive_replaces_the_earlier() {
        let mut p = LsnProgress::new(1, false);
        p.handle_ack(0, lsn(100));
        p.handle_idle_keepalive(lsn(200), lsn(100));
        assert_eq!(p.poll_confirmed(), lsn(200));
        // A new commit at 300 and a keepalive past it: held until flushed.
        p.handle_idle_keepalive(lsn(400), lsn(300));
        assert_eq!(p.poll_confirmed(), lsn(200));
        p.handle_ack(0, lsn(300));
        assert_eq!(p.poll_confirmed(), lsn(400));
    }

    #[test]
    fn acks_past_the_idle_position_win() {
        let mut p = LsnProgress::new(1, false);
        p.handle_idle_keepalive(lsn(200), lsn(100));
        p.handle_ack(0, lsn(300));
        assert_eq!(p.poll_confirmed(), lsn(300));
    }

    #[test]
    fn with_checkpoints_never_past_what_checkpoints_allow() {
        let mut p = LsnProgress::new(2, true);
        p.handle_ack(0, lsn(300));
        p.handle_ack(1, lsn(300));
        p.handle_idle_keepalive(lsn(400), lsn(300));
        assert_eq!(p.poll_confirmed(), Lsn::INVALID);
        p.handle_checkpoint_confirmable(lsn(200));
        assert_eq!(p.poll_confirmed(), lsn(200));
        // A checkpoint at an idle position beyond the last commit.
        p.handle_checkpoint_confirmable(lsn(450));
        assert_eq!(p.poll_confirmed(), lsn(450));
    }

    #[test]
    fn with_checkpoints_confirmed_stays_monotonic() {
        let mut p = LsnProgress::new(1, true);
        p.handle_checkpoint_confirmable(lsn(200));
        assert_eq!(p.poll_confirmed(), lsn(200));
        p.handle_checkpoint_confirmable(lsn(100));
        assert_eq!(p.poll_confirmed(), lsn(200));
    }

    #[test]
    fn without_checkpoints_their_position_is_ignored() {
        let mut p = LsnProgress::new(1, false);
        p.handle_checkpoint_confirmable(lsn(200));
        p.handle_ack(0, lsn(50));
        assert_eq!(p.poll_confirmed(), lsn(50));
    }

    #[test]
    fn a_prepared_transaction_holds_confirmed_until_its_commit_is_flushed() {
        let mut p = LsnProgress::new(1, false);
        p.handle_ack(0, lsn(300));
        assert_eq!(p.poll_confirmed(), lsn(300));
        // Begin Prepare at 400; a later transaction ends at 508 and is flushed.
        p.handle_prepared(Some(lsn(400)), lsn(300));
        p.handle_prepared(Some(lsn(400)), lsn(508));
        p.handle_ack(0, lsn(508));
        p.handle_idle_keepalive(lsn(520), lsn(508));
        assert_eq!(p.poll_confirmed(), lsn(400));
        // Commit Prepared: the released transaction ends at 608.
        p.handle_prepared(None, lsn(608));
        assert_eq!(p.poll_confirmed(), lsn(400), "not flushed yet");
        p.handle_ack(0, lsn(608));
        assert_eq!(p.poll_confirmed(), lsn(608));
    }

    #[test]
    fn with_checkpoints_a_prepared_transaction_holds_too() {
        let mut p = LsnProgress::new(1, true);
        p.handle_prepared(Some(lsn(400)), lsn(300));
        p.handle_checkpoint_confirmable(lsn(500));
        assert_eq!(p.poll_confirmed(), lsn(400));
        p.handle_prepared(None, lsn(608));
        p.handle_checkpoint_confirmable(lsn(700));
        assert_eq!(p.poll_confirmed(), lsn(700));
    }

    #[test]
    fn resuming_on_a_two_phase_slot_confirms_nothing_until_past_the_checkpoint() {
        let mut p = LsnProgress::new(1, true);
        p.handle_resume(lsn(1000));
        p.handle_two_phase_slot();
        p.handle_checkpoint_confirmable(lsn(1000));
        assert_eq!(p.poll_confirmed(), Lsn::INVALID);
        // Transactions before the checkpoint are sent again (and skipped).
        p.handle_prepared(None, lsn(1000));
        assert_eq!(p.poll_confirmed(), Lsn::INVALID);
        p.handle_keepalive(lsn(1200));
        assert_eq!(p.resuming(), None);
        assert_eq!(p.poll_confirmed(), lsn(1000));
    }

    #[test]
    fn status_update_reports_received_and_confirmed() {
        let mut p = LsnProgress::new(1, false);
        p.handle_xlog_data(lsn(500));
        p.handle_ack(0, lsn(100));
        p.poll_confirmed();
        let now = PgTimestamp::EPOCH;
        let u = p.status_update(now);
        assert_eq!((u.write, u.flush, u.apply), (lsn(500), lsn(100), lsn(100)));
        assert_eq!(u.send_time, now);
        assert!(!u.reply_requested);
    }

    #[test]
    fn status_update_writes_at_least_what_is_confirmed() {
        let mut p = LsnProgress::new(1, false);
        p.handle_xlog_data(lsn(100));
        p.handle_idle_keepalive(lsn(300), Lsn::INVALID);
        p.poll_confirmed();
        let u = p.status_update(PgTimestamp::EPOCH);
        assert_eq!((u.write, u.flush), (lsn(300), lsn(300)));
    }
}
