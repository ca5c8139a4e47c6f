//! JSON lines in files, rotated by size.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::encoding::JsonEncoder;
use crate::event::ChangeEvent;

use super::{Sink, SinkError};

/// Where and how a [`FileSink`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSinkOptions {
    /// Base path: files are `<path>.000001`, `<path>.000002`, ….
    pub path: PathBuf,
    /// Start a new file before a line would make the current one larger than
    /// this (a single longer line still goes whole into a file of its own).
    /// `0`: never rotate.
    pub max_file_bytes: u64,
}

/// JSON lines appended to numbered files, rotated by size.
///
/// * Lines are never split across files and never lost on rotation: the
///   full file is fsynced before the next one is created (and the directory
///   fsynced after).
/// * Lines are collected in memory and written in chunks of about 1 MiB (and
///   at every flush, rotation and close), each write and fsync on tokio's
///   blocking pool: one hand-off per chunk, not one per batch.
/// * [`flush`](Sink::flush) writes what is collected and fsyncs the current
///   file; lines written but not flushed may not be in the file yet.
/// * Opening again continues the highest-numbered file, appending. A
///   trailing partial line (a write torn by a crash, never flushed) is cut
///   off first, so every file holds whole lines only.
#[derive(Debug)]
pub struct FileSink {
    base: PathBuf,
    max_bytes: u64,
    /// Shared with the [`LineEncoder`](crate::encoding::LineEncoder) of a
    /// batch while the batch's writes borrow the sink.
    encoder: Arc<JsonEncoder>,
    seq: u32,
    path: PathBuf,
    /// `None` once closed (or while a write is on the blocking pool).
    file: Option<fs::File>,
    size: u64,
    buf: Vec<u8>,
    line: Vec<u8>,
}

impl FileSink {
    /// Opens (or continues) the files at `options.path`.
    pub async fn open(options: FileSinkOptions, encoder: JsonEncoder) -> Result<Self, SinkError> {
        let base = options.path.clone();
        let (seq, path, file, size) = tokio::task::spawn_blocking(move || open_latest(&base))
            .await
            .map_err(|e| {
                SinkError::io("opening", Some(options.path.clone()), io::Error::other(e))
            })??;
        Ok(FileSink {
            base: options.path,
            max_bytes: options.max_file_bytes,
            encoder: Arc::new(encoder),
            seq,
            path,
            file: Some(file),
            size,
            buf: Vec::new(),
            line: Vec::new(),
        })
    }

    /// The file currently written.
    pub fn current_path(&self) -> &Path {
        &self.path
    }

    /// Bytes in the current file (including buffered, unflushed writes).
    pub fn current_size(&self) -> u64 {
        self.size
    }

    /// The numbered files of `base`, in order.
    pub fn files(base: &Path) -> io::Result<Vec<PathBuf>> {
        Ok(numbered_files(base)?.into_iter().map(|(_, p)| p).collect())
    }

    /// Writes the collected lines to the file and, with `sync`, fsyncs it:
    /// one trip to the blocking pool.
    async fn write_buf(&mut self, sync: bool) -> Result<(), SinkError> {
        if self.buf.is_empty() && !sync {
            return Ok(());
        }
        let mut file = self.file.take().ok_or(SinkError::Closed)?;
        let buf = std::mem::take(&mut self.buf);
        let joined = tokio::task::spawn_blocking(move || {
            let written = if buf.is_empty() {
                Ok(())
            } else {
                let before = file.metadata().map(|m| m.len());
                let written = file.write_all(&buf).map_err(|e| ("writing", e));
                if written.is_err() {
                    if let Ok(before) = before {
                        cut_failed_write(&file, before, &buf);
                    }
                }
                written
            };
            let result = written.and_then(|()| {
                if sync {
                    file.sync_data().map_err(|e| ("fsyncing", e))
                } else {
                    Ok(())
                }
            });
            (file, buf, result)
        })
        .await;
        let (file, mut buf, result) = joined
            .map_err(|e| SinkError::io("writing", Some(self.path.clone()), io::Error::other(e)))?;
        self.file = Some(file);
        result.map_err(|(what, e)| SinkError::io(what, Some(self.path.clone()), e))?;
        buf.clear();
        self.buf = buf;
        Ok(())
    }

