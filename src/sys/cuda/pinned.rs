//! One pinned (page-locked) host buffer, the staging memory of bounce-buffer transfers: a
//! huge-page-aligned anonymous mapping, optionally placed on a NUMA node before its pages exist,
//! touched, and pinned with `cuMemHostRegister(PORTABLE)`; and its release. Bindings only: the
//! bounded pool that reuses these buffers and counts them is `backend::device::pinned_pool`.

use std::ptr::NonNull;

use cudarc::driver::sys;

use super::context::any_context;
use super::error::{CudaFailure, check};
use crate::sys::numa;

/// One pinned allocation. It is not freed on drop: its owner calls `release`, which needs a
/// CUDA context (a drop in a forked child or after a driver failure must leak instead).
#[derive(Debug)]
pub(crate) struct PinnedAllocation {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: the allocation is plain host memory owned by exactly one PinnedAllocation at a time.
unsafe impl Send for PinnedAllocation {}
// SAFETY: shared access only reads the memory (`as_slice`); writing needs `&mut self`.
unsafe impl Sync for PinnedAllocation {}

impl PinnedAllocation {
    /// A buffer of `size` bytes (at least 1), its pages preferably on NUMA node `node`
    /// (`map_placed`), zeroed and pinned (`allocate`). Returns it and the errno of a placement
    /// the kernel refused (the buffer is then pinned wherever its pages fell).
    ///
    /// Errors: `Unavailable`/`Forked`; `mmap` failures; the CUresult of `cuMemHostRegister`.
    pub(crate) fn allocate(size: usize, node: Option<u32>) -> Result<(PinnedAllocation, Option<i32>), CudaFailure> {
        let (ptr, refused) = allocate(size, node)?;
        Ok((PinnedAllocation { ptr, size }, refused))
    }

    /// The size asked for at allocation, in bytes.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Bytes actually pinned for it: its size rounded up to whole pages or huge pages.
    pub(crate) fn pinned_bytes(&self) -> u64 {
        pinned_len(self.size)
    }

    /// The start of the pinned memory.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The buffer's `size` bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `size` initialised bytes (zeroed by `map_placed`), owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.size) }
    }

    /// The buffer's `size` bytes, writable.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `size` initialised bytes, owned exclusively by self, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.size) }
    }

    /// Unregisters and unmaps the buffer. In a forked child, or once the driver failed, no CUDA
    /// call is safe: the buffer is leaked, and that is `Ok` (nothing of it is pinned in a child,
    /// which does not inherit the mapping). An error: the driver did not unregister it, so it is
    /// leaked, not unmapped (`release`), and still pinned.
    pub(crate) fn release(self) -> Result<(), CudaFailure> {
        let Ok(scope) = any_context() else { return Ok(()) };
        // SAFETY: cuda() succeeded (any_context checked it) and a context is current; the
        // pointer came from `allocate` and is released exactly once, as `self` is moved in here.
        let r = unsafe { release(self.ptr, self.size) };
        drop(scope);
        r
    }
}

/// Alignment and rounding of buffers of at least this size: one transparent huge page, so that a
/// buffer is backed by as few pages as possible (registration pins and maps every page).
const HUGE_PAGE: usize = 2 << 20;

const PAGE: usize = 4096;

/// Bytes pinned for a buffer of `size` bytes (`PinnedAllocation::pinned_bytes`).
fn pinned_len(size: usize) -> u64 {
    mapped_len(size).unwrap_or(size) as u64
}

/// The mapped (and pinned) length of a buffer of `size` bytes: whole huge pages from one huge
/// page up, whole pages below (a small buffer is not worth a huge page of pinned memory).
fn mapped_len(size: usize) -> Option<usize> {
    let size = size.max(1);
    size.checked_next_multiple_of(alignment(size))
}

/// Where a mapping of `len` bytes starts and how its length is rounded: huge pages from one huge
/// page up, pages below.
fn alignment(len: usize) -> usize {
    if len >= HUGE_PAGE { HUGE_PAGE } else { PAGE }
}

