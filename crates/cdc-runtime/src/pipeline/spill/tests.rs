//! Tests of the spiller.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use cdc_core::pgoutput::{
    Column, Insert, LogicalMessage, Prepare, Relation, ReplicaIdentity, RollbackPrepared,
    StreamAbort, StreamCommit, StreamStart, TupleData, TupleValue,
};
use cdc_core::{Lsn, PgTimestamp, TxnEvent};

const REL: u32 = 16384;

fn assembler() -> TxnAssembler {
    let mut asm = TxnAssembler::new();
    asm.handle_message(LogicalMessage::Relation(Relation {
        xid: None,
        oid: REL,
        namespace: "public".into(),
        name: "t".into(),
        replica_identity: ReplicaIdentity::Default,
        columns: vec![Column {
            flags: 1,
            name: "v".into(),
            type_oid: 25,
            type_modifier: -1,
        }],
    }))
    .unwrap();
    asm
}

fn insert(xid: Xid, value: &str) -> LogicalMessage<'static> {
    LogicalMessage::Insert(Insert {
        xid: Some(xid),
        relation: REL,
        new: TupleData::from_values(&[TupleValue::Text(value.as_bytes())]).unwrap(),
    })
}

fn start(xid: Xid, first_segment: bool) -> LogicalMessage<'static> {
    LogicalMessage::StreamStart(StreamStart { xid, first_segment })
}

fn spill_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

/// Feeds `msgs`, spilling as needed; replays what commits. Returns the
/// inserted values of the replayed or released events.
async fn feed(
    spiller: &mut Spiller,
    asm: &mut TxnAssembler,
    msgs: Vec<LogicalMessage<'static>>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |e: &TxnEvent<'_>| {
        if let TxnEvent::Change(cdc_core::Change::Insert(_, i)) = e {
            if let Some(TupleValue::Text(t)) = i.new.get(0) {
                out.push(String::from_utf8(t.to_vec()).unwrap());
            }
        }
    };
    for m in msgs {
        if let Some(e) = asm.handle_message(m).unwrap() {
            push(&e);
        }
        loop {
            spiller.after_message(asm).await.unwrap();
            while let Some(e) = asm.poll_event() {
                push(&e);
            }
            let Some(mut replay) = asm.poll_replay() else {
                break;
            };
            let mut file = spiller.reader(replay.xid()).await.unwrap();
            while let Some(body) = file.next().await.unwrap() {
                if let Some(e) = replay.record(body).unwrap() {
                    push(&e);
                }
            }
            replay.finish().unwrap();
        }
    }
    out
}

#[tokio::test]
async fn over_the_budget_a_transaction_goes_to_a_file_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut spiller = Spiller::new(dir.path().join("spill"), "slot_a", 1024);
    let mut asm = assembler();
    let values: Vec<String> = (0..200).map(|i| format!("row-{i:04}")).collect();
    let mut msgs = vec![start(7, true)];
    msgs.extend(values.iter().map(|v| insert(7, v)));
    msgs.push(LogicalMessage::StreamStop);
    assert!(feed(&mut spiller, &mut asm, msgs).await.is_empty());
    assert!(asm.is_spilled(7));
    assert!(asm.buffered_bytes() <= 1024);
    let files = spill_files(&dir.path().join("spill"));
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(name.starts_with("pgcdc-spill-slot_a-7-"), "{name}");
    let commit = LogicalMessage::StreamCommit(StreamCommit {
        xid: 7,
        flags: 0,
        commit_lsn: Lsn::from_u64(100),
        end_lsn: Lsn::from_u64(108),
        commit_time: PgTimestamp::EPOCH,
    });
    assert_eq!(feed(&mut spiller, &mut asm, vec![commit]).await, values);
    assert!(spill_files(&dir.path().join("spill")).is_empty());
    assert_eq!(spiller.open_files(), 0);
}

