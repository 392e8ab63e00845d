//! A file handle: open with KvikIO's flags, read synchronously (`read`, one call on the calling
//! thread) or in parallel (`pread`, task-size tasks on the shared pool, returning an
//! `Operation`). Reads in flight keep the descriptor alive, so closing a handle never lets a
//! task read from a recycled descriptor.

use crate::sys::cuda::{self, MemoryKind};
use crate::backend::cufile::file::CufileFile;
use crate::backend::device;
use crate::error::{Error, Result};
use crate::backend::cufile::gds::{self, FallbackReason, Unusable};
use crate::io::operation::{Operation, Stop};
use crate::page_cache::{DeviceReadInFlight, PageCache, Segment};
use crate::backend::posix::{self, Delivered};
use crate::io::route::{self, Plan};
use crate::settings::{self, CompatMode, FdChoice, Snapshot};
use crate::stats::{self, Counters, Route, StatsCell, TaskOutcome};
use crate::io::task_split::{self, Chunk, Split};
use crate::io::thread_pool;
use once_cell::sync::OnceCell;
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
    /// Shared with the cuFile registration when that registered this descriptor.
    fd: Arc<OwnedFd>,
    c_path: CString,
    path: String,
    flags: OpenFlags,
    /// The per-file half of the AUTO probe, decided at the first device read that needs it.
    cufile: OnceCell<std::result::Result<CufileFile, Unusable>>,
    /// Windows of this file registered for direct copies (device POSIX reads).
    page_cache: Arc<PageCache>,
    /// A second descriptor with `O_DIRECT` for POSIX reads under `auto_direct_io_read`, opened at
    /// the first such read; the error where the file system has no direct I/O.
    direct: OnceCell<std::result::Result<OwnedFd, String>>,
}

impl OpenFile {
    fn io_error(&self, op: &'static str, offset: u64, source: std::io::Error) -> Error {
        // Keep errno intact for gdsroute_last_error_errno; say why EBADF happens in the op text.
        let op = if source.raw_os_error() == Some(libc::EBADF) && self.flags == OpenFlags::Write {
            "read of a file opened write-only (\"w\")"
        } else {
            op
        };
        Error::Io { op, path: self.path.clone(), offset, source }
    }

    /// The part of a request of `size` bytes at `offset` that a read can find, and whether the
    /// file's size bounds it: the request is clipped to the file's size at this moment (one
    /// `fstat`; a block device's size by `ioctl`). Bytes the file gains later, during the read,
    /// are not read (KvikIO reads on until a read comes back short or at end of file, so it may
    /// return them). A file whose size says nothing about its reads (a pipe, a character device, a
    /// directory) and a write-only handle (whose reads must fail as before, though "w" truncated
    /// the file) are not clipped. A zero-byte request makes no system call.
    fn readable(&self, size: usize, offset: u64) -> Result<(usize, bool)> {
        if size == 0 {
            return Ok((0, true));
        }
        if self.flags == OpenFlags::Write {
            return Ok((size, false));
        }
        let end = crate::sys::fs::readable_end(self.fd.as_raw_fd()).map_err(|e| self.io_error("fstat", offset, e))?;
        Ok(match end {
            // The result is at most `size`, so it fits.
            Some(end) => (end.saturating_sub(offset).min(size as u64) as usize, true),
            None => (size, false),
        })
    }

    /// The `O_DIRECT` descriptor for a read under `auto_direct_io_read` (`wanted`), opened on
    /// first use; `None` when not wanted or where the file cannot be read that way (no direct I/O
    /// on its file system, or a handle opened write-only, whose reads must fail as before).
    fn direct_fd(&self, wanted: bool) -> Option<RawFd> {
        wanted.then(|| self.direct_descriptor().ok()).flatten()
    }

