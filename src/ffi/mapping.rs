//! Mapping handles (KvikIO's `MmapHandle`): open, read, parallel read, the handle's queries
//! (file size, mapped range, closed), close, free.

use super::{arg, guard, out, query, write_out};
use crate::abi::Status;
use crate::api::mapping::MappedFile;
use crate::io::operation::Operation;
use std::ffi::{CStr, c_char, c_void};

/// Opens the file at `path` read-only and maps `size` bytes of it from `file_offset`, read-only
/// and shared (KvikIO's `MmapHandle` with flags "r"; `size` 0: to the end of the file, as
/// KvikIO's `std::nullopt`). Any offset is accepted (the mapping starts at the page before it).
/// The range must lie in the file as it is now and hold a byte, except for an empty file, which
/// maps nothing (`file_offset` and `size` 0): its handle reads 0 bytes. Pages are read from the
/// file when first copied. No signal handler is installed: a file truncated under the mapping
/// makes the reads of the lost pages fail (`gdsroute_mapping_read`), not the process.
///
/// Returns `GDSROUTE_STATUS_OK` and a new handle in `*mapping`. Errors: `NULL_ARGUMENT`,
/// `INVALID_PATH` (empty), `OPEN_FAILED` (errno in `gdsroute_last_error_errno`),
/// `INVALID_ARGUMENT` (the range is not inside the file), `OVERFLOW` (`file_offset + size`
/// above the largest off_t), `IO_ERROR` (`fstat`, or `mmap`: e.g. `ENODEV` for a directory).
/// Ownership: free the handle with `gdsroute_mapping_free`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_mapping_open(path: *const c_char, file_offset: u64, size: usize, mapping: *mut *mut MappedFile) -> Status {
    guard(|| {
        let mapping = out(mapping, "mapping")?;
        // SAFETY: the caller passes a NUL-terminated string or NULL.
        let path = unsafe { arg(path, "path") }.map(|p| unsafe { CStr::from_ptr(p) })?;
        let handle = Box::new(MappedFile::open(path.to_bytes(), file_offset, size)?);
        // SAFETY: checked by `out`.
        unsafe { write_out(mapping, Box::into_raw(handle)) };
        Ok(())
    })
}

/// Copies the `size` mapped bytes at `file_offset` (a file offset, as KvikIO's) into `buf` on
/// the calling thread (KvikIO's `MmapHandle::read`). `buf` may be host (pageable or pinned),
/// device or managed memory; device and managed memory are filled through the pinned bounce
/// buffers of the device route (a copy into one, then a host-to-device copy on the thread's
/// stream, synchronised before it returns).
///
/// Returns `size` in `*bytes_read`: a read inside the mapped range is never short. `size` 0 is
/// fine anywhere in the range or at its end. Nothing outside `buf[0, size)` is written. The
/// bytes are copied by the kernel (`process_vm_readv`), never loaded from the mapping in user
/// space, so a bad page is an error, not a signal. Errors: `NULL_ARGUMENT`, `CLOSED_HANDLE`,
/// `INVALID_ARGUMENT` (`[file_offset, file_offset + size)` is not inside the mapped range; the
/// message names both), `OVERFLOW`, `IO_ERROR` with errno `EFAULT`: the file was truncated under
/// the mapping (the message says it shrank, to what size, and the first offset lost; the bytes
/// before it are in `buf`), a page of `buf` cannot be written (the message says so), or a mapped
/// page could not be read in (errno then the one `pread` reports there, e.g. `EIO`); for device
/// memory `CUDA_ERROR`, `CUDA_UNAVAILABLE`. The mapping handle's reads are in no counters.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_mapping_read(
    mapping: *const MappedFile,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    bytes_read: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let mapping = unsafe { arg(mapping, "mapping")? };
        let (buf, bytes_read) = (out(buf, "buf")?, out(bytes_read, "bytes_read")?);
        // SAFETY: the caller guarantees `buf` is writable for `size` bytes during the call.
        let n = unsafe { mapping.read_raw(buf.cast(), size, file_offset)? };
        // SAFETY: checked by `out`.
        unsafe { write_out(bytes_read, n) };
        Ok(())
    })
}

