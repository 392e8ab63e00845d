//! Direct I/O for POSIX reads, KvikIO's `KVIKIO_AUTO_DIRECT_IO_READ` (off by default, as in
//! KvikIO): the page-aligned middle of a read goes through a second descriptor of the file opened
//! with `O_DIRECT`, which bypasses the page cache; an unaligned head or a tail shorter than a page
//! goes through the handle's own descriptor. Where the destination is not page-aligned at the same
//! point as the file offset, the direct part goes through a page-aligned scratch buffer of the
//! thread and is copied out (KvikIO does the same).
//!
//! Why a user turns it on: data read once and larger than memory (a dataset streamed each epoch)
//! then does not push everything else out of the page cache, and reads cost no page-cache
//! bookkeeping. Why it is off by default: a second read of the same data goes to the disk again.

use std::cell::RefCell;
use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::pread::{pread_once, read_full_at};

/// Alignment of `O_DIRECT` offsets, lengths and memory: a page, as KvikIO uses (a multiple of
/// every logical block size Linux block devices report in practice).
pub(crate) const ALIGN: usize = 4096;

/// Most bytes of one direct read through the scratch buffer (also the scratch buffer's largest
/// size, per thread): one task of the default size.
const SCRATCH_MAX: usize = 4 << 20;

/// What a direct read delivered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectRead {
    /// Bytes read (fewer than asked only at end of file).
    pub bytes: usize,
    /// Of `bytes`, read through the `O_DIRECT` descriptor.
    pub direct_bytes: usize,
}

/// Opens a second descriptor of the file behind `fd` with `O_DIRECT` (read only), through
/// `/proc/self/fd`, so that it reaches the same file even if its path was renamed or removed since
/// the open.
///
/// Errors: the `open` failure, e.g. `EINVAL` where the file system has no direct I/O (tmpfs,
/// some FUSE and network file systems), `ENOENT` without `/proc`.
pub fn open_direct(fd: RawFd) -> io::Result<OwnedFd> {
    let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a number");
    // SAFETY: a NUL-terminated path; no mode is needed without O_CREAT.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECT | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Reads `len` bytes at `offset` into `dst`: the page-aligned middle through `direct` (an
/// `O_DIRECT` descriptor of the same file) as far as the file has whole pages, the rest through
/// `buffered`, so that no byte past those reported is written (unless the file shrinks during the
/// call: a direct read that then meets the new end writes zeros past it, inside `dst .. dst +
/// len`). Falls back to `buffered` for the rest of the range where the direct descriptor refuses
/// a read (`EINVAL`: an alignment the file system does not accept; `EFAULT`, `EOPNOTSUPP`: memory
/// or a file direct I/O cannot serve), where it stops short (a file system that ends direct
/// reads early), and where no scratch buffer can be had. Returns the bytes read, fewer than
/// `len` only at end of file.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes for the duration of the call.
pub unsafe fn read_full_at_direct(buffered: RawFd, direct: RawFd, dst: *mut u8, len: usize, offset: u64) -> io::Result<DirectRead> {
    let mut read = DirectRead::default();
    if len == 0 {
        return Ok(read);
    }
    // Direct reads stay within the file's whole pages: the device writes whole blocks, so one
    // that ran into the end of the file would write past the bytes it reports.
    let size = readable_size(buffered)?;
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
            Ok(None) => 0, // no scratch buffer: the rest below, through the page cache
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EFAULT | libc::EOPNOTSUPP)) => 0,
            Err(e) => return Err(e),
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
/// aligned `dst`, looping over short reads while they end on a page; returns the bytes read.
///
/// # Safety
/// `dst` valid for writes of `len` bytes.
unsafe fn read_aligned(direct: RawFd, dst: *mut u8, len: usize, offset: u64) -> io::Result<usize> {
    debug_assert!(len.is_multiple_of(ALIGN) && offset.is_multiple_of(ALIGN as u64) && (dst as usize).is_multiple_of(ALIGN));
    let mut done = 0usize;
    while done < len {
        // SAFETY: dst + done .. dst + len lies in the caller's range.
        let n = unsafe { pread_once(direct, dst.add(done), len - done, offset + done as u64) }?;
        done += n;
        if n == 0 || !n.is_multiple_of(ALIGN) {
            break; // end of file (a direct read may end mid-page only there)
        }
    }
    Ok(done)
}

