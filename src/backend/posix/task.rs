//! The POSIX backend's task entry: one task between the file and host memory, in either
//! direction. A read starts without waiting for the disk (`pread`), or takes the page-aligned
//! middle through `O_DIRECT` (`direct_io`); a write is a `pwrite` loop (`pwrite`), whole pages
//! direct where the task has an `O_DIRECT` descriptor. The engine's dispatch calls it for every
//! host-memory task.

use super::direct_io::read_full_at_direct;
use super::pread::{Delivered, ReadFailure, read_full_at_ahead};
use super::pwrite::write_range;
use crate::direction::Direction;
use std::io;
use std::os::fd::RawFd;

/// A host-memory task that failed: the call (`"pread"` or `"pwrite"`), the file offset its error
/// names (a read: the task's offset; a write: where the failing `pwrite` started) and the error.
#[derive(Debug)]
pub(crate) struct TaskFailure {
    pub op: &'static str,
    pub offset: u64,
    pub error: io::Error,
}

/// Moves `len` bytes at `offset` between the file (`fd`; `direct`: its `O_DIRECT` descriptor, for
/// a task under `auto_direct_io_read` or `_write`) and host memory at `buf`, in `direction`.
/// A read returns the bytes read (fewer only at end of file) and whether it waited for the disk;
/// a write returns `len` (continuing after short writes), or fails with the offset of the
/// `pwrite` that failed.
///
/// # Safety
/// `buf` is valid for `len` bytes for the duration of the call: writable for a read; a write only
/// reads it.
pub(crate) unsafe fn task(direction: Direction, fd: RawFd, direct: Option<RawFd>, buf: *mut u8, len: usize, offset: u64) -> Result<Delivered, TaskFailure> {
    let read_failure = |f: ReadFailure| TaskFailure { op: "pread", offset: f.offset, error: f.error };
    match (direction, direct) {
        // SAFETY (all arms): forwarded from the caller.
        (Direction::Read, Some(direct)) => unsafe { read_full_at_direct(fd, direct, buf, len, offset) }.map(Delivered::from).map_err(read_failure),
        (Direction::Read, None) => unsafe { read_full_at_ahead(fd, buf, len, offset, len) }.map_err(read_failure),
        (Direction::Write, direct) => unsafe { write_range(fd, direct, buf, len, offset) }
            .map(Delivered::from)
            .map_err(|f| TaskFailure { op: "pwrite", offset: f.offset, error: f.error }),
    }
}