    /// `direct_fd`, or why there is none.
    fn direct_descriptor(&self) -> std::result::Result<RawFd, String> {
        if self.flags == OpenFlags::Write {
            return Err("the handle is write-only".into());
        }
        let opened = self.direct.get_or_init(|| crate::backend::posix::direct_io::open_direct(self.fd.as_raw_fd()).map_err(|e| format!("O_DIRECT open failed: {e}")));
        opened.as_ref().map(|fd| fd.as_raw_fd()).map_err(Clone::clone)
    }

    /// Registers the file with cuFile (the per-file probe), on the descriptor the
    /// `GDSROUTE_CUFILE_FD` setting chooses now.
    fn register_with_cufile(&self, compat_mode: CompatMode) -> std::result::Result<CufileFile, Unusable> {
        // CUDA, libcufile, then AUTO's environment heuristics, then the driver (README's order).
        let gds = gds::process_for(compat_mode)?;
        let setting = settings::global().map(|s| s.cufile_fd()).unwrap_or_default();
        CufileFile::register(gds.library, setting, &self.c_path, &self.path, &self.fd)
    }

    /// The per-file verdict; once cuFile was shut down, "unusable" whatever was decided before,
    /// so AUTO falls back and OFF reports it.
    fn cufile(&self, compat_mode: CompatMode) -> std::result::Result<&CufileFile, Unusable> {
        if gds::is_shut_down() {
            return Err(Unusable::new(
                FallbackReason::DriverOpenFailed,
                "cuFile was shut down (gdsroute_shutdown, process exit, or this is a forked child)",
            ));
        }
        self.cufile.get_or_init(|| self.register_with_cufile(compat_mode)).as_ref().map_err(Clone::clone)
    }

    /// One task: `chunk` of the call into `target`, by the planned route. Returns what it
    /// delivered for the counters (bytes, those copied from the registered page cache, and
    /// whether a POSIX read had to wait for the disk).
    ///
    /// # Safety
    /// The target range of the chunk is writable memory of the caller.
    unsafe fn run_task(&self, plan: Plan, target: &Target, chunk: Chunk, snapshot: &Snapshot, compat_mode: CompatMode) -> Result<TaskOutcome> {
        let _in_flight = matches!(target, Target::Device { .. }).then(DeviceReadInFlight::enter);
        match (plan.route, target) {
            // SAFETY (all arms): the chunk lies in the caller's range (task_split tiles it).
            (_, Target::Host(ptr)) => {
                unsafe { self.read_chunk(ptr.at(chunk.buf_offset), chunk.len, chunk.file_offset, snapshot.direct_io_read) }.map(TaskOutcome::from)
            }
            (Route::Posix(_), Target::Device { kind, address, .. }) => unsafe {
                self.read_device_posix(kind, address + chunk.buf_offset as u64, chunk, snapshot)
            },
            (Route::Cufile, Target::Device { kind, base, base_offset, .. }) => {
                let registered = self.cufile(compat_mode).map_err(|u| Error::CufileUnavailable(u.message))?;
                unsafe {
                    crate::backend::cufile::read::cufile_read(
                        registered.library(),
                        registered.handle(),
                        &self.path,
                        kind,
                        *base,
                        base_offset + chunk.buf_offset as u64,
                        chunk.len,
                        chunk.file_offset,
                    )
                }
                .map(|bytes| TaskOutcome { bytes, ..TaskOutcome::default() })
            }
        }
    }

