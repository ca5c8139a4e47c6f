//! Tests of the file sink, on the real filesystem.

use std::sync::Arc;

use cdc_core::{Lsn, Value};

use super::*;
use crate::encoding::JsonFormat;
use crate::event::{ColumnSchema, Operation, SourceInfo, TableSchema};

fn events(n: u32, text_len: usize) -> Vec<ChangeEvent> {
    let table = Arc::new(TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "public".into(),
        table: "t".into(),
        columns: vec![
            ColumnSchema {
                name: "id".into(),
                type_oid: cdc_core::types::INT4,
                type_modifier: -1,
                is_key: true,
            },
            ColumnSchema {
                name: "doc".into(),
                type_oid: cdc_core::types::TEXT,
                type_modifier: -1,
                is_key: false,
            },
        ],
    });
    (0..n)
        .map(|i| ChangeEvent {
            op: Operation::Create,
            table: Some(table.clone()),
            before: None,
            after: Some(crate::event::Row::from_values(vec![
                Value::Int4(i as i32),
                Value::Text("x".repeat(text_len).into()),
            ])),
            message: None,
            schema_change: None,
            source: SourceInfo {
                commit_lsn: Lsn::from_u64(100),
                lsn: Lsn::from_u64(100),
                xid: 5,
                commit_time: None,
                database: "db".into(),
                slot: "s".into(),
            },
            index: i,
            position: Default::default(),
            boundary: None,
        })
        .collect()
}

async fn open(base: &Path, max: u64) -> FileSink {
    open_with(base, max, true).await
}

async fn open_with(base: &Path, max: u64, direct_io: bool) -> FileSink {
    FileSink::open(
        FileSinkOptions {
            path: base.to_path_buf(),
            max_file_bytes: max,
            page_cache_bytes: DEFAULT_PAGE_CACHE_BYTES,
            direct_io,
        },
        JsonEncoder::new(JsonFormat::Plain),
    )
    .await
    .unwrap()
}

/// Every line of every file, with the file it came from.
fn read_lines(base: &Path) -> Vec<(PathBuf, serde_json::Value)> {
    let mut all = Vec::new();
    for path in FileSink::files(base).unwrap() {
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{} ends mid-line",
            path.display()
        );
        for line in text.lines() {
            all.push((path.clone(), serde_json::from_str(line).unwrap()));
        }
    }
    all
}

fn indexes(lines: &[(PathBuf, serde_json::Value)]) -> Vec<u64> {
    lines
        .iter()
        .map(|(_, j)| j["index"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn rotates_by_size_without_splitting_lines() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("events.jsonl");
    let mut sink = open(&base, 1000).await;
    let evs = events(40, 50);
    for chunk in evs.chunks(7) {
        sink.write(chunk).await.unwrap();
    }
    sink.close().await.unwrap();
    let files = FileSink::files(&base).unwrap();
    assert!(files.len() > 2, "{files:?}");
    assert_eq!(files[0], dir.path().join("events.jsonl.000001"));
    for f in &files {
        assert!(fs::metadata(f).unwrap().len() <= 1000);
    }
    let lines = read_lines(&base);
    assert_eq!(indexes(&lines), (0..40).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_line_longer_than_the_limit_gets_a_file_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("big");
    let mut sink = open(&base, 200).await;
    sink.write(&events(1, 10)).await.unwrap();
    sink.write(&events(1, 500)).await.unwrap();
    sink.write(&events(1, 10)).await.unwrap();
    sink.flush().await.unwrap();
    let lines = read_lines(&base);
    assert_eq!(lines.len(), 3);
    assert_ne!(lines[0].0, lines[1].0);
    assert_ne!(lines[1].0, lines[2].0);
}

#[tokio::test]
async fn flush_makes_lines_visible_and_reopen_appends() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("e");
    let evs = events(5, 3);
    let mut sink = open(&base, 0).await;
    sink.write(&evs[..3]).await.unwrap();
    sink.flush().await.unwrap();
    assert_eq!(read_lines(&base).len(), 3, "flushed lines are in the file");
    drop(sink);

    let mut sink = open(&base, 0).await;
    assert_eq!(sink.current_path(), dir.path().join("e.000001"));
    sink.write(&evs[3..]).await.unwrap();
    sink.close().await.unwrap();
    assert!(matches!(sink.write(&evs).await, Err(SinkError::Closed)));
    assert_eq!(indexes(&read_lines(&base)), [0, 1, 2, 3, 4]);
    assert_eq!(FileSink::files(&base).unwrap().len(), 1);
}

#[tokio::test]
async fn reopen_continues_the_last_file_and_cuts_a_torn_line() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("e");
    fs::write(
        dir.path().join("e.000002"),
        "{\"index\":7}\n{\"index\":8,\"tor",
    )
    .unwrap();
    fs::write(dir.path().join("e.000001"), "{\"index\":6}\n").unwrap();
    fs::write(dir.path().join("e.000003x"), "not ours").unwrap();
    let mut sink = open(&base, 0).await;
    assert_eq!(sink.current_path(), dir.path().join("e.000002"));
    assert_eq!(sink.current_size(), 12);
    sink.write(&events(1, 1)).await.unwrap();
    sink.close().await.unwrap();
    assert_eq!(indexes(&read_lines(&base)), [6, 7, 0]);
}

#[test]
fn a_failed_write_leaves_whole_lines_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    // "a\n" was there; the write of "b\nccc\n" stopped after "b\ncc".
    fs::write(&path, "a\nb\ncc").unwrap();
    let file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    cut_failed_write(&file, 2, b"b\nccc\n");
    assert_eq!(fs::read_to_string(&path).unwrap(), "a\nb\n");
    // Nothing whole written: back to where it started.
    fs::write(&path, "a\nbb").unwrap();
    cut_failed_write(&file, 2, b"bbb\n");
    assert_eq!(fs::read_to_string(&path).unwrap(), "a\n");
}

