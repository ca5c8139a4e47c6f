//! A sequence of pgoutput messages through a [`Decoder`] and a
//! [`TxnAssembler`], checking the event stream:
//!
//! * no panic, whatever the messages and their order;
//! * events are well bracketed: Begin opens a transaction, changes and
//!   Origin only inside one, Commit/Prepare close it with the same xid and a
//!   matching kind, Commit/Rollback Prepared only outside;
//! * a rejected message leaves the assembler's state unchanged;
//! * a change carries the relation it names.
//!
//! Input: 1 option byte (bits 0-1 protocol version minus one, bit 3 parallel
//! streaming, bit 4: drain `poll_event` only every 8 messages instead of after
//! each), then records of u16 big-endian length + one message.
#![no_main]

use cdc_core::pgoutput::ProtocolVersion;
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
                assert!(
                    matches!(kind, TxnKind::Plain | TxnKind::Streamed),
                    "Commit of {kind:?}"
                );
            }
            TxnEvent::Prepare(p) => {
                let Some((xid, kind)) = self.open.take() else {
                    panic!("Prepare without Begin: {p:?}");
                };
                assert_eq!(xid, p.xid, "Prepare of another transaction");
                assert!(
                    matches!(kind, TxnKind::Prepared | TxnKind::StreamedPrepared),
                    "Prepare of {kind:?}"
                );
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
    let mut asm = TxnAssembler::new();
    let mut checker = Checker::default();

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
        if !lazy_drain || i % 8 == 7 {
            while let Some(ev) = asm.poll_event() {
                checker.check(&ev);
            }
        }
        assert_eq!(asm.buffered_changes() == 0, asm.buffered_bytes() == 0);
    }
    while let Some(ev) = asm.poll_event() {
        checker.check(&ev);
    }
    // Everything drained: the checker's open transaction is the assembler's.
    assert_eq!(checker.open.map(|(xid, _)| xid), asm.open_transaction());
});
