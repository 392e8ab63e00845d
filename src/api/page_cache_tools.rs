//! Page-cache tools (KvikIO's `get_page_cache_info`, `drop_file_page_cache`,
//! `drop_system_page_cache`) and whether a file takes direct I/O: by path, with the registered
//! page cache's pinned windows of a file dropped before its pages are (pinned pages cannot be
//! evicted). The system calls are `sys::page_cache`'s.

use crate::error::{Error, Result};
use crate::sys::page_cache as kernel;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub use crate::sys::page_cache::Residency;

/// `path` as a C string, or why it cannot be one.
fn c_path(path: &[u8]) -> Result<CString> {
    if path.is_empty() {
        return Err(Error::InvalidPath("empty path".into()));
    }
    CString::new(path).map_err(|_| Error::InvalidPath(format!("{:?} contains a NUL byte", String::from_utf8_lossy(path))))
}

/// The file at `path`, open read-only, with its size and (device, inode) (also the mapping
/// handle's open, `api::mapping`).
pub(super) fn open(path: &[u8]) -> Result<(OwnedFd, String, u64, (u64, u64))> {
    let c = c_path(path)?;
    let display = String::from_utf8_lossy(path).into_owned();
    // SAFETY: `c` is NUL-terminated.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Error::Open { path: display, flags: "r".into(), source: std::io::Error::last_os_error() });
    }
    // SAFETY: just opened, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let fstat_error = |source| Error::Io { op: "fstat", path: display.clone(), offset: 0, source };
    let st = crate::sys::fs::stat(fd.as_raw_fd()).map_err(fstat_error)?;
    // A block device's size is its ioctl's (its `st_size` is 0).
    let size = crate::sys::fs::size_of(fd.as_raw_fd(), &st).map_err(fstat_error)?;
    Ok((fd, display, size, (st.st_dev, st.st_ino)))
}

/// The part of `[offset, offset + len)` inside a file of `size` bytes (`len` 0: to its end).
fn clip(offset: u64, len: u64, size: u64) -> (u64, u64) {
    let end = if len == 0 { size } else { offset.saturating_add(len).min(size) };
    (offset.min(size), end.saturating_sub(offset.min(size)))
}

/// Resident and total pages of the part of `[offset, offset + len)` inside the file at `path`
/// (`len` 0: to the end of the file; a range past the end has none).
pub fn page_cache_info(path: &[u8], offset: u64, len: u64) -> Result<Residency> {
    let (fd, display, size, _) = open(path)?;
    let (offset, len) = clip(offset, len, size);
    kernel::residency(fd.as_raw_fd(), offset, len).map_err(|source| Error::Io { op: "cachestat/mincore", path: display, offset, source })
}

/// Drops `[offset, offset + len)` of the file at `path` (`len` 0: to its end) from the page cache,
/// after writing its dirty pages back if `sync_first` (without, dirty pages stay). The
/// registered page cache's windows of the file are dropped first, in every handle.
pub fn drop_file_page_cache(path: &[u8], offset: u64, len: u64, sync_first: bool) -> Result<()> {
    let (fd, display, _, file) = open(path)?;
    crate::page_cache::drop_windows_of(Some(file));
    kernel::drop_range(fd.as_raw_fd(), offset, len, sync_first).map_err(|source| Error::Io { op: "posix_fadvise(DONTNEED)", path: display, offset, source })
}

/// Drops the page cache of the whole system (root only: `IO_ERROR` with `EACCES` otherwise),
/// after every registered window of the process and a `sync`.
pub fn drop_system_page_cache() -> Result<()> {
    crate::page_cache::drop_windows_of(None);
    kernel::drop_system().map_err(|source| Error::Io { op: "write of /proc/sys/vm/drop_caches", path: "/proc/sys/vm/drop_caches".into(), offset: 0, source })
}

/// Whether the file at `path` can be opened with `O_DIRECT`.
pub fn supports_direct_io(path: &[u8]) -> Result<bool> {
    let c = c_path(path)?;
    kernel::supports_direct_io(&c).map_err(|source| Error::Open { path: String::from_utf8_lossy(path).into_owned(), flags: "r (O_DIRECT)".into(), source })
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn ranges_are_clipped_to_the_file() {
        assert_eq!(clip(0, 0, 100), (0, 100));
        assert_eq!(clip(10, 0, 100), (10, 90));
        assert_eq!(clip(10, 20, 100), (10, 20));
        assert_eq!(clip(90, 20, 100), (90, 10));
        assert_eq!(clip(200, 20, 100), (100, 0));
        assert_eq!(clip(u64::MAX, u64::MAX, 100), (100, 0));
    }
}
