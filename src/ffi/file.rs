//! File handles: open (by path or from a caller's descriptor), the handle's queries (descriptor,
//! flags, closed, cuFile in use), read, parallel read, write, parallel write, stream-ordered read
//! and write, sync, truncate, lock, counters, close, free.
//!
//! One job: the C entry points of a file handle, a few lines each, mostly doc comments.

use super::{arg, guard, out, write_out};
use crate::direction::Direction;
use crate::error::Error;
use crate::api::file::File;
use crate::backend::cufile::gds::FallbackReason;
use crate::io::operation::Operation;
use crate::settings::CompatMode;
use crate::stats::Counters;
use crate::abi::Status;
use std::ffi::{CStr, c_char, c_int, c_void};

/// Reads the C strings of an open call.
///
/// # Safety
/// Each pointer is NULL or a NUL-terminated string.
unsafe fn open_args<'a>(path: *const c_char, flags: *const c_char) -> crate::Result<(&'a [u8], &'a str)> {
    // SAFETY: forwarded from the caller.
    let path = unsafe { arg(path, "path") }.map(|p| unsafe { CStr::from_ptr(p) })?;
    // SAFETY: forwarded from the caller.
    let flags = unsafe { arg(flags, "flags") }.map(|f| unsafe { CStr::from_ptr(f) })?;
    let flags = flags.to_str().map_err(|_| Error::InvalidFlags(flags.to_string_lossy().into_owned()))?;
    Ok((path.to_bytes(), flags))
}

/// The handle and pointers of a read or write call of `direction`. A NULL one is counted as a
/// failed call of that direction, on the handle when there is one, else in the process-wide
/// counters only (there is no handle to count on); `read_raw`/`pread_raw`/`write_raw`/`pwrite_raw`
/// count every other call.
///
/// # Safety
/// `file` is NULL or a live handle.
unsafe fn call_args<'a, T>(
    direction: Direction,
    file: *const File,
    buf: *mut c_void,
    result: *mut T,
    result_name: &'static str,
) -> crate::Result<(&'a File, *mut c_void, *mut T)> {
    // SAFETY: forwarded from the caller.
    let Some(file) = (unsafe { file.as_ref() }) else {
        crate::stats::record_refused_call(None, direction);
        return Err(Error::NullArgument("file"));
    };
    match (out(buf, "buf"), out(result, result_name)) {
        (Ok(buf), Ok(result)) => Ok((file, buf, result)),
        (Err(e), _) | (_, Err(e)) => {
            file.record_rejected_call(direction);
            Err(e)
        }
    }
}

/// Opens a file.
///
/// `path` is a NUL-terminated byte string passed to `open(2)` as is (it need not be UTF-8).
/// `flags` is KvikIO's: "r" (read), "r+" (read/write), "w" (write, create, truncate) or "w+"
/// (read/write, create, truncate), or Python's exclusive creation: "x" (write, create; the file
/// must not exist: `O_CREAT | O_EXCL`) or "x+" (read/write, the same); `O_CLOEXEC` is always
/// added. `mode` is used when the file is created (e.g. 0644; the umask applies). The handle
/// takes the process's default compat mode as it is now. When the calling thread has a CUDA
/// context current, the device route is prepared in the background (pool workers' streams and
/// pinned buffers; see docs/routing.md, "Preparing the device route at open").
///
/// Returns `GDSROUTE_STATUS_OK` and a new handle in `*file`. Errors: `NULL_ARGUMENT`,
/// `INVALID_FLAGS`, `INVALID_PATH` (empty), `INVALID_ARGUMENT` (mode above 07777), `OPEN_FAILED`
/// (errno in `gdsroute_last_error_errno`; `EEXIST` for "x" and "x+" where the file exists),
/// `INVALID_SETTING`.
/// Ownership: free the handle with `gdsroute_file_free`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_open(
    path: *const c_char,
    flags: *const c_char,
    mode: u32,
    file: *mut *mut File,
) -> Status {
    guard(|| {
        let file = out(file, "file")?;
        // SAFETY: the caller passes NUL-terminated strings or NULL.
        let (path, flags) = unsafe { open_args(path, flags)? };
        let handle = Box::new(File::open(path, flags, mode, None)?);
        // SAFETY: checked by `out`.
        unsafe { write_out(file, Box::into_raw(handle)) };
        Ok(())
    })
}

