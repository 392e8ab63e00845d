//! The mapping handle (KvikIO's `MmapHandle`): a range of a file mapped read-only and shared at
//! open, read synchronously (`read_raw`: one copy on the calling thread) or in parallel
//! (`pread_raw`: task-size tasks on the shared pool, returning an `Operation`) into host or device
//! memory. Offsets are file offsets, as KvikIO's; a read must lie inside the mapped range. The
//! copies are `backend::mapping`'s: the kernel reads the mapping for them, so a file truncated
//! under it is an error (`Error::MappedFileShrank`), not a `SIGBUS`, and no signal handler is
//! installed. The handle's reads are in no counters (no route of the counters serves them).

use crate::backend::mapping::MappedRange;
use crate::error::{Error, Result};
use crate::io::operation::Operation;
use crate::io::request::{Target, check_range, target_of};
use crate::io::task_source::Task;
use crate::io::task_split::{self, Split};
use crate::io::thread_pool;
use crate::settings;
use std::sync::{Arc, RwLock};

/// A read-only mapping of a file range.
pub struct MappedFile {
    open: RwLock<Option<Arc<MappedRange>>>,
    /// The path as opened (lossy UTF-8), for messages.
    path: String,
    map_offset: u64,
    map_size: usize,
}

impl MappedFile {
    /// Opens `path` (any bytes but NUL) read-only and maps `size` bytes of it from file offset
    /// `offset` (any offset; `size` 0: to the end of the file). The range must lie in the file as
    /// it is now and, for a non-empty file, hold a byte; an empty file maps nothing (offset and
    /// size 0), and its handle reads 0 bytes. Pages are read when first copied.
    ///
    /// Errors: `InvalidPath`, `Open`, `Io` (`fstat`, `mmap`), `InvalidArgument` (the range is not
    /// inside the file), `Overflow` (`offset + size` beyond `off_t`).
    pub fn open(path: &[u8], offset: u64, size: usize) -> Result<MappedFile> {
        crate::api::report::arm();
        let (fd, display, file_size, _) = super::page_cache_tools::open(path)?;
        let map_size = mapped_size(&display, file_size, offset, size)?;
        let range = MappedRange::new(fd, display.clone(), offset, map_size)?;
        Ok(MappedFile { open: RwLock::new(Some(Arc::new(range))), path: display, map_offset: offset, map_size })
    }

    fn range(&self) -> Result<Arc<MappedRange>> {
        self.open.read().unwrap_or_else(|p| p.into_inner()).clone().ok_or_else(|| Error::ClosedHandle { path: self.path.clone() })
    }