    /// A device task on our POSIX backend: windows of the file that are registered are copied
    /// straight from the page cache, the rest goes through bounce buffers (`page_cache`).
    ///
    /// # Safety
    /// `dst .. dst + chunk.len` is device memory of `kind` that the caller may overwrite.
    unsafe fn read_device_posix(&self, kind: &MemoryKind, dst: u64, chunk: Chunk, snapshot: &Snapshot) -> Result<TaskOutcome> {
        let fd = self.fd.as_raw_fd();
        let direct = self.direct_fd(snapshot.direct_io_read);
        let bounce = |dst: u64, len: usize, offset: u64| {
            // SAFETY: forwarded from the caller; each segment lies inside the chunk.
            unsafe { device::bounce_read(fd, direct, &self.path, kind, dst, len, offset, snapshot.bounce_buffer_size) }
        };
        // Direct I/O bypasses the page cache, so the registered page cache (which maps it) is not
        // used either.
        let (Some(ordinal), budget @ 1.., None) = (kind.device_ordinal(), snapshot.page_cache_pin_max, direct) else {
            return bounce(dst, chunk.len, chunk.file_offset).map(TaskOutcome::from);
        };
        let mut outcome = TaskOutcome::default();
        for segment in self.page_cache.plan(fd, chunk.file_offset, chunk.len, ordinal, budget) {
            let at = dst + outcome.bytes as u64;
            match segment {
                Segment::Registered { mapping, file_offset, len } => {
                    // SAFETY: the segment lies in the mapping (page_cache::plan) and in the chunk.
                    unsafe { device::copy_from_registered(kind, at, mapping.address_of(file_offset), len) }?;
                    outcome.bytes += len;
                    outcome.mapped_bytes += len;
                }
                Segment::Bounce { file_offset, len } => {
                    let read = bounce(at, len, file_offset)?;
                    outcome.bytes += read.bytes;
                    outcome.not_cached |= read.not_cached;
                    outcome.direct_bytes += read.direct_bytes;
                    if read.bytes < len {
                        break; // end of file
                    }
                }
            }
        }
        Ok(outcome)
    }

    /// One POSIX read of a chunk into host memory, as a task body: with `direct_io` (and a file
    /// that allows it) the page-aligned middle through the `O_DIRECT` descriptor.
    ///
    /// # Safety
    /// `dst` valid for `len` bytes.
    unsafe fn read_chunk(&self, dst: *mut u8, len: usize, offset: u64, direct_io: bool) -> Result<Delivered> {
        let fd = self.fd.as_raw_fd();
        if let Some(direct) = self.direct_fd(direct_io) {
            // SAFETY: forwarded from the caller.
            let read = unsafe { crate::backend::posix::direct_io::read_full_at_direct(fd, direct, dst, len, offset) }.map_err(|e| self.io_error("pread", offset, e))?;
            return Ok(Delivered { bytes: read.bytes, not_cached: false, direct_bytes: read.direct_bytes });
        }
        // SAFETY: forwarded from the caller.
        unsafe { posix::read_full_at_ahead(fd, dst, len, offset, len) }.map_err(|e| self.io_error("pread", offset, e))
    }
}

/// A caller's buffer pointer moved into a task. The caller guarantees (C API contract, or the
/// borrow in `File::read_into`) that it stays valid until the operation finishes.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: the pointer is only dereferenced by tasks of one operation, on disjoint ranges.
unsafe impl Send for SendPtr {}
// SAFETY: shared between the threads running tasks of one operation, which only compute the
// addresses of their own, disjoint ranges from it (`at`).
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The address `offset` bytes in (a method, so closures capture the whole Send wrapper).
    fn at(self, offset: usize) -> *mut u8 {
        self.0.wrapping_add(offset)
    }
}

/// Where a call's bytes go.
#[derive(Clone, Copy)]
enum Target {
    /// Host memory, written directly by pread.
    Host(SendPtr),
    /// Device or managed memory.
    Device {
        /// The pointer's kind (device, context).
        kind: MemoryKind,
        /// The destination address.
        address: u64,
        /// Start of its allocation (cuFile is given base + offset, as KvikIO does).
        base: u64,
        /// `address - base`.
        base_offset: u64,
    },
}

fn target_of(dst: *mut u8) -> Result<Target> {
    let kind = cuda::classify(dst.cast())?;
    if !kind.is_device() {
        return Ok(Target::Host(SendPtr(dst)));
    }
    let (base, _) = cuda::allocation_range(dst.cast())?;
    let address = dst as u64;
    Ok(Target::Device { kind, address, base, base_offset: address - base })
}

