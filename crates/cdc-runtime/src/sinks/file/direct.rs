//! Direct I/O: the file sink's whole blocks go from its buffer to the device
//! (`O_DIRECT`), past the kernel's page cache.
//!
//! A buffered `write` copies every byte into page cache pages, which the
//! following fsync writes back and [`CacheWindow`](super::page_cache) later
//! drops again; for output that is written once and never read back by the
//! sink, that copy is most of the sink's system time. Measured on this
//! project's 2-core virtual machine (ext4 on virtio), writing 1.3 GB in 1 MiB
//! writes with an fdatasync every 16 MiB took 0.36–0.37 s of system CPU
//! through the page cache (with the 64 MiB window) and 0.07–0.08 s direct,
//! and less wall time too (1.15 s against 1.73–1.85 s).
//!
//! Direct writes need the buffer's address, the length and the file offset to
//! be multiples of the device's block size ([`BLOCK`] covers every common
//! one). So the sink writes only whole blocks directly; the last, partial
//! block of a flush goes through the page cache (an ordinary append, at most
//! [`BLOCK`] − 1 bytes) and stays in the buffer, to be written again as part
//! of a whole block once the lines after it arrive. The file never holds
//! padding: every byte in it is output, in order.
//!
//! Where the filesystem refuses `O_DIRECT` (at open, or with `EINVAL` on the
//! first write), the sink writes through the page cache, as with
//! `direct_io = false`.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// The alignment of direct writes: address, length and offset.
pub(super) const BLOCK: usize = 4096;

/// The lines collected for the file. The data starts at a [`BLOCK`]-aligned
/// address once [`align`](Self::align) ran (and stays there while the vector
/// keeps its allocation); before it lie `start` filler bytes.
#[derive(Debug, Default)]
pub(super) struct Output {
    bytes: Vec<u8>,
    start: usize,
}

