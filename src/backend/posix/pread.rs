//! The POSIX backend's system calls: `pread` until the range is full or the file ends. `EINTR`
//! is retried and short reads are looped; reaching end of file is not an error (the caller gets
//! the bytes read), which is the rule on every route.
//!
//! A task starts with a read that does not wait for the disk (`read_full_at_ahead`): it takes
//! what the page cache holds, and when that is not all it asked for, the kernel is asked to read
//! the rest of the task ahead (`readahead::advise_willneed`) before the waiting `pread`s. Why:
//! cold, 16 threads reading a 1 GiB file in 4 MiB tasks on the H200 machine's disk reached a
//! median of 1.81 GB/s this way against 1.54 with plain `pread`s (6 alternating passes,
//! 2026-11-30; docs/routing.md, "Reads of data not in the page cache"). Warm reads pay only the flag on their first read. The advice
//! never reaches past the end of the file (`readahead::advise_willneed` clips it), whatever range
//! the caller names.

use super::direct_io::DirectTransfer;
use crate::direction::Direction;
use crate::stats::TaskOutcome;
use crate::sys::fs::{MAX_SYSCALL_BYTES, transfer_full};
use std::io;
use std::os::fd::RawFd;

/// A read that stopped on an error: the file offset at which the failing call started (the
/// bytes before it, from the range's start, were read) and its error, as a write names its
/// failing `pwrite`.
#[derive(Debug)]
pub(crate) struct ReadFailure {
    pub offset: u64,
    pub error: io::Error,
}

impl ReadFailure {
    /// `error` of a call that started at `offset`.
    pub(crate) fn at(offset: u64, error: io::Error) -> ReadFailure {
        ReadFailure { offset, error }
    }
}

/// Reads `len` bytes at `offset` into `dst`, looping over short reads (`sys::fs::transfer_full`).
/// Returns the bytes read, fewer than `len` only at end of file.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes for the duration of the call.
pub(crate) unsafe fn read_full_at(fd: RawFd, dst: *mut u8, len: usize, offset: u64) -> Result<usize, ReadFailure> {
    // SAFETY: forwarded from the caller.
    unsafe { transfer_full(Direction::Read, fd, dst, len, offset) }.map_err(|stopped| ReadFailure::at(offset + stopped.moved as u64, stopped.error))
}

/// Bytes a read delivered, and whether it had to wait for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivered {
    pub bytes: usize,
    /// The first, non-blocking read did not get all it asked for (part of the range was not in
    /// the page cache, or not readable without waiting), the rest was advised ahead, and the
    /// waiting read then found more bytes (so it was not the end of the file). False where the
    /// kernel or file system has no `RWF_NOWAIT` for reads.
    pub not_cached: bool,
    /// Of `bytes`, read through an `O_DIRECT` descriptor (`direct_io`).
    pub direct_bytes: usize,
}

/// Reads `len` bytes at `offset` into `dst` like `read_full_at`, but starts without waiting for
/// the disk: `preadv2(RWF_NOWAIT)` takes what the page cache holds, and if that is not all it
/// asked for, `POSIX_FADV_WILLNEED` asks for the rest of `offset .. offset + ahead_len`
/// (`ahead_len >= len`: a task read in pieces advises the whole task on its first piece) before
/// the waiting reads.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes for the duration of the call.
pub(crate) unsafe fn read_full_at_ahead(fd: RawFd, dst: *mut u8, len: usize, offset: u64, ahead_len: usize) -> Result<Delivered, ReadFailure> {
    let asked = len.min(MAX_SYSCALL_BYTES);
    // SAFETY: dst is valid for asked <= len bytes.
    let cached = unsafe { read_cached(fd, dst, asked, offset) };
    let advised = match cached {
        Some(n) if n < asked => {
            super::readahead::advise_willneed(fd, offset + n as u64, ahead_len.max(len) - n);
            true
        }
        _ => false,
    };
    let n = cached.unwrap_or(0);
    // SAFETY: dst + n .. dst + len lies in the caller's range (n <= asked <= len).
    let rest = unsafe { read_full_at(fd, dst.add(n), len - n, offset + n as u64) }?;
    // A short non-blocking read followed by nothing is the end of the file, not the disk.
    Ok(Delivered { bytes: n + rest, not_cached: advised && rest > 0, direct_bytes: 0 })
}

/// What of `len` (at most `MAX_SYSCALL_BYTES`) bytes at `offset` the page cache holds, read into
/// `dst` without waiting for I/O (a prefix; 0 when the first page is not cached). `None` when that
/// cannot be told: the kernel or file system has no `RWF_NOWAIT` for reads, or the call failed for
/// another reason (the waiting read that follows reports real errors).
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes for the duration of the call.
unsafe fn read_cached(fd: RawFd, dst: *mut u8, len: usize, offset: u64) -> Option<usize> {
    debug_assert!(len <= MAX_SYSCALL_BYTES);
    let iov = libc::iovec { iov_base: dst.cast(), iov_len: len };
    loop {
        // SAFETY: iov describes the caller's writable range.
        let n = unsafe { libc::preadv2(fd, &iov, 1, offset as libc::off_t, libc::RWF_NOWAIT) };
        if n >= 0 {
            return Some(n as usize);
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Some(0),
            _ => return None,
        }
    }
}

