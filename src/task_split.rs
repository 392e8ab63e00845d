//! How a parallel read is cut into tasks, as in KvikIO: one task when the request fits in a task
//! (or in a page); otherwise tasks of `task_size` bytes and a last one with the remainder.

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
        let len = task.min(size - done);
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
    fn small_requests_are_one_task() {
        assert_eq!(split(4096, 0, 16).len(), 1);
        assert_eq!(split(100, 0, 4 << 20).len(), 1);
        assert!(split(0, 0, 4 << 20).is_empty());
    }
}