/// Like `gdsroute_file_open`, with a compat mode for this handle only (a `gdsroute_compat_mode`
/// value). Errors as `gdsroute_file_open`, plus `INVALID_ENUM`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_open_with_compat_mode(
    path: *const c_char,
    flags: *const c_char,
    mode: u32,
    compat_mode: u32,
    file: *mut *mut File,
) -> Status {
    guard(|| {
        let file = out(file, "file")?;
        let compat_mode = CompatMode::from_raw(compat_mode)?;
        // SAFETY: the caller passes NUL-terminated strings or NULL.
        let (path, flags) = unsafe { open_args(path, flags)? };
        let handle = Box::new(File::open(path, flags, mode, Some(compat_mode))?);
        // SAFETY: checked by `out`.
        unsafe { write_out(file, Box::into_raw(handle)) };
        Ok(())
    })
}

/// Opens a handle on the file open as the caller's descriptor `fd` (for a file driver that
/// opened the file itself). The handle reads and writes through a duplicate of `fd`
/// (`F_DUPFD_CLOEXEC`): the caller keeps `fd`, and closes it when it likes, before or after the
/// handle; `gdsroute_file_fd` gives the duplicate. The duplicate shares `fd`'s open file
/// description, so its status flags, file offset and `flock` locks are `fd`'s
/// (`gdsroute_file_lock` locks for both). The access mode is `fd`'s (`fcntl(F_GETFL)`):
/// `O_RDONLY` behaves as "r", `O_WRONLY` as "w" without the truncation, `O_RDWR` as "r+".
/// Messages and monitors name the file by what `/proc/self/fd/N` links to, else "fd N".
/// Everything else is as for a handle from `gdsroute_file_open`: the process's default compat
/// mode as it is now, the `O_DIRECT` descriptor of the direct-I/O settings (opened from
/// `/proc/self/fd`), cuFile's registration, the page cache, the pools, the preparation at open.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a negative `fd`, a descriptor open with
/// `O_DIRECT` (the handle's own transfers are buffered) or one with `O_APPEND` that can write
/// (Linux's `pwrite` then appends whatever the offset); `OPEN_FAILED` with errno `EBADF` for a
/// descriptor that is not open, or opened `O_PATH` (or with access mode 3: neither reads nor
/// writes), and with the errno of `fcntl` where it cannot be duplicated (`EMFILE`), and
/// `INVALID_SETTING`. Ownership: free the handle with `gdsroute_file_free`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_open_fd(fd: c_int, file: *mut *mut File) -> Status {
    guard(|| {
        let file = out(file, "file")?;
        let handle = Box::new(File::open_descriptor(fd, None)?);
        // SAFETY: checked by `out`.
        unsafe { write_out(file, Box::into_raw(handle)) };
        Ok(())
    })
}

/// Like `gdsroute_file_open_fd`, with a compat mode for this handle only (a
/// `gdsroute_compat_mode` value). Errors as `gdsroute_file_open_fd`, plus `INVALID_ENUM`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_open_fd_with_compat_mode(fd: c_int, compat_mode: u32, file: *mut *mut File) -> Status {
    guard(|| {
        let file = out(file, "file")?;
        let compat_mode = CompatMode::from_raw(compat_mode)?;
        let handle = Box::new(File::open_descriptor(fd, Some(compat_mode))?);
        // SAFETY: checked by `out`.
        unsafe { write_out(file, Box::into_raw(handle)) };
        Ok(())
    })
}

/// A query on a file handle (`super::query`).
///
/// # Safety
/// `file` is NULL or a live handle; `value` is NULL or writable for a `T`.
unsafe fn query<T>(file: *const File, value: *mut T, name: &'static str, answer: impl FnOnce(&File) -> crate::error::Result<T>) -> Status {
    // SAFETY: forwarded from the caller.
    unsafe { super::query(file, "file", value, name, answer) }
}

/// Reads the compat mode the handle was opened with into `*compat_mode`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_compat_mode(file: *const File, compat_mode: *mut u32) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `compat_mode` NULL or writable.
    unsafe { query(file, compat_mode, "compat_mode", |f| Ok(f.compat_mode() as u32)) }
}

