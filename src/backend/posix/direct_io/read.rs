//! Direct-I/O reads (`KVIKIO_AUTO_DIRECT_IO_READ`): see the module above.

use std::io;
use std::os::fd::RawFd;

use super::{ALIGN, DirectTransfer, SCRATCH_MAX, refused, scratch_copy_stopped, with_scratch};
use crate::backend::posix::pread::{ReadFailure, read_full_at};
use crate::direction::Direction;
use crate::sys::fs::transfer_once;
use crate::sys::process_copy::copy_to_caller;

/// Reads `len` bytes at `offset` into `dst`: the page-aligned middle through `direct` (an
/// `O_DIRECT` descriptor of the same file) as far as the file has whole pages, the rest through
/// `buffered`, so that no byte past those reported is written (unless the file shrinks during the
/// call: a direct read that then meets the new end writes zeros past it, inside `dst .. dst +
/// len`). Falls back to `buffered` for the rest of the range where the direct descriptor refuses
/// a read (`EINVAL`: an alignment the file system does not accept; `EFAULT`, `EOPNOTSUPP`: memory
/// or a file direct I/O cannot serve), where it stops short (a file system that ends direct
/// reads early), where no scratch buffer can be had, and where the copy out of it stops (a page
/// of `dst` that cannot be written: the buffered `pread` then fails with `EFAULT` there, having
/// written nothing at or after that byte; or the copy is refused). Returns the bytes read, fewer
/// than `len` only at end of file.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes for the duration of the call (a page that is
/// not is reported as `EFAULT`, never touched from user space).
pub(crate) unsafe fn read_full_at_direct(buffered: RawFd, direct: RawFd, dst: *mut u8, len: usize, offset: u64) -> Result<DirectTransfer, ReadFailure> {
    let mut read = DirectTransfer::default();
    if len == 0 {
        return Ok(read);
    }
    // Direct reads stay within the file's whole pages: the device writes whole blocks, so one
    // that ran into the end of the file would write past the bytes it reports.
    let size = crate::sys::fs::file_size(buffered).map_err(|e| ReadFailure::at(offset, e))?;
    let direct_end = size - size % ALIGN as u64;
    while read.bytes < len {
        let pos = offset + read.bytes as u64;
        let left = len - read.bytes;
        // SAFETY: read.bytes < len, so the pointer stays inside the caller's range.
        let into = unsafe { dst.add(read.bytes) };
        let head = (ALIGN - (pos % ALIGN as u64) as usize) % ALIGN;
        if head > 0 || left < ALIGN {
            // The unaligned head, or a tail shorter than a page: through the page cache.
            let want = if head > 0 { head.min(left) } else { left };
            // SAFETY: into .. into + want lies in the caller's range (want <= left).
            let n = unsafe { read_full_at(buffered, into, want, pos) }?;
            read.bytes += n;
            if n < want {
                return Ok(read); // end of file
            }
            continue;
        }
        let aligned = (left - left % ALIGN).min(direct_end.saturating_sub(pos).min(usize::MAX as u64) as usize);
        if aligned == 0 {
            break; // past the file's last whole page: the rest below
        }
        let direct_to_dst = (into as usize).is_multiple_of(ALIGN);
        let want = if direct_to_dst { aligned } else { aligned.min(SCRATCH_MAX) };
        // SAFETY: into .. into + want lies in the caller's range.
        let direct_read = unsafe {
            if direct_to_dst { read_aligned(direct, into, want, pos).map(Some) } else { read_through_scratch(direct, into, want, pos) }
        };
        let n = match direct_read {
            Ok(Some(n)) => n,
            Ok(None) => 0, // no scratch buffer, or no copy out of it: the rest below, through the page cache
            Err(e) if refused(&e) => 0,
            Err(e) => return Err(ReadFailure::at(pos, e)),
        };
        read.bytes += n;
        read.direct_bytes += n;
        if n < want {
            break; // the end of the file, or a refusal or early stop of the direct descriptor
        }
    }
    if read.bytes < len {
        // Past the file's last whole page, or after a direct read that stopped short: through the
        // page cache, which reads on to the true end of the file (or further if it grew).
        // SAFETY: read.bytes < len; the rest of the caller's range.
        read.bytes += unsafe { read_full_at(buffered, dst.add(read.bytes), len - read.bytes, offset + read.bytes as u64) }?;
    }
    Ok(read)
}

