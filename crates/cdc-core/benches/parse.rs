//! Micro-benchmarks of the hot path: parse a row change and split every column.
//!
//! The message shape (10 text columns of ~13 bytes, 178 bytes per Insert) is
//! the one the `pg_walstream` crate's own `parse_insert` bench uses, so numbers
//! compare directly. Run with `cargo bench -p cdc-core`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use cdc_core::encode::message_bytes;
use cdc_core::pgoutput::*;
use cdc_core::{Lsn, PgTimestamp, TxnAssembler, TxnEvent};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn row(seed: usize) -> TupleData<'static> {
    let vals: Vec<String> = (0..10)
        .map(|c| format!("value_{}_data", (c + seed) % 10))
        .collect();
    let vals: Vec<TupleValue<'_>> = vals
        .iter()
        .map(|v| TupleValue::Text(v.as_bytes()))
        .collect();
    TupleData::from_values(&vals).unwrap()
}

fn inserts(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            message_bytes(&LogicalMessage::Insert(Insert {
                xid: None,
                relation: 100,
                new: row(i),
            }))
        })
        .collect()
}

fn split_all(t: &TupleData<'_>) -> usize {
    t.iter().map(|v| v.bytes().map_or(0, <[u8]>::len)).sum()
}

fn bench_parse(c: &mut Criterion) {
    let msgs = inserts(1000);
    let bytes: usize = msgs.iter().map(Vec::len).sum();
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("insert_10_text_columns_x1000", |b| {
        let mut d = Decoder::new(ProtocolVersion::V2);
        b.iter(|| {
            let mut sum = 0;
            for m in &msgs {
                if let LogicalMessage::Insert(i) = d.decode(black_box(m)).unwrap() {
                    sum += split_all(&i.new);
                }
            }
            sum
        })
    });

    let updates: Vec<Vec<u8>> = (0..1000)
        .map(|i| {
            message_bytes(&LogicalMessage::Update(Update {
                xid: None,
                relation: 100,
                old: Some(OldTuple::Full(row(i + 1))),
                new: row(i),
            }))
        })
        .collect();
    let bytes: usize = updates.iter().map(Vec::len).sum();
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("update_full_old_new_x1000", |b| {
        let mut d = Decoder::new(ProtocolVersion::V2);
        b.iter(|| {
            let mut sum = 0;
            for m in &updates {
                if let LogicalMessage::Update(u) = d.decode(black_box(m)).unwrap() {
                    sum += u.old.as_ref().map_or(0, |o| split_all(o.tuple()));
                    sum += split_all(&u.new);
                }
            }
            sum
        })
    });
    g.finish();
}

fn bench_assembler(c: &mut Criterion) {
    let relation = message_bytes(&LogicalMessage::Relation(Relation {
        xid: None,
        oid: 100,
        namespace: "public".into(),
        name: "t".into(),
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
    let msgs = inserts(1000);
    let mut g = c.benchmark_group("assembler");
    g.throughput(Throughput::Elements(msgs.len() as u64 + 2));
    g.bench_function("plain_txn_1000_inserts", |b| {
        let mut d = Decoder::new(ProtocolVersion::V2);
        let mut asm = TxnAssembler::new();
        asm.handle_message(d.decode(&relation).unwrap()).unwrap();
        b.iter(|| {
            let mut sum = 0;
            for m in std::iter::once(&begin).chain(&msgs).chain([&commit]) {
                let e = asm.handle_message(d.decode(black_box(m)).unwrap()).unwrap();
                if let Some(TxnEvent::Change(cdc_core::Change::Insert(_, i))) = e {
                    sum += split_all(&i.new);
                }
            }
            sum
        })
    });
    g.finish();
}

criterion_group!(benches, bench_parse, bench_assembler);
criterion_main!(benches);
