//! Direct-I/O writes (`KVIKIO_AUTO_DIRECT_IO_WRITE`): see the module above.

use std::io;
use std::os::fd::RawFd;

use super::{ALIGN, DirectTransfer, SCRATCH_MAX, refused, scratch_copy_stopped, with_scratch};
use crate::backend::posix::pwrite::{WriteFailure, write_full_at};
use crate::direction::Direction;
use crate::sys::fs::transfer_once;
use crate::sys::process_copy::copy_from_caller;

/// Writes `len` bytes from `src` at `offset`: the whole pages inside the range through `direct`
/// (an `O_DIRECT` descriptor of the same file), the unaligned head up to the first page boundary
/// and a tail shorter than a page through `buffered`. Nothing outside `offset .. offset + len` of
/// the file is written (a direct write covers whole pages, so only pages wholly inside the range
/// go direct). Memory not page-aligned at the same point as the file goes through this thread's
/// scratch buffer, a piece at a time. Where the direct descriptor refuses (`EINVAL`, `EFAULT`,
/// `EOPNOTSUPP`), no scratch buffer can be had or the copy into it stops (a page of `src` that
/// cannot be read, or the copy refused), the rest of the range goes through `buffered`: a bad
/// page then fails that `pwrite` with `EFAULT` at its offset, every byte before it in the file.
/// Short writes are continued and `EINTR` retried, as `write_full_at`.
///
/// Errors: as `write_full_at`: the error and the file offset of the `pwrite` that failed; every
/// byte of the range before that offset reached the file.
///
/// # Safety
/// `src` must be valid for reads of `len` bytes for the duration of the call (a page that is
/// not is reported as `EFAULT`, never read from user space).
pub(crate) unsafe fn write_full_at_direct(buffered: RawFd, direct: RawFd, src: *const u8, len: usize, offset: u64) -> Result<DirectTransfer, WriteFailure> {
    let mut done = DirectTransfer::default();
    let mut direct_usable = true;
    while done.bytes < len {
        let pos = offset + done.bytes as u64;
        let left = len - done.bytes;
        // SAFETY: done.bytes < len, inside the caller's range.
        let from = unsafe { src.add(done.bytes) };
        let head = (ALIGN - (pos % ALIGN as u64) as usize) % ALIGN;
        if !direct_usable || head > 0 || left < ALIGN {
            // The unaligned head, a tail shorter than a page, or all the rest: the page cache.
            let want = if direct_usable && head > 0 { head.min(left) } else { left };
            // SAFETY: from .. from + want lies in the caller's range (want <= left).
            unsafe { write_full_at(buffered, from, want, pos) }.map_err(|f| WriteFailure { written: done.bytes + f.written, ..f })?;
            done.bytes += want;
            continue;
        }
        let aligned = left - left % ALIGN;
        // SAFETY: from .. from + aligned lies in the caller's range.
        let attempt = unsafe { write_aligned(direct, from, aligned, pos) };
        let n = match attempt {
            Ok(Some(n)) => n,
            Ok(None) => {
                direct_usable = false; // no scratch buffer, or no copy into it: the rest through the page cache
                continue;
            }
            Err(e) if refused(&e) => {
                direct_usable = false;
                continue;
            }
            Err(error) => return Err(WriteFailure { offset: pos, written: done.bytes, error }),
        };
        if n == 0 {
            let error = io::Error::new(io::ErrorKind::WriteZero, "pwrite (O_DIRECT) wrote 0 bytes");
            return Err(WriteFailure { offset: pos, written: done.bytes, error });
        }
        // A short direct write may end mid-page; the loop then goes on with a buffered head.
        done.bytes += n;
        done.direct_bytes += n;
    }
    Ok(done)
}

