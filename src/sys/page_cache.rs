//! The kernel's page cache of a file, asked about and emptied (KvikIO's `get_page_cache_info`,
//! `drop_file_page_cache`, `drop_system_page_cache`): how many pages of a range are resident
//! (`cachestat(2)`, Linux 6.5 and later, else `mincore(2)` over a read-only mapping of the range,
//! one window at a time so that a huge file never needs a huge mapping), dropping a range
//! (`posix_fadvise(POSIX_FADV_DONTNEED)`, after `fdatasync` if asked: dirty pages are not
//! dropped), dropping every file's clean pages (`/proc/sys/vm/drop_caches`, root only), and
//! whether a file takes `O_DIRECT`. The registered page cache's pinned windows are not this
//! module's business: `api::page_cache_tools` drops them first.

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;

/// Resident and total pages of a range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Residency {
    /// Pages of the range in the page cache.
    pub resident: u64,
    /// Pages the range spans.
    pub total: u64,
}

/// The system page size.
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 { page as u64 } else { 4096 }
}

/// `cachestat(2)`'s system call number: one table for every architecture since Linux 5.1.
const SYS_CACHESTAT: libc::c_long = 451;

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// `cachestat` of the pages spanning `[offset, offset + len)`; `None` where the kernel lacks it.
fn cachestat(fd: RawFd, offset: u64, len: u64) -> Option<io::Result<u64>> {
    let range = CachestatRange { off: offset, len };
    let mut stat = Cachestat::default();
    // SAFETY: both structs are valid for the call's duration and laid out as the kernel's.
    let r = unsafe { libc::syscall(SYS_CACHESTAT, fd, &range as *const CachestatRange, &mut stat as *mut Cachestat, 0u32) };
    if r == 0 {
        return Some(Ok(stat.nr_cache));
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        // Not in this kernel (or refused by a seccomp filter): ask mincore.
        Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EOPNOTSUPP) => None,
        _ => Some(Err(error)),
    }
}

/// How much of a range `mincore` is asked about at once.
const MINCORE_WINDOW: u64 = 1 << 30;

/// `mincore` over read-only mappings of the pages spanning `[offset, offset + len)`, a window at
/// a time. The mapping is never touched, so pages past the end of the file cannot fault.
fn mincore(fd: RawFd, offset: u64, len: u64) -> io::Result<u64> {
    let page = page_size();
    let mut at = offset / page * page;
    let end = offset + len;
    let mut resident = 0u64;
    let mut vec = Vec::new();
    while at < end {
        let span = (end - at).min(MINCORE_WINDOW);
        let pages = span.div_ceil(page) as usize;
        let bytes = pages * page as usize;
        // SAFETY: a fresh read-only shared mapping of the file, unmapped below; never read.
        let addr = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ, libc::MAP_SHARED, fd, at as libc::off_t) };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        vec.clear();
        vec.resize(pages, 0u8);
        // SAFETY: `addr` maps `bytes` bytes; `vec` has one byte per page.
        let r = unsafe { libc::mincore(addr, bytes, vec.as_mut_ptr()) };
        let error = io::Error::last_os_error();
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(addr, bytes) };
        if r != 0 {
            return Err(error);
        }
        resident += vec.iter().filter(|&&v| v & 1 != 0).count() as u64;
        at += bytes as u64;
    }
    Ok(resident)
}

/// Resident and total pages of `[offset, offset + len)` of the file open on `fd` (the caller
/// clips the range to the file's size).
pub(crate) fn residency(fd: RawFd, offset: u64, len: u64) -> io::Result<Residency> {
    if len == 0 {
        return Ok(Residency::default());
    }
    let page = page_size();
    let total = (offset + len).div_ceil(page) - offset / page;
    let resident = match cachestat(fd, offset, len) {
        Some(answer) => answer?,
        None => mincore(fd, offset, len)?,
    };
    Ok(Residency { resident: resident.min(total), total })
}

/// Drops the clean pages of `[offset, offset + len)` (`len` 0: to the end of the file) from the
/// page cache, after writing the dirty ones back if `sync_first`.
pub(crate) fn drop_range(fd: RawFd, offset: u64, len: u64, sync_first: bool) -> io::Result<()> {
    // SAFETY: plain system calls on a descriptor the caller keeps open.
    if sync_first && unsafe { libc::fdatasync(fd) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EOVERFLOW));
    };
    // SAFETY: as above.
    match unsafe { libc::posix_fadvise(fd, offset, len, libc::POSIX_FADV_DONTNEED) } {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// `sync(2)`, then `echo 1 > /proc/sys/vm/drop_caches` (the page cache; dentries and inodes are
/// left alone). Needs root (`EACCES` otherwise).
pub(crate) fn drop_system() -> io::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", b"1")
}

/// Whether the file at `path` can be opened with `O_DIRECT` (read-only): false where the file
/// system refuses it (`EINVAL`, as tmpfs before Linux 6.6); other failures are errors.
pub(crate) fn supports_direct_io(path: &CStr) -> io::Result<bool> {
    // SAFETY: `path` is NUL-terminated.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECT | libc::O_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: the descriptor just opened, closed once.
        unsafe { libc::close(fd) };
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EINVAL) { Ok(false) } else { Err(error) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn mincore_and_cachestat_agree() {
        // The fallback must count what cachestat counts (where the kernel has cachestat).
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(&vec![7u8; 3 << 20]).unwrap();
        let fd = tmp.as_file().as_raw_fd();
        let by_mincore = mincore(fd, 4096, 2 << 20).unwrap();
        assert_eq!(by_mincore, 512, "every page just written is resident");
        assert_eq!(mincore(fd, 1, 4096).unwrap(), 2, "two pages spanned");
        if let Some(by_cachestat) = cachestat(fd, 4096, 2 << 20) {
            assert_eq!(by_cachestat.unwrap(), by_mincore);
        }
        drop_range(fd, 0, 0, true).unwrap();
        let after = mincore(fd, 0, 3 << 20).unwrap();
        if let Some(by_cachestat) = cachestat(fd, 0, 3 << 20) {
            assert_eq!(by_cachestat.unwrap(), after);
        }
    }
}