/// `pread`s `len` bytes (a multiple of `ALIGN`) at the aligned `offset` through `direct` into the
/// aligned `dst`, looping over short reads while they end on a page; returns the bytes read. A
/// failure after some bytes returns those: the caller reads on from there through the page cache,
/// whose read fails again where the file does and names that offset (a disk's bad block in the
/// middle of a direct read named the read's start, and the bytes before it were dropped).
///
/// # Safety
/// `dst` valid for writes of `len` bytes.
unsafe fn read_aligned(direct: RawFd, dst: *mut u8, len: usize, offset: u64) -> io::Result<usize> {
    debug_assert!(len.is_multiple_of(ALIGN) && offset.is_multiple_of(ALIGN as u64) && (dst as usize).is_multiple_of(ALIGN));
    let mut done = 0usize;
    while done < len {
        // SAFETY: dst + done .. dst + len lies in the caller's range.
        let n = match unsafe { transfer_once(Direction::Read, direct, dst.add(done), len - done, offset + done as u64) } {
            Ok(n) => n,
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        };
        done += n;
        if n == 0 || !n.is_multiple_of(ALIGN) {
            break; // end of file (a direct read may end mid-page only there)
        }
    }
    Ok(done)
}

/// Reads `len` bytes (a multiple of `ALIGN`, at most `SCRATCH_MAX`) at the aligned `offset`
/// through `direct` into this thread's aligned scratch buffer, and copies what was read to `dst`
/// with a copy that reports a bad page. `None` when the thread has no scratch buffer (allocation
/// failed, or the thread is exiting) or the copy stopped (a bad page of `dst`, or refused; the
/// bytes before the stop may have been written to `dst`, inside its range).
///
/// # Safety
/// `dst` valid for writes of `len` bytes.
unsafe fn read_through_scratch(direct: RawFd, dst: *mut u8, len: usize, offset: u64) -> io::Result<Option<usize>> {
    with_scratch(|scratch| {
        // SAFETY: the scratch buffer holds SCRATCH_MAX >= len aligned bytes, owned by this thread.
        let n = unsafe { read_aligned(direct, scratch, len, offset) }?;
        // SAFETY: n <= len bytes were written to the scratch buffer, which never overlaps the
        // caller's dst; a bad page of dst is reported, not touched.
        match unsafe { copy_to_caller(dst, scratch, n) } {
            Ok(()) => Ok(Some(n)),
            Err(stop) => {
                scratch_copy_stopped(&stop);
                Ok(None)
            }
        }
    })
    .unwrap_or(Ok(None))
}

#[cfg(test)]
mod tests {
    use super::super::open_direct;
    use super::super::testing::{Guarded, POISON};
    use super::*;
    use std::io::Write;
    use std::os::fd::{AsRawFd, OwnedFd};