/// Tells whether cuFile serves this file's device reads (at or above the GDS threshold) and, if
/// not, why: `*reason` receives a `gdsroute_fallback_reason` (`GDSROUTE_FALLBACK_REASON_NONE` when
/// cuFile is used) and `buf` the explanation (snprintf semantics; full length in `*length`; `buf`
/// may be NULL when `buf_len` is 0). Decides it now if no device read has yet, which may load
/// libcufile and open its driver (0.2 to 0.7 s once per process). Under compat mode OFF a reason
/// other than NONE means device reads of this file fail with `GDSROUTE_STATUS_CUFILE_UNAVAILABLE`;
/// under AUTO they use the POSIX backend. With NONE the text also says which descriptor cuFile
/// registered (`O_DIRECT` or buffered, see `gdsroute_settings_set_cufile_fd`).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_cufile_verdict(
    file: *const File,
    reason: *mut u32,
    buf: *mut c_char,
    buf_len: usize,
    length: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let file = unsafe { arg(file, "file")? };
        let reason = out(reason, "reason")?;
        let text_out = super::TextOut::new(buf, buf_len, length)?;
        let (code, text) = match file.cufile_verdict()? {
            Ok(()) => {
                let descriptor = file.cufile_descriptor().map(|c| format!("; {c}")).unwrap_or_default();
                (FallbackReason::None, format!("cuFile serves this file{descriptor}"))
            }
            Err(u) => (u.reason, u.message),
        };
        // SAFETY: the caller's buffer and out-pointers (checked above).
        unsafe {
            text_out.write(&text);
            write_out(reason, code as u32);
        }
        Ok(())
    })
}

/// Reads the file's current size in bytes into `*size`: `fstat`'s, or for a block device its
/// `BLKGETSIZE64` (its `st_size` is 0).
/// Errors: `NULL_ARGUMENT`, `CLOSED_HANDLE`, `IO_ERROR`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_size(file: *const File, size: *mut u64) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `size` NULL or writable.
    unsafe { query(file, size, "size", |f| f.size()) }
}

/// Reads into `*fd` the descriptor the handle reads and writes through (KvikIO's
/// `FileHandle::fd()`). It stays the handle's: valid until `gdsroute_file_close` and the end of
/// every call on the handle; never close it. Errors: `NULL_ARGUMENT`, `CLOSED_HANDLE`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_fd(file: *const File, fd: *mut c_int) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `fd` NULL or writable.
    unsafe { query(file, fd, "fd", |f| f.fd()) }
}

/// Reads into `*flags` the open flags of the handle's descriptor as `fcntl(F_GETFL)` reports them
/// (KvikIO's `fd_open_flags()`): `flags & O_ACCMODE` is `O_RDONLY` ("r"), `O_WRONLY` ("w", "x")
/// or `O_RDWR` ("r+", "w+", "x+"); for a handle from `gdsroute_file_open_fd`, the flags of the
/// caller's descriptor. Errors: `NULL_ARGUMENT`, `CLOSED_HANDLE`, `IO_ERROR`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_fd_open_flags(file: *const File, flags: *mut c_int) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `flags` NULL or writable.
    unsafe { query(file, flags, "flags", |f| f.fd_open_flags()) }
}

/// Reads into `*fd` the handle's `O_DIRECT` descriptor where one is open already, -1 where none
/// is: one opens at the handle's first direct-I/O task (the `auto_direct_io_read` and
/// `auto_direct_io_write` settings); asking opens none. It stays the handle's, as
/// `gdsroute_file_fd`'s. Errors: `NULL_ARGUMENT`, `CLOSED_HANDLE`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_direct_fd(file: *const File, fd: *mut c_int) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `fd` NULL or writable.
    unsafe { query(file, fd, "fd", |f| Ok(f.direct_fd()?.unwrap_or(-1))) }
}

/// Sets `*closed` to whether `gdsroute_file_close` was called on the handle (KvikIO's
/// `FileHandle::closed()`). Errors: `NULL_ARGUMENT` only; a closed handle is an answer here.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_is_closed(file: *const File, closed: *mut bool) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `closed` NULL or writable.
    unsafe { query(file, closed, "closed", |f| Ok(f.is_closed())) }
}

