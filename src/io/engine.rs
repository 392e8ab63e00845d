//! The engine: from a request (a read or a write) to tasks and back. It classifies the target, plans the route
//! (`route`), cuts the bytes the file has into tasks (`task_split`), runs them inline or on the
//! pool as an `Operation`, dispatches each task to its backend (POSIX, device bounce or registered
//! page cache, cuFile) and records every task and call in the handle's counters.

use super::open_file::OpenFile;
use super::request::{Request, Target, check_range, target_of};
use crate::backend::device;
use crate::backend::posix::{self, Delivered};
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::io::operation::{Operation, Stop};
use crate::io::route::{self, Plan};
use crate::io::task_split::{self, Chunk, Split};
use crate::io::thread_pool;
use crate::page_cache::{DeviceReadInFlight, Segment};
use crate::settings::{self, CompatMode, Snapshot};
use crate::stats::{self, Route, StatsCell, TaskOutcome};
use crate::sys::cuda::{self, MemoryKind};
use std::os::fd::AsRawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

impl OpenFile {
    /// One task: `chunk` of the call into `target`, by the planned route. Returns what it
    /// delivered for the counters (bytes, those copied from the registered page cache, and
    /// whether a POSIX read had to wait for the disk).
    ///
    /// # Safety
    /// The target range of the chunk is writable memory of the caller.
    unsafe fn run_task(&self, direction: Direction, plan: Plan, target: &Target, chunk: Chunk, snapshot: &Snapshot, compat_mode: CompatMode) -> Result<TaskOutcome> {
        let _in_flight = matches!(target, Target::Device { .. }).then(DeviceReadInFlight::enter);
        match (plan.route, target) {
            // SAFETY (all arms): the chunk lies in the caller's range (task_split tiles it).
            (_, Target::Host(ptr)) => {
                unsafe { self.host_task(direction, ptr.at(chunk.buf_offset), chunk.len, chunk.file_offset, snapshot.direct_io(direction)) }.map(TaskOutcome::from)
            }
            (Route::Posix(_), Target::Device { kind, address, .. }) => unsafe {
                self.device_posix_task(direction, kind, address + chunk.buf_offset as u64, chunk, snapshot)
            },
            (Route::Cufile, Target::Device { kind, base, base_offset, .. }) => {
                let registered = self.cufile(compat_mode).map_err(|u| Error::CufileUnavailable(u.message))?;
                unsafe {
                    crate::backend::cufile::transfer::transfer(
                        direction,
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
    unsafe fn device_posix_task(&self, direction: Direction, kind: &MemoryKind, dst: u64, chunk: Chunk, snapshot: &Snapshot) -> Result<TaskOutcome> {
        let fd = self.fd.as_raw_fd();
        let direct = self.direct_fd(snapshot.direct_io(direction));
        if direction == Direction::Write {
            // Bounce buffers only: the registered page cache maps the file for reading, and its
            // windows were dropped for this write (`run_and_record`).
            // SAFETY: forwarded from the caller (the range is read, not written).
            return unsafe { device::bounce(direction, fd, direct, &self.path, kind, dst, chunk.len, chunk.file_offset, snapshot.bounce_buffer_size) }.map(TaskOutcome::from);
        }
        let bounce = |dst: u64, len: usize, offset: u64| {
            // SAFETY: forwarded from the caller; each segment lies inside the chunk.
            unsafe { device::bounce(direction, fd, direct, &self.path, kind, dst, len, offset, snapshot.bounce_buffer_size) }
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

    /// One POSIX read of a chunk into host memory (or write from it: a `pwrite` loop that
    /// continues after short writes and fails with the offset where a `pwrite` failed), as a
    /// task body: with `direct_io` (and a file that allows it) the page-aligned middle through
    /// the `O_DIRECT` descriptor.
    ///
    /// # Safety
    /// `dst` valid for `len` bytes.
    unsafe fn host_task(&self, direction: Direction, dst: *mut u8, len: usize, offset: u64, direct_io: bool) -> Result<Delivered> {
        let fd = self.fd.as_raw_fd();
        let direct = self.direct_fd(direct_io);
        if direction == Direction::Write {
            // SAFETY: forwarded from the caller (`dst` is the source of a write, only read).
            let written = unsafe { posix::write_range(fd, direct, dst, len, offset) }.map_err(|f| self.io_error("pwrite", f.offset, f.error))?;
            return Ok(Delivered { bytes: written.bytes, not_cached: false, direct_bytes: written.direct_bytes });
        }
        if let Some(direct) = direct {
            // SAFETY: forwarded from the caller.
            let read = unsafe { crate::backend::posix::direct_io::read_full_at_direct(fd, direct, dst, len, offset) }.map_err(|e| self.io_error("pread", offset, e))?;
            return Ok(Delivered { bytes: read.bytes, not_cached: false, direct_bytes: read.direct_bytes });
        }
        // SAFETY: forwarded from the caller.
        unsafe { posix::read_full_at_ahead(fd, dst, len, offset, len) }.map_err(|e| self.io_error("pread", offset, e))
    }
}

fn plan(file: &OpenFile, target: &Target, size: usize, gds_threshold: u64, compat_mode: CompatMode) -> Result<Plan> {
    let kind = match target {
        Target::Host(_) => MemoryKind::Host,
        Target::Device { kind, .. } => *kind,
    };
    route::plan(&kind, size, gds_threshold, compat_mode, || file.cufile(compat_mode).map(|_| ()))
}

/// Reads the request's `size` bytes at `offset` in one synchronous call on the calling thread (KvikIO's
/// `read`: no task splitting and no GDS threshold), for the handle whose counters are `stats`
/// and whose open file `open_file` hands out (an error once closed). Returns the bytes read
/// (fewer only at end of file). The end of the file is its size when the call starts
/// (`OpenFile::readable`): nothing past it is read, and a request at or past it reads nothing and
/// runs no task, as a zero-byte request.
///
/// # Safety
/// `request.buf` must be valid for writes of `request.size` bytes for the duration of the call.
pub unsafe fn read(stats: &Arc<StatsCell>, compat_mode: CompatMode, open_file: impl FnOnce() -> Result<Arc<OpenFile>>, request: Request) -> Result<usize> {
    let Request { direction, buf: dst, size, offset } = request;
    // Every call counts once, an early error return included.
    let call = stats::PendingCall::new(stats, direction);
    check_range(size, offset)?;
    let snapshot = settings::global()?.snapshot();
    let file = open_file()?;
    let (len, _) = file.extent(direction, size, offset)?;
    if direction == Direction::Write && len > 0 {
        file.page_cache.file_written();
    }
    if len == 0 {
        call.finish(size as u64, 0, false);
        return Ok(0);
    }
    let target = target_of(dst)?;
    let plan = plan(&file, &target, size, 0, compat_mode)?;
    if plan.route == Route::Cufile {
        sync_default_stream(&target)?;
    }
    let chunk = Chunk { buf_offset: 0, file_offset: offset, len };
    // SAFETY: forwarded from the caller.
    let result = run_and_record(direction, &file, stats, plan, &target, chunk, &snapshot, compat_mode);
    let delivered = *result.as_ref().unwrap_or(&0) as u64;
    call.finish(size as u64, delivered, result.is_err());
    result
}

/// Starts a parallel read of the request's `size` bytes at `offset` (KvikIO's `pread`): task-size tasks on
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
/// `request.buf` must be valid for writes of `request.size` bytes until the returned operation
/// has finished.
pub unsafe fn pread(stats: &Arc<StatsCell>, compat_mode: CompatMode, open_file: impl FnOnce() -> Result<Arc<OpenFile>>, request: Request) -> Result<Operation> {
    let Request { direction, buf: dst, size, offset } = request;
    crate::trace::event("pread", size as u64);
    // Every call counts once: the operation records it, or this does for an early error.
    let call = stats::PendingCall::new(stats, direction);
    check_range(size, offset)?;
    let snapshot = settings::global()?.snapshot();
    let pool = thread_pool::global()?;
    let file = open_file()?;
    let (len, size_known) = file.extent(direction, size, offset)?;
    if direction == Direction::Write && len > 0 {
        file.page_cache.file_written();
    }
    if len == 0 {
        // Nothing to move: no task, no cuFile probe, an operation that is already done.
        call.handed_over();
        return Ok(Operation::finished_in(direction, size as u64, Arc::clone(stats)));
    }
    let target = target_of(dst)?;
    let plan = plan(&file, &target, size, snapshot.gds_threshold, compat_mode)?;
    if plan.route == Route::Cufile {
        sync_default_stream(&target)?;
    }
    let split = if plan.inline {
        Split::one(len, offset)
    } else {
        let split = if snapshot.direct_io(direction) { task_split::split_for_direct_io } else { task_split::split };
        split(len, offset, snapshot.task_size)
    };
    // Where the size is unknown the request is not clipped: stop at the first short or failed
    // task instead of running one per task size of the request.
    let stop = if size_known { Stop::Never } else { Stop::AtFirstShortOrFailed };
    let run = {
        let file = Arc::clone(&file);
        let stats = Arc::clone(stats);
        move |chunk| run_and_record(direction, &file, &stats, plan, &target, chunk, &snapshot, compat_mode)
    };
    let operation = Operation::new_in(direction, split, size as u64, Arc::clone(stats), stop, run);
    call.handed_over();
    if plan.inline {
        operation.run_here();
    } else if direction == Direction::Write && matches!(plan.route, Route::Posix(_)) && file.direct_fd(snapshot.direct_io(direction)).is_none() {
        // Measured on the H200 machine (ext4, 1 GiB from device memory into a new file,
        // docs/performance.md): 1 worker 4.01 GB/s, 16 workers 3.43; the kernel writes one file's
        // page cache under the inode's lock, so more workers only wait on it.
        operation.start_at_most(pool, file.buffered_write_workers());
    } else {
        operation.start(pool);
    }
    Ok(operation)
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
#[allow(clippy::too_many_arguments)] // the task, its call's plan and target, and the handle's state
fn run_and_record(
    direction: Direction,
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
    // Before the task and after it, so no window registered in between outlives the write.
    let _windows = (direction == Direction::Write).then(|| WindowsDropped::new(file));
    // SAFETY: chunks tile the caller's range, which stays valid until the call or operation ends.
    let task = AssertUnwindSafe(|| unsafe { file.run_task(direction, plan, target, chunk, snapshot, compat_mode) });
    let result = catch_unwind(task).unwrap_or_else(|p| Err(Error::Panic(crate::error::panic_message(&p))));
    let outcome = result.as_ref().copied().unwrap_or_default();
    // Device and managed memory count for their device too; host memory for none.
    let device = match target {
        Target::Device { kind, .. } => kind.device_ordinal(),
        Target::Host(_) => None,
    };
    stats::record_task(stats, direction, plan.route, device, &outcome, result.is_err());
    result.map(|outcome| outcome.bytes)
}

/// Drops the file's registered page-cache windows (in every handle of it) when made and again
/// when dropped: around each write task.
struct WindowsDropped<'a>(&'a OpenFile);

impl<'a> WindowsDropped<'a> {
    fn new(file: &'a OpenFile) -> Self {
        file.page_cache.file_written();
        WindowsDropped(file)
    }
}

impl Drop for WindowsDropped<'_> {
    fn drop(&mut self) {
        self.0.page_cache.file_written();
    }
}
