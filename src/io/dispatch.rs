//! Which backend runs a task: the one `match` from a call's route and target to a backend's task
//! entry (`posix::task` for host memory, `device::task` for device memory on the POSIX route,
//! `cufile::synchronous::task` for cuFile), for reads and writes alike; and around every task,
//! written once, what the engine adds: the panic caught, the file's registered page-cache windows
//! dropped around a write, and the task counted. The engine (`engine`) hands each task here.

use super::open_file::OpenFile;
use super::request::Target;
use crate::backend::{TaskFile, cufile, device, posix};
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::io::route::Plan;
use crate::io::task_split::Chunk;
use crate::page_cache::DeviceReadInFlight;
use crate::settings::{CompatMode, Snapshot};
use crate::stats::{self, Route, StatsCell, TaskOutcome};
use std::os::fd::AsRawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What every task of one call shares: its direction, plan, target, settings and compat mode.
pub(super) struct Call {
    pub(super) direction: Direction,
    pub(super) plan: Plan,
    pub(super) target: Target,
    pub(super) snapshot: Snapshot,
    pub(super) compat_mode: CompatMode,
    /// False for a call a monitor's callback made: its tasks are not observed either, on whatever
    /// thread they run (the callback's thread is the one that knows).
    pub(super) observed: bool,
}

/// Runs one task of `call` on `file` (on a worker or the calling thread), catching panics, and
/// counts it in `stats`. Returns the bytes it delivered. The caller of the engine's entries
/// guarantees that the target range stays valid until the call or its operation ends.
pub(super) fn run_and_record(call: &Call, file: &OpenFile, stats: &StatsCell, chunk: Chunk) -> Result<usize> {
    if chunk.len == 0 {
        return Ok(0);
    }
    // Before the task and after it, so no window registered in between outlives the write.
    let _windows = (call.direction == Direction::Write).then(|| WindowsDropped::new(file));
    // SAFETY: chunks tile the caller's range, which stays valid until the call or operation ends.
    record(call, file, stats, chunk, || unsafe { run_task(call, file, chunk) })
}

/// Counts `chunk` of a relayed read as a task whose bytes the copy engine copies straight from the
/// file's registered page-cache windows on the caller's stream (`io::relay::RegisteredRuns`): it
/// moves nothing here. Returns its bytes.
pub(super) fn record_registered(call: &Call, file: &OpenFile, stats: &StatsCell, chunk: Chunk) -> Result<usize> {
    if chunk.len == 0 {
        return Ok(0);
    }
    record(call, file, stats, chunk, || Ok(TaskOutcome { bytes: chunk.len, mapped_bytes: chunk.len, ..TaskOutcome::default() }))
}

/// `task` as one task of `call` on `file`: observed (monitors, NVTX), its panic caught, counted in
/// `stats`.
fn record(call: &Call, file: &OpenFile, stats: &StatsCell, chunk: Chunk, task: impl FnOnce() -> Result<TaskOutcome>) -> Result<usize> {
    let mut outcome = TaskOutcome::default();
    let result = super::observe::observe_task(call, file, chunk.file_offset, chunk.len, chunk.buf_offset, || {
        let result = catch_unwind(AssertUnwindSafe(task)).unwrap_or_else(|p| Err(Error::Panic(crate::error::panic_message(&p))));
        outcome = result.as_ref().copied().unwrap_or_default();
        result.map(|o| o.bytes)
    });
    // Device and managed memory count for their device too; host memory for none.
    let device = match &call.target {
        Target::Device { kind, .. } => kind.device_ordinal(),
        Target::Host(_) => None,
    };
    stats::record_task(stats, call.direction, call.plan.route, device, &outcome, result.is_err());
    result
}

/// One task: `chunk` of the call between `file` and the call's target, by the planned route.
/// Returns what it delivered for the counters (bytes, those copied from the registered page
/// cache, those through direct I/O, and whether a POSIX read had to wait for the disk).
///
/// # Safety
/// The target range of the chunk is valid memory of the caller: writable for a read; a write
/// only reads it.
unsafe fn run_task(call: &Call, file: &OpenFile, chunk: Chunk) -> Result<TaskOutcome> {
    let _in_flight = matches!(call.target, Target::Device { .. }).then(DeviceReadInFlight::enter);
    let fd = file.fd.as_raw_fd();
    // Opened at the first task that takes direct I/O; cuFile tasks never ask.
    let direct = || file.direct_fd(call.snapshot.direct_io(call.direction));
    match (call.plan.route, &call.target) {
        // SAFETY (all arms): the chunk lies in the caller's range (task_split tiles it).
        (_, Target::Host(ptr)) => unsafe { posix::task(call.direction, fd, direct(), ptr.at(chunk.buf_offset), chunk.len, chunk.file_offset) }
            .map(TaskOutcome::from)
            .map_err(|f| file.io_error(f.op, f.offset, f.error)),
        (Route::Posix(_), Target::Device { kind, address, .. }) => {
            let task_file = TaskFile { fd, direct: direct(), path: &file.path };
            let dev = address + chunk.buf_offset as u64;
            unsafe { device::task(call.direction, task_file, &file.page_cache, kind, dev, chunk.len, chunk.file_offset, &call.snapshot) }
        }
        (Route::Cufile, Target::Device { kind, base, base_offset, .. }) => {
            let registered = file.cufile(call.compat_mode).map_err(|u| Error::CufileUnavailable(u.message))?;
            let (library, handle, dev_offset) = (registered.library(), registered.handle(), base_offset + chunk.buf_offset as u64);
            unsafe { cufile::synchronous::task(call.direction, library, handle, &file.path, kind, *base, dev_offset, chunk.len, chunk.file_offset) }
                .map(|bytes| TaskOutcome { bytes, ..TaskOutcome::default() })
        }
    }
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