/// An open file.
pub struct File {
    open: RwLock<Option<Arc<OpenFile>>>,
    /// The path as opened (lossy UTF-8), for messages after `close`.
    path: String,
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
        let fd = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        crate::io::warm_up::prepare_in_background();
        Ok(File {
            path: display.clone(),
            open: RwLock::new(Some(Arc::new(OpenFile {
                fd,
                c_path,
                path: display,
                flags,
                cufile: OnceCell::new(),
                page_cache: PageCache::new(),
                direct: OnceCell::new(),
            }))),
            compat_mode: compat_mode.unwrap_or_else(|| settings.compat_mode()),
            stats: Arc::new(StatsCell::default()),
        })
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

    /// Counts a read call on this handle that was rejected before it reached `read_raw` or
    /// `pread_raw` (a NULL output pointer at the C boundary).
    pub fn record_rejected_call(&self) {
        stats::record_rejected_call(Some(&self.stats));
    }

    /// Whether cuFile can serve this file under the handle's compat mode, deciding it now if no
    /// device read has yet (this may open the cuFile driver). `Ok` means reads of device memory
    /// at or above the GDS threshold go through cuFile.
    pub fn cufile_verdict(&self) -> Result<std::result::Result<(), Unusable>> {
        let file = self.open_file()?;
        if self.compat_mode == CompatMode::On {
            return Ok(Err(Unusable::new(FallbackReason::CompatOn, "compat mode is ON: cuFile is never called")));
        }
        Ok(file.cufile(self.compat_mode).map(|_| ()))
    }

    /// Whether this file's POSIX reads can take direct I/O (the `auto_direct_io_read` setting),
    /// opening the `O_DIRECT` descriptor now if no read has; the reason where they cannot.
    pub fn direct_io_verdict(&self) -> Result<std::result::Result<(), String>> {
        Ok(self.open_file()?.direct_descriptor().map(|_| ()))
    }

    /// Which descriptor cuFile registered for this file, and why; `None` before a device read or
    /// `cufile_verdict` registered it, when it could not be, or after `close`.
    pub fn cufile_descriptor(&self) -> Option<FdChoice> {
        let file = self.open_file().ok()?;
        file.cufile.get()?.as_ref().ok().map(CufileFile::choice)
    }

    fn plan(&self, file: &OpenFile, target: &Target, size: usize, gds_threshold: u64) -> Result<Plan> {
        let kind = match target {
            Target::Host(_) => MemoryKind::Host,
            Target::Device { kind, .. } => *kind,
        };
        route::plan(&kind, size, gds_threshold, self.compat_mode, || file.cufile(self.compat_mode).map(|_| ()))
    }

    /// Reads `size` bytes at `offset` in one synchronous call on the calling thread (KvikIO's
    /// `read`: no task splitting and no GDS threshold). Returns the bytes read (fewer only at end
    /// of file). The end of the file is its size when the call starts (`OpenFile::readable`):
    /// nothing past it is read, and a request at or past it reads nothing and runs no task, as a
    /// zero-byte request.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size` bytes for the duration of the call.
    pub unsafe fn read_raw(&self, dst: *mut u8, size: usize, offset: u64) -> Result<usize> {
        // Every call counts once, an early error return included.
        let call = stats::PendingCall::new(&self.stats);
        check_range(size, offset)?;
        let snapshot = settings::global()?.snapshot();
        let file = self.open_file()?;
        let (len, _) = file.readable(size, offset)?;
        if len == 0 {
            call.finish(size as u64, 0, false);
            return Ok(0);
        }
        let target = target_of(dst)?;
        let plan = self.plan(&file, &target, size, 0)?;
        if plan.route == Route::Cufile {
            sync_default_stream(&target)?;
        }
        let chunk = Chunk { buf_offset: 0, file_offset: offset, len };
        // SAFETY: forwarded from the caller.
        let result = run_and_record(&file, &self.stats, plan, &target, chunk, &snapshot, self.compat_mode);
        let delivered = *result.as_ref().unwrap_or(&0) as u64;
        call.finish(size as u64, delivered, result.is_err());
        result
    }

