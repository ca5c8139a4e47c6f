//! Spill files: held transactions (streamed ones in progress, and prepared
//! ones waiting for COMMIT PREPARED) that outgrow `pipeline.byte_budget`
//! move from memory to a temporary file and are read back at Stream Commit
//! or Commit Prepared.
//!
//! The encoding, the bookkeeping of subtransaction aborts and the replay are
//! cdc-core's ([`cdc_core::spill`]); this module only stores bytes. After
//! every message the pipeline calls [`Spiller::after_message`] (when
//! [`Spiller::has_work`] says there is any): while the
//! assembler holds more than the budget it spills the largest transaction
//! still in memory, then appends whatever spill output is pending. At Stream
//! Commit (or Commit Prepared) [`Spiller::reader`] streams the file back one
//! record at a time.
//!
//! Files live in `pipeline.spill_dir` (default: the system temporary
//! directory) and are named `pgcdc-spill-<slot>-<xid>-<n>.spill`. A file is
//! removed when its transaction is replayed or aborted, when the pipeline
//! reconnects or stops (on drop), and at startup for leftovers of the same
//! slot from a process that died. Each file stays open from creation to
//! replay, so a file unlinked by another process under the same name does
//! not break this one (on Unix). A reconnect keeps the files of prepared
//! transactions the assembler still holds ([`Spiller::retain`]).

use std::collections::HashMap;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};

use cdc_core::spill::{frame_len, SpillOp, SpillRecordError, FRAME_HEADER_LEN};
use cdc_core::{TxnAssembler, Xid};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufReader, BufWriter};

/// Buffer size for writing and reading spill files.
const IO_BUFFER: usize = 256 * 1024;

/// A spill file could not be written or read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpillError {
    /// Creating, writing, reading or seeking a spill file failed.
    #[error("spill file {}: {source} (pipeline.spill_dir needs room for streamed transactions larger than pipeline.byte_budget)", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A spill file ended in the middle of a record.
    #[error("spill file {} ends inside a record", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
    },
    /// A record read back is not what was written.
    #[error("spill file {}: {source}", path.display())]
    Record {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: SpillRecordError,
    },
    /// Spill output for a transaction without a file (a bug).
    #[error("spill output for transaction {xid}, which has no spill file")]
    NoFile {
        /// The transaction.
        xid: Xid,
    },
}

impl SpillError {
    /// Whether the spill directory's file system is full (`ENOSPC`) or its
    /// quota exhausted (`EDQUOT`): space may come back, so the pipeline
    /// reconnects with backoff (the server sends the transaction again and
    /// spill files are cut at each reconnect) instead of stopping.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, SpillError::Io { source, .. } if crate::disk_full::is_disk_full(source))
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> SpillError + '_ {
    move |source| SpillError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The file name prefix of one slot's spill files. Slot names are lower-case
/// letters, digits and underscores; anything else is escaped so that the
/// prefix of one slot is never the prefix of another's.
fn file_prefix(slot: &str) -> String {
    let mut prefix = String::from("pgcdc-spill-");
    for c in slot.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            prefix.push(c);
        } else {
            for b in c.to_string().bytes() {
                prefix.push_str(&format!("%{b:02x}"));
            }
        }
    }
    prefix.push('-');
    prefix
}

const SUFFIX: &str = ".spill";

/// Removes `path`, logging (not failing) if that does not work.
fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::debug!(path = %path.display(), "removed spill file"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot remove spill file"),
    }
}

/// A path removed on drop.
#[derive(Debug)]
struct Removal(PathBuf);

impl Drop for Removal {
    fn drop(&mut self) {
        remove(&self.0);
    }
}

/// One spilled transaction's file, open for appending; removed on drop.
#[derive(Debug)]
struct SpillFile {
    // Declared before `path`: closed before it is removed.
    writer: BufWriter<tokio::fs::File>,
    path: Removal,
    bytes: u64,
}

/// The spill files of one pipeline.
#[derive(Debug)]
pub(crate) struct Spiller {
    dir: PathBuf,
    prefix: String,
    budget: usize,
    files: HashMap<Xid, SpillFile>,
    buf: Vec<u8>,
    created: u64,
    /// Counts spilled bytes, when monitored.
    pub(crate) spilled: Option<prometheus_client::metrics::counter::Counter>,
}