/// A direct read or write as a delivery: never waited for the page cache.
impl From<DirectTransfer> for Delivered {
    fn from(moved: DirectTransfer) -> Self {
        Delivered { bytes: moved.bytes, not_cached: false, direct_bytes: moved.direct_bytes }
    }
}

/// A task served by POSIX reads alone, as the counters take it.
impl From<Delivered> for TaskOutcome {
    fn from(read: Delivered) -> Self {
        TaskOutcome { bytes: read.bytes, mapped_bytes: 0, not_cached: read.not_cached, direct_bytes: read.direct_bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fs::file_size;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn reads_whole_range_and_stops_at_eof() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let mut buf = vec![0xAAu8; 12_000];
        let n = unsafe { read_full_at(f.as_raw_fd(), buf.as_mut_ptr(), 12_000, 0) }.unwrap();
        assert_eq!(n, 10_000);
        assert_eq!(&buf[..n], &data[..]);
        assert!(buf[n..].iter().all(|&b| b == 0xAA));
        let n = unsafe { read_full_at(f.as_raw_fd(), buf.as_mut_ptr(), 100, 20_000) }.unwrap();
        assert_eq!(n, 0);
        assert_eq!(file_size(f.as_raw_fd()).unwrap(), 10_000);
    }

    /// A temporary file of random bytes (in the page cache: just written).
    fn random_file(len: usize, seed: u64) -> (std::fs::File, Vec<u8>) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let data: Vec<u8> = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        (f, data)
    }

    // Ranges not in the page cache: tests/posix_reads.rs (it evicts files from the cache).
    #[test]
    fn cached_ranges_are_read_in_one_go_and_not_flagged() {
        let (f, data) = random_file(1 << 20, 1);
        let mut buf = vec![0xA5u8; (1 << 20) + 4096];
        let got = unsafe { read_full_at_ahead(f.as_raw_fd(), buf.as_mut_ptr(), 1 << 20, 0, 1 << 20) }.unwrap();
        assert_eq!(got, Delivered { bytes: 1 << 20, ..Delivered::default() });
        assert!(buf[..1 << 20] == data[..]);
        assert!(buf[1 << 20..].iter().all(|&b| b == 0xA5));
        // Past the end: the short read is the end of the file, not the disk.
        let got = unsafe { read_full_at_ahead(f.as_raw_fd(), buf.as_mut_ptr(), 8192, (1 << 20) - 100, 8192) }.unwrap();
        assert_eq!(got, Delivered { bytes: 100, ..Delivered::default() });
        assert!(buf[..100] == data[(1 << 20) - 100..]);
    }

    /// Bytes of memory the kernel says are available now.
    fn mem_available() -> u64 {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib = text.lines().find_map(|l| l.strip_prefix("MemAvailable:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
        kib.unwrap_or(0) << 10
    }

    #[test]
    fn a_cached_range_longer_than_one_system_call_is_not_flagged() {
        // The non-blocking read asks for at most MAX_SYSCALL_BYTES; a warm range longer than
        // that must not count as not cached. A sparse file: 2 GiB + 1 MiB of zeros and a mark.
        let len = MAX_SYSCALL_BYTES + (1 << 20) + 4096;
        // GDSROUTE_TEST_SKIP_HUGE: set by scripts/test.sh for ThreadSanitizer, whose shadow
        // memory would multiply the 2 GiB.
        if std::env::var_os("GDSROUTE_TEST_SKIP_HUGE").is_some() || mem_available() < 3 * len as u64 {
            eprintln!("skipped: GDSROUTE_TEST_SKIP_HUGE set, or less than {} bytes of memory available", 3 * len);
            return;
        }
        let f = tempfile::tempfile().unwrap();
        f.set_len(len as u64).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"mark", len as u64 - 4).unwrap();
        let mut buf = vec![0xA5u8; len];
        let fd = f.as_raw_fd();
        assert_eq!(unsafe { read_full_at(fd, buf.as_mut_ptr(), len, 0) }.unwrap(), len); // warm
        buf.fill(0xA5);
        let got = unsafe { read_full_at_ahead(fd, buf.as_mut_ptr(), len, 0, len) }.unwrap();
        assert_eq!(got, Delivered { bytes: len, ..Delivered::default() });
        let zeros = vec![0u8; 1 << 20];
        assert!(buf[..len - 4].chunks(1 << 20).all(|c| c == &zeros[..c.len()]), "zeros expected");
        assert_eq!(&buf[len - 4..], b"mark");
    }

    #[test]
    fn bad_descriptor_is_an_error() {
        let mut buf = [0u8; 4];
        let err = unsafe { read_full_at(-1, buf.as_mut_ptr(), 4, 0) }.unwrap_err();
        assert_eq!((err.error.raw_os_error(), err.offset), (Some(libc::EBADF), 0));
        let err = unsafe { read_full_at_ahead(-1, buf.as_mut_ptr(), 4, 7, 4) }.unwrap_err();
        assert_eq!((err.error.raw_os_error(), err.offset), (Some(libc::EBADF), 7));
    }
}