    /// A file of `len` random bytes in the temporary directory, its data, and its `O_DIRECT`
    /// descriptor where the file system has direct I/O.
    fn random_file(len: usize, seed: u64) -> (std::fs::File, Vec<u8>, Option<OwnedFd>) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let data: Vec<u8> = std::iter::repeat_with(|| rng.u8(..)).take(len).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        let direct = open_direct(f.as_raw_fd()).ok();
        (f, data, direct)
    }

    /// Checks a destination: the expected bytes at its start, poison everywhere else.
    fn check(dst: &Guarded, expect: &[u8]) {
        let (before, rest) = dst.storage.split_at(dst.start);
        let (got, after) = rest.split_at(dst.len);
        assert!(before.iter().all(|&b| b == POISON), "written before the range");
        assert!(got[..expect.len()] == *expect, "bytes differ");
        assert!(got[expect.len()..].iter().chain(after).all(|&b| b == POISON), "written past what was read");
    }

    #[test]
    fn every_offset_length_and_alignment_reads_the_files_bytes() {
        let size = 5 * ALIGN + 1234;
        let (f, data, direct) = random_file(size, 7);
        let Some(direct) = direct else {
            eprintln!("skipped: no O_DIRECT on the temporary directory's file system");
            return;
        };
        for offset in [0usize, 1, 100, ALIGN - 1, ALIGN, ALIGN + 17, 3 * ALIGN, size - 10, size, size + 5] {
            for len in [0usize, 1, 100, ALIGN - 1, ALIGN, ALIGN + 1, 3 * ALIGN + 17, size] {
                for misalign in [0usize, 1, 512, ALIGN - 1] {
                    let mut dst = Guarded::new(len, misalign);
                    // SAFETY: dst holds len writable bytes.
                    let got = unsafe { read_full_at_direct(f.as_raw_fd(), direct.as_raw_fd(), dst.ptr(), len, offset as u64) }.unwrap();
                    let expect = &data[offset.min(size)..(offset + len).min(size)];
                    assert_eq!(got.bytes, expect.len(), "offset {offset} len {len} misalign {misalign}");
                    assert!(got.direct_bytes <= got.bytes);
                    check(&dst, expect);
                    // Direct I/O took the aligned middle when there was one in the file's whole pages.
                    let first_aligned = offset.next_multiple_of(ALIGN);
                    let middle_end = ((offset + len) / ALIGN * ALIGN).min(size / ALIGN * ALIGN);
                    if middle_end > first_aligned {
                        assert!(got.direct_bytes > 0, "offset {offset} len {len} misalign {misalign}");
                    } else {
                        assert_eq!(got.direct_bytes, 0, "offset {offset} len {len} misalign {misalign}");
                    }
                }
            }
        }
    }

    #[test]
    fn ranges_longer_than_the_scratch_buffer_go_through_it_in_turns() {
        let size = SCRATCH_MAX * 2 + 3 * ALIGN;
        let (f, data, direct) = random_file(size, 8);
        let Some(direct) = direct else {
            eprintln!("skipped: no O_DIRECT on the temporary directory's file system");
            return;
        };
        let mut dst = Guarded::new(size, 3);
        // SAFETY: dst holds size writable bytes.
        let got = unsafe { read_full_at_direct(f.as_raw_fd(), direct.as_raw_fd(), dst.ptr(), size, 0) }.unwrap();
        assert_eq!(got, DirectTransfer { bytes: size, direct_bytes: size });
        check(&dst, &data);
    }

    /// A destination at +1 (through the scratch buffer) with a read-only or unmapped page first,
    /// in the middle or last: `EFAULT`, never a crash; every byte before the bad page is the
    /// file's, nothing after it written.
    #[test]
    fn a_bad_destination_page_is_efault_and_nothing_after_it_is_written() {
        use crate::sys::process_copy::testing::{Mapping, PAGE};
        let (f, data, direct) = random_file(6 * ALIGN, 10);
        let Some(direct) = direct else {
            eprintln!("skipped: no O_DIRECT on the temporary directory's file system");
            return;
        };
        for bad in [0, 2, 4] {
            for protection in [Some(libc::PROT_READ), None] {
                let map = Mapping::new(5, bad, protection);
                let len = 5 * PAGE - 1;
                // SAFETY: the call writes only inside base + 1 .. base + 5 pages, and reports the bad page.
                let err = unsafe { read_full_at_direct(f.as_raw_fd(), direct.as_raw_fd(), map.base.add(1), len, 0) }.unwrap_err();
                let fault = (bad * PAGE).max(1); // in the mapping; the range starts at 1
                // The failing read started at the bad page: file offset fault - 1.
                assert_eq!((err.error.raw_os_error(), err.offset), (Some(libc::EFAULT), fault as u64 - 1), "bad page {bad}");
                for i in (0..5 * PAGE).filter(|i| protection.is_some() || i / PAGE != bad) {
                    let expect = if (1..fault).contains(&i) { data[i - 1] } else { Mapping::original(i) };
                    assert_eq!(map.at(i), expect, "bad page {bad}, {protection:?}: byte {i}");
                }
            }
        }
    }

    #[test]
    fn a_failing_direct_descriptor_is_an_error() {
        let (f, _, _) = random_file(3 * ALIGN, 9);
        let mut dst = Guarded::new(2 * ALIGN, 0);
        // SAFETY: dst holds 2 * ALIGN writable bytes.
        let err = unsafe { read_full_at_direct(f.as_raw_fd(), -1, dst.ptr(), 2 * ALIGN, 0) }.unwrap_err();
        assert_eq!(err.error.raw_os_error(), Some(libc::EBADF));
        check(&dst, &[]);
    }
}
