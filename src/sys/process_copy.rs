//! Copies between memory the library owns and the caller's memory that report a bad caller page
//! as an error instead of a `SIGSEGV`: `process_vm_readv` / `process_vm_writev` on this very
//! process. The caller's memory is the "remote" side, which the kernel pins page by page, so a
//! copy stops exactly at the first caller page it cannot read (or write) and returns the bytes
//! before it. Bindings only: what to do when a copy stops (fall back, report) is the caller's
//! policy (`backend::posix::direct_io`).

use std::io;

/// A copy that stopped before its end: `copied` bytes (from the start) were copied, and
/// `error` says why the rest was not. `EFAULT`: the caller's byte at `copied` lies in a page
/// that cannot be read (or written); `ENOSYS`, `EPERM` (a seccomp filter, a kernel without the
/// calls), `ENOMEM` and the like: the calls are refused, nothing says the memory is bad.
#[derive(Debug)]
pub(crate) struct ShortCopy {
    pub copied: usize,
    pub error: io::Error,
}

/// Copies `len` bytes from the caller's `src` into `dst`, memory the library owns.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes and not overlap `src`. `src` need not be valid:
/// a bad page ends the copy with `EFAULT`.
pub(crate) unsafe fn copy_from_caller(dst: *mut u8, src: *const u8, len: usize) -> Result<(), ShortCopy> {
    // SAFETY: a stricter contract than `copy_either_side_bad`'s.
    unsafe { copy_either_side_bad(dst, src, len) }
}

/// Copies `len` bytes from `src` into `dst` where either may have bad pages: a page of `src` that
/// cannot be read (a page of a file mapping past the end of a file truncated under it reads so
/// too: the kernel's page-in fails where a load would raise `SIGBUS`) or a page of `dst` that
/// cannot be written ends the copy with `EFAULT`, and nothing at or after that point of `dst` is
/// written. `process_vm_readv`: the kernel reads `src` with the pages pinned one by one and writes
/// `dst` with its user-copy routine, both of which report a fault instead of signalling. Which
/// side faulted is not said; the caller asks (`api::mapping` probes the source alone).
///
/// # Safety
/// `dst` must not overlap `src` and nothing else may write either range during the call.
pub(crate) unsafe fn copy_either_side_bad(dst: *mut u8, src: *const u8, len: usize) -> Result<(), ShortCopy> {
    copy_in_pieces(len, |done| {
        // done < len. The kernel writes dst + done .. dst + len and reads src + done .. src + len
        // itself and reports a bad page on either side as EFAULT.
        let local = libc::iovec { iov_base: dst.wrapping_add(done).cast(), iov_len: len - done };
        let remote = libc::iovec { iov_base: src.wrapping_add(done).cast_mut().cast(), iov_len: len - done };
        // SAFETY: one iovec on each side, as described above; flags must be 0.
        unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) }
    })
}

/// Copies `len` bytes from `src`, memory the library owns, into the caller's `dst`.
///
/// # Safety
/// `src` must be valid for reads of `len` bytes and not overlap `dst`. `dst` need not be valid:
/// a page that cannot be written ends the copy with `EFAULT`, and nothing at or after it is
/// written.
pub(crate) unsafe fn copy_to_caller(dst: *mut u8, src: *const u8, len: usize) -> Result<(), ShortCopy> {
    copy_in_pieces(len, |done| {
        // SAFETY: done < len; src + done .. src + len is the library's readable memory. The
        // kernel writes dst + done .. dst + len itself and reports a bad page as EFAULT.
        let local = libc::iovec { iov_base: unsafe { src.add(done) }.cast_mut().cast(), iov_len: len - done };
        let remote = libc::iovec { iov_base: dst.wrapping_add(done).cast(), iov_len: len - done };
        // SAFETY: one iovec on each side, as described above; flags must be 0.
        unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) }
    })
}

/// Runs `once(done)` (one system call for the bytes from `done` on, returning what it copied or
/// -1 with errno) until `len` bytes are copied. A short count is followed by another call from
/// there: the kernel returns the bytes before a bad page and fails only a call that copies
/// nothing, so that call's error belongs to the byte at `done`.
fn copy_in_pieces(len: usize, mut once: impl FnMut(usize) -> isize) -> Result<(), ShortCopy> {
    let mut done = 0usize;
    while done < len {
        let n = once(done);
        if n > 0 {
            done += n as usize;
            continue;
        }
        let error = if n == 0 { io::Error::other("process_vm copy moved 0 bytes") } else { io::Error::last_os_error() };
        if error.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return Err(ShortCopy { copied: done, error });
    }
    Ok(())
}

/// Memory with a bad page, for the tests here and of the transfers that copy through this module.
#[cfg(test)]
pub(crate) mod testing {
    pub(crate) const PAGE: usize = 4096;