#[tokio::test]
async fn abort_reset_drop_and_startup_remove_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut spiller = Spiller::new(dir.path().to_owned(), "s", 64);
    let mut asm = assembler();
    let mut msgs = vec![start(7, true), insert(7, "a"), insert(7, "b")];
    msgs.extend([LogicalMessage::StreamStop, start(8, true)]);
    msgs.extend((0..10).map(|_| insert(8, "c")));
    msgs.push(LogicalMessage::StreamStop);
    feed(&mut spiller, &mut asm, msgs).await;
    assert!(asm.is_spilled(7) && asm.is_spilled(8));
    assert_eq!(spill_files(dir.path()).len(), 2);
    // Abort: that file goes.
    let abort = LogicalMessage::StreamAbort(StreamAbort {
        xid: 7,
        subxid: 7,
        abort_info: None,
    });
    feed(&mut spiller, &mut asm, vec![abort]).await;
    assert_eq!(spill_files(dir.path()).len(), 1);
    // Reset (reconnect): all go (no prepared transaction is held).
    asm.reset();
    spiller.retain(|xid| asm.is_spilled(xid));
    assert!(spill_files(dir.path()).is_empty());
    // Drop: all go.
    feed(
        &mut spiller,
        &mut asm,
        vec![start(9, true), insert(9, "x"), insert(9, "y")],
    )
    .await;
    assert_eq!(spill_files(dir.path()).len(), 1);
    drop(spiller);
    assert!(spill_files(dir.path()).is_empty());
    // Startup: leftovers of this slot go, other files stay.
    for name in [
        "pgcdc-spill-s-5-1.spill",
        "pgcdc-spill-s_other-5-1.spill",
        "pgcdc-spill-s-5-1.keep",
        "unrelated",
    ] {
        std::fs::write(dir.path().join(name), b"x").unwrap();
    }
    let _spiller = Spiller::new(dir.path().to_owned(), "s", 64);
    let left: Vec<String> = spill_files(dir.path())
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        left,
        [
            "pgcdc-spill-s-5-1.keep",
            "pgcdc-spill-s_other-5-1.spill",
            "unrelated"
        ]
    );
}

#[tokio::test]
async fn a_truncated_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut spiller = Spiller::new(dir.path().to_owned(), "s", 16);
    let mut asm = assembler();
    feed(
        &mut spiller,
        &mut asm,
        vec![start(7, true), insert(7, "abc"), insert(7, "def")],
    )
    .await;
    let path = spill_files(dir.path()).remove(0);
    let mut reader = spiller.reader(7).await.unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 2)
        .unwrap();
    assert!(reader.next().await.unwrap().is_some());
    assert!(matches!(
        reader.next().await,
        Err(SpillError::Truncated { .. })
    ));
}

#[test]
fn prefixes_of_different_slots_never_overlap() {
    assert_eq!(file_prefix("pgcdc_app"), "pgcdc-spill-pgcdc_app-");
    assert_eq!(file_prefix("a-b"), "pgcdc-spill-a%2db-");
    assert!(!file_prefix("a_b").starts_with(&file_prefix("a")));
}

#[tokio::test]
async fn a_prepared_transaction_keeps_its_file_over_a_reset_until_decided() {
    let dir = tempfile::tempdir().unwrap();
    let mut spiller = Spiller::new(dir.path().to_owned(), "s", 64);
    let mut asm = assembler();
    let mut msgs = vec![start(7, true)];
    msgs.extend((0..10).map(|_| insert(7, "p")));
    msgs.extend([
        LogicalMessage::StreamStop,
        LogicalMessage::StreamPrepare(Prepare {
            flags: 0,
            prepare_lsn: Lsn::from_u64(0x700),
            end_lsn: Lsn::from_u64(0x708),
            prepare_time: PgTimestamp::EPOCH,
            xid: 7,
            gid: "g".into(),
        }),
        start(8, true),
    ]);
    msgs.extend((0..10).map(|_| insert(8, "s")));
    msgs.push(LogicalMessage::StreamStop);
    feed(&mut spiller, &mut asm, msgs).await;
    assert!(asm.is_spilled(7) && asm.is_spilled(8));
    // Reconnect: the streamed one goes, the prepared one stays.
    asm.reset();
    spiller.retain(|xid| asm.is_spilled(xid));
    assert_eq!(spill_files(dir.path()).len(), 1);
    assert_eq!(spiller.open_files(), 1);
    // Rollback Prepared: its file goes too.
    let rollback = LogicalMessage::RollbackPrepared(RollbackPrepared {
        flags: 0,
        prepare_end_lsn: Lsn::from_u64(0x708),
        rollback_end_lsn: Lsn::from_u64(0x808),
        prepare_time: PgTimestamp::EPOCH,
        rollback_time: PgTimestamp::EPOCH,
        xid: 7,
        gid: "g".into(),
    });
    feed(&mut spiller, &mut asm, vec![rollback]).await;
    assert!(spill_files(dir.path()).is_empty());
}