impl Output {
    /// The vector lines are appended to (append only: the data is everything
    /// after the first `start` bytes).
    pub(super) fn vec(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    pub(super) fn data(&self) -> &[u8] {
        self.bytes.get(self.start..).unwrap_or_default()
    }

    pub(super) fn len(&self) -> usize {
        self.bytes.len().saturating_sub(self.start)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn clear(&mut self) {
        self.bytes.truncate(self.start);
    }

    /// Drops the first `n` bytes of the data; the rest moves to the front.
    pub(super) fn consume(&mut self, n: usize) {
        let n = n.min(self.len());
        let end = self.bytes.len();
        self.bytes.copy_within(self.start + n..end, self.start);
        self.bytes.truncate(end - n);
    }

    fn is_aligned(&self) -> bool {
        (self.bytes.as_ptr().addr() + self.start) % BLOCK == 0
    }

    /// Moves the data to a [`BLOCK`]-aligned address (a no-op unless the
    /// vector was (re)allocated since).
    pub(super) fn align(&mut self) {
        if self.is_aligned() {
            return;
        }
        let len = self.len();
        // Room for any shift below without another allocation.
        self.bytes.reserve(BLOCK);
        let want = (BLOCK - self.bytes.as_ptr().addr() % BLOCK) % BLOCK;
        if want > self.start {
            self.bytes.resize(want + len, 0);
            self.bytes.copy_within(self.start..self.start + len, want);
        } else {
            self.bytes.copy_within(self.start..self.start + len, want);
            self.bytes.truncate(want + len);
        }
        self.start = want;
    }
}

/// A file written directly: its whole blocks through `file` (`O_DIRECT`),
/// the partial last block of a flush through the sink's ordinary handle.
#[derive(Debug)]
pub(super) struct Direct {
    file: File,
    /// The file offset of the [`Output`]'s first byte: a multiple of [`BLOCK`].
    base: u64,
    /// The file's length: what is below it is in the file (the bytes from
    /// `base` up to it are also still in the [`Output`]).
    on_disk: u64,
    /// A direct write succeeded: an `EINVAL` now is an error, not a
    /// filesystem without direct I/O.
    proven: bool,
}

/// What a direct write left to the caller.
#[derive(Debug)]
pub(super) enum Refused {
    /// The filesystem refuses direct I/O: the file is as before the write;
    /// write the [`Output`] from `skip` on through the page cache.
    Unsupported { skip: usize },
    /// The write failed.
    Failed(&'static str, io::Error),
}

impl Direct {
    /// Opens `path` (whose first `len` bytes are the output so far) for
    /// direct writes, and puts its partial last block into `out`; `None`
    /// where the platform or filesystem has no direct I/O.
    pub(super) fn open(path: &Path, len: u64, out: &mut Output) -> io::Result<Option<Direct>> {
        let Some(file) = open_direct(path) else {
            return Ok(None);
        };
        let base = len - len % BLOCK as u64;
        out.clear();
        if len > base {
            let tail = usize::try_from(len - base).unwrap_or(BLOCK);
            let reader = File::open(path)?;
            let at = out.vec().len();
            out.vec().resize(at + tail, 0);
            read_exact_at(&reader, &mut out.vec()[at..], base)?;
        }
        Ok(Some(Direct {
            file,
            base,
            on_disk: len,
            proven: false,
        }))
    }

    /// Writes `out`'s whole blocks at `base` and drops them from `out`.
    pub(super) fn write_blocks(&mut self, out: &mut Output) -> Result<(), Refused> {
        let whole = out.len() - out.len() % BLOCK;
        if whole == 0 {
            return Ok(());
        }
        out.align();
        let blocks = out.data().get(..whole).unwrap_or_default();
        match write_all_at(&self.file, blocks, self.base) {
            Ok(()) => {
                self.proven = true;
                self.base += whole as u64;
                self.on_disk = self.on_disk.max(self.base);
                out.consume(whole);
                Ok(())
            }
            Err(e) => {
                // Whatever part went in is cut, so the file ends where it
                // did: a retry, or the page cache, continues from there.
                let restored = self.restore();
                let skip = usize::try_from(self.on_disk.saturating_sub(self.base)).unwrap_or(0);
                if !self.proven && e.kind() == io::ErrorKind::InvalidInput && restored {
                    Err(Refused::Unsupported { skip })
                } else {
                    Err(Refused::Failed("writing", e))
                }
            }
        }
    }

    /// Appends the part of `out` not in the file yet through `file` (the
    /// sink's ordinary, appending handle, whose end is `on_disk`).
    pub(super) fn write_tail(&mut self, file: &mut File, out: &Output) -> Result<(), Refused> {
        let skip = usize::try_from(self.on_disk.saturating_sub(self.base)).unwrap_or(usize::MAX);
        let Some(tail) = out.data().get(skip..) else {
            return Ok(());
        };
        if tail.is_empty() {
            return Ok(());
        }
        match file.write_all(tail) {
            Ok(()) => {
                self.on_disk += tail.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.restore();
                Err(Refused::Failed("writing", e))
            }
        }
    }

    /// Makes the next direct write fail (an unaligned offset), for tests of
    /// the failure path.
    #[cfg(test)]
    pub(super) fn misalign(&mut self) {
        self.base += 1;
    }

    /// After a failed write: cuts the file back to `on_disk`. False when
    /// that did not work (the file may be longer).
    fn restore(&self) -> bool {
        match self.file.metadata() {
            Ok(m) if m.len() == self.on_disk => true,
            Ok(_) => self.file.set_len(self.on_disk).is_ok(),
            Err(_) => false,
        }
    }
}

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_: &Path) -> Option<File> {
    None
}

#[cfg(unix)]
fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn write_all_at(_: &File, _: &[u8], _: u64) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(not(unix))]
fn read_exact_at(_: &File, _: &mut [u8], _: u64) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_moves_the_data_to_a_block_boundary_and_keeps_it() {
        let mut out = Output::default();
        out.vec().extend_from_slice(b"hello\n");
        out.align();
        assert_eq!(out.data(), b"hello\n");
        assert!(out.is_aligned());
        // Growth may move the allocation; align restores it.
        out.vec().extend(std::iter::repeat_n(b'x', 3 * BLOCK));
        out.align();
        assert!(out.is_aligned());
        assert_eq!(out.len(), 6 + 3 * BLOCK);
        assert_eq!(out.data().get(..6), Some(&b"hello\n"[..]));
        out.consume(BLOCK);
        assert!(out.is_aligned());
        assert_eq!(out.len(), 6 + 2 * BLOCK);
        assert!(out.data().iter().all(|&b| b == b'x'));
        out.clear();
        assert!(out.is_empty() && out.is_aligned());
    }

    /// An `EINVAL` on the first direct write reads as a filesystem without
    /// direct I/O, with the file as it was; after a direct write succeeded,
    /// it is an error. (An unaligned offset makes the kernel say `EINVAL`.)
    #[test]
    fn einval_before_any_direct_write_is_a_fallback_and_after_one_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"").unwrap();
        let mut out = Output::default();
        let Some(mut d) = Direct::open(&path, 0, &mut out).unwrap() else {
            eprintln!("skipped: no direct I/O here");
            return;
        };
        out.vec().extend(std::iter::repeat_n(b'a', 2 * BLOCK + 10));
        d.base = 512 + 1;
        d.on_disk = d.base;
        std::fs::write(&path, vec![b'-'; 513]).unwrap();
        match d.write_blocks(&mut out) {
            Err(Refused::Unsupported { skip: 0 }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 513);
        assert_eq!(out.len(), 2 * BLOCK + 10, "nothing consumed");

        d.base = 0;
        d.on_disk = 0;
        std::fs::write(&path, b"").unwrap();
        d.write_blocks(&mut out).unwrap();
        assert_eq!(out.len(), 10);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        d.write_tail(&mut file, &out).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![b'a'; 2 * BLOCK + 10]);
        d.base = 1;
        out.vec().extend(std::iter::repeat_n(b'b', BLOCK));
        assert!(matches!(d.write_blocks(&mut out), Err(Refused::Failed(..))));
    }
}