/// Sets `*in_use` to whether cuFile is in use for the handle: its file is registered with cuFile,
/// by a device call that took cuFile's route or by `gdsroute_file_cufile_verdict`. Asking decides
/// nothing (no driver open, no registration): before either, or after `gdsroute_shutdown`, the
/// answer is false. Errors: `NULL_ARGUMENT`, `CLOSED_HANDLE`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_cufile_in_use(file: *const File, in_use: *mut bool) -> Status {
    // SAFETY: the caller passes a live handle or NULL, and `in_use` NULL or writable.
    unsafe { query(file, in_use, "in_use", |f| f.cufile_in_use()) }
}

/// Reads `size` bytes at `file_offset` into `buf` in one synchronous call on the calling thread
/// (KvikIO's `read`). Blocks until done.
///
/// Returns the bytes read in `*bytes_read`: fewer than `size` only when the file ends first
/// (0 when `file_offset` is at or past the end); that is success. Nothing outside
/// `buf[0, size)` is written. Errors: `NULL_ARGUMENT`, `CLOSED_HANDLE`, `OVERFLOW` (`size` above
/// SSIZE_MAX or `file_offset + size` above the largest off_t), `IO_ERROR`.
/// Routes: host memory is read by the POSIX backend.
/// Counters: every call counts once in `calls`, and in `calls_failed` if it returns an error,
/// whatever the error (with a NULL `file`, in the process-wide counters only).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_read(
    file: *const File,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    bytes_read: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let (file, buf, bytes_read) = unsafe { call_args(Direction::Read, file, buf, bytes_read, "bytes_read")? };
        // SAFETY: the caller guarantees `buf` is writable for `size` bytes during the call.
        let n = unsafe { file.read_raw(buf.cast(), size, file_offset)? };
        // SAFETY: checked by `out`.
        unsafe { write_out(bytes_read, n) };
        Ok(())
    })
}

/// Starts a parallel read of `size` bytes at `file_offset` into `buf` (KvikIO's `pread`): the
/// request is split into task-size tasks run on the shared pool. Returns at once with an
/// operation in `*op`; wait for it with `gdsroute_op_wait`.
///
/// The buffer must stay valid and untouched until the operation has finished (`gdsroute_op_wait`
/// returned, `gdsroute_op_poll` said done, or `gdsroute_op_free` returned). Errors found before
/// any task starts are returned here (as `gdsroute_file_read`); task errors by `gdsroute_op_wait`.
/// Counters: as `gdsroute_file_read`; a call that fails here counts as failed at once, a started
/// one when its operation finishes.
/// Ownership: free the operation with `gdsroute_op_free`. The handle may be closed or freed
/// while the operation runs; its tasks keep the descriptor open until they finish.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_pread(
    file: *const File,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    op: *mut *mut Operation,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let (file, buf, op) = unsafe { call_args(Direction::Read, file, buf, op, "op")? };
        // SAFETY: the caller keeps `buf` valid for `size` bytes until the operation finishes.
        let operation = Box::new(unsafe { file.pread_raw(buf.cast(), size, file_offset)? });
        // SAFETY: checked by `out`.
        unsafe { write_out(op, Box::into_raw(operation)) };
        Ok(())
    })
}

