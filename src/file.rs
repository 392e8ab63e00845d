//! A file handle: open with KvikIO's flags, read synchronously (`read`, one call on the calling
//! thread) or in parallel (`pread`, task-size tasks on the shared pool, returning an
//! `Operation`). Reads in flight keep the descriptor alive, so closing a handle never lets a
//! task read from a recycled descriptor.

use crate::error::{Error, Result};
use crate::operation::Operation;
use crate::posix;
use crate::route::{self, Destination};
use crate::settings::{self, CompatMode};
use crate::stats::{self, Counters, Route, StatsCell};
use crate::task_split;
use crate::thread_pool;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, RwLock};

/// KvikIO's open flags. Stricter than KvikIO, which looks at two characters only: the whole
/// string must be one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenFlags {
    /// "r": read only.
    Read,
    /// "r+": read and write.
    ReadWrite,
    /// "w": write only, create, truncate.
    Write,
    /// "w+": read and write, create, truncate.
    WriteRead,
}

impl OpenFlags {
    /// Parses "r", "r+", "w" or "w+".
    pub fn parse(text: &str) -> Result<OpenFlags> {
        match text {
            "r" => Ok(OpenFlags::Read),
            "r+" => Ok(OpenFlags::ReadWrite),
            "w" => Ok(OpenFlags::Write),
            "w+" => Ok(OpenFlags::WriteRead),
            _ => Err(Error::InvalidFlags(text.to_string())),
        }
    }

    fn os_flags(self) -> libc::c_int {
        let access = match self {
            OpenFlags::Read => libc::O_RDONLY,
            OpenFlags::ReadWrite => libc::O_RDWR,
            OpenFlags::Write => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            OpenFlags::WriteRead => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        };
        access | libc::O_CLOEXEC
    }

    fn as_str(self) -> &'static str {
        match self {
            OpenFlags::Read => "r",
            OpenFlags::ReadWrite => "r+",
            OpenFlags::Write => "w",
            OpenFlags::WriteRead => "w+",
        }
    }
}

/// The open state shared by the handle and its reads in flight.
struct OpenFile {
    fd: OwnedFd,
    path: String,
    flags: OpenFlags,
}

impl OpenFile {
    fn io_error(&self, op: &'static str, offset: u64, source: std::io::Error) -> Error {
        let source = if source.raw_os_error() == Some(libc::EBADF) && self.flags == OpenFlags::Write {
            std::io::Error::new(source.kind(), format!("{source}; the file was opened write-only (\"w\")"))
        } else {
            source
        };
        Error::Io { op, path: self.path.clone(), offset, source }
    }

    /// One POSIX read of a chunk, as a task body.
    ///
    /// # Safety
    /// `dst` valid for `len` bytes.
    unsafe fn read_chunk(&self, dst: *mut u8, len: usize, offset: u64) -> Result<usize> {
        // SAFETY: forwarded from the caller.
        unsafe { posix::read_full_at(self.fd.as_raw_fd(), dst, len, offset) }.map_err(|e| self.io_error("pread", offset, e))
    }
}

/// A caller's buffer pointer moved into a task. The caller guarantees (C API contract, or the
/// borrow in `File::read_into`) that it stays valid until the operation finishes.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: the pointer is only dereferenced by tasks of one operation, on disjoint ranges.
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// The address `offset` bytes in (a method, so closures capture the whole Send wrapper).
    fn at(self, offset: usize) -> *mut u8 {
        self.0.wrapping_add(offset)
    }
}

/// An open file.
pub struct File {
    open: RwLock<Option<Arc<OpenFile>>>,
    compat_mode: CompatMode,
    stats: Arc<StatsCell>,
}

fn check_range(size: usize, offset: u64) -> Result<()> {
    if size > isize::MAX as usize {
        return Err(Error::Overflow(format!("size {size} exceeds ssize_t")));
    }
    let end = offset.checked_add(size as u64);
    if offset > i64::MAX as u64 || end.is_none_or(|e| e > i64::MAX as u64) {
        return Err(Error::Overflow(format!("offset {offset} + size {size} exceeds off_t")));
    }
    Ok(())
}