/// One direct `pwrite` of up to `len` bytes (a multiple of `ALIGN`) at the aligned `offset`:
/// straight from `src` where it is page-aligned, else the first `SCRATCH_MAX` bytes at most
/// copied into this thread's scratch buffer first, with a copy that reports a bad page (only the
/// whole pages before it are written then). Returns what the `pwrite` wrote, or `None` without a
/// scratch buffer or when the copy stopped before a whole page.
///
/// # Safety
/// `src` valid for reads of `len` bytes.
unsafe fn write_aligned(direct: RawFd, src: *const u8, len: usize, offset: u64) -> io::Result<Option<usize>> {
    debug_assert!(len.is_multiple_of(ALIGN) && offset.is_multiple_of(ALIGN as u64));
    if (src as usize).is_multiple_of(ALIGN) {
        // SAFETY: forwarded from the caller.
        return unsafe { transfer_once(Direction::Write, direct, src.cast_mut(), len, offset) }.map(Some);
    }
    let len = len.min(SCRATCH_MAX);
    with_scratch(|scratch| {
        // SAFETY: the scratch buffer holds SCRATCH_MAX >= len bytes owned by this thread and never
        // overlaps the caller's src; a bad page of src is reported, not touched.
        if let Err(stop) = unsafe { copy_from_caller(scratch, src, len) } {
            scratch_copy_stopped(&stop);
            // The whole pages copied before the stop still go direct; the next call starts at
            // the stop, copies nothing and sends the rest through the page cache.
            let whole = stop.copied - stop.copied % ALIGN;
            // SAFETY: scratch is aligned and holds whole <= len copied bytes.
            return if whole == 0 { Ok(None) } else { unsafe { transfer_once(Direction::Write, direct, scratch, whole, offset) }.map(Some) };
        }
        // SAFETY: scratch is aligned and holds len bytes.
        unsafe { transfer_once(Direction::Write, direct, scratch, len, offset) }.map(Some)
    })
    .unwrap_or(Ok(None))
}

#[cfg(test)]
mod tests {
    use super::super::open_direct;
    use super::super::testing::{Guarded, POISON};
    use super::*;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::fs::FileExt;

    const FILL: u8 = 0x3C;

    /// A file of `len` bytes of `FILL` in the temporary directory, opened read-write, and its
    /// `O_DIRECT` descriptor where the file system has direct I/O.
    fn filled_file(len: usize) -> (std::fs::File, Option<OwnedFd>) {
        let f = tempfile::tempfile().unwrap();
        f.write_all_at(&vec![FILL; len], 0).unwrap();
        let direct = open_direct(f.as_raw_fd()).ok();
        (f, direct)
    }

    fn random(len: usize, seed: u64) -> Vec<u8> {
        let mut rng = fastrand::Rng::with_seed(seed);
        std::iter::repeat_with(|| rng.u8(..)).take(len).collect()
    }

    /// `data` placed in guarded memory `misalign` bytes past a page.
    fn source(data: &[u8], misalign: usize) -> Guarded {
        let mut src = Guarded::new(data.len(), misalign);
        let start = src.start;
        src.storage[start..start + data.len()].copy_from_slice(data);
        src
    }

    /// The whole pages of `offset .. offset + len`, in bytes.
    fn whole_pages(offset: usize, len: usize) -> usize {
        let first = offset.next_multiple_of(ALIGN);
        let end = (offset + len) / ALIGN * ALIGN;
        end.saturating_sub(first)
    }

    #[test]
    fn every_offset_length_and_alignment_writes_exactly_the_range() {
        let size = 6 * ALIGN + 777;
        let (probe, direct) = filled_file(0);
        drop(probe);
        if direct.is_none() {
            eprintln!("skipped: no O_DIRECT on the temporary directory's file system");
            return;
        }
        for offset in [0usize, 1, 100, ALIGN - 1, ALIGN, ALIGN + 17, 3 * ALIGN, size - 10, size, size + 5000] {
            for len in [0usize, 1, 100, ALIGN - 1, ALIGN, ALIGN + 1, 3 * ALIGN + 17, size] {
                for misalign in [0usize, 1, 512, ALIGN - 1] {
                    let (f, direct) = filled_file(size);
                    let direct = direct.unwrap();
                    let data = random(len, (offset * 31 + len * 7 + misalign) as u64);
                    let src = source(&data, misalign);
                    let before = src.storage.clone();
                    // SAFETY: src holds len readable bytes at its start.
                    let got = unsafe { write_full_at_direct(f.as_raw_fd(), direct.as_raw_fd(), src.storage[src.start..].as_ptr(), len, offset as u64) }.unwrap();
                    let at = format!("offset {offset} len {len} misalign {misalign}");
                    assert_eq!(got.bytes, len, "{at}");
                    assert_eq!(got.direct_bytes, whole_pages(offset, len), "{at}: the whole pages go direct, nothing else");
                    assert!(src.storage == before, "{at}: the source changed");
                    let end = if len == 0 { size } else { size.max(offset + len) };
                    let mut back = vec![0u8; end];
                    f.read_exact_at(&mut back, 0).unwrap();
                    assert_eq!(f.metadata().unwrap().len() as usize, end, "{at}: file size");
                    let expect_outside = |i: usize| if i < size { FILL } else { 0 };
                    let (start, stop) = if len == 0 { (end, end) } else { (offset, offset + len) };
                    assert!(back[..start].iter().enumerate().all(|(i, &b)| b == expect_outside(i)), "{at}: written before the range");
                    assert!(back[start..stop] == data[..], "{at}: bytes differ");
                    assert!(back[stop..].iter().enumerate().all(|(i, &b)| b == expect_outside(stop + i)), "{at}: written past the range");
                }
            }
        }
    }

