//! The device backend's task entry: one task between the file and GPU memory without cuFile, in
//! either direction. A read copies the windows of the file registered with the page cache
//! straight to the GPU (`page_cache`, `bounce::copy_from_registered`) and bounces the rest
//! (`bounce::bounce_in`); a write goes through bounce buffers only (`bounce::bounce_out`).

use super::bounce::{bounce_in, bounce_out, copy_from_registered};
use crate::backend::TaskFile;
use crate::direction::Direction;
use crate::error::Result;
use crate::page_cache::{PageCache, Segment};
use crate::settings::Snapshot;
use crate::stats::TaskOutcome;
use crate::sys::cuda::MemoryKind;
use std::sync::Arc;

/// Moves `len` bytes at `offset` of `file` between it and device memory of `kind` at `dev`, in
/// `direction`, with the bounce buffer size and page-cache budget of `snapshot`. Returns what it
/// delivered for the counters: a read's bytes (fewer only at end of file), those copied from the
/// registered page cache, and whether a `pread` waited for the disk; a write's `len`.
///
/// A write takes bounce buffers only: the registered page cache maps the file for reading, and
/// its windows are dropped around every write task (`io::dispatch`).
///
/// # Safety
/// `dev .. dev + len` is device memory of `kind` that the caller may overwrite (a read) or that it
/// does not change during the call (a write, which only reads it).
#[allow(clippy::too_many_arguments)] // the file, its windows, the memory, the range and the settings
pub(crate) unsafe fn task(
    direction: Direction,
    file: TaskFile<'_>,
    page_cache: &Arc<PageCache>,
    kind: &MemoryKind,
    dev: u64,
    len: usize,
    offset: u64,
    snapshot: &Snapshot,
) -> Result<TaskOutcome> {
    match direction {
        // SAFETY: forwarded from the caller.
        Direction::Read => unsafe { read(file, page_cache, kind, dev, len, offset, snapshot) },
        // SAFETY: forwarded from the caller (the range is read, not written).
        Direction::Write => unsafe { bounce_out(file, kind, dev, len, offset, snapshot.bounce_buffer_size) }.map(TaskOutcome::from),
    }
}

/// The `Read` arm of `task`: registered windows straight from the page cache, the rest through
/// bounce buffers.
///
/// # Safety
/// As `task`.
#[allow(clippy::too_many_arguments)] // as `task`
unsafe fn read(file: TaskFile<'_>, page_cache: &Arc<PageCache>, kind: &MemoryKind, dst: u64, len: usize, offset: u64, snapshot: &Snapshot) -> Result<TaskOutcome> {
    let bounce = |dst: u64, len: usize, offset: u64| {
        // SAFETY: forwarded from the caller; each segment lies inside the task's range.
        unsafe { bounce_in(file, kind, dst, len, offset, snapshot.bounce_buffer_size) }
    };
    // Direct I/O bypasses the page cache, so the registered page cache (which maps it) is not
    // used either.
    let (Some(ordinal), budget @ 1.., None) = (kind.device_ordinal(), snapshot.page_cache_pin_max, file.direct) else {
        return bounce(dst, len, offset).map(TaskOutcome::from);
    };
    let mut outcome = TaskOutcome::default();
    for segment in page_cache.plan(file.fd, offset, len, ordinal, budget) {
        let at = dst + outcome.bytes as u64;
        match segment {
            Segment::Registered { mapping, file_offset, len } => {
                // SAFETY: the segment lies in the mapping (page_cache::plan) and in the task.
                unsafe { copy_from_registered(kind, at, mapping.address_of(file_offset), len) }?;
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
