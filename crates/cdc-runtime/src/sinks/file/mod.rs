//! JSON lines in files, rotated by size.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::encoding::JsonEncoder;
use crate::event::ChangeEvent;

use super::{Sink, SinkError};

mod direct;
mod page_cache;
use direct::{Direct, Output, Refused};
use page_cache::CacheWindow;

/// The default [`FileSinkOptions::page_cache_bytes`]: 64 MiB.
pub const DEFAULT_PAGE_CACHE_BYTES: u64 = 64 << 20;

/// Where and how a [`FileSink`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSinkOptions {
    /// Base path: files are `<path>.000001`, `<path>.000002`, ….
    pub path: PathBuf,
    /// Start a new file before a line would make the current one larger than
    /// this (a single longer line still goes whole into a file of its own).
    /// `0`: never rotate.
    pub max_file_bytes: u64,
    /// How much of the newest durable output stays in the kernel's page
    /// cache: once fsynced, older pages of the file are dropped
    /// (`posix_fadvise(DONTNEED)`), so that gigabytes of output do not push
    /// out what the machine reads. `0`: keep everything (the kernel decides).
    /// Default [`DEFAULT_PAGE_CACHE_BYTES`]. Only for output written
    /// through the page cache (not with [`direct_io`](Self::direct_io)).
    pub page_cache_bytes: u64,
    /// Write past the page cache (`O_DIRECT`, Linux) where the filesystem
    /// allows it, falling back to the page cache where it does not. Saves
    /// the kernel's copy of every byte; readers that follow the files then
    /// read them from the device. Default `true`.
    pub direct_io: bool,
}

impl FileSinkOptions {
    /// Files at `path`, never rotated, with the default page cache window.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileSinkOptions {
            path: path.into(),
            max_file_bytes: 0,
            page_cache_bytes: DEFAULT_PAGE_CACHE_BYTES,
            direct_io: true,
        }
    }
}

/// JSON lines appended to numbered files, rotated by size.
///
/// * Lines are never split across files and never lost on rotation: the
///   full file is fsynced before the next one is created (and the directory
///   fsynced after).
/// * Lines are collected in memory and written in chunks of about 1 MiB (and
///   at every flush, rotation and close), each write and fsync on tokio's
///   blocking pool: one hand-off per chunk, not one per batch.
/// * With [`direct_io`](FileSinkOptions::direct_io), the chunks are whole
///   4 KiB blocks written past the page cache; a flush appends the partial
///   last block through it.
/// * [`flush`](Sink::flush) writes what is collected and fsyncs the current
///   file; lines written but not flushed may not be in the file yet, or only
///   in part (the file may end mid-line until the next flush).
/// * Opening again continues the highest-numbered file, appending. A
///   trailing partial line (a write torn by a crash, never flushed) is cut
///   off first, so every file holds whole lines only.
/// * Fsynced output beyond the newest
///   [`page_cache_bytes`](FileSinkOptions::page_cache_bytes) is dropped from
///   the page cache; the files themselves are untouched.
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
    /// The current file's direct handle (`None` without direct I/O, or
    /// while a write is on the blocking pool).
    direct: Option<Direct>,
    direct_io: bool,
    size: u64,
    out: Output,
    line: Vec<u8>,
    cache: CacheWindow,
}

impl FileSink {
    /// Opens (or continues) the files at `options.path`.
    pub async fn open(options: FileSinkOptions, encoder: JsonEncoder) -> Result<Self, SinkError> {
        let direct_io = options.direct_io;
        let (seq, path, file, size, direct, out) =
            open_latest_blocking(&options.path, direct_io, "opening").await?;
        Ok(FileSink {
            base: options.path,
            max_bytes: options.max_file_bytes,
            encoder: Arc::new(encoder),
            seq,
            path,
            file: Some(file),
            direct,
            direct_io,
            size,
            out,
            line: Vec::new(),
            cache: CacheWindow::new(options.page_cache_bytes),
        })
    }