impl File {
    /// Opens `path` (any bytes but NUL) with KvikIO's `flags` and `mode` for created files.
    /// `compat_mode` overrides the process setting for this handle; `None` takes the setting's
    /// value now (later changes of the setting do not affect this handle, as in KvikIO).
    pub fn open(path: &[u8], flags: &str, mode: u32, compat_mode: Option<CompatMode>) -> Result<File> {
        let settings = settings::global()?;
        let flags = OpenFlags::parse(flags)?;
        if path.is_empty() {
            return Err(Error::InvalidPath("empty path".into()));
        }
        let display = String::from_utf8_lossy(path).into_owned();
        let c_path = CString::new(path).map_err(|_| Error::InvalidPath(format!("{display:?} contains a NUL byte")))?;
        if mode > 0o7777 {
            return Err(Error::InvalidArgument(format!("mode {mode:#o} has bits outside 0o7777")));
        }
        // SAFETY: c_path is NUL-terminated; the mode is passed as the variadic third argument.
        let fd: RawFd = unsafe { libc::open(c_path.as_ptr(), flags.os_flags(), mode as libc::c_uint) };
        if fd < 0 {
            return Err(Error::Open { path: display, flags: flags.as_str().into(), source: std::io::Error::last_os_error() });
        }
        // SAFETY: fd was just returned by open and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(File {
            open: RwLock::new(Some(Arc::new(OpenFile { fd, path: display, flags }))),
            compat_mode: compat_mode.unwrap_or_else(|| settings.compat_mode()),
            stats: Arc::new(StatsCell::default()),
        })
    }

    fn open_file(&self) -> Result<Arc<OpenFile>> {
        self.open.read().unwrap_or_else(|p| p.into_inner()).clone().ok_or(Error::ClosedHandle)
    }

    /// Closes the handle; idempotent. Reads in flight finish on the descriptor they hold.
    pub fn close(&self) {
        self.open.write().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// True after `close`.
    pub fn is_closed(&self) -> bool {
        self.open.read().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    /// The compat mode this handle was opened with.
    pub fn compat_mode(&self) -> CompatMode {
        self.compat_mode
    }

    /// The path as opened (lossy UTF-8).
    pub fn path(&self) -> Result<String> {
        Ok(self.open_file()?.path.clone())
    }

    /// Current size of the file (fstat).
    pub fn size(&self) -> Result<u64> {
        let file = self.open_file()?;
        posix::file_size(file.fd.as_raw_fd()).map_err(|e| file.io_error("fstat", 0, e))
    }

    /// This handle's counters.
    pub fn stats(&self) -> Counters {
        let mut c = self.stats.snapshot();
        c.cufile_stats_state = stats::CufileStatsState::ProcessWideOnly as u64;
        c
    }

    /// Zeroes this handle's counters.
    pub fn reset_stats(&self) {
        self.stats.reset();
    }

    /// Reads `size` bytes at `offset` in one synchronous call on the calling thread. Returns the
    /// bytes read (fewer only at end of file).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size` bytes for the duration of the call.
    pub unsafe fn read_raw(&self, dst: *mut u8, size: usize, offset: u64) -> Result<usize> {
        check_range(size, offset)?;
        let file = self.open_file()?;
        let plan = route::plan(Destination::Host);
        // SAFETY: forwarded from the caller.
        let result = unsafe { file.read_chunk(dst, size, offset) };
        let delivered = *result.as_ref().unwrap_or(&0) as u64;
        if size > 0 {
            stats::record_task(&self.stats, plan.route, delivered, result.is_err());
        }
        stats::record_call(&self.stats, size as u64, delivered, result.is_err());
        result
    }

    /// Starts a parallel read of `size` bytes at `offset`, split into task-size tasks on the
    /// shared pool. The returned operation must be waited for (or dropped, which waits) before
    /// the buffer is released.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size` bytes until the returned operation has finished.
    pub unsafe fn pread_raw(&self, dst: *mut u8, size: usize, offset: u64) -> Result<Operation> {
        check_range(size, offset)?;
        let snapshot = settings::global()?.snapshot();
        let pool = thread_pool::global()?;
        let file = self.open_file()?;
        let plan = route::plan(Destination::Host);
        let chunks = task_split::split(size, offset, snapshot.task_size);
        let (operation, slots) = Operation::new(chunks.iter().map(|c| c.len).collect(), size as u64, Arc::clone(&self.stats));
        let dst = SendPtr(dst);
        for (chunk, slot) in chunks.into_iter().zip(slots) {
            let file = Arc::clone(&file);
            let stats = Arc::clone(&self.stats);
            pool.submit(move || {
                let task = AssertUnwindSafe(|| {
                    // SAFETY: chunks tile [dst, dst + size) without overlap and the caller keeps
                    // the buffer alive until the operation finishes.
                    unsafe { file.read_chunk(dst.at(chunk.buf_offset), chunk.len, chunk.file_offset) }
                });
                let result = catch_unwind(task).unwrap_or_else(|p| Err(Error::Panic(panic_message(&p))));
                record_task_result(&stats, plan.route, &result);
                slot.finish(result);
            });
        }
        Ok(operation)
    }

    /// Safe parallel read into a slice; waits for completion. Returns the bytes read.
    pub fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        // SAFETY: the borrow outlives the wait below.
        let operation = unsafe { self.pread_raw(buf.as_mut_ptr(), buf.len(), offset)? };
        operation.wait(thread_pool::global().ok())
    }
}

fn record_task_result(cell: &StatsCell, route: Route, result: &Result<usize>) {
    stats::record_task(cell, route, *result.as_ref().unwrap_or(&0) as u64, result.is_err());
}

/// Text of a caught panic payload.
pub fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_strict() {
        assert_eq!(OpenFlags::parse("r").unwrap(), OpenFlags::Read);
        assert_eq!(OpenFlags::parse("w+").unwrap(), OpenFlags::WriteRead);
        for bad in ["", "a", "x", "rb", "r+b", "R", "ww"] {
            assert!(matches!(OpenFlags::parse(bad), Err(Error::InvalidFlags(_))), "{bad}");
        }
        assert_ne!(OpenFlags::Read.os_flags() & libc::O_CLOEXEC, 0);
    }

    #[test]
    fn range_checks() {
        assert!(check_range(10, 0).is_ok());
        assert!(check_range(0, i64::MAX as u64).is_ok());
        assert!(matches!(check_range(1, i64::MAX as u64), Err(Error::Overflow(_))));
        assert!(matches!(check_range(usize::MAX, 0), Err(Error::Overflow(_))));
        assert!(matches!(check_range(0, u64::MAX), Err(Error::Overflow(_))));
    }
}
