//! Page-cache tools by path (`api::page_cache_tools`): resident pages, dropping a file's pages or the
//! system's, and whether a file takes direct I/O.

use super::{guard, out, write_out};
use crate::abi::Status;
use std::ffi::{CStr, c_char};

/// The bytes of a NUL-terminated `path`, or `NULL_ARGUMENT`.
///
/// # Safety
/// `path` is NULL or NUL-terminated.
unsafe fn path_arg<'a>(path: *const c_char) -> crate::Result<&'a [u8]> {
    // SAFETY: forwarded from the caller.
    unsafe { super::arg(path, "path") }.map(|p| unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// Counts the pages of `[file_offset, file_offset + length)` of the file at `path` (`length` 0:
/// to the end of the file; the part past the end counts nothing) that are in the page cache into
/// `*resident_pages`, and the pages the range spans into `*total_pages` (KvikIO's
/// `get_page_cache_info`). Uses `cachestat(2)` (Linux 6.5 and later), else `mincore(2)`. Pages
/// the registered page cache pinned count as resident. Errors: `NULL_ARGUMENT`, `INVALID_PATH`
/// (empty), `OPEN_FAILED`, `IO_ERROR` (errno in `gdsroute_last_error_errno`).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_page_cache_info(
    path: *const c_char,
    file_offset: u64,
    length: u64,
    resident_pages: *mut u64,
    total_pages: *mut u64,
) -> Status {
    guard(|| {
        let resident = out(resident_pages, "resident_pages")?;
        let total = out(total_pages, "total_pages")?;
        // SAFETY: the caller passes NULL or a NUL-terminated string.
        let path = unsafe { path_arg(path)? };
        let info = crate::api::page_cache_tools::page_cache_info(path, file_offset, length)?;
        // SAFETY: checked by `out`.
        unsafe {
            write_out(resident, info.resident);
            write_out(total, info.total);
        }
        Ok(())
    })
}

/// Drops `[file_offset, file_offset + length)` of the file at `path` (`length` 0: to its end)
/// from the page cache (KvikIO's `drop_file_page_cache`; `posix_fadvise(POSIX_FADV_DONTNEED)`),
/// after writing the range's dirty pages back if `sync_first` (`fdatasync`; without it dirty
/// pages stay). The registered page cache's windows of the file, in every handle, are dropped
/// first: pinned pages cannot be evicted. The kernel may keep pages another process maps or
/// locks. Errors: `NULL_ARGUMENT`, `INVALID_PATH`, `OPEN_FAILED`, `IO_ERROR`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_page_cache_drop(path: *const c_char, file_offset: u64, length: u64, sync_first: bool) -> Status {
    guard(|| {
        // SAFETY: the caller passes NULL or a NUL-terminated string.
        let path = unsafe { path_arg(path)? };
        crate::api::page_cache_tools::drop_file_page_cache(path, file_offset, length, sync_first)
    })
}

/// Drops the whole system's page cache (KvikIO's `drop_system_page_cache`): every registered
/// window of this process first, then `sync`, then `1` into `/proc/sys/vm/drop_caches`. Needs
/// root: `IO_ERROR` with errno `EACCES` otherwise. Blocking: the `sync` may take seconds.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_page_cache_drop_system() -> Status {
    guard(crate::api::page_cache_tools::drop_system_page_cache)
}

/// Writes into `*supported` whether the file at `path` can be opened with `O_DIRECT` (false where
/// its file system refuses it). Errors: `NULL_ARGUMENT`, `INVALID_PATH`, `OPEN_FAILED` (the file
/// cannot be opened at all; errno in `gdsroute_last_error_errno`).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_supports_direct_io(path: *const c_char, supported: *mut bool) -> Status {
    guard(|| {
        let supported = out(supported, "supported")?;
        // SAFETY: the caller passes NULL or a NUL-terminated string.
        let path = unsafe { path_arg(path)? };
        let answer = crate::api::page_cache_tools::supports_direct_io(path)?;
        // SAFETY: checked by `out`.
        unsafe { write_out(supported, answer) };
        Ok(())
    })
}

symbol_version!(GDSROUTE_0.2: gdsroute_page_cache_info, gdsroute_page_cache_drop, gdsroute_page_cache_drop_system, gdsroute_supports_direct_io);
