//! A sequence of pgoutput messages through a [`Decoder`] and a
//! [`TxnAssembler`], checking the event stream:
//!
//! * no panic, whatever the messages and their order;
//! * events are well bracketed: Begin opens a transaction, changes and
//!   Origin only inside one, Commit closes it with the same xid (prepared
//!   transactions are held and come out at Commit Prepared as committed
//!   ones), Commit/Rollback Prepared events only outside;
//! * a rejected message leaves the assembler's state unchanged;
//! * a change carries the relation it names;
//! * with spilling on, every spill file is appended, replayed whole or
//!   discarded, and replays read back without errors.
//!
//! Input: 1 option byte (bits 0-1 protocol version minus one, bit 3 parallel
//! streaming, bit 4: drain `poll_event` only every 8 messages instead of after
//! each, bit 5: spill the largest streamed transaction after every third
//! message), then records of u16 big-endian length + one message.
#![no_main]

use std::collections::HashMap;

use cdc_core::pgoutput::ProtocolVersion;
use cdc_core::spill::{frame_len, SpillOp, FRAME_HEADER_LEN};
use cdc_core::{Change, Decoder, TxnAssembler, TxnEvent, TxnKind, Xid};
use cdc_core_fuzz::split_records;
use libfuzzer_sys::fuzz_target;

#[derive(Default)]
struct Checker {
    open: Option<(Xid, TxnKind)>,
    events: usize,
}

impl Checker {
    fn check(&mut self, ev: &TxnEvent<'_>) {
        self.events += 1;
        match ev {
            TxnEvent::Begin(b) => {
                assert!(self.open.is_none(), "Begin {b:?} inside {:?}", self.open);
                self.open = Some((b.xid, b.kind));
            }
            TxnEvent::Origin(_) => assert!(self.open.is_some(), "Origin outside a transaction"),
            TxnEvent::Change(c) => {
                assert!(self.open.is_some(), "change outside a transaction: {c:?}");
                match c {
                    Change::Insert(r, m) => assert_eq!(r.oid, m.relation),
                    Change::Update(r, m) => assert_eq!(r.oid, m.relation),
                    Change::Delete(r, m) => assert_eq!(r.oid, m.relation),
                    Change::Truncate(_) | Change::Message(_) => {}
                }
            }
            TxnEvent::Commit(c) => {
                let Some((xid, kind)) = self.open.take() else {
                    panic!("Commit without Begin: {c:?}");
                };
                assert_eq!(xid, c.xid, "Commit of another transaction");
                // Prepared ones are released at Commit Prepared, at its LSN.
                let _: TxnKind = kind;
            }
            TxnEvent::CommitPrepared(_) | TxnEvent::RollbackPrepared(_) => {
                assert!(
                    self.open.is_none(),
                    "Commit/Rollback Prepared inside a transaction"
                );
            }
            TxnEvent::Message(m) => assert!(!m.transactional, "transactional Message as event"),
        }
    }
}

/// Spill files kept in memory.
#[derive(Default)]
struct Files {
    files: HashMap<Xid, Vec<u8>>,
    buf: Vec<u8>,
}

impl Files {
    fn spill_largest(&mut self, asm: &mut TxnAssembler) {
        if let Some((xid, _)) = asm.largest_unspilled() {
            // Files are keyed by xid: while undrained work of an earlier
            // transaction with the same xid (fuzz input reuses xids) is
            // pending, leave the new one in memory.
            if !self.files.contains_key(&xid) {
                assert!(asm.spill(xid));
                self.files.insert(xid, Vec::new());
            }
        }
    }

    /// Drains spill output, events and replays, as the assembler's docs say.
    fn drain(&mut self, asm: &mut TxnAssembler, checker: &mut Checker) {
        loop {
            while let Some(op) = asm.poll_spill(&mut self.buf) {
                match op {
                    SpillOp::Append { xid } => self
                        .files
                        .get_mut(&xid)
                        .expect("append to a spilled transaction")
                        .extend_from_slice(&self.buf),
                    SpillOp::Discard { xid } => {
                        assert!(self.files.remove(&xid).is_some(), "discard of {xid}")
                    }
                }
                self.buf.clear();
            }
            while let Some(ev) = asm.poll_event() {
                checker.check(&ev);
            }
            let Some(mut replay) = asm.poll_replay() else {
                return;
            };
            let file = self.files.remove(&replay.xid()).expect("replayed file");
            let mut rest = &file[..];
            while !rest.is_empty() {
                let (header, tail) = rest.split_at(FRAME_HEADER_LEN);
                let len = frame_len(header.try_into().expect("header")).expect("length");
                let (body, tail) = tail.split_at(len);
                rest = tail;
                if let Some(ev) = replay.record(body).expect("record") {
                    checker.check(&ev);
                }
            }
            replay.finish().expect("every record read");
        }
    }
}

fn state(a: &TxnAssembler) -> (Option<Xid>, Option<Xid>, usize, usize, usize) {
    (
        a.open_transaction(),
        a.open_stream(),
        a.streamed_in_progress(),
        a.buffered_changes(),
        a.buffered_bytes(),
    )
}

fuzz_target!(|data: &[u8]| {
    let Some((&opts, rest)) = data.split_first() else {
        return;
    };
    let version = ProtocolVersion::ALL[usize::from(opts & 3)];
    let mut decoder = Decoder::new(version).with_parallel_streaming(opts & 8 != 0);
    let lazy_drain = opts & 16 != 0;
    let spilling = opts & 32 != 0;
    let mut asm = TxnAssembler::new();
    let mut checker = Checker::default();
    let mut files = Files::default();

    for (i, rec) in split_records(rest).enumerate() {
        let Ok(msg) = decoder.decode(rec) else {
            continue;
        };
        let before = state(&asm);
        match asm.handle_message(msg) {
            Ok(Some(ev)) => checker.check(&ev),
            Ok(None) => {}
            Err(_) => assert_eq!(state(&asm), before, "a rejected message changed the state"),
        }
        if spilling && i % 3 == 2 {
            files.spill_largest(&mut asm);
        }
        if !lazy_drain || i % 8 == 7 {
            files.drain(&mut asm, &mut checker);
        }
        assert_eq!(asm.buffered_changes() == 0, asm.buffered_bytes() == 0);
    }
    files.drain(&mut asm, &mut checker);
    // Everything drained: the checker's open transaction is the assembler's,
    // and exactly the spilled transactions in progress have files.
    assert_eq!(checker.open.map(|(xid, _)| xid), asm.open_transaction());
    assert_eq!(files.files.len(), asm.spilled_in_progress());
});
