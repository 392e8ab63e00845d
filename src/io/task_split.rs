//! How a parallel call, a read or a write, is cut into tasks, as in KvikIO: one task when the
//! request fits in a task (or in a page); otherwise tasks of `task_size` bytes and a last one with
//! the remainder. With direct I/O (`split_for_direct_io`) the first task ends on a page boundary
//! of the file, so that every later task starts on one (KvikIO does this for device reads).
//!
//! A `Split` is a description of the tasks, not a list of them: task `i` is computed when it is
//! claimed, so the memory of a call does not depend on how many tasks it has (with a task size of
//! 1 byte, an 8 MiB read is 8 Mi tasks). It is the task source of a call on one file
//! (`task_source`).

/// One task's slice of the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Offset into the caller's buffer.
    pub buf_offset: usize,
    /// Offset into the file.
    pub file_offset: u64,
    /// Bytes in this task.
    pub len: usize,
}

pub(crate) const PAGE_SIZE: usize = 4096;

/// The tasks of one request: `count()` tasks that tile `size` bytes at `file_offset`, in file
/// order; task 0 has `first` bytes (the whole request when it is one task), the others `task`
/// bytes, the last one the remainder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Split {
    size: usize,
    file_offset: u64,
    first: usize,
    task: usize,
    count: usize,
}

impl Split {
    /// The whole request as one task (none when it is empty).
    pub(crate) fn one(size: usize, file_offset: u64) -> Split {
        Split { size, file_offset, first: size, task: size.max(1), count: usize::from(size > 0) }
    }

    /// Number of tasks.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Bytes of the whole request.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Task `index` (< `count()`).
    pub(crate) fn chunk(&self, index: usize) -> Chunk {
        debug_assert!(index < self.count, "task {index} of {}", self.count);
        if index == 0 {
            return Chunk { buf_offset: 0, file_offset: self.file_offset, len: self.first.min(self.size) };
        }
        // (index - 1) * task < size - first, since index < count: no overflow.
        let buf_offset = self.first + (index - 1) * self.task;
        Chunk { buf_offset, file_offset: self.file_offset + buf_offset as u64, len: self.task.min(self.size - buf_offset) }
    }

    /// Every task, in file order (computed one by one): for the tests, which list them.
    #[cfg(test)]
    pub(crate) fn chunks(self) -> impl Iterator<Item = Chunk> {
        (0..self.count).map(move |i| self.chunk(i))
    }
}

/// Splits `size` bytes at `file_offset` into tasks. `task_size` must be positive. A zero-byte
/// request has no tasks.
pub(crate) fn split(size: usize, file_offset: u64, task_size: u64) -> Split {
    split_with_first(size, file_offset, task_size, None)
}

/// The task size that cuts `size` bytes into about one task per thread of `threads`, in whole
/// pages, no smaller than `min` and no larger than `task_size`: `task_size` itself for a request
/// of at least `threads` tasks.
pub(crate) fn spread_task_size(size: usize, threads: usize, min: u64, task_size: u64) -> u64 {
    let per_thread = (size.div_ceil(threads.max(1)) as u64).next_multiple_of(PAGE_SIZE as u64);
    per_thread.max(min).min(task_size)
}

/// `split`, with a first task shortened by the file offset's distance past a page boundary when
/// that is less than a task (KvikIO's `first_task_size`), so that the other tasks start on pages
/// (for `direct_io`; with a task size that is a multiple of the page).
pub(crate) fn split_for_direct_io(size: usize, file_offset: u64, task_size: u64) -> Split {
    let past_page = (file_offset % crate::backend::posix::direct_io::ALIGN as u64) as usize;
    let task = usize::try_from(task_size).unwrap_or(usize::MAX);
    let first = (past_page > 0 && past_page < task).then(|| task - past_page);
    split_with_first(size, file_offset, task_size, first)
}

