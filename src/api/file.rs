//! A file handle: open with KvikIO's flags or from a caller's descriptor, read or write
//! synchronously (`read_raw`, `write_raw`: one call on the calling thread) or in parallel
//! (`pread_raw`, `pwrite_raw`: task-size tasks on the shared pool, returning an `Operation`), sync,
//! truncate, lock, close, and the verdicts on cuFile and direct I/O. The transfers themselves are
//! `io::engine`'s (`run`, `submit`); the open state they share with the handle is
//! `io::open_file::OpenFile`.
//!
//! One job in one file, although over 450 lines: the handle's public methods, most a documented
//! call into the engine or the open file.

use crate::backend::cufile::file::CufileFile;
use crate::backend::cufile::gds::Unusable;
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::io::engine;
use crate::io::open_file::{Access, OpenFile, OpenFlags, Opened};
use crate::io::operation::Operation;
use crate::io::request::Request;
use crate::io::schedule::Start;
use crate::io::stream_order::{ParamPointers, Params, StreamCall, StreamSource};
use crate::sys::cuda::CallerStream;
use crate::io::thread_pool;
use crate::settings::{self, CompatMode, FdChoice};
use crate::stats::{self, Counters, StatsCell};
use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, RwLock};

/// An open file.
pub struct File {
    open: RwLock<Option<Arc<OpenFile>>>,
    /// The path as opened (lossy UTF-8), for messages after `close`.
    path: String,
    compat_mode: CompatMode,
    stats: Arc<StatsCell>,
}

impl File {
    /// Opens `path` (any bytes but NUL) with KvikIO's `flags` ("r", "r+", "w", "w+") or an
    /// exclusive creation ("x", "x+": `O_CREAT | O_EXCL`, an existing file is `Open` with
    /// `EEXIST`), and `mode` for created files. `compat_mode` overrides the process setting for
    /// this handle; `None` takes the setting's value now (later changes of the setting do not
    /// affect this handle, as in KvikIO).
    pub fn open(path: &[u8], flags: &str, mode: u32, compat_mode: Option<CompatMode>) -> Result<File> {
        crate::trace::event("open.start", 0);
        crate::api::report::arm();
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
        crate::trace::event("open.descriptor", 0);
        let open = OpenFile::new(fd, display, Opened::Path(flags))?;
        crate::trace::event("open.handle", 0);
        let file = File::of(open, compat_mode.unwrap_or_else(|| settings.compat_mode()));
        crate::trace::event("open.end", 0);
        Ok(file)
    }

    /// Opens a handle on the file open as the caller's descriptor `fd`, for code that opened the
    /// file itself (a file driver). The handle reads and writes through a duplicate
    /// (`F_DUPFD_CLOEXEC`): the caller keeps `fd` and closes it when it likes, before or after
    /// the handle. The duplicate shares `fd`'s open file description: its file offset, status
    /// flags and `flock` locks (`lock` through the handle locks for `fd` too). Its access mode is
    /// `fd`'s: `O_RDONLY` behaves as "r", `O_WRONLY` as "w" without the truncation, `O_RDWR` as
    /// "r+". Messages and monitors name the file by what `/proc/self/fd/N` links to, else
    /// "fd N". Everything else (the `O_DIRECT` descriptor, cuFile's registration, the page cache,
    /// the pools) is as for a handle opened by path. `compat_mode` as in `open`.
    ///
    /// Errors: `Open` with `EBADF` for a descriptor opened `O_PATH` or with the access mode 3
    /// (neither can read or write), or another errno where it cannot be duplicated (`EMFILE`);
    /// `InvalidArgument` for a descriptor with `O_DIRECT` (the handle's own transfers are
    /// buffered, and it opens its `O_DIRECT` descriptor itself) or with `O_APPEND` that can write
    /// (Linux's `pwrite` then appends wherever it was asked to write); `InvalidSetting`.
    pub fn open_fd(fd: BorrowedFd<'_>, compat_mode: Option<CompatMode>) -> Result<File> {
        File::open_descriptor(fd.as_raw_fd(), compat_mode)
    }