impl Spiller {
    /// Spill files of `slot` in `dir`, spilling past `budget` bytes. Removes
    /// leftover files of the same slot (best effort: failures are logged).
    pub(crate) fn new(dir: PathBuf, slot: &str, budget: usize) -> Self {
        let prefix = file_prefix(slot);
        match std::fs::read_dir(&dir) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let name = entry.file_name();
                    let Some(name) = name.to_str() else { continue };
                    if name.starts_with(&prefix) && name.ends_with(SUFFIX) {
                        tracing::info!(path = %entry.path().display(), "removing a leftover spill file");
                        remove(&entry.path());
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot list the spill directory")
            }
        }
        Spiller {
            dir,
            prefix,
            budget,
            files: HashMap::new(),
            buf: Vec::new(),
            created: 0,
            spilled: None,
        }
    }

    /// Spilled transactions whose file is open.
    #[cfg(test)]
    fn open_files(&self) -> usize {
        self.files.len()
    }

    /// Whether [`after_message`](Self::after_message) has work: a held
    /// transaction to spill or spill output to write (or a spill buffer to
    /// shrink). Tested after each message without building that call's
    /// future, which costs more than the test.
    #[inline]
    pub(crate) fn has_work(&self, assembler: &TxnAssembler) -> bool {
        assembler.spill_pending()
            || self.buf.capacity() > IO_BUFFER
            || assembler.buffered_bytes() > self.budget
    }

    /// After each message: spills the largest in-memory streamed
    /// transactions while the assembler holds more than the budget, then
    /// writes all pending spill output and deletes the files of aborted
    /// transactions.
    pub(crate) async fn after_message(
        &mut self,
        assembler: &mut TxnAssembler,
    ) -> Result<(), SpillError> {
        while assembler.buffered_bytes() > self.budget {
            let Some((xid, bytes)) = assembler.largest_unspilled() else {
                break;
            };
            let file = self.create(xid).await?;
            tracing::info!(xid, bytes, budget = self.budget, path = %file.path.0.display(),
                "held (streamed or prepared) transaction over pipeline.byte_budget; spilling it to disk");
            self.files.insert(xid, file);
            assembler.spill(xid);
            self.write_pending(assembler).await?;
        }
        self.write_pending(assembler).await
    }

    async fn create(&mut self, xid: Xid) -> Result<SpillFile, SpillError> {
        tokio::fs::create_dir_all(&self.dir)
            .await
            .map_err(io_error(&self.dir))?;
        self.created += 1;
        let path = self
            .dir
            .join(format!("{}{xid}-{}{SUFFIX}", self.prefix, self.created));
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await
            .map_err(io_error(&path))?;
        Ok(SpillFile {
            writer: BufWriter::with_capacity(IO_BUFFER, file),
            path: Removal(path),
            bytes: 0,
        })
    }

    async fn write_pending(&mut self, assembler: &mut TxnAssembler) -> Result<(), SpillError> {
        while let Some(op) = assembler.poll_spill(&mut self.buf) {
            match op {
                SpillOp::Append { xid } => {
                    let file = self.files.get_mut(&xid).ok_or(SpillError::NoFile { xid })?;
                    file.writer
                        .write_all(&self.buf)
                        .await
                        .map_err(io_error(&file.path.0))?;
                    file.bytes += self.buf.len() as u64;
                    if let Some(c) = &self.spilled {
                        c.inc_by(self.buf.len() as u64);
                    }
                }
                SpillOp::Discard { xid } => {
                    if let Some(file) = self.files.remove(&xid) {
                        tracing::debug!(xid, bytes = file.bytes, "spilled transaction aborted");
                    }
                }
            }
            self.buf.clear();
        }
        // Keep the buffer small between messages (it grows to a backlog
        // chunk while a transaction is first spilled).
        if self.buf.capacity() > IO_BUFFER {
            self.buf = Vec::new();
        }
        Ok(())
    }

    /// The file of spilled transaction `xid`, complete, from its start.
    /// The file is removed when the reader is dropped.
    pub(crate) async fn reader(&mut self, xid: Xid) -> Result<SpillReader, SpillError> {
        let SpillFile {
            mut writer,
            path,
            bytes,
        } = self.files.remove(&xid).ok_or(SpillError::NoFile { xid })?;
        writer.flush().await.map_err(io_error(&path.0))?;
        let mut file = writer.into_inner();
        file.seek(SeekFrom::Start(0))
            .await
            .map_err(io_error(&path.0))?;
        tracing::debug!(xid, bytes, "replaying a spilled transaction");
        Ok(SpillReader {
            reader: BufReader::with_capacity(IO_BUFFER, file),
            path,
            body: Vec::new(),
        })
    }

    /// The assembler was reset: deletes every spill file except those of
    /// the transactions `keep` names (prepared ones it still holds).
    pub(crate) fn retain(&mut self, keep: impl Fn(Xid) -> bool) {
        self.files.retain(|&xid, _| keep(xid));
    }
}

/// Reads a spill file back one record at a time; removes it on drop.
#[derive(Debug)]
pub(crate) struct SpillReader {
    // Declared before `path`: closed before it is removed.
    reader: BufReader<tokio::fs::File>,
    path: Removal,
    body: Vec<u8>,
}

impl SpillReader {
    /// The next record's body, or `None` at the end of the file.
    pub(crate) async fn next(&mut self) -> Result<Option<&[u8]>, SpillError> {
        let mut header = [0u8; FRAME_HEADER_LEN];
        let mut got = 0;
        while got < FRAME_HEADER_LEN {
            let n = self
                .reader
                .read(&mut header[got..])
                .await
                .map_err(io_error(&self.path.0))?;
            if n == 0 {
                if got == 0 {
                    return Ok(None);
                }
                return Err(SpillError::Truncated {
                    path: self.path.0.clone(),
                });
            }
            got += n;
        }
        let len = frame_len(header).map_err(|e| self.corrupt(e))?;
        self.body.clear();
        self.body.resize(len, 0);
        match self.reader.read_exact(&mut self.body).await {
            Ok(_) => Ok(Some(&self.body)),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(SpillError::Truncated {
                path: self.path.0.clone(),
            }),
            Err(e) => Err(io_error(&self.path.0)(e)),
        }
    }

    /// `source` as an error about this file.
    pub(crate) fn corrupt(&self, source: SpillRecordError) -> SpillError {
        SpillError::Record {
            path: self.path.0.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests;