/// Reads `len` bytes (a multiple of `ALIGN`, at most `SCRATCH_MAX`) at the aligned `offset`
/// through `direct` into this thread's aligned scratch buffer, and copies what was read to `dst`.
/// `None` when the thread has no scratch buffer (allocation failed, or the thread is exiting).
///
/// # Safety
/// `dst` valid for writes of `len` bytes.
unsafe fn read_through_scratch(direct: RawFd, dst: *mut u8, len: usize, offset: u64) -> io::Result<Option<usize>> {
    let read = SCRATCH.try_with(|scratch| {
        let Ok(mut scratch) = scratch.try_borrow_mut() else { return Ok(None) };
        if scratch.is_none() {
            *scratch = AlignedBuffer::new();
        }
        let Some(buffer) = scratch.as_ref() else { return Ok(None) };
        // SAFETY: the scratch buffer holds SCRATCH_MAX >= len aligned bytes, owned by this thread.
        let n = unsafe { read_aligned(direct, buffer.ptr, len, offset) }?;
        // SAFETY: n <= len bytes were written to the scratch buffer; dst is the caller's, valid
        // for len bytes, and never overlaps memory this module allocated.
        unsafe { std::ptr::copy_nonoverlapping(buffer.ptr, dst, n) };
        Ok(Some(n))
    });
    read.unwrap_or(Ok(None))
}

/// The size that bounds direct reads: the file's size, or a block device's (whose `st_size` is 0).
fn readable_size(fd: RawFd) -> io::Result<u64> {
    let st = crate::sys::fs::stat(fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFBLK {
        return Ok(st.st_size as u64);
    }
    crate::sys::fs::block_device_size(fd)
}

thread_local! {
    /// This thread's scratch buffer for direct reads into unaligned destinations, allocated on
    /// first need and kept for the thread's life (pool threads live as long as the process).
    static SCRATCH: RefCell<Option<AlignedBuffer>> = const { RefCell::new(None) };
}

/// `SCRATCH_MAX` bytes of heap memory aligned to `ALIGN`.
struct AlignedBuffer {
    ptr: *mut u8,
}

impl AlignedBuffer {
    fn layout() -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(SCRATCH_MAX, ALIGN).expect("constant, valid layout")
    }

    /// `None` where the memory cannot be had (reads then go through the page cache).
    fn new() -> Option<Self> {
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(Self::layout()) };
        (!ptr.is_null()).then_some(AlignedBuffer { ptr })
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with the same layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, Self::layout()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

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

    /// A destination with poisoned guard bytes on both sides, whose start lies `misalign` bytes
    /// past a page boundary.
    struct Guarded {
        storage: Vec<u8>,
        start: usize,
        len: usize,
    }

    const GUARD: usize = 64;

    impl Guarded {
        fn new(len: usize, misalign: usize) -> Self {
            let storage = vec![0xA5u8; len + 2 * ALIGN + GUARD];
            let base = storage.as_ptr() as usize;
            let start = (base + GUARD).next_multiple_of(ALIGN) + misalign - base;
            Guarded { storage, start, len }
        }
        fn ptr(&mut self) -> *mut u8 {
            self.storage[self.start..].as_mut_ptr()
        }
        fn check(&self, expect: &[u8]) {
            let (before, rest) = self.storage.split_at(self.start);
            let (got, after) = rest.split_at(self.len);
            assert!(before.iter().all(|&b| b == 0xA5), "written before the range");
            assert!(got[..expect.len()] == *expect, "bytes differ");
            assert!(got[expect.len()..].iter().chain(after).all(|&b| b == 0xA5), "written past what was read");
        }
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
                    dst.check(expect);
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
        assert_eq!(got, DirectRead { bytes: size, direct_bytes: size });
        dst.check(&data);
    }

    #[test]
    fn a_failing_direct_descriptor_is_an_error() {
        let (f, _, _) = random_file(3 * ALIGN, 9);
        let mut dst = Guarded::new(2 * ALIGN, 0);
        // SAFETY: dst holds 2 * ALIGN writable bytes.
        let err = unsafe { read_full_at_direct(f.as_raw_fd(), -1, dst.ptr(), 2 * ALIGN, 0) }.unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
        dst.check(&[]);
    }
}