/// Writes `size` bytes from `buf` at `file_offset` in one synchronous call on the calling thread
/// (KvikIO's `write`). Blocks until done. `buf` may be host (pageable or pinned), device or
/// managed memory; it is only read.
///
/// Returns `size` in `*bytes_written` on success: a write covers its whole range or fails, never
/// short (short `pwrite`s are continued, `EINTR` retried). Writing past the end of the file
/// extends it (a gap becomes a hole); nothing of the file outside `[file_offset, file_offset +
/// size)` is changed. A `size` of 0 writes nothing and returns 0. On error, part of the range may
/// have reached the file: the bytes from `file_offset` up to the offset the message names.
/// Errors: `NULL_ARGUMENT`, `CLOSED_HANDLE`, `OVERFLOW`, `IO_ERROR` (errno in
/// `gdsroute_last_error_errno`: `EBADF` at once, before anything runs, for a handle opened "r",
/// whatever the size; `ENOSPC`, `EFBIG`, `EIO`, ... with the file offset of the failing `pwrite`
/// in the message), and for device memory `CUDA_ERROR`, `CUFILE_ERROR`, `CUFILE_UNAVAILABLE`.
/// A write across the process's file-size limit (`RLIMIT_FSIZE`) fails with `EFBIG` only where
/// the program ignores `SIGXFSZ`; otherwise the kernel's signal ends the process (the library
/// does not change signal dispositions).
/// Routes: as reads (host memory through `pwrite`; device memory below the GDS threshold, under
/// compat mode ON or AUTO's fallback through pinned bounce buffers; otherwise `cuFileWrite`).
/// Registered page-cache windows of the file (in every handle of it in the process) are dropped
/// around every write task, so no later device read sees bytes from before the write.
/// Counters: `write_calls` (once per call, as `calls` for reads), `write_calls_failed`,
/// `bytes_written`, and the `*write_tasks`/`*write_bytes` fields.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_write(
    file: *const File,
    buf: *const c_void,
    size: usize,
    file_offset: u64,
    bytes_written: *mut usize,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let (file, buf, bytes_written) = unsafe { call_args(Direction::Write, file, buf.cast_mut(), bytes_written, "bytes_written")? };
        // SAFETY: the caller guarantees `buf` is readable for `size` bytes during the call.
        let n = unsafe { file.write_raw(buf.cast(), size, file_offset)? };
        // SAFETY: checked by `out`.
        unsafe { write_out(bytes_written, n) };
        Ok(())
    })
}

/// Starts a parallel write of `size` bytes from `buf` at `file_offset` (KvikIO's `pwrite`):
/// task-size tasks on the shared pool (one task on the calling thread for device memory below the
/// GDS threshold). Returns at once with an operation in `*op`; `gdsroute_op_wait` gives `size`.
///
/// Semantics as `gdsroute_file_write`. When tasks fail (`ENOSPC`, `EFBIG`, `EIO`, ...), the
/// other tasks still run to their end or their own error; the operation reports an error only
/// after every task stopped: the error of the failing task with the lowest file offset, whose
/// message names the file offset at which its failing call started. No byte count is reported
/// then: ranges of tasks that did not fail reached the file, other bytes of the range may or may
/// not have. A count is reported only for a write that wrote the whole range, so it is never
/// larger than what reached the file. The buffer must stay valid and unchanged until the
/// operation has finished. Ownership: free the operation with `gdsroute_op_free`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_pwrite(
    file: *const File,
    buf: *const c_void,
    size: usize,
    file_offset: u64,
    op: *mut *mut Operation,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let (file, buf, op) = unsafe { call_args(Direction::Write, file, buf.cast_mut(), op, "op")? };
        // SAFETY: the caller keeps `buf` valid for `size` bytes until the operation finishes.
        let operation = Box::new(unsafe { file.pwrite_raw(buf.cast(), size, file_offset)? });
        // SAFETY: checked by `out`.
        unsafe { write_out(op, Box::into_raw(operation)) };
        Ok(())
    })
}