/// Starts a parallel copy of the `size` mapped bytes at `file_offset` into `buf` (KvikIO's
/// `MmapHandle::pread`): tasks of `task_size` bytes (0: the task size setting,
/// `gdsroute_settings_get_task_size`, as KvikIO's default) run on the shared pool. Returns at
/// once with an operation in `*op`; `gdsroute_op_wait` gives `size`, or the first error in file
/// order once every task stopped (the errors of `gdsroute_mapping_read`'s copy).
///
/// The buffer must stay valid and untouched until the operation has finished (as
/// `gdsroute_file_pread`'s). Errors found before any task starts are returned here: those of
/// `gdsroute_mapping_read` but the copy's. The handle may be closed or freed while the operation
/// runs; its tasks keep the mapping until they finish. Ownership: free the operation with
/// `gdsroute_op_free`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_mapping_pread(
    mapping: *const MappedFile,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    task_size: usize,
    op: *mut *mut Operation,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let mapping = unsafe { arg(mapping, "mapping")? };
        let (buf, op) = (out(buf, "buf")?, out(op, "op")?);
        let task_size = (task_size > 0).then_some(task_size as u64);
        // SAFETY: the caller keeps `buf` valid for `size` bytes until the operation finishes.
        let operation = Box::new(unsafe { mapping.pread_raw(buf.cast(), size, file_offset, task_size)? });
        // SAFETY: checked by `out`.
        unsafe { write_out(op, Box::into_raw(operation)) };
        Ok(())
    })
}

/// Reads the file's current size in bytes (`fstat`; KvikIO's `MmapHandle::file_size()`) into
/// `*size`: it changes when the file does, the mapped range does not. Errors: `NULL_ARGUMENT`,
/// `CLOSED_HANDLE`, `IO_ERROR`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_mapping_file_size(mapping: *const MappedFile, size: *mut u64) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `size` NULL or writable.
    unsafe { query(mapping, "mapping", size, "size", |m| m.file_size()) }
}

/// Reads into `*file_offset` the file offset of the mapped range's first byte, as given to
/// `gdsroute_mapping_open` (KvikIO's `initial_map_offset()`); also after
/// `gdsroute_mapping_close`. Errors: `NULL_ARGUMENT`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_mapping_map_offset(mapping: *const MappedFile, file_offset: *mut u64) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `file_offset` NULL or writable.
    unsafe { query(mapping, "mapping", file_offset, "file_offset", |m| Ok(m.map_offset())) }
}

/// Reads into `*size` the bytes mapped (KvikIO's `initial_map_size()`): the `size` given to
/// `gdsroute_mapping_open`, or, where it was 0, the file's size at open less the offset (0 for
/// an empty file); also after `gdsroute_mapping_close`. Errors: `NULL_ARGUMENT`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_mapping_map_size(mapping: *const MappedFile, size: *mut usize) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `size` NULL or writable.
    unsafe { query(mapping, "mapping", size, "size", |m| Ok(m.map_size())) }
}

/// Sets `*closed` to whether `gdsroute_mapping_close` was called on the handle (KvikIO's
/// `MmapHandle::closed()`). Errors: `NULL_ARGUMENT` only; a closed handle is an answer here.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_mapping_is_closed(mapping: *const MappedFile, closed: *mut bool) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `closed` NULL or writable.
    unsafe { query(mapping, "mapping", closed, "closed", |m| Ok(m.is_closed())) }
}

/// Unmaps the range and closes the file (KvikIO's `MmapHandle::close()`). Idempotent: closing a
/// closed handle, or NULL, returns `GDSROUTE_STATUS_OK`. Later reads return
/// `GDSROUTE_STATUS_CLOSED_HANDLE`; parallel reads in flight complete normally, on the mapping
/// they hold. The handle itself stays allocated until `gdsroute_mapping_free`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_mapping_close(mapping: *const MappedFile) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        if let Some(mapping) = unsafe { mapping.as_ref() } {
            mapping.close();
        }
        Ok(())
    })
}

/// Closes (if needed) and frees a mapping handle. NULL is a no-op. The pointer must not be used
/// again; freeing twice is undefined behaviour (use `gdsroute_mapping_close` for an idempotent
/// close).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_mapping_free(mapping: *mut MappedFile) {
    let _ = guard(|| {
        if !mapping.is_null() {
            // SAFETY: the pointer came from Box::into_raw in gdsroute_mapping_open, freed once.
            drop(unsafe { Box::from_raw(mapping) });
        }
        Ok(())
    });
}

symbol_version!(GDSROUTE_0.2: gdsroute_mapping_open, gdsroute_mapping_read, gdsroute_mapping_pread, gdsroute_mapping_file_size, gdsroute_mapping_map_offset, gdsroute_mapping_map_size, gdsroute_mapping_is_closed, gdsroute_mapping_close, gdsroute_mapping_free);
