//! A range of a file whose page-cache pages the GPU's copy engine reads directly: the range is
//! mapped read-only and shared (`mmap(PROT_READ, MAP_SHARED)`) and pinned with
//! `cuMemHostRegister(READ_ONLY | PORTABLE)`, so a host-to-device copy from it moves file bytes
//! without a CPU copy into a bounce buffer.
//!
//! Measured on the H200 (scripts/probe-mapped.py, 1 GiB warm file): copies from such a mapping run
//! at 54-55 GB/s, but registering costs about 0.09 s per GiB and the driver serialises it across
//! threads, so this pays only for ranges that are read more than once (see `page_cache`).
//!
//! `write(2)` to the file updates the same page-cache pages, and later copies see it (measured).
//! Truncation does not: the pinned pages stay, detached from the file. The owner therefore checks
//! the file's identity (size, times) before every use and drops mappings of a changed file.

use std::ptr::NonNull;

use cudarc::driver::sys;

use super::context::any_context;
use super::error::{CudaFailure, check};

/// A registered, read-only mapping of `len` bytes of a file from a page-aligned offset.
///
/// Thread safety: `Send` and `Sync`; it is only read (by the copy engine) while alive, and
/// unregistered and unmapped on drop.
#[derive(Debug)]
pub struct RegisteredMapping {
    addr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only memory owned by this value; nothing writes through it.
unsafe impl Send for RegisteredMapping {}
// SAFETY: as above; shared use only reads.
unsafe impl Sync for RegisteredMapping {}

impl RegisteredMapping {
    /// Maps `len` bytes of `fd` at `offset` (a multiple of the page size) and registers them.
    /// Registration pins the pages, reading any that are not cached yet.
    ///
    /// Errors: `Unavailable`/`Forked`; `Call` for `mmap` (with errno) or for the CUresult of
    /// `cuMemHostRegister` (e.g. `CUDA_ERROR_NOT_SUPPORTED` where read-only registration of file
    /// pages is refused).
    pub fn new(fd: std::os::fd::RawFd, offset: u64, len: usize) -> Result<Self, CudaFailure> {
        let _scope = any_context()?;
        let mmap_failure = |errno: i32| CudaFailure::Call {
            call: "mmap",
            name: std::io::Error::from_raw_os_error(errno).to_string(),
            code: errno as u32,
        };
        let file_offset = libc::off_t::try_from(offset).map_err(|_| mmap_failure(libc::EOVERFLOW))?;
        if len == 0 {
            return Err(mmap_failure(libc::EINVAL));
        }
        // SAFETY: a fresh shared read-only mapping chosen by the kernel; no existing memory is
        // affected. The descriptor may be closed afterwards: the mapping keeps the file open.
        let raw = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, fd, file_offset) };
        if raw == libc::MAP_FAILED {
            return Err(mmap_failure(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
        }
        let addr = NonNull::new(raw.cast::<u8>()).ok_or_else(|| mmap_failure(libc::EINVAL))?;
        let flags = sys::CU_MEMHOSTREGISTER_READ_ONLY | sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: cuda() succeeded (any_context); a context is current; the range is one live
        // mapping, unregistered before it is unmapped (Drop).
        let r = unsafe { sys::cuMemHostRegister_v2(raw, len, flags) };
        if let Err(e) = check("cuMemHostRegister", r) {
            // SAFETY: mapped above, never registered, not used afterwards.
            unsafe { libc::munmap(raw, len) };
            return Err(e);
        }
        Ok(RegisteredMapping { addr, len })
    }

    /// The host address of the first mapped byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.addr.as_ptr()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: empty mappings are refused by `new`.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for RegisteredMapping {
    fn drop(&mut self) {
        // In a forked child nothing is safe to call: the driver may not have let the mapping
        // into the child, so the address may belong to something else there. Leak, as the
        // pinned pool does.
        let Ok(scope) = any_context() else { return };
        // SAFETY: registered by `new`, unregistered exactly once, here.
        let r = unsafe { sys::cuMemHostUnregister(self.addr.as_ptr().cast()) };
        drop(scope);
        if let Err(e) = check("cuMemHostUnregister", r) {
            eprintln!("gdsroute: {e}");
        }
        // SAFETY: mapped by `new` with this length; no copy reads it any more (the owner holds
        // the mapping alive until its copies are synchronised).
        unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
impl RegisteredMapping {
    /// Test-only: `len` bytes of anonymous read-only memory, never registered. Release it with
    /// `release_for_tests` (its `Drop` would try to unregister it where CUDA is present).
    pub(crate) fn unregistered_for_tests(len: usize) -> Self {
        // SAFETY: a fresh private anonymous mapping chosen by the kernel.
        let raw = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(raw, libc::MAP_FAILED);
        RegisteredMapping { addr: NonNull::new(raw.cast()).unwrap(), len }
    }

    /// Test-only: unmaps a mapping made by `unregistered_for_tests`, skipping `Drop`.
    pub(crate) fn release_for_tests(self) {
        // SAFETY: mapped by `unregistered_for_tests` with this length; `self` is forgotten below.
        unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
        std::mem::forget(self);
    }
}