/// Starts a stream-ordered read of `size` bytes at `file_offset` into `buf` (KvikIO's
/// `read_async`), ordered on the CUDA stream `stream` (a `CUstream`; NULL (0) and
/// `CU_STREAM_LEGACY` (1) name the legacy default stream of the calling thread's current context,
/// `CU_STREAM_PER_THREAD` (2) the calling thread's per-thread default stream). Returns at once,
/// whatever the stream has queued, with an operation in `*op`: the read happens after the work
/// queued on the stream before this call, and the work queued after it sees the bytes read. The
/// calling thread is not blocked (unless the stream cannot wait on the host, below).
///
/// The operation settles when the read has ended, just before the stream is let past it:
/// `gdsroute_op_wait` (which waits for the stream to get there and the read to end),
/// `gdsroute_op_poll` (never blocks), or the stream itself (after `cuStreamSynchronize` or an
/// event recorded after this call completed, `gdsroute_op_wait` returns at once). Its result is as `gdsroute_file_pread`'s: the bytes read,
/// fewer only at end of file (where the file ends when the stream reaches the call, so a
/// stream-ordered write before it counts); errors after every task stopped, never at the call.
/// `gdsroute_op_free` does not wait for a stream-ordered operation: the read still happens in
/// stream order; its result is then only in the counters. The buffer must stay valid until the
/// stream has passed the call (freeing it earlier, e.g. with `cuMemFreeAsync` on another stream,
/// is the caller's error). The handle may be closed or freed meanwhile. Destroying the stream
/// with calls queued is allowed (CUDA runs its queued work first).
///
/// Routes and counters as `gdsroute_file_pread`, plus `stream_calls_ordered`. Errors at the call:
/// those of `gdsroute_file_pread` found before any I/O, `CUDA_UNAVAILABLE`, `CUDA_ERROR` (a bad
/// stream, or no current context for a default stream), `STREAM_CAPTURING` (the stream is being
/// captured into a CUDA graph: refused, as a host-side read cannot be captured). Where the driver
/// cannot make a stream wait on a host flag (no `cuStreamWaitValue32_v2`) and where the
/// `GDSROUTE_STREAM_ORDERED` setting is off, this does what KvikIO does: synchronises the stream
/// and reads before returning (counted in `stream_calls_blocking_no_stream_wait` or
/// `stream_calls_blocking_setting`). Under its default `auto`, on a stream the legacy default
/// stream waits for (the legacy and per-thread default streams, a stream created without
/// `CU_STREAM_NON_BLOCKING`), with `GDSROUTE_STREAM_RELAY=true` (the default), the call
/// is relayed: what moves its bytes is queued on the stream at the call (into device memory, the
/// copy engine's copies from pinned host slots that host threads fill from the file; a relay
/// kernel for host memory), so that a synchronous legacy-stream call of the program cannot
/// deadlock with it (counted in `stream_calls_relayed`; its tasks through the POSIX route). A
/// relayed read into device memory writes zeros into the requested range past the end of the
/// file, and copies the parts of the file in registered page-cache windows straight from them
/// (`posix_mapped_bytes`); should the file be written or changed between the call and the stream
/// reaching it, such a read fails with `IO_ERROR` (`ESTALE`) instead of delivering what the
/// windows held (docs/routing.md, "Relayed stream-ordered calls"). Otherwise (the setting off, compat mode OFF where cuFile must serve, nothing can be
/// queued) it blocks as above, counted in `stream_calls_blocking_legacy_waits`. At exit, the stream waits of calls not
/// done are released (docs/routing.md, "Stream-ordered calls at exit").
/// Ownership: free the operation with `gdsroute_op_free`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_read_async(
    file: *const File,
    buf: *mut c_void,
    size: usize,
    file_offset: u64,
    stream: *mut c_void,
    op: *mut *mut Operation,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let (file, buf, op) = unsafe { call_args(Direction::Read, file, buf, op, "op")? };
        // SAFETY: the caller keeps `buf` valid until the stream passed the call.
        let operation = Box::new(unsafe { file.read_async_raw(buf.cast(), size, file_offset, stream as usize)? });
        // SAFETY: checked by `out`.
        unsafe { write_out(op, Box::into_raw(operation)) };
        Ok(())
    })
}

/// Starts a stream-ordered write of `size` bytes from `buf` at `file_offset` (KvikIO's
/// `write_async`), ordered on `stream` as `gdsroute_file_read_async`: the write reads `buf`
/// after the work queued before it on the stream (a kernel producing the data) and the work
/// queued after it runs once the bytes are in the file (as `gdsroute_file_pwrite` leaves them:
/// written, not synced). Its result is as `gdsroute_file_pwrite`'s (all of `size`, or an error
/// after every task stopped); everything else as `gdsroute_file_read_async`, plus `EBADF` at the
/// call for a handle opened "r". The buffer must stay valid and unchanged (but by the stream's
/// earlier work) until the stream has passed the call.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_write_async(
    file: *const File,
    buf: *const c_void,
    size: usize,
    file_offset: u64,
    stream: *mut c_void,
    op: *mut *mut Operation,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let (file, buf, op) = unsafe { call_args(Direction::Write, file, buf.cast_mut(), op, "op")? };
        // SAFETY: the caller keeps `buf` valid until the stream passed the call.
        let operation = Box::new(unsafe { file.write_async_raw(buf.cast(), size, file_offset, stream as usize)? });
        // SAFETY: checked by `out`.
        unsafe { write_out(op, Box::into_raw(operation)) };
        Ok(())
    })
}