    /// Starts a parallel read of `size` bytes at `offset` (KvikIO's `pread`): task-size tasks on
    /// the shared pool, or one task on the calling thread for device requests below the GDS
    /// threshold. The returned operation must be waited for (or dropped, which waits) before the
    /// buffer is released.
    ///
    /// The route is chosen by the size asked for, as in KvikIO; the tasks cover only the bytes the
    /// file has when the call starts (`OpenFile::readable`), so their number, and the work of the
    /// call, are bounded by the file, not by `size`: a request at or past the end runs no task, as
    /// a zero-byte one. The operation's memory does not depend on the number of tasks: one pool
    /// job per pool thread (at most one per task) claims tasks until none is left.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size` bytes until the returned operation has finished.
    pub unsafe fn pread_raw(&self, dst: *mut u8, size: usize, offset: u64) -> Result<Operation> {
        crate::trace::event("pread", size as u64);
        // Every call counts once: the operation records it, or this does for an early error.
        let call = stats::PendingCall::new(&self.stats);
        check_range(size, offset)?;
        let snapshot = settings::global()?.snapshot();
        let pool = thread_pool::global()?;
        let file = self.open_file()?;
        let (len, size_known) = file.readable(size, offset)?;
        if len == 0 {
            // Nothing to read: no task, no cuFile probe, an operation that is already done.
            call.handed_over();
            return Ok(Operation::finished(size as u64, Arc::clone(&self.stats)));
        }
        let target = target_of(dst)?;
        let plan = self.plan(&file, &target, size, snapshot.gds_threshold)?;
        if plan.route == Route::Cufile {
            sync_default_stream(&target)?;
        }
        let split = if plan.inline {
            Split::one(len, offset)
        } else {
            let split = if snapshot.direct_io_read { task_split::split_for_direct_io } else { task_split::split };
            split(len, offset, snapshot.task_size)
        };
        // Where the size is unknown the request is not clipped: stop at the first short or failed
        // task instead of running one per task size of the request.
        let stop = if size_known { Stop::Never } else { Stop::AtFirstShortOrFailed };
        let run = {
            let file = Arc::clone(&file);
            let stats = Arc::clone(&self.stats);
            let compat_mode = self.compat_mode;
            move |chunk| run_and_record(&file, &stats, plan, &target, chunk, &snapshot, compat_mode)
        };
        let operation = Operation::new(split, size as u64, Arc::clone(&self.stats), stop, run);
        call.handed_over();
        if plan.inline {
            operation.run_here();
        } else {
            operation.start(pool);
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

/// cuFile is not ordered with the CUDA null stream, so work queued there (e.g. a kernel still
/// using the buffer) is finished first, once per call, as KvikIO does.
fn sync_default_stream(target: &Target) -> Result<()> {
    if let Target::Device { kind, .. } = target {
        let _context = cuda::ScopedContext::for_kind(kind)?;
        cuda::synchronize(cuda::Stream::DEFAULT)?;
    }
    Ok(())
}

/// Runs one task of a call (on a worker or the calling thread), catching panics, and counts it.
/// The caller of the public read functions guarantees the target range stays writable.
fn run_and_record(
    file: &OpenFile,
    stats: &StatsCell,
    plan: Plan,
    target: &Target,
    chunk: Chunk,
    snapshot: &Snapshot,
    compat_mode: CompatMode,
) -> Result<usize> {
    if chunk.len == 0 {
        return Ok(0);
    }
    // SAFETY: chunks tile the caller's range, which stays valid until the call or operation ends.
    let task = AssertUnwindSafe(|| unsafe { file.run_task(plan, target, chunk, snapshot, compat_mode) });
    let result = catch_unwind(task).unwrap_or_else(|p| Err(Error::Panic(panic_message(&p))));
    let outcome = result.as_ref().copied().unwrap_or_default();
    stats::record_task(stats, plan.route, &outcome, result.is_err());
    result.map(|outcome| outcome.bytes)
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