    #[test]
    fn ranges_longer_than_the_scratch_buffer_go_through_it_in_turns() {
        let len = 2 * SCRATCH_MAX + 5 * ALIGN;
        let (f, direct) = filled_file(0);
        let Some(direct) = direct else {
            eprintln!("skipped: no O_DIRECT on the temporary directory's file system");
            return;
        };
        let data = random(len, 11);
        let src = source(&data, 3);
        // SAFETY: src holds len readable bytes at its start.
        let got = unsafe { write_full_at_direct(f.as_raw_fd(), direct.as_raw_fd(), src.storage[src.start..].as_ptr(), len, 0) }.unwrap();
        assert_eq!(got, DirectTransfer { bytes: len, direct_bytes: len });
        let mut back = vec![0u8; len];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back == data);
        assert!(src.storage[..src.start].iter().all(|&b| b == POISON));
    }

    /// A source at +1 (through the scratch buffer) with an unreadable or unmapped page first, in
    /// the middle or last: `EFAULT` at the file offset of the bad page's first byte, never a
    /// crash; every byte before it reached the file, nothing at or after it.
    #[test]
    fn a_bad_source_page_is_efault_at_its_offset() {
        use crate::sys::process_copy::testing::{Mapping, PAGE};
        for bad in [0, 2, 4] {
            for protection in [Some(libc::PROT_NONE), None] {
                let (f, direct) = filled_file(6 * ALIGN);
                let Some(direct) = direct else {
                    eprintln!("skipped: no O_DIRECT on the temporary directory's file system");
                    return;
                };
                let map = Mapping::new(5, bad, protection);
                // SAFETY: the call reads only inside base + 1 .. base + 5 pages, and reports the bad page.
                let err = unsafe { write_full_at_direct(f.as_raw_fd(), direct.as_raw_fd(), map.base.add(1), 5 * PAGE - 1, 0) }.unwrap_err();
                let fault = (bad * PAGE).saturating_sub(1); // the file offset of the bad page's first byte
                assert_eq!((err.offset, err.error.raw_os_error()), (fault as u64, Some(libc::EFAULT)), "bad page {bad}, {protection:?}");
                let mut back = vec![0u8; 6 * ALIGN];
                f.read_exact_at(&mut back, 0).unwrap();
                assert!((0..fault).all(|i| back[i] == Mapping::original(i + 1)), "bad page {bad}: bytes before the fault");
                assert!(back[fault..].iter().all(|&b| b == FILL), "bad page {bad}: written at or after the fault");
            }
        }
    }

    #[test]
    fn a_failing_direct_write_names_its_offset_after_the_head_reached_the_file() {
        // A read-only descriptor in the direct descriptor's place fails writes with EBADF: not a
        // refusal (those fall back to the page cache) but a failure, reported at the first direct
        // offset, after the buffered head reached the file.
        let (f, _) = filled_file(4 * ALIGN);
        let readonly = std::fs::File::open(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
        let data = random(3 * ALIGN, 12);
        // SAFETY: data holds 3 * ALIGN readable bytes.
        let err = unsafe { write_full_at_direct(f.as_raw_fd(), readonly.as_raw_fd(), data.as_ptr(), data.len(), 100) }.unwrap_err();
        assert_eq!((err.offset, err.written, err.error.raw_os_error()), (ALIGN as u64, ALIGN - 100, Some(libc::EBADF)));
        let mut back = vec![0u8; ALIGN - 100];
        f.read_exact_at(&mut back, 100).unwrap();
        assert!(back[..] == data[..ALIGN - 100]);
    }
}