    /// `pages` pages of anonymous memory holding `i % 251` at byte `i`, with page `bad` made
    /// inaccessible by `protection` (or unmapped when `protection` is `None`). One at a time in
    /// the process: a hole left by one test's mapping could be taken by another test's `mmap`,
    /// and its `Drop` (which unmaps the whole range) would then unmap that other mapping's page
    /// (seen: a byte of another test's pattern in a fresh mapping).
    pub(crate) struct Mapping {
        pub base: *mut u8,
        pages: usize,
        /// The page unmapped by `new`, which `Drop` leaves alone (it may be someone else's now).
        hole: Option<usize>,
        _one_at_a_time: std::sync::MutexGuard<'static, ()>,
    }

    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    impl Mapping {
        pub(crate) fn new(pages: usize, bad: usize, protection: Option<libc::c_int>) -> Self {
            let one_at_a_time = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
            let base = unsafe { libc::mmap(std::ptr::null_mut(), pages * PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
            assert_ne!(base, libc::MAP_FAILED);
            let base = base.cast::<u8>();
            for i in 0..pages * PAGE {
                // SAFETY: inside the mapping, still writable.
                unsafe { *base.add(i) = Self::original(i) };
            }
            // SAFETY: one whole page of the mapping.
            let page = unsafe { base.add(bad * PAGE) }.cast();
            let rc = match protection {
                // SAFETY: as above.
                Some(prot) => unsafe { libc::mprotect(page, PAGE, prot) },
                // SAFETY: as above; Drop unmaps the pages around the hole.
                None => unsafe { libc::munmap(page, PAGE) },
            };
            assert_eq!(rc, 0);
            Mapping { base, pages, hole: protection.is_none().then_some(bad), _one_at_a_time: one_at_a_time }
        }

        /// The byte `new` put at `i`.
        pub(crate) fn original(i: usize) -> u8 {
            (i % 251) as u8
        }

        /// The byte at `i`, which must not lie in the bad page.
        pub(crate) fn at(&self, i: usize) -> u8 {
            // SAFETY: inside the mapping; the caller keeps out of the bad page.
            unsafe { *self.base.add(i) }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            let (before, after) = match self.hole {
                Some(hole) => (hole, hole + 1),
                None => (self.pages, self.pages),
            };
            // SAFETY: the pages of the mapping made in `new`, without its hole (munmap of an
            // empty range fails harmlessly).
            unsafe {
                libc::munmap(self.base.cast(), before * PAGE);
                libc::munmap(self.base.add(after * PAGE).cast(), (self.pages - after) * PAGE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{Mapping, PAGE};
    use super::*;

    const PAGES: usize = 5;
    const POISON: u8 = 0xA5;

    /// Each bad page (first, middle, last), each start (page-aligned, +1, +4095), unreadable and
    /// unmapped: the copy stops exactly at the bad page with EFAULT, every byte before it right.
    #[test]
    fn a_copy_from_bad_memory_stops_at_the_bad_page() {
        for bad in [0, 2, PAGES - 1] {
            for protection in [Some(libc::PROT_NONE), None] {
                let map = Mapping::new(PAGES, bad, protection);
                for start in [0usize, 1, PAGE - 1] {
                    let len = PAGES * PAGE - start;
                    let mut dst = vec![POISON; len];
                    // SAFETY: dst holds len bytes; the source may fault, which the call reports.
                    let stop = unsafe { copy_from_caller(dst.as_mut_ptr(), map.base.add(start), len) }.unwrap_err();
                    let at = bad * PAGE - start.min(bad * PAGE);
                    let what = format!("bad page {bad}, start {start}, {protection:?}");
                    assert_eq!((stop.copied, stop.error.raw_os_error()), (at, Some(libc::EFAULT)), "{what}");
                    assert!(dst[..at].iter().enumerate().all(|(i, &b)| b == Mapping::original(start + i)), "{what}");
                    assert!(dst[at..].iter().all(|&b| b == POISON), "{what}: written past the fault");
                }
            }
        }
    }

    /// The same for a copy into memory with a read-only (or unmapped) page: nothing at or after
    /// the bad page written, everything before it.
    #[test]
    fn a_copy_into_bad_memory_stops_at_the_bad_page() {
        for bad in [0, 2, PAGES - 1] {
            for protection in [Some(libc::PROT_READ), Some(libc::PROT_NONE), None] {
                for start in [0usize, 1, PAGE - 1] {
                    let map = Mapping::new(PAGES, bad, protection);
                    let len = PAGES * PAGE - start - 1; // ends inside the last page
                    let src = vec![0x3Cu8; len];
                    // SAFETY: src holds len bytes; the destination may fault, which the call reports.
                    let stop = unsafe { copy_to_caller(map.base.add(start), src.as_ptr(), len) }.unwrap_err();
                    let at = bad * PAGE - start.min(bad * PAGE);
                    let what = format!("bad page {bad}, start {start}, {protection:?}");
                    assert_eq!((stop.copied, stop.error.raw_os_error()), (at, Some(libc::EFAULT)), "{what}");
                    for i in 0..PAGES * PAGE {
                        if i / PAGE == bad {
                            continue; // not readable (or not there)
                        }
                        let inside = i >= start && i < start + at;
                        assert_eq!(map.at(i), if inside { 0x3C } else { Mapping::original(i) }, "{what}: byte {i}");
                    }
                }
            }
        }
    }

    /// A destination with a read-only (or unmapped) page takes the copy up to that page and
    /// nothing after it: `copy_either_side_bad` needs neither side valid.
    #[test]
    fn a_copy_from_good_memory_into_bad_memory_stops_at_the_bad_page() {
        for bad in [0, 2, PAGES - 1] {
            for protection in [Some(libc::PROT_READ), None] {
                let map = Mapping::new(PAGES, bad, protection);
                let start = 1usize;
                let len = PAGES * PAGE - start - 1;
                let src = vec![0x5Au8; len];
                // SAFETY: src holds len bytes; the destination may fault, which the call reports.
                let stop = unsafe { copy_either_side_bad(map.base.add(start), src.as_ptr(), len) }.unwrap_err();
                let at = (bad * PAGE).saturating_sub(start);
                let what = format!("bad page {bad}, {protection:?}");
                assert_eq!((stop.copied, stop.error.raw_os_error()), (at, Some(libc::EFAULT)), "{what}");
                for i in (0..PAGES * PAGE).filter(|i| i / PAGE != bad) {
                    let inside = i >= start && i < start + at;
                    assert_eq!(map.at(i), if inside { 0x5A } else { Mapping::original(i) }, "{what}: byte {i}");
                }
            }
        }
    }

    /// The case the mapping handle rests on: a shared mapping of a file that is then truncated
    /// reads as `EFAULT` from the first page past the new end (a load would raise `SIGBUS`), every
    /// byte before it right, and the process goes on; no signal handler is involved.
    #[test]
    fn a_mapping_of_a_file_truncated_under_it_reads_as_efault() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let dir = std::env::temp_dir().join(format!("gdsroute-truncated-{}", std::process::id()));
        let mut file = std::fs::File::create_new(&dir).unwrap();
        let data: Vec<u8> = (0..4 * PAGE).map(|i| (i * 7 % 256) as u8).collect();
        file.write_all(&data).unwrap();
        let mapping = crate::sys::cuda::FileMapping::new(file.as_raw_fd(), 0, data.len()).unwrap();
        for new_len in [PAGE + 100, PAGE, 0] {
            file.set_len(new_len as u64).unwrap();
            let mut dst = vec![POISON; data.len()];
            // SAFETY: dst holds the bytes named; the mapping may fault past the new end.
            let stop = unsafe { copy_either_side_bad(dst.as_mut_ptr(), mapping.as_ptr(), data.len()) }.unwrap_err();
            // The page holding the new end is still there (zero past it): the fault is at the next.
            let at = new_len.div_ceil(PAGE) * PAGE;
            assert_eq!((stop.copied, stop.error.raw_os_error()), (at, Some(libc::EFAULT)), "truncated to {new_len}");
            assert_eq!(dst[..new_len], data[..new_len]);
            assert!(dst[new_len..at].iter().all(|&b| b == 0) && dst[at..].iter().all(|&b| b == POISON));
        }
        drop(mapping);
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn good_memory_is_copied_whole_both_ways() {
        let src: Vec<u8> = (0..3 * PAGE + 7).map(|i| (i * 13 % 256) as u8).collect();
        let mut mid = vec![0u8; src.len() + 2];
        let mut back = vec![POISON; src.len()];
        // SAFETY: every buffer holds the bytes named.
        unsafe { copy_to_caller(mid.as_mut_ptr().add(1), src.as_ptr(), src.len()) }.unwrap();
        // SAFETY: as above.
        unsafe { copy_from_caller(back.as_mut_ptr(), mid.as_ptr().add(1), src.len()) }.unwrap();
        assert!(back == src && mid[0] == 0 && mid[src.len() + 1] == 0);
        // SAFETY: zero bytes: no call is made.
        unsafe { copy_from_caller(back.as_mut_ptr(), std::ptr::null(), 0) }.unwrap();
    }

    /// A call that copies part and then one that fails: the failure belongs to the byte where
    /// the short copy stopped; EINTR is retried; a call that moves nothing is not a fault.
    #[test]
    fn short_counts_are_continued_and_the_failure_named_at_their_end() {
        let mut calls = Vec::new();
        let stop = copy_in_pieces(10, |done| {
            calls.push(done);
            match calls.len() {
                1 => 3,
                2 => {
                    // SAFETY: sets this thread's errno.
                    unsafe { *libc::__errno_location() = libc::EINTR };
                    -1
                }
                3 => 4,
                _ => {
                    // SAFETY: as above.
                    unsafe { *libc::__errno_location() = libc::EFAULT };
                    -1
                }
            }
        })
        .unwrap_err();
        assert_eq!(calls, [0, 3, 3, 7]);
        assert_eq!((stop.copied, stop.error.raw_os_error()), (7, Some(libc::EFAULT)));
        let stop = copy_in_pieces(5, |_| 0).unwrap_err();
        assert_eq!((stop.copied, stop.error.raw_os_error()), (0, None));
        assert!(copy_in_pieces(6, |done| if done == 0 { 2 } else { 4 }).is_ok());
    }
}