    /// Unmaps and closes the file; idempotent. Parallel reads in flight finish on the mapping
    /// they hold, which goes when the last of them does.
    pub fn close(&self) {
        self.open.write().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// True after `close`.
    pub fn is_closed(&self) -> bool {
        self.open.read().unwrap_or_else(|p| p.into_inner()).is_none()
    }

    /// The file offset of the mapped range's first byte, as given to `open` (also after `close`).
    pub fn map_offset(&self) -> u64 {
        self.map_offset
    }

    /// Bytes mapped (the file's size less the offset where `open` was given size 0), also after
    /// `close`.
    pub fn map_size(&self) -> usize {
        self.map_size
    }

    /// The file's current size (`fstat`), which may differ from its size at open.
    pub fn file_size(&self) -> Result<u64> {
        self.range()?.file_size()
    }

    /// Checks that `[offset, offset + size)` lies in the mapped range (0 bytes: `offset` in it or
    /// at its end).
    fn check_read(&self, size: usize, offset: u64) -> Result<()> {
        check_range(size, offset)?;
        let (start, end, read_end) = (self.map_offset, self.map_offset + self.map_size as u64, offset + size as u64);
        if offset < start || read_end > end {
            return Err(Error::InvalidArgument(format!(
                "the read of file range [{offset}, {read_end}) is not inside the mapped range [{start}, {end}) of {:?}",
                self.path
            )));
        }
        Ok(())
    }

    /// Copies the `size` mapped bytes at file offset `offset` into `dst`, host or device memory,
    /// on the calling thread (KvikIO's `MmapHandle::read`). Returns `size`: a read inside the
    /// mapped range is never short.
    ///
    /// Errors: `ClosedHandle`; `InvalidArgument` (the range is not inside the mapped one);
    /// `Overflow`; `MappedFileShrank` (the file was truncated under the mapping; the bytes before
    /// the lost page are in `dst`); `Io` with `EFAULT` (a page of `dst` cannot be written, or a
    /// mapped page could not be read in); for device memory `Cuda`, `CudaUnavailable`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size` bytes for the duration of the call (a host page
    /// that cannot be written is reported, not written).
    pub unsafe fn read_raw(&self, dst: *mut u8, size: usize, offset: u64) -> Result<usize> {
        let range = self.range()?;
        self.check_read(size, offset)?;
        if size == 0 {
            return Ok(0);
        }
        let target = target_of(dst)?;
        let buffer_size = settings::global()?.bounce_buffer_size();
        // SAFETY: the range was checked; the buffer is forwarded from the caller.
        unsafe { copy(&range, &target, 0, size, offset, buffer_size) }
    }

    /// Starts a parallel copy of the `size` mapped bytes at file offset `offset` into `dst`
    /// (KvikIO's `MmapHandle::pread`): tasks of `task_size` bytes (`None`: the task size setting)
    /// on the shared pool. Waiting for the operation gives `size` or the first error in file
    /// order, once every task stopped. The handle may be closed meanwhile; the tasks keep the
    /// mapping.
    ///
    /// Errors at the call: as `read_raw`'s checks, and `InvalidArgument` for a task size of 0.
    /// From the operation: `read_raw`'s copy errors.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size` bytes until the operation has finished (it
    /// waits when dropped).
    pub unsafe fn pread_raw(&self, dst: *mut u8, size: usize, offset: u64, task_size: Option<u64>) -> Result<Operation> {
        let range = self.range()?;
        self.check_read(size, offset)?;
        let settings = settings::global()?;
        let task_size = match task_size {
            None => settings.task_size(),
            Some(0) => return Err(Error::InvalidArgument("task size 0: a task size must be positive".into())),
            Some(t) => t,
        };
        let pool = thread_pool::global()?;
        if size == 0 {
            return Ok(Operation::uncounted(Split::one(0, offset), |_| Ok(0)));
        }
        let target = target_of(dst)?;
        let buffer_size = settings.bounce_buffer_size();
        let operation = Operation::uncounted(task_split::split(size, offset, task_size), move |task: Task| {
            let chunk = task.chunk;
            // SAFETY: each task's chunk lies in the checked range and in the caller's buffer,
            // which stays valid until the operation has finished.
            unsafe { copy(&range, &target, chunk.buf_offset, chunk.len, chunk.file_offset, buffer_size) }
        });
        operation.start(pool, usize::MAX);
        Ok(operation)
    }

    /// Safe synchronous read into a slice of host memory (`read_raw`).
    pub fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        // SAFETY: the borrow outlives the call.
        unsafe { self.read_raw(buf.as_mut_ptr(), buf.len(), offset) }
    }
}

/// The bytes `open` maps of a file of `file_size` bytes for `offset` and `size` (0: to the end).
fn mapped_size(path: &str, file_size: u64, offset: u64, size: usize) -> Result<usize> {
    check_range(size, offset)?;
    if file_size == 0 && offset == 0 && size == 0 {
        return Ok(0);
    }
    if offset >= file_size {
        return Err(Error::InvalidArgument(format!("map offset {offset} is at or past the end of {path:?} ({file_size} bytes)")));
    }
    let size = match size {
        0 => usize::try_from(file_size - offset).map_err(|_| Error::Overflow(format!("{path:?} from offset {offset} does not fit the address space")))?,
        size => size,
    };
    let end = offset + size as u64;
    if end > file_size {
        return Err(Error::InvalidArgument(format!("the mapped range [{offset}, {end}) reaches past the end of {path:?} ({file_size} bytes)")));
    }
    Ok(size)
}

/// Copies `len` bytes at file offset `file_offset` of `range` to `buf_offset` bytes into the
/// caller's memory `target`. Returns `len`.
///
/// # Safety
/// The file range lies in the mapped one; the memory range in the caller's buffer, writable.
unsafe fn copy(range: &MappedRange, target: &Target, buf_offset: usize, len: usize, file_offset: u64, buffer_size: u64) -> Result<usize> {
    match target {
        // SAFETY: forwarded from the caller.
        Target::Host(dst) => unsafe { range.read_host(dst.at(buf_offset), len, file_offset) },
        // SAFETY: forwarded from the caller.
        Target::Device { kind, address, .. } => unsafe { range.read_device(kind, address + buf_offset as u64, len, file_offset, buffer_size) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapped_range_must_lie_in_the_file() {
        assert_eq!(mapped_size("f", 0, 0, 0).unwrap(), 0);
        assert_eq!(mapped_size("f", 100, 0, 0).unwrap(), 100);
        assert_eq!(mapped_size("f", 100, 99, 0).unwrap(), 1);
        assert_eq!(mapped_size("f", 100, 10, 90).unwrap(), 90);
        for (size, offset, len) in [(0, 0, 1), (0, 1, 0), (100, 100, 0), (100, 10, 91), (100, 200, 1)] {
            let err = mapped_size("f", size, offset, len).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{size} {offset} {len}: {err}");
        }
        assert!(matches!(mapped_size("f", 100, u64::MAX, 0), Err(Error::Overflow(_))));
        assert!(matches!(mapped_size("f", 100, 1, usize::MAX), Err(Error::Overflow(_))));
    }
}