/// The error for a buffer size whose mapping would overflow the address space.
fn size_overflows() -> CudaFailure {
    CudaFailure::Call { call: "mmap", name: "size overflows".into(), code: 0 }
}

/// Maps anonymous memory on a huge-page boundary (placed on `node` if one is given:
/// `map_placed`), asks for transparent huge pages, touches every page, then pins it with
/// `cuMemHostRegister`. Measured on the H200 (`tools/probes/probe-pinning.py`,
/// 2026-11-30, THP `madvise`; docs/routing.md, "Preparing the device route at open"): a 4 MiB buffer cost 1.5-2.0 ms through
/// `cuMemAllocHost`, 2.1-2.4 ms through touched 4 KiB pages and registration, 0.8-0.9 ms with huge
/// pages; 16 threads allocating at once took 32 / 9 / 7 ms. Where huge pages are off (THP
/// `never`) the advice is ignored and this is the 4 KiB-page path. The mapping is not inherited
/// by a forked child (`MADV_DONTFORK`): a child never uses it, and copying pinned pages into a
/// child could, on older kernels, leave the parent's next write in a copy the GPU never sees.
/// Returns the buffer and the errno of a placement the kernel refused.
fn allocate(size: usize, node: Option<u32>) -> Result<(NonNull<u8>, Option<i32>), CudaFailure> {
    crate::trace::event("pin.start", size as u64);
    let _scope = any_context()?;
    let len = mapped_len(size).ok_or_else(size_overflows)?;
    let (ptr, refused) = map_placed(len, node)?;
    crate::trace::event("pin.touched", len as u64);
    // SAFETY: cuda() succeeded (any_context); a context is current; the range is one live,
    // page-aligned mapping, unregistered before it is unmapped (`release`).
    let r = unsafe { sys::cuMemHostRegister_v2(ptr.as_ptr().cast(), len, sys::CU_MEMHOSTREGISTER_PORTABLE) };
    crate::trace::event("pin.end", len as u64);
    if let Err(e) = check("cuMemHostRegister", r) {
        // SAFETY: mapped above with this length, never registered.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
        return Err(e);
    }
    Ok((ptr, refused))
}

/// The memory of a buffer before it is pinned: `map_aligned(len)`, its pages preferably on `node`
/// (asked before any page exists, so every page is placed when first touched), advised for huge
/// pages and `MADV_DONTFORK`, and touched. Returns the mapping and the errno of a placement the
/// kernel refused (the memory is then wherever it fell).
fn map_placed(len: usize, node: Option<u32>) -> Result<(NonNull<u8>, Option<i32>), CudaFailure> {
    let ptr = map_aligned(len)?;
    // SAFETY: ptr..ptr+len is a fresh private anonymous mapping of ours, no page touched yet.
    let refused = node.and_then(|node| unsafe { numa::prefer_node(ptr.as_ptr(), len, node) }.err()).map(|e| e.raw_os_error().unwrap_or(libc::EINVAL));
    // SAFETY: as above. The huge-page advice may fail (THP disabled): that only loses the
    // speed-up. DONTFORK cannot fail on a valid range.
    unsafe {
        libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE);
        libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_DONTFORK);
    }
    // SAFETY: as above; writing touches every page (registration of resident pages is fast) and
    // makes the slices handed out by PinnedBuffer initialised.
    unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
    Ok((ptr, refused))
}

