//! A range of a file whose page-cache pages the GPU's copy engine reads directly: the range is
//! mapped read-only and shared (`FileMapping`: `mmap(PROT_READ, MAP_SHARED)`) and pinned with
//! `cuMemHostRegister(READ_ONLY | PORTABLE)` (`RegisteredMapping`), so a host-to-device copy from
//! it moves file bytes without a CPU copy into a bounce buffer.
//!
//! Measured on the H200 (tools/probes/probe-mapped.py, 1 GiB warm file): copies from such a mapping run
//! at 54-55 GB/s, but registering costs about 0.09 s per GiB and the driver serialises it across
//! threads, so this pays only for ranges that are read more than once (see `page_cache`).
//!
//! `write(2)` to the file updates the same page-cache pages, and later copies see it (measured).
//! Truncation does not: the pinned pages stay, detached from the file. The owner therefore checks
//! the file's identity (size, times) before every use and drops mappings of a changed file.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use cudarc::driver::sys;

use super::context::{ContextHandle, ScopedContext, current_context};
use super::error::{CudaFailure, check};

/// A shared, read-only mapping of `len` bytes of a file from a page-aligned offset. The mapping
/// keeps the file open, so the descriptor it was made from may close; it uses no descriptor.
///
/// Thread safety: `Send` and `Sync`; nothing writes through it.
#[derive(Debug)]
pub(crate) struct FileMapping {
    addr: NonNull<u8>,
    len: usize,
}

// SAFETY: read-only memory owned by this value; nothing writes through it.
unsafe impl Send for FileMapping {}
// SAFETY: as above; shared use only reads.
unsafe impl Sync for FileMapping {}

impl FileMapping {
    /// Maps `len` bytes of `fd` at `offset` (a multiple of the page size). Pages are not read.
    ///
    /// Errors: the errno of `mmap` (`EINVAL` for a zero length, `EOVERFLOW` for an offset beyond
    /// `off_t`).
    pub(crate) fn new(fd: std::os::fd::RawFd, offset: u64, len: usize) -> std::io::Result<Self> {
        let file_offset = libc::off_t::try_from(offset).map_err(|_| std::io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        if len == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh shared read-only mapping chosen by the kernel; no existing memory is
        // affected; fd is open for the duration of the call (the caller holds it).
        let raw = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, fd, file_offset) };
        if raw == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let addr = NonNull::new(raw.cast::<u8>()).ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(FileMapping { addr, len })
    }

    /// Anonymous read-only memory standing in for a file mapping (tests).
    #[cfg(test)]
    pub(crate) fn anonymous_for_tests(len: usize) -> Self {
        // SAFETY: a fresh private anonymous mapping chosen by the kernel.
        let raw = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(raw, libc::MAP_FAILED);
        FileMapping { addr: NonNull::new(raw.cast()).unwrap(), len }
    }

    /// The address of the first mapped byte (the file offset given to `new`).
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.addr.as_ptr()
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: mapped by `new` with this length; nothing uses it any more (a registered
        // mapping is unregistered first, see RegisteredMapping).
        unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
    }
}

/// A `FileMapping` pinned for the copy engine.
///
/// Thread safety: `Send` and `Sync`; it is only read (by the copy engine) while alive, and
/// unregistered and unmapped on drop.
#[derive(Debug)]
pub(crate) struct RegisteredMapping {
    mapping: ManuallyDrop<FileMapping>,
    /// The context current at registration; unregistration pushes it, so that dropping a
    /// mapping never creates a context on some other device.
    ctx: ContextHandle,
}

impl RegisteredMapping {
    /// Pins `mapping` (`cuMemHostRegister(READ_ONLY | PORTABLE)`) in the context current on this
    /// thread, which must outlive the registration (the registrar uses primary contexts, retained
    /// for the life of the process). Reads any of the pages that are not cached yet. On failure
    /// the mapping is unmapped.
    ///
    /// Errors: `Unavailable`/`Forked`; `NoContext`; the CUresult of `cuMemHostRegister` (e.g.
    /// `CUDA_ERROR_NOT_SUPPORTED` where read-only registration of file pages is refused).
    pub(crate) fn register(mapping: FileMapping) -> Result<Self, CudaFailure> {
        let ctx = current_context()?.ok_or(CudaFailure::NoContext("RegisteredMapping::register"))?;
        let flags = sys::CU_MEMHOSTREGISTER_READ_ONLY | sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: cuda() succeeded (current_context); a context is current; the range is one
        // live mapping, unregistered before it is unmapped (Drop).
        let r = unsafe { sys::cuMemHostRegister_v2(mapping.addr.as_ptr().cast(), mapping.len, flags) };
        check("cuMemHostRegister", r)?;
        Ok(RegisteredMapping { mapping: ManuallyDrop::new(mapping), ctx })
    }

    /// Unregisters; true when the range is no longer registered (so it may be unmapped).
    fn unregister(&self) -> bool {
        // In a forked child (Forked) or with the context gone, nothing is safe to call.
        let Ok(_scope) = ScopedContext::push(self.ctx) else { return false };
        // SAFETY: registered by `register` in this context, unregistered once, here.
        let r = unsafe { sys::cuMemHostUnregister(self.mapping.addr.as_ptr().cast()) };
        match check("cuMemHostUnregister", r) {
            Ok(()) => true,
            Err(e) => {
                crate::log::cleanup_error("unregistering a page-cache window", &e);
                r == sys::CUresult::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
            }
        }
    }

    /// A mapping that was never registered, standing in for a registered one (tests). Release
    /// it with `release_for_tests`: its `Drop` would try to unregister it where CUDA is present.
    #[cfg(test)]
    pub(crate) fn unregistered_for_tests(len: usize) -> Self {
        let ctx = ContextHandle::from_address(0x1000).expect("a non-null test handle");
        RegisteredMapping { mapping: ManuallyDrop::new(FileMapping::anonymous_for_tests(len)), ctx }
    }

    /// Unmaps a mapping made by `unregistered_for_tests`, skipping `Drop` (tests).
    #[cfg(test)]
    pub(crate) fn release_for_tests(mut self) {
        // SAFETY: taken once; `self` is forgotten below, so Drop never sees the emptied field.
        drop(unsafe { ManuallyDrop::take(&mut self.mapping) });
        std::mem::forget(self);
    }

    /// The host address of the first mapped byte.
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.mapping.as_ptr()
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.mapping.len()
    }
}

impl RegisteredMapping {
    /// Unregisters and unmaps, as dropping does. False when the range was leaked instead (it may
    /// still be registered, `unregister_and_unmap`): its pages stay pinned.
    pub(crate) fn release(self) -> bool {
        let mut this = ManuallyDrop::new(self);
        this.unregister_and_unmap()
    }

    /// A range that may still be registered is leaked, never unmapped: the address could be
    /// reused while the driver still holds it. That covers a forked child (the driver may not
    /// have let the mapping into it) and a context that is gone. Called once.
    fn unregister_and_unmap(&mut self) -> bool {
        if !self.unregister() {
            return false;
        }
        // SAFETY: taken once, here; no copy reads the mapping any more (its owner holds it alive
        // until its copies are synchronised), and it is no longer registered.
        drop(unsafe { ManuallyDrop::take(&mut self.mapping) });
        true
    }
}

impl Drop for RegisteredMapping {
    fn drop(&mut self) {
        self.unregister_and_unmap();
    }
}