    async fn rotate(&mut self) -> Result<(), SinkError> {
        self.write_buf(true).await?;
        let seq = self.seq.checked_add(1).ok_or_else(|| {
            SinkError::io(
                "rotating",
                Some(self.path.clone()),
                io::Error::other("file sequence number exhausted"),
            )
        })?;
        let path = numbered(&self.base, seq);
        let p = path.clone();
        let file = tokio::task::spawn_blocking(move || create_synced(&p))
            .await
            .map_err(|e| SinkError::io("creating", Some(path.clone()), io::Error::other(e)))??;
        self.file = Some(file);
        self.seq = seq;
        self.path = path;
        self.size = 0;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Sink for FileSink {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        if self.file.is_none() {
            return Err(SinkError::Closed);
        }
        let encoder = Arc::clone(&self.encoder);
        let mut lines = encoder.lines_at(encoder.now());
        for ev in batch {
            if self.max_bytes == 0 {
                // No rotation: encode straight into the buffer.
                let start = self.buf.len();
                lines.encode_line(ev, &mut self.buf);
                self.size += (self.buf.len() - start) as u64;
            } else {
                self.line.clear();
                lines.encode_line(ev, &mut self.line);
                let len = self.line.len() as u64;
                if self.size > 0 && self.size + len > self.max_bytes {
                    self.rotate().await?;
                }
                self.buf.extend_from_slice(&self.line);
                self.size += len;
            }
            if self.buf.len() >= WRITE_CHUNK {
                self.write_buf(false).await?;
            }
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        self.write_buf(true).await
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        if self.file.is_some() {
            self.flush().await?;
            self.file = None;
        }
        Ok(())
    }

    /// Discards the lines not written yet and opens the newest file again
    /// (cutting a line torn by the failed write), as a fresh
    /// [`FileSink::open`] would. Lines that reached the file since the last
    /// flush stay, so the replay may duplicate them: identified by
    /// `(commit_lsn, index)`, as after a crash. Lines flushed before stay
    /// durable: the replay rewrites everything after them, so a failed
    /// fsync loses nothing either.
    fn can_reset(&self) -> bool {
        true
    }

    async fn reset(&mut self) -> Result<(), SinkError> {
        self.buf.clear();
        self.file = None;
        let base = self.base.clone();
        let (seq, path, file, size) = tokio::task::spawn_blocking(move || open_latest(&base))
            .await
            .map_err(|e| {
                SinkError::io("reopening", Some(self.base.clone()), io::Error::other(e))
            })??;
        self.seq = seq;
        self.path = path;
        self.file = Some(file);
        self.size = size;
        Ok(())
    }
}

/// Collected lines are written once they reach this many bytes.
const WRITE_CHUNK: usize = 1 << 20;

fn numbered(base: &Path, seq: u32) -> PathBuf {
    let mut name = base.as_os_str().to_owned();
    name.push(format!(".{seq:06}"));
    PathBuf::from(name)
}

fn parent_dir(base: &Path) -> &Path {
    match base.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `(seq, path)` of the files `<base>.<digits>`, sorted by number.
fn numbered_files(base: &Path) -> io::Result<Vec<(u32, PathBuf)>> {
    let Some(stem) = base.file_name().and_then(|n| n.to_str()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "file sink path needs a UTF-8 file name",
        ));
    };
    let prefix = format!("{stem}.");
    let dir = parent_dir(base);
    let mut found = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(digits) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(seq) = digits.parse::<u32>() {
            found.push((seq, numbered(base, seq)));
        }
    }
    found.sort();
    Ok(found)
}

fn open_latest(base: &Path) -> Result<(u32, PathBuf, fs::File, u64), SinkError> {
    let err = |what, e| SinkError::io(what, Some(base.to_path_buf()), e);
    fs::create_dir_all(parent_dir(base)).map_err(|e| err("creating directory", e))?;
    let latest = numbered_files(base).map_err(|e| err("listing", e))?.pop();
    let Some((seq, path)) = latest else {
        let path = numbered(base, 1);
        let file = create_synced(&path)?;
        return Ok((1, path, file, 0));
    };
    let mut file = fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(&path)
        .map_err(|e| SinkError::io("opening", Some(path.clone()), e))?;
    let size = cut_partial_line(&mut file)
        .map_err(|e| SinkError::io("repairing", Some(path.clone()), e))?;
    Ok((seq, path, file, size))
}

/// After a write of `buf` at offset `before` failed part-way (a full disk,
/// say), cuts the line it left incomplete, so that readers never see a
/// partial line while the sink retries. Whole lines written stay (the
/// replay may repeat them, as at-least-once allows). Best effort: a reset
/// or the next open cuts a torn line anyway.
fn cut_failed_write(file: &fs::File, before: u64, buf: &[u8]) {
    let Ok(after) = file.metadata().map(|m| m.len()) else {
        return;
    };
    let written = usize::try_from(after.saturating_sub(before))
        .unwrap_or(usize::MAX)
        .min(buf.len());
    let whole = buf
        .get(..written)
        .and_then(|w| w.iter().rposition(|&b| b == b'\n'))
        .map_or(0, |pos| pos + 1);
    let keep = before + whole as u64;
    if keep < after {
        let _ = file.set_len(keep);
    }
}

/// Truncates `file` after its last `\n` and returns the new length.
fn cut_partial_line(file: &mut fs::File) -> io::Result<u64> {
    let len = file.metadata()?.len();
    let mut end = len;
    let mut chunk = [0u8; 8192];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let n = usize::try_from(end - start).unwrap_or(chunk.len());
        let part = chunk.get_mut(..n).unwrap_or_default();
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(part)?;
        if let Some(pos) = part.iter().rposition(|&b| b == b'\n') {
            let keep = start + pos as u64 + 1;
            if keep != len {
                file.set_len(keep)?;
                file.sync_data()?;
            }
            return Ok(keep);
        }
        end = start;
    }
    if len != 0 {
        file.set_len(0)?;
        file.sync_data()?;
    }
    Ok(0)
}

/// Creates `path` (appending if it exists) and fsyncs its directory so the
/// new name survives a crash.
fn create_synced(path: &Path) -> Result<fs::File, SinkError> {
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| SinkError::io("creating", Some(path.to_path_buf()), e))?;
    let dir = parent_dir(path);
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| SinkError::io("fsyncing directory", Some(dir.to_path_buf()), e))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
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
        FileSink::open(
            FileSinkOptions {
                path: base.to_path_buf(),
                max_file_bytes: max,
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
        let mut sink = open(&base, 0).await;
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
}