    /// `open_fd` for a descriptor number from C, which may be anything: a negative one is
    /// `InvalidArgument`, one not open `Open` with `EBADF` (asked of the kernel, never used
    /// otherwise before it was duplicated).
    pub(crate) fn open_descriptor(fd: RawFd, compat_mode: Option<CompatMode>) -> Result<File> {
        crate::api::report::arm();
        let settings = settings::global()?;
        if fd < 0 {
            return Err(Error::InvalidArgument(format!("fd {fd} is not a descriptor")));
        }
        let display = crate::sys::fs::descriptor_target(fd).map_or_else(|| format!("fd {fd}"), |p| p.to_string_lossy().into_owned());
        let refused = |why: &str, source: std::io::Error| Error::Open { path: display.clone(), flags: format!("descriptor {fd} ({why})"), source };
        let ebadf = || std::io::Error::from_raw_os_error(libc::EBADF);
        let status = crate::sys::fs::status_flags(fd).map_err(|e| refused("fcntl F_GETFL", e))?;
        if status & libc::O_PATH != 0 {
            return Err(refused("O_PATH: neither reads nor writes", ebadf()));
        }
        let access = Access::of_status_flags(status).ok_or_else(|| refused("access mode 3: neither reads nor writes", ebadf()))?;
        if status & libc::O_DIRECT != 0 {
            return Err(Error::InvalidArgument(format!(
                "{display:?} (fd {fd}) is open with O_DIRECT: a handle transfers through its descriptor with buffered I/O, and opens an O_DIRECT one of its own where the direct-I/O settings ask; pass a descriptor without O_DIRECT"
            )));
        }
        if status & libc::O_APPEND != 0 && access != Access::ReadOnly {
            return Err(Error::InvalidArgument(format!(
                "{display:?} (fd {fd}) is open with O_APPEND: Linux's pwrite then appends whatever the offset, so the handle's writes would land at the end; pass a descriptor without O_APPEND"
            )));
        }
        let duplicate = crate::sys::fs::duplicate(fd).map_err(|e| refused("F_DUPFD_CLOEXEC", e))?;
        let open = OpenFile::new(duplicate, display, Opened::Descriptor(access))?;
        Ok(File::of(open, compat_mode.unwrap_or_else(|| settings.compat_mode())))
    }

    /// The handle of a file opened now, under `compat_mode`; starts the device route's
    /// preparation in the background (`io::warm_up`).
    fn of(open: OpenFile, compat_mode: CompatMode) -> File {
        crate::io::warm_up::prepare_in_background(compat_mode);
        File { path: open.path.clone(), open: RwLock::new(Some(Arc::new(open))), compat_mode, stats: Arc::new(StatsCell::default()) }
    }

    /// Runs this handle's parallel calls from now on on `pool` (a caller's `Pool`: its size and
    /// CPUs), or with `None` on the pool a handle opened now gets (the shared pool; under
    /// `KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE` its drive's). Calls in flight finish where they run.
    ///
    /// Errors: `ClosedHandle`; the settings or the drive's pool (`None` only).
    pub fn set_pool(&self, pool: Option<&crate::api::pool::Pool>) -> Result<()> {
        let file = self.open_file()?;
        let assigned = match pool {
            Some(pool) => thread_pool::Assigned::Caller(Arc::clone(&pool.inner)),
            None => thread_pool::Assigned::at_open(|| crate::sys::drive::drive_of(file.fd.as_raw_fd()))?,
        };
        *file.pool.lock().unwrap_or_else(|p| p.into_inner()) = assigned;
        Ok(())
    }

    /// Which pool runs this handle's parallel calls, in words: `shared`, `drive nvme0` (the pool
    /// of that drive), `no block device: memory` (tmpfs; also `network`, `fuse`, `overlay`,
    /// `other`), or `caller` (a `Pool` given with `set_pool`).
    ///
    /// Errors: `ClosedHandle`.
    pub fn pool_name(&self) -> Result<String> {
        Ok(self.open_file()?.pool.lock().unwrap_or_else(|p| p.into_inner()).describe())
    }