    /// Whether the current file is written past the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
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
        if self.out.is_empty() && !sync {
            return Ok(());
        }
        let mut file = self.file.take().ok_or(SinkError::Closed)?;
        let mut out = std::mem::take(&mut self.out);
        let mut direct = self.direct.take();
        // Every line counted in `size` is in `out` or in the file already.
        let evict = if sync && direct.is_none() {
            self.cache.after_sync(self.size)
        } else {
            None
        };
        let path = self.path.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let result = write_out(&mut file, &mut direct, &mut out, sync, &path);
            let result = result.and_then(|()| {
                if sync {
                    file.sync_data().map_err(|e| ("fsyncing", e))?;
                    if let Some(e) = evict {
                        e.apply(&file);
                    }
                }
                Ok(())
            });
            (file, direct, out, result)
        })
        .await;
        let (file, direct, out, result) = joined
            .map_err(|e| SinkError::io("writing", Some(self.path.clone()), io::Error::other(e)))?;
        self.file = Some(file);
        self.direct = direct;
        self.out = out;
        result.map_err(|(what, e)| SinkError::io(what, Some(self.path.clone()), e))?;
        if let Some(e) = evict {
            self.cache.dropped(e);
        }
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
        // The full file is durable: it may leave the page cache entirely.
        // (A duplicate handle: the old file stays current until the new one exists.)
        let old = self.cache.whole_file(self.size).and_then(|d| {
            let f = self.file.as_ref()?.try_clone().ok()?;
            Some((f, d))
        });
        let direct_io = self.direct_io;
        let mut out = std::mem::take(&mut self.out);
        let (file, direct, out) = tokio::task::spawn_blocking(move || {
            if let Some((old, d)) = old {
                d.apply(&old);
            }
            let file = create_synced(&p)?;
            out.clear();
            let direct = open_direct(&p, 0, direct_io, &mut out)?;
            Ok::<_, SinkError>((file, direct, out))
        })
        .await
        .map_err(|e| SinkError::io("creating", Some(path.clone()), io::Error::other(e)))??;
        self.file = Some(file);
        self.direct = direct;
        self.out = out;
        self.seq = seq;
        self.path = path;
        self.size = 0;
        self.cache.new_file();
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
                let start = self.out.len();
                lines.encode_line(ev, self.out.vec());
                self.size += (self.out.len() - start) as u64;
            } else {
                self.line.clear();
                lines.encode_line(ev, &mut self.line);
                let len = self.line.len() as u64;
                if self.size > 0 && self.size + len > self.max_bytes {
                    self.rotate().await?;
                }
                self.out.vec().extend_from_slice(&self.line);
                self.size += len;
            }
            if self.out.len() >= WRITE_CHUNK {
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
            self.direct = None;
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
        self.out.clear();
        self.file = None;
        self.direct = None;
        let (seq, path, file, size, direct, out) =
            open_latest_blocking(&self.base, self.direct_io, "reopening").await?;
        self.seq = seq;
        self.path = path;
        self.file = Some(file);
        self.direct = direct;
        self.out = out;
        self.size = size;
        self.cache.new_file();
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

/// The file a sink opened: `(seq, path, appending handle, length, direct
/// handle, the output buffer holding its partial last block if direct)`.
type Opened = (u32, PathBuf, fs::File, u64, Option<Direct>, Output);

/// [`open_latest`] on the blocking pool.
async fn open_latest_blocking(
    base: &Path,
    direct_io: bool,
    what: &'static str,
) -> Result<Opened, SinkError> {
    let owned = base.to_path_buf();
    tokio::task::spawn_blocking(move || open_latest(&owned, direct_io))
        .await
        .map_err(|e| SinkError::io(what, Some(base.to_path_buf()), io::Error::other(e)))?
}

fn open_latest(base: &Path, direct_io: bool) -> Result<Opened, SinkError> {
    let err = |what, e| SinkError::io(what, Some(base.to_path_buf()), e);
    fs::create_dir_all(parent_dir(base)).map_err(|e| err("creating directory", e))?;
    let latest = numbered_files(base).map_err(|e| err("listing", e))?.pop();
    let mut out = Output::default();
    let Some((seq, path)) = latest else {
        let path = numbered(base, 1);
        let file = create_synced(&path)?;
        let direct = open_direct(&path, 0, direct_io, &mut out)?;
        return Ok((1, path, file, 0, direct, out));
    };
    let mut file = fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(&path)
        .map_err(|e| SinkError::io("opening", Some(path.clone()), e))?;
    let size = cut_partial_line(&mut file)
        .map_err(|e| SinkError::io("repairing", Some(path.clone()), e))?;
    let direct = open_direct(&path, size, direct_io, &mut out)?;
    Ok((seq, path, file, size, direct, out))
}

/// The direct handle of `path` (`len` bytes long), with its partial last
/// block put into `out`; `None` without `direct_io` or where the filesystem
/// has no direct I/O (logged).
fn open_direct(
    path: &Path,
    len: u64,
    direct_io: bool,
    out: &mut Output,
) -> Result<Option<Direct>, SinkError> {
    if !direct_io {
        return Ok(None);
    }
    let direct =
        Direct::open(path, len, out).map_err(|e| SinkError::io("opening", Some(path.into()), e))?;
    if direct.is_none() {
        tracing::info!(
            path = %path.display(),
            "the filesystem has no direct I/O; the file sink writes through the page cache"
        );
    }
    Ok(direct)
}

/// Writes `out` (see [`FileSink::write_buf`]): whole blocks directly and,
/// with `sync`, the rest through `file`; or all of it through `file`
/// without a direct handle. What went to the file leaves `out`, except a
/// partial last block written through `file`, which stays for the next
/// direct write.
fn write_out(
    file: &mut fs::File,
    direct: &mut Option<Direct>,
    out: &mut Output,
    sync: bool,
    path: &Path,
) -> Result<(), (&'static str, io::Error)> {
    let mut skip = 0;
    if let Some(d) = direct {
        let written = d.write_blocks(out).and_then(|()| {
            if sync {
                d.write_tail(file, out)
            } else {
                Ok(())
            }
        });
        match written {
            Ok(()) => return Ok(()),
            Err(Refused::Failed(what, e)) => {
                // As through the page cache: the file keeps its whole lines only (whole
                // blocks written before may end mid-line), what was not written is
                // dropped (the reset replays it), and the file goes on through the page
                // cache until the reset opens it again.
                cut_torn_line(path, file);
                *direct = None;
                out.clear();
                return Err((what, e));
            }
            Err(Refused::Unsupported { skip: s }) => {
                tracing::info!(
                    path = %path.display(),
                    "the filesystem refuses direct writes; the file sink writes through the page cache"
                );
                *direct = None;
                skip = s;
            }
        }
    }
    let buf = out.data().get(skip..).unwrap_or_default();
    if !buf.is_empty() {
        let before = file.metadata().map(|m| m.len());
        let written = file.write_all(buf).map_err(|e| ("writing", e));
        if written.is_err() {
            if let Ok(before) = before {
                cut_failed_write(file, before, buf);
            }
        }
        written?;
    }
    out.clear();
    Ok(())
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

/// After a failed direct write: cuts the line `file` (at `path`) may end in,
/// so that readers never see a partial line while the sink retries. Best
/// effort, as [`cut_failed_write`]: a reset or the next open cuts it anyway.
fn cut_torn_line(path: &Path, file: &fs::File) {
    let Ok(mut reader) = fs::File::open(path) else {
        return;
    };
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return;
    };
    if let Ok(keep) = last_line_end(&mut reader, len) {
        if keep < len {
            let _ = file.set_len(keep);
        }
    }
}

/// Truncates `file` after its last `\n` and returns the new length.
fn cut_partial_line(file: &mut fs::File) -> io::Result<u64> {
    let len = file.metadata()?.len();
    let keep = last_line_end(file, len)?;
    if keep != len {
        file.set_len(keep)?;
        file.sync_data()?;
    }
    Ok(keep)
}

/// The offset just after the last `\n` in the first `len` bytes of `file`
/// (0 without one).
fn last_line_end(file: &mut fs::File, len: u64) -> io::Result<u64> {
    let mut end = len;
    let mut chunk = [0u8; 8192];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let n = usize::try_from(end - start).unwrap_or(chunk.len());
        let part = chunk.get_mut(..n).unwrap_or_default();
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(part)?;
        if let Some(pos) = part.iter().rposition(|&b| b == b'\n') {
            return Ok(start + pos as u64 + 1);
        }
        end = start;
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
mod tests;
