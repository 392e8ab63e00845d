//! How a parallel read is cut into tasks, as in KvikIO: one task when the request fits in a task
//! (or in a page); otherwise tasks of `task_size` bytes and a last one with the remainder. With
//! direct I/O (`split_for_direct_io`) the first task ends on a page boundary of the file, so that
//! every later task starts on one (KvikIO does this for device reads).

/// One task's slice of the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Offset into the caller's buffer.
    pub buf_offset: usize,
    /// Offset into the file.
    pub file_offset: u64,
    /// Bytes in this task.
    pub len: usize,
}

const PAGE_SIZE: usize = 4096;

/// Splits `size` bytes at `file_offset` into tasks. `task_size` must be positive. A zero-byte
/// request has no tasks.
pub fn split(size: usize, file_offset: u64, task_size: u64) -> Vec<Chunk> {
    split_with_first(size, file_offset, task_size, None)
}

/// `split`, with a first task shortened by the file offset's distance past a page boundary when
/// that is less than a task (KvikIO's `first_task_size`), so that the other tasks start on pages
/// (for `direct_io`; with a task size that is a multiple of the page).
pub fn split_for_direct_io(size: usize, file_offset: u64, task_size: u64) -> Vec<Chunk> {
    let past_page = (file_offset % crate::direct_io::ALIGN as u64) as usize;
    let task = usize::try_from(task_size).unwrap_or(usize::MAX);
    let first = (past_page > 0 && past_page < task).then(|| task - past_page);
    split_with_first(size, file_offset, task_size, first)
}

fn split_with_first(size: usize, file_offset: u64, task_size: u64, first: Option<usize>) -> Vec<Chunk> {
    assert!(task_size > 0, "task_size is validated by the settings");
    let task = usize::try_from(task_size).unwrap_or(usize::MAX);
    if size == 0 {
        return Vec::new();
    }
    if size <= task || size <= PAGE_SIZE {
        return vec![Chunk { buf_offset: 0, file_offset, len: size }];
    }
    let mut chunks = Vec::with_capacity(size.div_ceil(task));
    let mut done = 0usize;
    while done < size {
        let this_task = if done == 0 { first.unwrap_or(task) } else { task };
        let len = this_task.min(size - done);
        chunks.push(Chunk { buf_offset: done, file_offset: file_offset + done as u64, len });
        done += len;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_gib_in_4_mib_tasks_is_256_tasks() {
        let chunks = split(1 << 30, 0, 4 << 20);
        assert_eq!(chunks.len(), 256);
        assert!(chunks.iter().all(|c| c.len == 4 << 20));
        assert_eq!(chunks[255].file_offset, (1 << 30) - (4 << 20));
    }

    #[test]
    fn remainder_goes_last_and_tasks_tile_the_request() {
        for (size, off, task) in [(10 << 20, 100u64, 4u64 << 20), (4097, 5, 4096), ((4 << 20) + 1, 0, 4 << 20), (12345, 0, 1000)] {
            let chunks = split(size, off, task);
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
        let chunks = split_for_direct_io(10 << 20, 100, 4 << 20);
        assert_eq!(chunks[0], Chunk { buf_offset: 0, file_offset: 100, len: (4 << 20) - 100 });
        assert!(chunks[1..].iter().all(|c| c.file_offset % PAGE_SIZE as u64 == 0));
        assert_eq!(chunks.iter().map(|c| c.len).sum::<usize>(), 10 << 20);
        assert_eq!(chunks.len(), 3);
        // Aligned offsets, small requests and tasks smaller than the distance split as before.
        assert_eq!(split_for_direct_io(10 << 20, 8192, 4 << 20), split(10 << 20, 8192, 4 << 20));
        assert_eq!(split_for_direct_io(100, 5, 4 << 20), split(100, 5, 4 << 20));
        assert_eq!(split_for_direct_io(20_000, 4000, 1000), split(20_000, 4000, 1000));
    }

    #[test]
    fn small_requests_are_one_task() {
        assert_eq!(split(4096, 0, 16).len(), 1);
        assert_eq!(split(100, 0, 4 << 20).len(), 1);
        assert!(split(0, 0, 4 << 20).is_empty());
    }
}
