//! Direct I/O for POSIX tasks: the page-aligned middle of a range goes through a second
//! descriptor of the file opened with `O_DIRECT`, which bypasses the page cache; an unaligned
//! head or a tail shorter than a page goes through the handle's own descriptor. Where the
//! caller's memory is not page-aligned at the same point as the file offset, the direct part goes
//! through a page-aligned scratch buffer of the thread (KvikIO does the same).
//!
//! Copies between the caller's memory and the scratch buffer go through
//! `sys::process_copy`, which reports a bad caller page (unmapped, `PROT_NONE`, read-only for a
//! read) instead of crashing; `memcpy` is never used on the caller's memory. A copy that stops,
//! for a bad page or because the calls are refused (`ENOSYS`, `EPERM`: a seccomp filter), sends
//! the rest of the range through the handle's own descriptor, where the kernel copies: a bad page
//! is then `EFAULT` at its exact offset, as on every other route (docs/reliability.md).
//!
//! Reads (`read`): KvikIO's `KVIKIO_AUTO_DIRECT_IO_READ`, off by default as in KvikIO. Data read
//! once and larger than memory then does not push everything else out of the page cache; a
//! second read of the same data goes to the disk again.
//!
//! Writes (`write`): KvikIO's `KVIKIO_AUTO_DIRECT_IO_WRITE`. A write, unlike a read, cannot round
//! its range out to whole pages (that would overwrite the file's bytes next to the range), so
//! only whole pages inside the range go direct. Why the default differs from KvikIO's:
//! docs/writes.md, "Direct-I/O writes".

mod read;
mod write;

pub(crate) use read::read_full_at_direct;
pub(crate) use write::write_full_at_direct;

use std::cell::RefCell;
use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::sys::process_copy::ShortCopy;

/// Alignment of `O_DIRECT` offsets, lengths and memory: a page, as KvikIO uses (a multiple of
/// every logical block size Linux block devices report in practice).
pub(crate) const ALIGN: usize = 4096;

/// Most bytes of one direct transfer through the scratch buffer (also the scratch buffer's
/// size, per thread): one task of the default size.
const SCRATCH_MAX: usize = 4 << 20;

/// What a direct read or write moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectTransfer {
    /// Bytes moved (a read: fewer than asked only at end of file; a write: all it was asked).
    pub bytes: usize,
    /// Of `bytes`, moved through the `O_DIRECT` descriptor.
    pub direct_bytes: usize,
}

/// Opens a second descriptor of the file behind `fd` with `O_DIRECT` and the same access mode
/// (read-only, write-only or both), through `/proc/self/fd`, so that it reaches the same file
/// even if its path was renamed or removed since the open. Never creates or truncates.
///
/// Only regular files and block devices are reopened: opening a FIFO again would block until its
/// other end opens, and opening a character device runs its driver's open (a tape rewinds, a
/// terminal may become the controlling one) before the kernel refuses `O_DIRECT`.
///
/// Errors: `EINVAL` for other file types and where the file system has no direct I/O (older
/// tmpfs, some FUSE and network file systems); the `fstat`, `fcntl` or `open` failure, e.g.
/// `ENOENT` without `/proc`.
pub(crate) fn open_direct(fd: RawFd) -> io::Result<OwnedFd> {
    let kind = crate::sys::fs::stat(fd)?.st_mode & libc::S_IFMT;
    if kind != libc::S_IFREG && kind != libc::S_IFBLK {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: F_GETFL takes no argument and only reads the descriptor's status flags.
    let status = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if status < 0 {
        return Err(io::Error::last_os_error());
    }
    let path = CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL in a number");
    // The caller's O_SYNC / O_DSYNC too: O_DIRECT alone neither flushes the device's cache nor
    // commits an extending write's size and blocks, which the caller's descriptor promises.
    let flags = (status & (libc::O_ACCMODE | libc::O_SYNC | libc::O_DSYNC)) | libc::O_DIRECT | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: a NUL-terminated path; no mode is needed without O_CREAT.
    let raw = unsafe { libc::open(path.as_ptr(), flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Whether a direct transfer's error means "not this way" rather than a failure of the file:
/// `EINVAL` (an alignment the file system does not accept), `EFAULT` and `EOPNOTSUPP` (memory or
/// a file direct I/O cannot serve). The rest of the range then goes through the page cache.
fn refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EFAULT | libc::EOPNOTSUPP))
}

/// Set once the copies between the caller's memory and a scratch buffer were refused for good
/// (`ENOSYS`, `EPERM`: a kernel without `process_vm_readv`, a seccomp filter); from then on
/// memory that would need the scratch buffer goes through the page cache, without asking again.
static SCRATCH_COPIES_REFUSED: AtomicBool = AtomicBool::new(false);

/// Notes a copy to or from the caller's memory that stopped. The transfer then sends the rest
/// of its range through the buffered descriptor either way: after a bad page (`EFAULT`) the
/// kernel's own copy stops at the same byte and names its offset, as every other route does;
/// after a refusal the kernel copies what the refused call could not.
fn scratch_copy_stopped(stop: &ShortCopy) {
    if matches!(stop.error.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
        SCRATCH_COPIES_REFUSED.store(true, Ordering::Relaxed);
    }
}

/// Runs `body` with this thread's page-aligned scratch buffer of `SCRATCH_MAX` bytes, allocated
/// on first need; `None` when the thread has none (allocation failed, the thread is exiting, or
/// the buffer is in use further up this thread's stack) or the copies through it were refused
/// (`SCRATCH_COPIES_REFUSED`).
fn with_scratch<T>(body: impl FnOnce(*mut u8) -> T) -> Option<T> {
    if SCRATCH_COPIES_REFUSED.load(Ordering::Relaxed) {
        return None;
    }
    SCRATCH
        .try_with(|scratch| {
            let mut scratch = scratch.try_borrow_mut().ok()?;
            if scratch.is_none() {
                *scratch = AlignedBuffer::new();
            }
            scratch.as_ref().map(|buffer| body(buffer.ptr))
        })
        .ok()
        .flatten()
}

thread_local! {
    /// This thread's scratch buffer for direct transfers of unaligned memory, kept for the
    /// thread's life (pool threads live as long as the process).
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

    /// `None` where the memory cannot be had (transfers then go through the page cache).
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

/// Test helpers shared by the read and write tests.
#[cfg(test)]
mod testing {
    use super::ALIGN;

    /// Memory with poisoned guard bytes on both sides, whose start lies `misalign` bytes past a
    /// page boundary.
    pub(super) struct Guarded {
        pub storage: Vec<u8>,
        pub start: usize,
        pub len: usize,
    }

    pub(super) const GUARD: usize = 64;
    pub(super) const POISON: u8 = 0xA5;

    impl Guarded {
        pub(super) fn new(len: usize, misalign: usize) -> Self {
            let storage = vec![POISON; len + 2 * ALIGN + GUARD];
            let base = storage.as_ptr() as usize;
            let start = (base + GUARD).next_multiple_of(ALIGN) + misalign - base;
            Guarded { storage, start, len }
        }
        pub(super) fn ptr(&mut self) -> *mut u8 {
            self.storage[self.start..].as_mut_ptr()
        }
    }
}