#[tokio::test]
async fn reset_discards_unflushed_lines_and_cuts_a_torn_one() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("e");
    let mut sink = open(&base, 0).await;
    let evs = events(6, 1);
    sink.write(&evs[..3]).await.unwrap();
    sink.flush().await.unwrap();
    // Collected but not written: a reset drops them.
    sink.write(&evs[3..]).await.unwrap();
    // A write that failed half-way left a torn line in the file.
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(sink.current_path())
        .unwrap();
    file.write_all(b"{\"index\":3,\"tor").unwrap();
    sink.reset().await.unwrap();
    // The replay of what was written since the flush.
    sink.write(&evs[3..]).await.unwrap();
    sink.close().await.unwrap();
    assert_eq!(indexes(&read_lines(&base)), [0, 1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn lines_are_written_in_chunks_and_all_by_flush() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("e");
    let file = dir.path().join("e.000001");
    let mut sink = open_with(&base, 0, false).await;
    sink.write(&events(3, 10)).await.unwrap();
    assert_eq!(
        fs::metadata(&file).unwrap().len(),
        0,
        "collected, not written"
    );
    // More than a chunk: written without a flush, whole lines only.
    let big = events(40, WRITE_CHUNK / 32);
    sink.write(&big).await.unwrap();
    let on_disk = fs::read(&file).unwrap();
    assert!(on_disk.len() >= WRITE_CHUNK, "{}", on_disk.len());
    assert!(on_disk.ends_with(b"\n"));
    sink.write(&events(2, 10)).await.unwrap();
    sink.flush().await.unwrap();
    assert_eq!(fs::metadata(&file).unwrap().len(), sink.current_size());
    assert_eq!(read_lines(&base).len(), 45);
}

#[tokio::test]
async fn a_file_without_any_newline_is_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("e");
    fs::write(dir.path().join("e.000001"), "partial").unwrap();
    let sink = open(&base, 0).await;
    assert_eq!(sink.current_size(), 0);
    assert_eq!(fs::read(dir.path().join("e.000001")).unwrap(), b"");
}

