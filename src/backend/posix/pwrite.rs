//! The POSIX backend's writes: `pwrite` until the whole range reached the file. `EINTR` is
//! retried and short writes are continued from where they stopped; any other error ends the
//! range with the error and the file offset where it happened (what was written before that
//! offset stays in the file). A `pwrite` that writes nothing for a non-empty range is an error
//! (`ErrorKind::WriteZero`), never a silent short count: a write either covers its range or
//! fails.

use std::io;
use std::os::fd::RawFd;

use super::direct_io::{DirectTransfer, write_full_at_direct};
use crate::direction::Direction;
use crate::sys::fs::transfer_full;

/// A write that stopped before the end of its range: the error and the file offset at which
/// the failing `pwrite` started (every byte before it, from the range's start, reached the file).
#[derive(Debug)]
pub(crate) struct WriteFailure {
    pub offset: u64,
    pub written: usize,
    pub error: io::Error,
}

/// Writes `len` bytes from `src` at `offset`, continuing after short writes and retrying `EINTR`
/// (`sys::fs::transfer_full`).
///
/// # Safety
/// `src` must be valid for reads of `len` bytes for the duration of the call.
pub(crate) unsafe fn write_full_at(fd: RawFd, src: *const u8, len: usize, offset: u64) -> Result<usize, WriteFailure> {
    // SAFETY: forwarded from the caller; a write only reads the buffer.
    unsafe { transfer_full(Direction::Write, fd, src.cast_mut(), len, offset) }
        .map_err(|stopped| WriteFailure { offset: offset + stopped.moved as u64, written: stopped.moved, error: stopped.error })
}

/// A write task's range: through `direct` (an `O_DIRECT` descriptor of the file, under the
/// `auto_direct_io_write` setting) as `direct_io::write_full_at_direct` does, else
/// `write_full_at` through `fd`. Returns the bytes written, all of `len`, and those that went
/// direct.
///
/// # Safety
/// `src` must be valid for reads of `len` bytes for the duration of the call.
pub(crate) unsafe fn write_range(fd: RawFd, direct: Option<RawFd>, src: *const u8, len: usize, offset: u64) -> Result<DirectTransfer, WriteFailure> {
    match direct {
        // SAFETY: forwarded from the caller.
        Some(direct) => unsafe { write_full_at_direct(fd, direct, src, len, offset) },
        // SAFETY: forwarded from the caller.
        None => unsafe { write_full_at(fd, src, len, offset) }.map(|bytes| DirectTransfer { bytes, direct_bytes: 0 }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;

    #[test]
    fn writes_the_range_and_extends_the_file() {
        let f = tempfile::tempfile().unwrap();
        f.write_all_at(&[0xEE; 100], 0).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(unsafe { write_full_at(f.as_raw_fd(), data.as_ptr(), data.len(), 50) }.unwrap(), data.len());
        let mut back = vec![0u8; 10_050];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back[..50].iter().all(|&b| b == 0xEE));
        assert_eq!(&back[50..], &data[..]);
        assert_eq!(f.metadata().unwrap().len(), 10_050);
    }

    #[test]
    fn a_read_only_descriptor_fails_at_the_first_offset() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let f = std::fs::File::open(tmp.path()).unwrap();
        let err = unsafe { write_full_at(f.as_raw_fd(), [1u8; 4].as_ptr(), 4, 8) }.unwrap_err();
        assert_eq!((err.offset, err.written, err.error.raw_os_error()), (8, 0, Some(libc::EBADF)));
    }
}