fn split_with_first(size: usize, file_offset: u64, task_size: u64, first: Option<usize>) -> Split {
    assert!(task_size > 0, "task_size is validated by the settings");
    let task = usize::try_from(task_size).unwrap_or(usize::MAX);
    if size <= task || size <= PAGE_SIZE {
        return Split::one(size, file_offset);
    }
    // size > task >= first: the first task leaves a remainder.
    let first = first.unwrap_or(task);
    Split { size, file_offset, first, task, count: 1 + (size - first).div_ceil(task) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(split: Split) -> Vec<Chunk> {
        let chunks: Vec<Chunk> = split.chunks().collect();
        assert_eq!(chunks.len(), split.count());
        chunks
    }

    #[test]
    fn one_gib_in_4_mib_tasks_is_256_tasks() {
        let chunks = list(split(1 << 30, 0, 4 << 20));
        assert_eq!(chunks.len(), 256);
        assert!(chunks.iter().all(|c| c.len == 4 << 20));
        assert_eq!(chunks[255].file_offset, (1 << 30) - (4 << 20));
    }

    #[test]
    fn remainder_goes_last_and_tasks_tile_the_request() {
        for (size, off, task) in [(10 << 20, 100u64, 4u64 << 20), (4097, 5, 4096), ((4 << 20) + 1, 0, 4 << 20), (12345, 0, 1000), (5000, 3, 1)] {
            let chunks = list(split(size, off, task));
            let mut expect_buf = 0;
            for c in &chunks {
                assert_eq!(c.buf_offset, expect_buf);
                assert_eq!(c.file_offset, off + c.buf_offset as u64);
                assert!(c.len as u64 <= task && c.len > 0);
                expect_buf += c.len;
            }
            assert_eq!(expect_buf, size);
        }
    }

    #[test]
    fn with_direct_io_tasks_after_the_first_start_on_pages() {
        let chunks = list(split_for_direct_io(10 << 20, 100, 4 << 20));
        assert_eq!(chunks[0], Chunk { buf_offset: 0, file_offset: 100, len: (4 << 20) - 100 });
        assert!(chunks[1..].iter().all(|c| c.file_offset % PAGE_SIZE as u64 == 0));
        assert_eq!(chunks.iter().map(|c| c.len).sum::<usize>(), 10 << 20);
        assert_eq!(chunks.len(), 3);
        // Aligned offsets, small requests and tasks smaller than the distance split as before.
        assert_eq!(split_for_direct_io(10 << 20, 8192, 4 << 20), split(10 << 20, 8192, 4 << 20));
        assert_eq!(split_for_direct_io(100, 5, 4 << 20), split(100, 5, 4 << 20));
        assert_eq!(split_for_direct_io(20_000, 4000, 1000), split(20_000, 4000, 1000));
        // A remainder that fits in the first task's shortfall: two tasks.
        let chunks = list(split_for_direct_io((4 << 20) + 10, 4000, 4 << 20));
        assert_eq!(chunks, [Chunk { buf_offset: 0, file_offset: 4000, len: (4 << 20) - 4000 }, Chunk { buf_offset: (4 << 20) - 4000, file_offset: 4 << 20, len: 4010 }]);
    }

    #[test]
    fn a_small_request_spreads_over_the_threads_in_pages_within_the_bounds() {
        const MIB: usize = 1 << 20;
        assert_eq!(spread_task_size(2 * MIB, 16, 256 << 10, 4 << 20), 256 << 10, "2 MiB on 16 threads: 8 tasks of the minimum");
        assert_eq!(spread_task_size(16 * MIB, 16, 256 << 10, 4 << 20), MIB as u64);
        assert_eq!(spread_task_size(1 << 30, 16, 256 << 10, 4 << 20), 4 << 20, "a large request keeps the task size");
        assert_eq!(spread_task_size(10 * MIB + 1, 3, 4096, 4 << 20), 3_497_984, "rounded up to a page");
        assert_eq!(spread_task_size(100, 16, 256 << 10, 4 << 20), 256 << 10);
        assert_eq!(split(2 * MIB, 0, spread_task_size(2 * MIB, 16, 256 << 10, 4 << 20)).count(), 8);
    }

    #[test]
    fn small_requests_are_one_task() {
        assert_eq!(split(4096, 0, 16).count(), 1);
        assert_eq!(split(100, 0, 4 << 20).count(), 1);
        assert_eq!(split(10, 0, 1).count(), 1);
        assert_eq!(split(5000, 0, 1).count(), 5000);
        assert_eq!(split(0, 0, 4 << 20).count(), 0);
        assert_eq!(Split::one(0, 7).count(), 0);
        assert_eq!(list(Split::one(9, 7)), [Chunk { buf_offset: 0, file_offset: 7, len: 9 }]);
    }

    #[test]
    fn the_largest_requests_are_described_without_a_list() {
        // 2^63 - 1 bytes in 1-byte tasks: any task is computed in constant time and memory.
        let size = isize::MAX as usize;
        let s = split(size, 0, 1);
        assert_eq!(s.count(), size);
        assert_eq!(s.chunk(size - 1), Chunk { buf_offset: size - 1, file_offset: size as u64 - 1, len: 1 });
        let s = split_for_direct_io(size - 100, 100, 4 << 20);
        let last = s.chunk(s.count() - 1);
        assert_eq!(last.buf_offset + last.len, size - 100);
        assert_eq!(s.chunk(1).file_offset, 4 << 20);
    }
}