/// Bytes of `path` in the page cache, by util-linux's `fincore`.
fn resident_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .expect("fincore (util-linux) runs");
    assert!(out.status.success(), "fincore: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Whether `dir` is on a file system whose pages `posix_fadvise` cannot
/// drop (tmpfs keeps its pages: they are the files).
fn on_tmpfs(dir: &Path) -> bool {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    // `f_type`'s type differs between targets.
    #[allow(clippy::cast_sign_loss)]
    rustix::fs::statfs(dir).is_ok_and(|s| s.f_type as u64 == TMPFS_MAGIC)
}

/// Writes 8 MiB in flushes of about 256 KiB; returns what stays cached and
/// how many lines were written.
async fn cached_after_writing(dir: &Path, window: u64) -> (u64, usize) {
    let base = dir.join(format!("cache-{window}"));
    let mut sink = FileSink::open(
        FileSinkOptions {
            path: base.clone(),
            max_file_bytes: 0,
            page_cache_bytes: window,
            direct_io: false,
        },
        JsonEncoder::new(JsonFormat::Plain),
    )
    .await
    .unwrap();
    let batch = events(64, 4000);
    let mut written = 0;
    while sink.current_size() < 8 << 20 {
        sink.write(&batch).await.unwrap();
        sink.flush().await.unwrap();
        written += batch.len();
    }
    sink.close().await.unwrap();
    (resident_bytes(sink.current_path()), written)
}

#[tokio::test]
async fn fsynced_output_beyond_the_window_leaves_the_page_cache() {
    let dir = tempfile::tempdir().unwrap();
    if on_tmpfs(dir.path()) {
        eprintln!("skipped: the temporary directory is on tmpfs, whose pages cannot be dropped");
        return;
    }
    let (kept, _) = cached_after_writing(dir.path(), 0).await;
    let (windowed, written) = cached_after_writing(dir.path(), 1 << 20).await;
    assert!(
        kept >= 7 << 20,
        "without a window the 8 MiB stay cached (the comparison needs it): {kept}"
    );
    assert!(
        windowed <= 3 << 20,
        "a 1 MiB window keeps at most two windows and a flush cached: {windowed}"
    );
    // Dropped from the cache, not from the file.
    assert_eq!(read_lines(&dir.path().join("cache-1048576")).len(), written);
}

/// Writes the same events in the same batches, with flushes and reopenings
/// at the same points, through a direct and a buffered sink: the files must
/// be byte for byte the same, and every flush must leave whole lines.
#[tokio::test]
async fn direct_writes_leave_the_same_bytes_as_buffered_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |below: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % below
    };
    // (batch size, text length, then: 0 nothing, 1 flush, 2 flush and reopen)
    let steps: Vec<(u64, u64, u64)> = (0..120)
        .map(|_| (next(40) + 1, next(6000), next(3)))
        .collect();
    let mut files = Vec::new();
    let mut direct_seen = false;
    for direct_io in [true, false] {
        let base = dir.path().join(format!("d-{direct_io}"));
        let mut sink = open_with(&base, 0, direct_io).await;
        direct_seen |= sink.is_direct();
        for &(n, text, then) in &steps {
            sink.write(&events(n as u32, text as usize)).await.unwrap();
            if then >= 1 {
                sink.flush().await.unwrap();
                let path = sink.current_path().to_path_buf();
                assert_eq!(fs::metadata(&path).unwrap().len(), sink.current_size());
                assert!(fs::read(&path).unwrap().ends_with(b"\n"));
            }
            if then == 2 {
                drop(sink);
                sink = open_with(&base, 0, direct_io).await;
            }
        }
        sink.close().await.unwrap();
        files.push(fs::read(base.with_extension("000001")).unwrap());
    }
    if !on_tmpfs(dir.path()) {
        assert!(direct_seen, "ext4 and xfs take direct writes");
    }
    assert!(files[0].len() > 8 << 20, "{}", files[0].len());
    assert!(
        files[0] == files[1],
        "the direct file differs from the buffered one"
    );
}

/// A sink at `base` writing directly; `None` (the test skipped) where the
/// file system has no direct I/O.
async fn open_direct_sink(base: &Path) -> Option<FileSink> {
    let sink = open(base, 0).await;
    if !sink.is_direct() {
        eprintln!("skipped: this file system has no direct I/O");
        return None;
    }
    Some(sink)
}

#[tokio::test]
async fn direct_output_does_not_stay_in_the_page_cache() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("e");
    let Some(mut sink) = open_direct_sink(&base).await else {
        return;
    };
    let batch = events(64, 4000);
    while sink.current_size() < 8 << 20 {
        sink.write(&batch).await.unwrap();
        sink.flush().await.unwrap();
    }
    // Chunks are written without a flush as whole blocks (the file may end
    // mid-line until the flush).
    sink.write(&events(400, 4000)).await.unwrap();
    let len = fs::metadata(sink.current_path()).unwrap().len();
    assert_eq!(len % direct::BLOCK as u64, 0, "{len}");
    sink.close().await.unwrap();
    let cached = resident_bytes(sink.current_path());
    // At most the partial last block of each flush passes through the cache
    // (and leaves it when the direct write of its block replaces it).
    assert!(cached <= 64 << 10, "{cached} bytes cached");
    assert_eq!(read_lines(&base).len() % 64, 400 % 64);
}

/// A direct write that fails after whole blocks left the file mid-line: the
/// torn line is cut at once (readers never see it while the sink retries),
/// and the reset's replay completes the output.
#[tokio::test]
async fn a_failed_direct_write_leaves_whole_lines_only() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("e");
    let Some(mut sink) = open_direct_sink(&base).await else {
        return;
    };
    let evs = events(600, 4000);
    sink.write(&evs[..10]).await.unwrap();
    sink.flush().await.unwrap();
    // More than a chunk: whole blocks go out, the file ends mid-line.
    sink.write(&evs[10..400]).await.unwrap();
    let path = sink.current_path().to_path_buf();
    assert!(!fs::read(&path).unwrap().ends_with(b"\n"));
    sink.direct.as_mut().unwrap().misalign();
    assert!(sink.write(&evs[400..]).await.is_err() || sink.flush().await.is_err());
    let text = fs::read(&path).unwrap();
    assert!(
        text.ends_with(b"\n"),
        "a torn line stayed after the failure"
    );
    // The pipeline resets and replays everything since the last flush.
    sink.reset().await.unwrap();
    sink.write(&evs[10..]).await.unwrap();
    sink.close().await.unwrap();
    let got = indexes(&read_lines(&base));
    let mut seen = std::collections::BTreeSet::new();
    for i in &got {
        seen.insert(*i);
    }
    assert_eq!(seen.len(), 600, "every line at least once");
    assert_eq!(
        &got[..10],
        &(0..10).collect::<Vec<_>>()[..],
        "flushed lines kept"
    );
}
