//! [`is_disk_full`]: the IO errors that mean "no space left", which the
//! spill files and the file sink retry with backoff instead of stopping,
//! since space may be freed.

/// `ENOSPC` or `EDQUOT` (Linux error numbers 28 and 122).
pub(crate) fn is_disk_full(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull || matches!(e.raw_os_error(), Some(28 | 122))
}
