//! How much of a file's output stays in the kernel's page cache.
//!
//! The file sink never reads its output back, and a job can write gigabytes
//! an hour: left alone, those pages fill the page cache and push out what
//! the machine does read (PostgreSQL's own cache, if it runs there). Once a
//! stretch of the file is durable (fsynced), its pages are clean and can be
//! dropped at no risk; [`CacheWindow`] drops all but the newest `window`
//! bytes, so readers that tail the file still find it in memory. Measured on
//! a virtual machine whose host takes back the guest's freed memory,
//! writing 3 GB with an fdatasync every 16 MiB cost 10.5 s of system CPU
//! when every page stayed cached (each new page cache page was a fresh page
//! of guest memory) and 1.1 s with a 64 MiB window (the pages are reused).

use std::fs::File;

/// The part of a file to drop from the page cache after an fsync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Evict {
    offset: u64,
    len: u64,
}

impl Evict {
    /// Asks the kernel to drop the range's pages (`POSIX_FADV_DONTNEED`).
    /// Only advice: where it fails or the platform has none, the pages stay.
    pub(super) fn apply(self, file: &File) {
        #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
        {
            if let Some(len) = std::num::NonZeroU64::new(self.len) {
                let _ =
                    rustix::fs::fadvise(file, self.offset, Some(len), rustix::fs::Advice::DontNeed);
            }
        }
        #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
        let _ = file;
    }
}

/// Keeps the newest `window` bytes of one file's durable output cached.
#[derive(Debug, Clone, Copy)]
pub(super) struct CacheWindow {
    /// `0`: keep everything (the kernel decides).
    window: u64,
    /// Everything below this offset was dropped.
    dropped: u64,
}

impl CacheWindow {
    pub(super) fn new(window: u64) -> Self {
        CacheWindow { window, dropped: 0 }
    }

    /// The same window for another file (or the file opened again).
    pub(super) fn new_file(&mut self) {
        self.dropped = 0;
    }

    /// What to drop once the file's first `durable` bytes are fsynced: all
    /// but the newest `window`, in steps of at least `window` so that a
    /// flush per transaction does not make a system call per transaction.
    pub(super) fn after_sync(&self, durable: u64) -> Option<Evict> {
        if self.window == 0 {
            return None;
        }
        let upto = durable.saturating_sub(self.window);
        (upto >= self.dropped.saturating_add(self.window)).then_some(Evict {
            offset: self.dropped,
            len: upto - self.dropped,
        })
    }

    /// Records that `evict` was applied.
    pub(super) fn dropped(&mut self, evict: Evict) {
        self.dropped = self.dropped.max(evict.offset + evict.len);
    }

    /// A file that is complete (rotated away from): all of it may go.
    pub(super) fn whole_file(&self, len: u64) -> Option<Evict> {
        (self.window != 0 && len > self.dropped).then_some(Evict {
            offset: self.dropped,
            len: len - self.dropped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_all_but_the_window_in_window_sized_steps() {
        let mut w = CacheWindow::new(100);
        assert_eq!(w.after_sync(150), None, "under two windows: nothing yet");
        let d = w.after_sync(200).unwrap();
        assert_eq!(
            d,
            Evict {
                offset: 0,
                len: 100
            }
        );
        w.dropped(d);
        assert_eq!(w.after_sync(250), None);
        let d = w.after_sync(330).unwrap();
        assert_eq!(
            d,
            Evict {
                offset: 100,
                len: 130
            }
        );
        w.dropped(d);
        assert_eq!(
            w.whole_file(400),
            Some(Evict {
                offset: 230,
                len: 170
            })
        );
    }

    #[test]
    fn a_zero_window_keeps_everything() {
        let w = CacheWindow::new(0);
        assert_eq!(w.after_sync(u64::MAX), None);
        assert_eq!(w.whole_file(1 << 40), None);
    }

    #[test]
    fn dropping_leaves_the_file_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| i as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = File::open(&path).unwrap();
        file.sync_all().unwrap();
        Evict {
            offset: 0,
            len: data.len() as u64,
        }
        .apply(&file);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }
}