    fn open_file(&self) -> Result<Arc<OpenFile>> {
        self.open.read().unwrap_or_else(|p| p.into_inner()).clone().ok_or_else(|| Error::ClosedHandle { path: self.path.clone() })
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
        crate::sys::fs::file_size(file.fd.as_raw_fd()).map_err(|e| file.io_error("fstat", 0, e))
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

    /// This handle's part of a batch entry (`api::batch`): its counters, compat mode and open
    /// file (a closed handle's error, which fails the entry when it is submitted).
    pub(crate) fn batch_entry(&self, request: Request, cookie: u64) -> crate::io::batch::Entry {
        crate::io::batch::Entry { stats: Arc::clone(&self.stats), compat_mode: self.compat_mode, file: self.open_file(), request, cookie }
    }

    /// Counts a call of `direction` on this handle that was rejected before it reached
    /// `read_raw`, `pread_raw`, `write_raw` or `pwrite_raw` (a NULL pointer argument at the C
    /// boundary).
    pub(crate) fn record_rejected_call(&self, direction: Direction) {
        stats::record_refused_call(Some(&self.stats), direction);
    }

    /// Whether cuFile can serve this file under the handle's compat mode, deciding it now if no
    /// device read has yet (this may open the cuFile driver). `Ok` means reads of device memory
    /// at or above the GDS threshold go through cuFile.
    pub fn cufile_verdict(&self) -> Result<std::result::Result<(), Unusable>> {
        let file = self.open_file()?;
        if self.compat_mode == CompatMode::On {
            return Ok(Err(Unusable::compat_on()));
        }
        Ok(file.cufile(self.compat_mode).map(|_| ()))
    }

    /// Whether this file's POSIX reads and writes can take direct I/O (the `auto_direct_io_read`
    /// and `_write` settings), opening the `O_DIRECT` descriptor now if no task has; the reason
    /// where they cannot.
    pub fn direct_io_verdict(&self) -> Result<std::result::Result<(), String>> {
        Ok(self.open_file()?.direct_descriptor().map(|_| ()))
    }

    /// The descriptor the handle reads and writes through (KvikIO's `FileHandle::fd()`): owned by
    /// the handle, valid until it is closed and every call on it has finished; the caller must not
    /// close it.
    pub fn fd(&self) -> Result<RawFd> {
        Ok(self.open_file()?.fd.as_raw_fd())
    }

    /// The open flags of `fd` as `fcntl(F_GETFL)` reports them (KvikIO's `fd_open_flags()`):
    /// the access mode (`O_RDONLY`, `O_WRONLY`, `O_RDWR`) and status flags such as `O_APPEND`.
    pub fn fd_open_flags(&self) -> Result<i32> {
        let file = self.open_file()?;
        crate::sys::fs::status_flags(file.fd.as_raw_fd()).map_err(|e| file.io_error("fcntl(F_GETFL)", 0, e))
    }

    /// The handle's `O_DIRECT` descriptor where one is open already (a direct-I/O task or
    /// `direct_io_verdict` opened it), `None` otherwise; asking opens none. Owned by the handle,
    /// as `fd`. (cuFile's own `O_DIRECT` descriptor, where it registered one, is cuFile's.)
    pub fn direct_fd(&self) -> Result<Option<RawFd>> {
        let file = self.open_file()?;
        Ok(file.direct.get().and_then(|d| d.as_ref().ok()).map(|fd| fd.as_raw_fd()))
    }

    /// Whether cuFile is in use for this handle: its file is registered with cuFile, by a call
    /// that took cuFile's route or by `cufile_verdict`. Asking decides nothing (no driver open,
    /// no registration); `cufile_verdict` decides.
    pub fn cufile_in_use(&self) -> Result<bool> {
        let file = self.open_file()?;
        Ok(!crate::backend::cufile::gds::is_shut_down() && file.cufile.get().is_some_and(|c| c.is_ok()))
    }

    /// Which descriptor cuFile registered for this file, and why; `None` before a device read or
    /// `cufile_verdict` registered it, when it could not be, or after `close`.
    pub fn cufile_descriptor(&self) -> Option<FdChoice> {
        let file = self.open_file().ok()?;
        file.cufile.get()?.as_ref().ok().map(CufileFile::choice)
    }

    /// Reads `size` bytes at `offset` in one synchronous call on the calling thread (KvikIO's
    /// `read`; `io::engine::run`). Returns the bytes read, fewer only at end of file.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size` bytes for the duration of the call.
    pub unsafe fn read_raw(&self, dst: *mut u8, size: usize, offset: u64) -> Result<usize> {
        // SAFETY: forwarded from the caller.
        unsafe { engine::run(&self.stats, self.compat_mode, || self.open_file(), Request { direction: Direction::Read, buf: dst, size, offset }) }
    }

    /// Starts a parallel read of `size` bytes at `offset` (KvikIO's `pread`; `io::engine::submit`).
    /// The returned operation must be waited for (or dropped, which waits) before the buffer is
    /// released.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size` bytes until the returned operation has finished.
    pub unsafe fn pread_raw(&self, dst: *mut u8, size: usize, offset: u64) -> Result<Operation> {
        // SAFETY: forwarded from the caller.
        unsafe { engine::submit(&self.stats, self.compat_mode, || self.open_file(), Request { direction: Direction::Read, buf: dst, size, offset }, Start::Now) }
    }

    /// Writes `size` bytes from `src` at `offset` in one synchronous call on the calling thread
    /// (KvikIO's `write`; `io::engine::run` with `Direction::Write`). Returns `size`: a write
    /// covers its whole request or fails (see docs/writes.md, "The short-write rule").
    ///
    /// # Safety
    /// `src` must be valid for reads of `size` bytes, unchanged, for the duration of the call.
    pub unsafe fn write_raw(&self, src: *const u8, size: usize, offset: u64) -> Result<usize> {
        // SAFETY: forwarded from the caller; a write only reads the buffer.
        unsafe { engine::run(&self.stats, self.compat_mode, || self.open_file(), Request { direction: Direction::Write, buf: src.cast_mut(), size, offset }) }
    }

    /// Starts a parallel write of `size` bytes from `src` at `offset` (KvikIO's `pwrite`;
    /// `io::engine::submit`): task-size tasks on the pool; waiting gives `size`, or the first error in file order once
    /// every task stopped.
    ///
    /// # Safety
    /// `src` must be valid for reads of `size` bytes, unchanged, until the operation has finished.
    pub unsafe fn pwrite_raw(&self, src: *const u8, size: usize, offset: u64) -> Result<Operation> {
        // SAFETY: forwarded from the caller; a write only reads the buffer.
        unsafe { engine::submit(&self.stats, self.compat_mode, || self.open_file(), Request { direction: Direction::Write, buf: src.cast_mut(), size, offset }, Start::Now) }
    }

    /// Starts a stream-ordered read of `size` bytes at `offset` into `dst`, ordered on the CUDA
    /// `stream` (a `CUstream` as an address; 0 or 1 the legacy default stream, 2 the calling
    /// thread's per-thread default stream): it runs once the stream has reached this point and
    /// the stream's later work waits for it (`io::stream_order`). Returns at once; the operation
    /// settles once the stream passed the point. Dropping the operation does not wait.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size` bytes until the stream has passed the call;
    /// `stream` must be a live stream (or a default one) until then.
    pub unsafe fn read_async_raw(&self, dst: *mut u8, size: usize, offset: u64, stream: usize) -> Result<Operation> {
        let request = Request { direction: Direction::Read, buf: dst, size, offset };
        // SAFETY: forwarded from the caller.
        unsafe { self.on_stream(request, StreamSource::Cuda(CallerStream::from_raw(stream)), Params::Given) }
    }

    /// Starts a stream-ordered write of `size` bytes from `src` at `offset`, as `read_async_raw`.
    ///
    /// # Safety
    /// `src` must be valid for reads of `size` bytes, unchanged by anything but the stream's
    /// earlier work, until the stream has passed the call; `stream` as in `read_async_raw`.
    pub unsafe fn write_async_raw(&self, src: *const u8, size: usize, offset: u64, stream: usize) -> Result<Operation> {
        let request = Request { direction: Direction::Write, buf: src.cast_mut(), size, offset };
        // SAFETY: forwarded from the caller.
        unsafe { self.on_stream(request, StreamSource::Cuda(CallerStream::from_raw(stream)), Params::Given) }
    }

    /// A stream-ordered read whose size and file offset are read through `size_p` and `offset_p`
    /// when the stream reaches the call, and whose bytes read (or -1 on error) are written
    /// through `bytes_p` before the stream goes on (KvikIO's `read_async`).
    ///
    /// # Safety
    /// As `read_async_raw` for `dst` (for the size read at stream time); the three pointers are
    /// host, pinned or managed memory, valid until the stream passed the call.
    pub unsafe fn read_async_ptr_raw(&self, dst: *mut u8, size_p: *const usize, offset_p: *const u64, bytes_p: *mut isize, stream: usize) -> Result<Operation> {
        // SAFETY: forwarded from the caller.
        unsafe { self.async_ptr(Direction::Read, dst, size_p, offset_p, bytes_p, stream) }
    }

    /// The write of `read_async_ptr_raw` (KvikIO's `write_async`): the bytes written, all of the
    /// size or -1, through `bytes_p`.
    ///
    /// # Safety
    /// As `write_async_raw` for `src`; the pointers as in `read_async_ptr_raw`.
    pub unsafe fn write_async_ptr_raw(&self, src: *const u8, size_p: *const usize, offset_p: *const u64, bytes_p: *mut isize, stream: usize) -> Result<Operation> {
        // SAFETY: forwarded from the caller.
        unsafe { self.async_ptr(Direction::Write, src.cast_mut(), size_p, offset_p, bytes_p, stream) }
    }

    /// # Safety
    /// As `read_async_ptr_raw`.
    unsafe fn async_ptr(&self, direction: Direction, buf: *mut u8, size_p: *const usize, offset_p: *const u64, bytes_p: *mut isize, stream: usize) -> Result<Operation> {
        let request = Request { direction, buf, size: 0, offset: 0 };
        let params = Params::Behind(ParamPointers { size: size_p, offset: offset_p, bytes: bytes_p });
        // SAFETY: forwarded from the caller.
        unsafe { self.on_stream(request, StreamSource::Cuda(CallerStream::from_raw(stream)), params) }
    }

    /// A stream-ordered call through the engine (`Start::OnStream`).
    ///
    /// # Safety
    /// The buffer (and pointers of `params`) stay valid until the stream passed the call.
    unsafe fn on_stream(&self, request: Request, stream: StreamSource, params: Params) -> Result<Operation> {
        let start = Start::OnStream(StreamCall { stream, params });
        // SAFETY: forwarded from the caller.
        unsafe { engine::submit(&self.stats, self.compat_mode, || self.open_file(), request, start) }
    }

    /// The open file behind the handle, for tests of what it holds (its page cache).
    #[cfg(test)]
    pub(crate) fn open_file_for_tests(&self) -> Arc<OpenFile> {
        self.open_file().unwrap()
    }

    /// A stream-ordered call on a test's stream (`StreamSource::Fake`), as `on_stream`.
    ///
    /// # Safety
    /// As `on_stream`.
    #[cfg(test)]
    pub(crate) unsafe fn stream_call_for_tests(&self, request: Request, stream: StreamSource, params: Params) -> Result<Operation> {
        // SAFETY: forwarded from the caller.
        unsafe { self.on_stream(request, stream, params) }
    }

    /// Safe parallel write of a slice; waits for completion. Returns the bytes written (all).
    pub fn write_from(&self, buf: &[u8], offset: u64) -> Result<usize> {
        // SAFETY: the borrow outlives the wait below.
        let operation = unsafe { self.pwrite_raw(buf.as_ptr(), buf.len(), offset)? };
        operation.wait()
    }

    /// `fsync(2)`: what reached the file (finished writes) is on the storage device when this
    /// returns, data and metadata. Operations still in flight are not waited for.
    pub fn sync(&self) -> Result<()> {
        let file = self.open_file()?;
        crate::sys::fs::fsync(file.fd.as_raw_fd(), false).map_err(|e| file.io_error("fsync", 0, e))
    }

    /// `fdatasync(2)`: as `sync`, without metadata the data does not need (times).
    pub fn datasync(&self) -> Result<()> {
        let file = self.open_file()?;
        crate::sys::fs::fsync(file.fd.as_raw_fd(), true).map_err(|e| file.io_error("fdatasync", 0, e))
    }

    /// Truncates or extends the file to `size` bytes (`ftruncate(2)`; KvikIO has no such call, a
    /// file driver needs it). Bytes past a new, smaller end are gone: later reads stop there;
    /// an extension reads as zeros. Registered page-cache windows of the file are dropped in
    /// every handle of it (`io::open_file::OpenFile::set_len`). Calls in flight are not waited for.
    ///
    /// Errors: `ClosedHandle`; `InvalidArgument` for a size above `i64::MAX`; `Io` (`EBADF` at
    /// once for a read-only handle; `EFBIG`, `EPERM`, `EIO`, ...).
    pub fn truncate(&self, size: u64) -> Result<()> {
        let file = self.open_file()?;
        if i64::try_from(size).is_err() {
            return Err(Error::InvalidArgument(format!("cannot truncate {:?} to {size} bytes: above the largest off_t ({})", file.path, i64::MAX)));
        }
        file.set_len(size)
    }

    /// Takes an advisory `flock(2)` lock on the file: exclusive (`LOCK_EX`) or shared
    /// (`LOCK_SH`); with `wait` false it does not wait for a conflicting lock (`LOCK_NB`). A lock
    /// belongs to the open file description: another handle of the file, opened by path, is
    /// another holder; a handle from `open_fd` holds it with the caller's descriptor. Locking
    /// again converts the lock (shared to exclusive and back). The lock goes with `unlock`, or when
    /// the last descriptor of the description closes (the handle's close, once calls in flight
    /// finished, for a handle opened by path). A signal while waiting waits again (`EINTR`).
    ///
    /// Errors: `ClosedHandle`; `Io` with `EWOULDBLOCK` (`wait` false, held elsewhere), `ENOLCK`,
    /// or `ENOSYS`/`EOPNOTSUPP` where the file system has no such locks.
    pub fn lock(&self, exclusive: bool, wait: bool) -> Result<()> {
        let file = self.open_file()?;
        let (operation, name) = match (exclusive, wait) {
            (true, true) => (libc::LOCK_EX, "flock(LOCK_EX)"),
            (true, false) => (libc::LOCK_EX | libc::LOCK_NB, "flock(LOCK_EX | LOCK_NB)"),
            (false, true) => (libc::LOCK_SH, "flock(LOCK_SH)"),
            (false, false) => (libc::LOCK_SH | libc::LOCK_NB, "flock(LOCK_SH | LOCK_NB)"),
        };
        crate::sys::fs::flock(file.fd.as_raw_fd(), operation).map_err(|e| file.io_error(name, 0, e))
    }

    /// Releases the handle's `flock` lock (`LOCK_UN`); without one it does nothing.
    ///
    /// Errors: `ClosedHandle`; `Io`.
    pub fn unlock(&self) -> Result<()> {
        let file = self.open_file()?;
        crate::sys::fs::flock(file.fd.as_raw_fd(), libc::LOCK_UN).map_err(|e| file.io_error("flock(LOCK_UN)", 0, e))
    }

    /// Safe parallel read into a slice; waits for completion. Returns the bytes read.
    pub fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        // SAFETY: the borrow outlives the wait below.
        let operation = unsafe { self.pread_raw(buf.as_mut_ptr(), buf.len(), offset)? };
        operation.wait()
    }
}
