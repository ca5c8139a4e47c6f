//! [`OutputBuffer`]: the decoder's one zeroed allocation of the message length, handed out
//! as [`Bytes`] without a copy.
//!
//! A fresh buffer of hundreds of MiB costs more to fault in than to fill: with 4 KiB pages
//! the kernel takes one page fault per page (65,536 for 256 MiB) on the first write. So on
//! Linux a buffer of at least [`MAPPED_MIN`] bytes is an anonymous mapping whose pages the
//! decoder asks the kernel to populate ([`OutputBuffer::prefault`], `MADV_POPULATE_WRITE`)
//! up to a MiB ahead of the block it writes next: the kernel then allocates and zeroes them
//! in one call instead of one trap per page. Decoding 256 MiB of incompressible state took
//! about 120 ms of CPU instead of 170 ms on the machine we measured, and the pages are
//! populated just before they are written, so they are still in cache. Kernels before 5.14
//! refuse the advice; the buffer then works as an ordinary one, page fault by page fault.
//! Smaller buffers, other systems and a refused mapping use a zeroed `Vec`. The mapping
//! comes from `memmap2`, whose safe API holds the only `unsafe` (this crate forbids its
//! own); no file is involved.
//!
//! Transparent huge pages (`MADV_HUGEPAGE`) take 512 times fewer faults, but on the virtual
//! machine we measure on they made loads of 256 MiB about twice as expensive: fresh 2 MiB
//! pages come from memory the guest had handed back to the host (free page reporting), and
//! zeroing them faults on the host.

use bytes::Bytes;

/// Smallest buffer that is mapped and populated ahead (below it, faults cost little).
#[cfg(target_os = "linux")]
pub(super) const MAPPED_MIN: usize = 4 << 20;

/// How far ahead of the write position pages are populated, in one call each.
#[cfg(target_os = "linux")]
const PREFAULT_STEP: usize = 1 << 20;

/// A zeroed, writable buffer of a fixed length.
pub(super) struct OutputBuffer {
    inner: Inner,
}

enum Inner {
    Heap(Vec<u8>),
    #[cfg(target_os = "linux")]
    Mapped {
        map: memmap2::MmapMut,
        /// Pages below this offset have been populated (or population was refused).
        populated: usize,
        /// False once the kernel refused to populate: ordinary page faults from then on.
        populate: bool,
    },
}

impl std::fmt::Debug for OutputBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.inner {
            Inner::Heap(_) => "heap",
            #[cfg(target_os = "linux")]
            Inner::Mapped { .. } => "mapped",
        };
        f.debug_struct("OutputBuffer")
            .field("kind", &kind)
            .field("len", &self.len())
            .finish()
    }
}

impl OutputBuffer {
    /// An empty buffer (allocates nothing).
    pub(super) fn empty() -> Self {
        OutputBuffer {
            inner: Inner::Heap(Vec::new()),
        }
    }

    /// `len` zero bytes.
    pub(super) fn zeroed(len: usize) -> Self {
        #[cfg(target_os = "linux")]
        if len >= MAPPED_MIN {
            if let Ok(map) = memmap2::MmapOptions::new().len(len).map_anon() {
                return OutputBuffer {
                    inner: Inner::Mapped {
                        map,
                        populated: 0,
                        populate: true,
                    },
                };
            }
        }
        OutputBuffer {
            inner: Inner::Heap(vec![0; len]),
        }
    }

    /// Whether the buffer is an anonymous mapping (for tests).
    #[cfg(test)]
    pub(super) fn is_mapped(&self) -> bool {
        !matches!(self.inner, Inner::Heap(_))
    }

    pub(super) fn len(&self) -> usize {
        match &self.inner {
            Inner::Heap(v) => v.len(),
            #[cfg(target_os = "linux")]
            Inner::Mapped { map, .. } => map.len(),
        }
    }

    /// About to write up to offset `end`: populates the pages up to it, and a few MiB
    /// beyond, that are not populated yet. Only a hint; the bytes are the same either way.
    pub(super) fn prefault(&mut self, end: usize) {
        #[cfg(target_os = "linux")]
        if let Inner::Mapped {
            map,
            populated,
            populate,
        } = &mut self.inner
        {
            if !*populate || end <= *populated {
                return;
            }
            let to = end.saturating_add(PREFAULT_STEP).min(map.len());
            let from = *populated;
            *populated = to;
            if map
                .advise_range(memmap2::Advice::PopulateWrite, from, to - from)
                .is_err()
            {
                *populate = false;
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = end;
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.inner {
            Inner::Heap(v) => v,
            #[cfg(target_os = "linux")]
            Inner::Mapped { map, .. } => map,
        }
    }

    /// The bytes, without a copy; dropping the last slice of them frees the buffer.
    pub(super) fn into_bytes(self) -> Bytes {
        match self.inner {
            Inner::Heap(v) => Bytes::from(v),
            #[cfg(target_os = "linux")]
            Inner::Mapped { map, .. } => Bytes::from_owner(map),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_buffers_are_zeroed_heap_buffers() {
        let mut b = OutputBuffer::zeroed(1000);
        assert!(!b.is_mapped());
        assert_eq!(b.len(), 1000);
        b.prefault(1000);
        assert!(b.as_mut_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[999] = 7;
        let bytes = b.into_bytes();
        assert_eq!(bytes.len(), 1000);
        assert_eq!(bytes[999], 7);
    }

    #[test]
    fn empty_buffer() {
        let mut b = OutputBuffer::empty();
        assert_eq!(b.len(), 0);
        assert!(b.as_mut_slice().is_empty());
        assert!(b.into_bytes().is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn big_buffers_are_zeroed_mappings_of_exactly_their_length() {
        let len = MAPPED_MIN + PREFAULT_STEP + 12_345;
        let mut b = OutputBuffer::zeroed(len);
        assert!(b.is_mapped());
        assert_eq!(b.len(), len);
        // Out of order, repeated, past the end: hints only.
        b.prefault(len);
        b.prefault(10);
        b.prefault(len + 1);
        let s = b.as_mut_slice();
        assert_eq!(s.len(), len);
        assert!(s.iter().all(|&x| x == 0));
        s[0] = 1;
        s[len - 1] = 2;
        let bytes = b.into_bytes();
        assert_eq!(bytes.len(), len);
        assert_eq!((bytes[0], bytes[len - 1]), (1, 2));
        // Slices keep the mapping alive after the buffer is gone.
        let tail = bytes.slice(len - 1..);
        drop(bytes);
        assert_eq!(&tail[..], &[2]);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn prefault_in_steps_covers_the_buffer() {
        let len = 3 * PREFAULT_STEP + 1;
        let mut b = OutputBuffer::zeroed(len);
        let mut at = 0;
        while at < len {
            let end = (at + (256 << 10)).min(len);
            b.prefault(end);
            b.as_mut_slice()[at..end].fill(0xAB);
            at = end;
        }
        assert!(b.into_bytes().iter().all(|&x| x == 0xAB));
    }
}
