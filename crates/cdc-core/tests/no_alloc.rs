//! Parsing Insert/Update/Delete messages and reading every column allocates
//! nothing, and neither does passing a plain transaction through the
//! assembler. Counted with a per-thread counting global allocator.
// The GlobalAlloc impl needs `unsafe`; the library itself forbids it.
#![allow(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

use cdc_core::encode::message_bytes;
use cdc_core::pgoutput::*;
use cdc_core::{Lsn, PgTimestamp, TxnAssembler, TxnEvent};

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

struct Counting;

fn count() {
    // `try_with`: never panic inside the allocator, e.g. during thread teardown.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_in(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

fn row(i: usize) -> TupleData<'static> {
    let text = format!("user-{i}@example.com");
    TupleData::from_values(&[
        TupleValue::Text(i.to_string().as_bytes()),
        TupleValue::Text(text.as_bytes()),
        TupleValue::Null,
        TupleValue::UnchangedToast,
        TupleValue::Binary(&[0, 0, 0, 7]),
    ])
    .unwrap()
}

/// Parses `msg` and reads every column of every tuple; returns the bytes seen.
fn parse_and_split(d: &mut Decoder, msg: &[u8]) -> usize {
    let m = d.decode(black_box(msg)).unwrap();
    let mut seen = 0;
    let mut take = |t: &TupleData<'_>| {
        for v in t.iter() {
            seen += black_box(v).bytes().map_or(1, <[u8]>::len);
        }
    };
    match &m {
        LogicalMessage::Insert(i) => take(&i.new),
        LogicalMessage::Update(u) => {
            if let Some(old) = &u.old {
                take(old.tuple());
            }
            take(&u.new);
        }
        LogicalMessage::Delete(d) => take(d.old.tuple()),
        other => panic!("unexpected {other:?}"),
    }
    seen
}

#[test]
fn parsing_row_changes_does_not_allocate() {
    let mut msgs = Vec::new();
    for i in 0..100 {
        msgs.push(message_bytes(&LogicalMessage::Insert(Insert {
            xid: None,
            relation: 16384,
            new: row(i),
        })));
        msgs.push(message_bytes(&LogicalMessage::Update(Update {
            xid: None,
            relation: 16384,
            old: (i % 2 == 0).then(|| OldTuple::Full(row(i + 1))),
            new: row(i),
        })));
        msgs.push(message_bytes(&LogicalMessage::Delete(Delete {
            xid: None,
            relation: 16384,
            old: OldTuple::Key(row(i)),
        })));
    }
    let mut decoder = Decoder::new(ProtocolVersion::V4);
    // Warm up (lazy thread-locals, etc.) outside the measurement.
    parse_and_split(&mut decoder, &msgs[0]);

    let mut seen = 0;
    let n = allocations_in(|| {
        for m in &msgs {
            seen += parse_and_split(&mut decoder, m);
        }
    });
    assert!(seen > 0);
    assert_eq!(n, 0, "{n} allocations for {} messages", msgs.len());

    // Sanity check that the counter works: an owned copy does allocate.
    let n = allocations_in(|| {
        let m = decoder.decode(&msgs[0]).unwrap().into_owned();
        black_box(m);
    });
    assert!(n > 0);
}

#[test]
fn a_plain_transaction_passes_the_assembler_without_allocating() {
    let relation = message_bytes(&LogicalMessage::Relation(Relation {
        xid: None,
        oid: 16384,
        namespace: "public".into(),
        name: "users".into(),
        replica_identity: ReplicaIdentity::Default,
        columns: vec![],
    }));
    let begin = message_bytes(&LogicalMessage::Begin(Begin {
        final_lsn: Lsn::from_u64(1000),
        commit_time: PgTimestamp::EPOCH,
        xid: 5,
    }));
    let commit = message_bytes(&LogicalMessage::Commit(Commit {
        flags: 0,
        commit_lsn: Lsn::from_u64(1000),
        end_lsn: Lsn::from_u64(1008),
        commit_time: PgTimestamp::EPOCH,
    }));
    let inserts: Vec<Vec<u8>> = (0..50)
        .map(|i| {
            message_bytes(&LogicalMessage::Insert(Insert {
                xid: None,
                relation: 16384,
                new: row(i),
            }))
        })
        .collect();
    let mut decoder = Decoder::new(ProtocolVersion::V1);
    let mut asm = TxnAssembler::new();
    asm.handle_message(decoder.decode(&relation).unwrap())
        .unwrap();

    let mut columns = 0;
    let n = allocations_in(|| {
        for buf in std::iter::once(&begin).chain(&inserts).chain([&commit]) {
            let event = asm.handle_message(decoder.decode(buf).unwrap()).unwrap();
            if let Some(TxnEvent::Change(cdc_core::Change::Insert(_, ins))) = &event {
                columns += ins.new.iter().count();
            }
            black_box(event);
            assert!(asm.poll_event().is_none());
        }
    });
    assert_eq!(columns, 50 * 5);
    assert_eq!(n, 0, "{n} allocations");
}