/// A private anonymous mapping of `len` bytes (a multiple of `PAGE`), starting on a `HUGE_PAGE`
/// boundary when `len` is at least one: one huge page more is mapped, and the unaligned head and
/// tail unmapped.
fn map_aligned(len: usize) -> Result<NonNull<u8>, CudaFailure> {
    let failed = |what: &'static str| CudaFailure::Call { call: what, name: std::io::Error::last_os_error().to_string(), code: 0 };
    let align = alignment(len);
    let padded = len.checked_add(align - PAGE).ok_or_else(size_overflows)?;
    // SAFETY: a new anonymous mapping; no existing memory is affected.
    let raw = unsafe {
        libc::mmap(std::ptr::null_mut(), padded, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if raw == libc::MAP_FAILED {
        return Err(failed("mmap"));
    }
    let start = raw as usize;
    let aligned = start.next_multiple_of(align);
    let head = aligned - start;
    let tail = padded - head - len;
    // SAFETY: both ranges lie inside the mapping made above and outside aligned..aligned+len.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    NonNull::new(aligned as *mut u8).ok_or_else(|| failed("mmap"))
}

/// Unregisters and unmaps a buffer from `allocate`. A range the driver failed to unregister is
/// leaked, not unmapped: a later mapping at the same addresses must not inherit a registration.
///
/// # Safety
/// `ptr` came from `allocate(size)` and is released exactly once; a context is current.
unsafe fn release(ptr: NonNull<u8>, size: usize) -> Result<(), CudaFailure> {
    // SAFETY: forwarded from the caller.
    check("cuMemHostUnregister", unsafe { sys::cuMemHostUnregister(ptr.as_ptr().cast()) })?;
    if let Some(len) = mapped_len(size) {
        // SAFETY: mapped by `allocate` with this length; no longer registered or used.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_whole_pages_and_huge_pages_from_two_mib() {
        assert_eq!(mapped_len(0), Some(PAGE));
        assert_eq!(mapped_len(1), Some(PAGE));
        assert_eq!(mapped_len(PAGE + 1), Some(2 * PAGE));
        assert_eq!(mapped_len(HUGE_PAGE - 1), Some(HUGE_PAGE));
        assert_eq!(mapped_len(HUGE_PAGE), Some(HUGE_PAGE));
        assert_eq!(mapped_len(HUGE_PAGE + 1), Some(2 * HUGE_PAGE));
        assert_eq!(mapped_len(4 << 20), Some(4 << 20));
        assert_eq!(mapped_len(usize::MAX), None);
        assert_eq!(pinned_len(3 << 20), 4 << 20);
    }

    #[test]
    fn aligned_mappings_start_on_their_boundary_and_are_writable() {
        for (len, align) in [(PAGE, PAGE), (HUGE_PAGE, HUGE_PAGE), (3 * HUGE_PAGE, HUGE_PAGE)] {
            let ptr = map_aligned(len).unwrap();
            assert_eq!(ptr.as_ptr() as usize % align, 0, "len {len}");
            // SAFETY: the mapping is len bytes, private and writable.
            unsafe {
                std::ptr::write_bytes(ptr.as_ptr(), 0x5A, len);
                assert_eq!(*ptr.as_ptr().add(len - 1), 0x5A);
                assert_eq!(libc::munmap(ptr.as_ptr().cast(), len), 0);
            }
        }
        assert!(map_aligned(usize::MAX - PAGE + 1).is_err(), "an overflowing length is an error");
    }

    #[test]
    fn placed_buffers_take_their_pages_from_the_node_asked_for() {
        // Node 0 exists on every Linux machine with NUMA support.
        let len = 2 * HUGE_PAGE;
        let (ptr, refused) = map_placed(len, Some(0)).unwrap();
        assert_eq!(refused, None);
        for at in (0..len).step_by(PAGE * 97).chain([len - 1]) {
            assert_eq!(numa::node_of_page(ptr.as_ptr() as usize + at).unwrap(), 0, "page at {at}");
        }
        // SAFETY: mapped with this length.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
        // A node that does not exist: refused, and the buffer is still made.
        let (ptr, refused) = map_placed(PAGE, Some(60_000)).unwrap();
        assert_eq!(refused, Some(libc::EINVAL));
        // SAFETY: mapped with this length and touched.
        unsafe {
            assert_eq!(*ptr.as_ptr(), 0);
            libc::munmap(ptr.as_ptr().cast(), PAGE);
        }
    }
}