/// `gdsroute_file_read_async` in KvikIO's pointer form: the size and the file offset are read
/// through `size_p` and `file_offset_p` when the stream reaches the call (so work queued before
/// it may compute them), and the bytes read are written through `bytes_read_p` (-1 on error)
/// before the stream's later work runs. The three pointers must be aligned for their types
/// and memory the host can access while the stream waits: pageable or pinned host memory, or
/// managed memory of a device on which the CPU may access it while GPU work runs (concurrent
/// managed access); device memory, managed memory of other devices and misaligned pointers are
/// refused (`INVALID_ARGUMENT`).
/// They must stay valid until the stream has passed the call (the operation's settling tells it
/// too). The size and offset are checked when read: an invalid value fails the operation
/// (`OVERFLOW`), not the call, also where the call blocks instead of being ordered on the stream.
/// `buf` must be valid for the size read.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_read_async_ptr(
    file: *const File,
    buf: *mut c_void,
    size_p: *const usize,
    file_offset_p: *const u64,
    bytes_read_p: *mut isize,
    stream: *mut c_void,
    op: *mut *mut Operation,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let (file, buf, op) = unsafe { call_args(Direction::Read, file, buf, op, "op")? };
        // SAFETY: the caller keeps `buf` and the pointers valid until the stream passed the call.
        let operation = Box::new(unsafe { file.read_async_ptr_raw(buf.cast(), size_p, file_offset_p, bytes_read_p, stream as usize)? });
        // SAFETY: checked by `out`.
        unsafe { write_out(op, Box::into_raw(operation)) };
        Ok(())
    })
}

/// `gdsroute_file_write_async` in KvikIO's pointer form, as `gdsroute_file_read_async_ptr`: the
/// size and file offset read when the stream reaches the call, the bytes written (all of the
/// size, or -1 on error) through `bytes_written_p` before the stream goes on.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_write_async_ptr(
    file: *const File,
    buf: *const c_void,
    size_p: *const usize,
    file_offset_p: *const u64,
    bytes_written_p: *mut isize,
    stream: *mut c_void,
    op: *mut *mut Operation,
) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let (file, buf, op) = unsafe { call_args(Direction::Write, file, buf.cast_mut(), op, "op")? };
        // SAFETY: the caller keeps `buf` and the pointers valid until the stream passed the call.
        let operation = Box::new(unsafe { file.write_async_ptr_raw(buf.cast(), size_p, file_offset_p, bytes_written_p, stream as usize)? });
        // SAFETY: checked by `out`.
        unsafe { write_out(op, Box::into_raw(operation)) };
        Ok(())
    })
}

/// `fsync(2)` of the file: every write that finished before this call (a returned
/// `gdsroute_file_write`, a waited-for `gdsroute_file_pwrite`) is on the storage device, data and
/// metadata, when it returns. Operations still running are not waited for. Allowed on any open
/// handle, "r" included. `gdsroute_file_datasync` is the data-only variant.
/// Errors: `NULL_ARGUMENT`, `CLOSED_HANDLE`, `IO_ERROR` (errno: `EIO`, `ENOSPC`, ...).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_sync(file: *const File) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        unsafe { arg(file, "file")? }.sync()
    })
}

/// `fdatasync(2)` of the file: as `gdsroute_file_sync`, without the metadata that reading the
/// data back does not need (such as the modification time).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_datasync(file: *const File) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        unsafe { arg(file, "file")? }.datasync()
    })
}

/// Truncates or extends the file to `size` bytes (`ftruncate(2)` on the handle's descriptor):
/// bytes past a smaller end are gone, so later reads there return a short count or 0 (end of
/// file); an extension reads as zeros. The file's registered page-cache windows are dropped in
/// every handle of it in the process, before and after, so no later device read copies bytes
/// from before the truncation (docs/local-api.md, "Calls for file drivers"). Operations still
/// running are not waited for: a read or write racing the truncation sees the file before or
/// after it. Errors: `NULL_ARGUMENT`, `CLOSED_HANDLE`, `INVALID_ARGUMENT` (`size` above
/// INT64_MAX), `IO_ERROR` (errno in `gdsroute_last_error_errno`: `EBADF` at once for a handle
/// that cannot write, as opened "r"; `EFBIG`, `EPERM`, `EIO`, ...).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_truncate(file: *const File, size: u64) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        unsafe { arg(file, "file")? }.truncate(size)
    })
}

