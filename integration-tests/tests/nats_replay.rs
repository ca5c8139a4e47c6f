//! The NATS sink's publisher against a real JetStream when a replay repeats
//! part of what the stream holds *after* a message it does not hold (a
//! snapshot chunk read again, a replay that yields records the first run
//! did not): JetStream checks a message's id for a duplicate before its
//! `Nats-Expected-Last-Msg-Id`, and a duplicate does not become the
//! stream's last id, so the message after such a duplicate is refused
//! although nothing was lost. The sink must send those again, in their
//! order, and neither stop nor loop.
//!
//! Driven through the library (`NatsSink` with hand-made events), so the
//! ids and their order are exactly the test's.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use cdc_core::{Lsn, Value};
use cdc_runtime::encoding::JsonFormat;
use cdc_runtime::event::{
    ChangeEvent, ColumnSchema, Operation, Position, Row, SourceInfo, TableSchema,
};
use cdc_runtime::sinks::nats::{NatsSink, NatsSinkOptions};
use cdc_runtime::sinks::Sink;
use integration_tests::nats::{delete_stream, read_stream, unique_name, TestNats};

fn table() -> Arc<TableSchema> {
    Arc::new(TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "public".into(),
        table: "t".into(),
        columns: vec![ColumnSchema {
            name: "id".into(),
            type_oid: cdc_core::types::INT4,
            type_modifier: -1,
            is_key: true,
        }],
    })
}

/// An insert committed at `lsn`, event `index` of its transaction.
fn insert(table: &Arc<TableSchema>, lsn: u64, index: u32) -> ChangeEvent {
    ChangeEvent {
        op: Operation::Create,
        table: Some(table.clone()),
        before: None,
        after: Some(Row::from_values(vec![Value::Int4(index as i32)])),
        message: None,
        schema_change: None,
        source: SourceInfo {
            commit_lsn: Lsn::from_u64(lsn),
            lsn: Lsn::from_u64(lsn),
            xid: 7,
            commit_time: None,
            database: "db".into(),
            slot: "s".into(),
        },
        index,
        position: Position::default(),
        boundary: None,
    }
}

fn ids(job: &str, events: &[(u64, u32)]) -> Vec<String> {
    events
        .iter()
        .map(|(lsn, i)| format!("{job}:{}:{i}", Lsn::from_u64(*lsn)))
        .collect()
}

#[tokio::test]
async fn messages_refused_after_a_duplicate_are_sent_again_in_order() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let job = unique_name("natsreplay");
    let stream = job.to_ascii_uppercase();
    let mut options = NatsSinkOptions::new(job.clone(), JsonFormat::Plain);
    options.servers = vec![nats.url().to_owned()];
    options.prefix = job.clone();
    options.stream.name = Some(stream.clone());
    let t = table();
    let run = |events: &[(u64, u32)]| -> Vec<ChangeEvent> {
        events.iter().map(|&(l, i)| insert(&t, l, i)).collect()
    };

    let mut sink = NatsSink::connect(options).await.unwrap();
    let first = [(0x100, 0), (0x100, 1), (0x100, 2)];
    sink.write(&run(&first)).await.unwrap();
    sink.flush().await.unwrap();

    // A replay on a new connection: a message the stream lacks, then one it
    // has, then new ones (refused after the duplicate), another it has, and
    // a new one.
    sink.reset().await.unwrap();
    let second = [
        (0x50, 0),
        (0x100, 1),
        (0x200, 0),
        (0x200, 1),
        (0x100, 2),
        (0x300, 0),
    ];
    sink.write(&run(&second)).await.unwrap();
    sink.flush().await.unwrap();
    assert_eq!(sink.duplicates(), 2);

    // A replay that starts with duplicates, the stream's last message being
    // another one: the first new message is refused, and sent again.
    sink.reset().await.unwrap();
    let third = [(0x100, 0), (0x400, 0), (0x400, 1)];
    sink.write(&run(&third)).await.unwrap();
    sink.flush().await.unwrap();
    assert_eq!(sink.duplicates(), 3);
    assert_eq!(sink.duplicates_dropped(), 3);
    sink.close().await.unwrap();

    let stored: Vec<String> = read_stream(&js, &stream)
        .await
        .unwrap()
        .iter()
        .map(|m| m.header("Nats-Msg-Id").unwrap_or_default().to_owned())
        .collect();
    let want = ids(
        &job,
        &[
            (0x100, 0),
            (0x100, 1),
            (0x100, 2),
            (0x50, 0),
            (0x200, 0),
            (0x200, 1),
            (0x300, 0),
            (0x400, 0),
            (0x400, 1),
        ],
    );
    assert_eq!(stored, want);
    delete_stream(&js, &stream).await.unwrap();
}