/// Takes an advisory `flock(2)` lock on the file, as HDF5's sec2 driver does: exclusive
/// (`LOCK_EX`) when `exclusive`, else shared (`LOCK_SH`); without `wait`, a lock held elsewhere
/// fails at once (`LOCK_NB`) instead of waiting. A signal while waiting waits again (`EINTR`).
/// The lock belongs to the handle's open file description: another handle of the file opened by
/// path is another holder (so two handles conflict as two processes do); a handle from
/// `gdsroute_file_open_fd` holds it together with the caller's descriptor and its duplicates,
/// and a child process that inherited them. Locking again converts the lock. It is released by
/// `gdsroute_file_unlock`, or when the last descriptor of the description closes (for a handle
/// opened by path, its close, once the operations in flight ended). Errors: `NULL_ARGUMENT`,
/// `CLOSED_HANDLE`, `IO_ERROR` with errno `EWOULDBLOCK` (`wait` false and a conflicting lock is
/// held), `ENOLCK`, or `ENOSYS`/`EOPNOTSUPP` where the file system has no such locks.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_lock(file: *const File, exclusive: bool, wait: bool) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        unsafe { arg(file, "file")? }.lock(exclusive, wait)
    })
}

/// Releases the handle's `flock` lock (`LOCK_UN`); OK without one. Errors: `NULL_ARGUMENT`,
/// `CLOSED_HANDLE`, `IO_ERROR`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_unlock(file: *const File) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        unsafe { arg(file, "file")? }.unlock()
    })
}

/// Copies this handle's counters into `*stats` (see `gdsroute_stats_get` for the `struct_size`
/// protocol). The `cufile_n_*` fields are process-wide only and read 0 here
/// (`cufile_stats_state` = `GDSROUTE_CUFILE_STATS_STATE_PROCESS_WIDE_ONLY`).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_stats(file: *const File, stats: *mut Counters) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        let file = unsafe { arg(file, "file")? };
        // SAFETY: the caller passes a stats struct with `struct_size` set, or NULL.
        unsafe { super::stats::copy_counters_out(&file.stats(), stats) }
    })
}

/// Zeroes this handle's counters.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_stats_reset(file: *const File) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        unsafe { arg(file, "file")? }.reset_stats();
        Ok(())
    })
}

/// Closes the file. Idempotent: closing a closed handle, or NULL, returns `GDSROUTE_STATUS_OK`.
/// Later reads return `GDSROUTE_STATUS_CLOSED_HANDLE`. Reads in flight complete normally. The
/// file's registered page-cache windows are unpinned when the last read in flight finishes.
/// The handle itself stays allocated until `gdsroute_file_free`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_close(file: *const File) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live handle or NULL.
        if let Some(file) = unsafe { file.as_ref() } {
            file.close();
        }
        Ok(())
    })
}

/// Closes (if needed) and frees a handle. NULL is a no-op. The pointer must not be used again;
/// freeing twice is undefined behaviour (use `gdsroute_file_close` for an idempotent close).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_file_free(file: *mut File) {
    let _ = guard(|| {
        if !file.is_null() {
            // SAFETY: the pointer came from Box::into_raw in an open call and is freed once.
            drop(unsafe { Box::from_raw(file) });
        }
        Ok(())
    });
}

symbol_version!(gdsroute_file_open, gdsroute_file_open_with_compat_mode, gdsroute_file_compat_mode, gdsroute_file_cufile_verdict, gdsroute_file_size, gdsroute_file_read, gdsroute_file_pread, gdsroute_file_stats, gdsroute_file_stats_reset, gdsroute_file_close, gdsroute_file_free);
symbol_version!(GDSROUTE_0.2: gdsroute_file_write, gdsroute_file_pwrite, gdsroute_file_sync, gdsroute_file_datasync);
symbol_version!(GDSROUTE_0.2: gdsroute_file_read_async, gdsroute_file_write_async, gdsroute_file_read_async_ptr, gdsroute_file_write_async_ptr);
symbol_version!(GDSROUTE_0.2: gdsroute_file_fd, gdsroute_file_fd_open_flags, gdsroute_file_direct_fd, gdsroute_file_is_closed, gdsroute_file_cufile_in_use);
symbol_version!(GDSROUTE_0.2: gdsroute_file_open_fd, gdsroute_file_open_fd_with_compat_mode, gdsroute_file_truncate, gdsroute_file_lock, gdsroute_file_unlock);
