//! A bounded pool of pinned (page-locked) host bounce buffers, the staging area for reads into
//! device memory through POSIX. Buffers are huge-page-aligned anonymous mappings pinned with
//! `cuMemHostRegister(PORTABLE)`, optionally placed on a NUMA node before their pages exist,
//! reused across calls, freed when the configured size changes, and counted (bytes pinned, peak,
//! calls), per pool and for a group of pools together (`PinnedGroup`).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use cudarc::driver::sys;

use super::context::any_context;
use super::driver::cuda;
use super::error::{CudaFailure, check};
use crate::sys::numa;

/// One pinned allocation owned by the pool or by a `PinnedBuffer`.
#[derive(Debug)]
struct RawPinned {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: the allocation is plain host memory owned by exactly one RawPinned at a time.
unsafe impl Send for RawPinned {}

#[derive(Debug)]
struct State {
    buffer_size: usize,
    idle: Vec<RawPinned>,
    /// Buffers allocated and not yet freed: idle plus lent out.
    live: usize,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    returned: Condvar,
    max_count: usize,
    bytes_pinned: AtomicU64,
    peak_bytes_pinned: AtomicU64,
    allocations: AtomicU64,
    frees: AtomicU64,
    /// The NUMA node new buffers are placed on, if any.
    node: Option<u32>,
    /// The errno of the last placement the kernel refused (0: none).
    placement_refused: std::sync::atomic::AtomicI32,
    group: Option<Arc<PinnedGroup>>,
}

/// Pinned bytes of several pools together, now and at most at once (the sum of the pools' peaks
/// would overstate it: they need not peak together).
#[derive(Debug, Default)]
pub struct PinnedGroup {
    bytes_pinned: AtomicU64,
    peak_bytes_pinned: AtomicU64,
}

impl PinnedGroup {
    /// Bytes pinned now by the group's pools, and the most pinned at once.
    pub fn usage(&self) -> (u64, u64) {
        (self.bytes_pinned.load(Ordering::Relaxed), self.peak_bytes_pinned.load(Ordering::Relaxed))
    }

    fn add(&self, bytes: u64) {
        let now = self.bytes_pinned.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak_bytes_pinned.fetch_max(now, Ordering::Relaxed);
    }

    fn sub(&self, bytes: u64) {
        self.bytes_pinned.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Counters of a `PinnedPool`, read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinnedStats {
    /// Bytes currently pinned by this pool (idle and lent-out buffers).
    pub bytes_pinned: u64,
    /// The highest `bytes_pinned` seen.
    pub peak_bytes_pinned: u64,
    /// Buffers allocated and pinned.
    pub allocations: u64,
    /// Buffers freed (size change, `clear`, pool drop).
    pub frees: u64,
    /// Buffers allocated and not freed (idle plus lent out).
    pub buffers_live: usize,
    /// Buffers waiting in the pool.
    pub buffers_idle: usize,
    /// The size of new buffers.
    pub buffer_size: usize,
    /// The most buffers that may exist at once.
    pub max_count: usize,
    /// The NUMA node buffers are placed on (`PinnedPool::placed`), `None` for no placement.
    pub node: Option<u32>,
    /// The errno of the last placement the kernel refused (`mbind`); such a buffer is pinned
    /// wherever its pages fell. `None` when every placement asked for was made.
    pub placement_refused: Option<i32>,
}

/// A bounded pool of pinned host buffers of one configured size.
///
/// Thread safety: share it freely (`Sync`; `clone` shares the same pool); `acquire` blocks when
/// `max_count` buffers are lent.
#[derive(Debug, Clone)]
pub struct PinnedPool {
    inner: Arc<Inner>,
}

impl PinnedPool {
    /// A pool of buffers of `buffer_size` bytes, at most `max_count` existing at once (both are
    /// raised to 1 if 0). Allocates nothing until the first `acquire`.
    pub fn new(buffer_size: usize, max_count: usize) -> Self {
        Self::placed(buffer_size, max_count, None, None)
    }

    /// `new`, with the pages of every buffer taken preferably from NUMA node `node` (asked before
    /// they are touched: `mbind(MPOL_PREFERRED)`; where the kernel refuses, the buffer is pinned
    /// unplaced and `PinnedStats::placement_refused` says why), and the pinned bytes counted in
    /// `group` as well.
    pub fn placed(buffer_size: usize, max_count: usize, node: Option<u32>, group: Option<Arc<PinnedGroup>>) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    buffer_size: buffer_size.max(1),
                    idle: Vec::new(),
                    live: 0,
                }),
                returned: Condvar::new(),
                max_count: max_count.max(1),
                bytes_pinned: AtomicU64::new(0),
                peak_bytes_pinned: AtomicU64::new(0),
                allocations: AtomicU64::new(0),
                frees: AtomicU64::new(0),
                node,
                placement_refused: std::sync::atomic::AtomicI32::new(0),
                group,
            }),
        }
    }

    /// Takes an idle buffer, or allocates one while fewer than `max_count` exist, or waits for
    /// one to be returned.
    ///
    /// Errors: `Unavailable`/`Forked`; the CUresult of `cuMemHostRegister`.
    ///
    /// Blocking: yes, while all `max_count` buffers are lent out.
    pub fn acquire(&self) -> Result<PinnedBuffer, CudaFailure> {
        cuda()?;
        let mut state = self.inner.lock();
        loop {
            if let Some(raw) = state.idle.pop() {
                return Ok(self.lend(raw));
            }
            if state.live < self.inner.max_count {
                return self.allocate_unlocked(state);
            }
            state = self
                .inner
                .returned
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Like `acquire`, but returns `Ok(None)` instead of waiting when all buffers are lent out.
    ///
    /// Errors: as `acquire`.
    pub fn try_acquire(&self) -> Result<Option<PinnedBuffer>, CudaFailure> {
        cuda()?;
        let mut state = self.inner.lock();
        if let Some(raw) = state.idle.pop() {
            return Ok(Some(self.lend(raw)));
        }
        if state.live < self.inner.max_count {
            return self.allocate_unlocked(state).map(Some);
        }
        Ok(None)
    }

    /// Pins one more buffer and keeps it idle, if fewer than `count` (and fewer than `max_count`)
    /// exist; true if it did. Threads calling this at once each pin their own buffer, in parallel:
    /// a preparation ahead of the first read (warm_up.rs) without lending anything out.
    ///
    /// Errors: as `acquire`.
    pub fn fill_to(&self, count: usize) -> Result<bool, CudaFailure> {
        cuda()?;
        let state = self.inner.lock();
        if state.live >= count.min(self.inner.max_count) {
            return Ok(false);
        }
        let buffer = self.allocate_unlocked(state)?;
        drop(buffer); // back to the idle list
        Ok(true)
    }

    /// Changes the size of future buffers. Idle buffers of the old size are freed now; lent-out
    /// ones are freed when returned.
    pub fn set_buffer_size(&self, buffer_size: usize) {
        let stale = {
            let mut state = self.inner.lock();
            let buffer_size = buffer_size.max(1);
            if state.buffer_size == buffer_size {
                return;
            }
            state.buffer_size = buffer_size;
            let stale = std::mem::take(&mut state.idle);
            state.live -= stale.len();
            stale
        };
        self.inner.returned.notify_all();
        stale.into_iter().for_each(|raw| self.inner.free(raw));
    }

    /// Frees every idle buffer (lent-out buffers are unaffected).
    pub fn clear(&self) {
        let idle = {
            let mut state = self.inner.lock();
            let idle = std::mem::take(&mut state.idle);
            state.live -= idle.len();
            idle
        };
        self.inner.returned.notify_all();
        idle.into_iter().for_each(|raw| self.inner.free(raw));
    }

    /// The pool's counters.
    pub fn stats(&self) -> PinnedStats {
        let state = self.inner.lock();
        PinnedStats {
            bytes_pinned: self.inner.bytes_pinned.load(Ordering::Relaxed),
            peak_bytes_pinned: self.inner.peak_bytes_pinned.load(Ordering::Relaxed),
            allocations: self.inner.allocations.load(Ordering::Relaxed),
            frees: self.inner.frees.load(Ordering::Relaxed),
            buffers_live: state.live,
            buffers_idle: state.idle.len(),
            buffer_size: state.buffer_size,
            max_count: self.inner.max_count,
            node: self.inner.node,
            placement_refused: Some(self.inner.placement_refused.load(Ordering::Relaxed)).filter(|&e| e != 0),
        }
    }

    fn lend(&self, raw: RawPinned) -> PinnedBuffer {
        PinnedBuffer {
            raw: Some(raw),
            pool: Arc::clone(&self.inner),
        }
    }

    /// Reserves a slot under the lock, then allocates without holding it.
    fn allocate_unlocked(
        &self,
        mut state: MutexGuard<'_, State>,
    ) -> Result<PinnedBuffer, CudaFailure> {
        state.live += 1;
        let size = state.buffer_size;
        drop(state);
        match allocate(size, self.inner.node) {
            Ok((ptr, refused)) => {
                if let Some(errno) = refused {
                    self.inner.placement_refused.store(errno, Ordering::Relaxed);
                }
                self.inner.allocations.fetch_add(1, Ordering::Relaxed);
                let pinned = pinned_len(size);
                let now = self.inner.bytes_pinned.fetch_add(pinned, Ordering::Relaxed) + pinned;
                self.inner
                    .peak_bytes_pinned
                    .fetch_max(now, Ordering::Relaxed);
                if let Some(group) = &self.inner.group {
                    group.add(pinned);
                }
                Ok(self.lend(RawPinned { ptr, size }))
            }
            Err(e) => {
                self.inner.lock().live -= 1;
                self.inner.returned.notify_one();
                Err(e)
            }
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a buffer back: kept if it has the current size, freed otherwise.
    fn give_back(&self, raw: RawPinned) {
        let stale = {
            let mut state = self.lock();
            if raw.size == state.buffer_size {
                state.idle.push(raw);
                None
            } else {
                state.live -= 1;
                Some(raw)
            }
        };
        self.returned.notify_one();
        if let Some(raw) = stale {
            self.free(raw);
        }
    }

    fn free(&self, raw: RawPinned) {
        self.bytes_pinned
            .fetch_sub(pinned_len(raw.size), Ordering::Relaxed);
        if let Some(group) = &self.group {
            group.sub(pinned_len(raw.size));
        }
        self.frees.fetch_add(1, Ordering::Relaxed);
        // In a forked child or after a failure there is nothing safe to call: leak.
        let Ok(scope) = any_context() else { return };
        // SAFETY: cuda() succeeded (any_context checked it); the pointer came from `allocate`
        // and is released exactly once because RawPinned is moved in here.
        let r = unsafe { release(raw.ptr, raw.size) };
        drop(scope);
        if let Err(e) = r {
            // Leaked and still registered (see `release`): still pinned, so still counted.
            self.bytes_pinned.fetch_add(pinned_len(raw.size), Ordering::Relaxed);
            if let Some(group) = &self.group {
                group.add(pinned_len(raw.size));
            }
            eprintln!("gdsroute: {e}");
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let idle = std::mem::take(&mut self.lock().idle);
        idle.into_iter().for_each(|raw| self.free(raw));
    }
}

/// Alignment and rounding of buffers of at least this size: one transparent huge page, so that a
/// buffer is backed by as few pages as possible (registration pins and maps every page).
const HUGE_PAGE: usize = 2 << 20;

const PAGE: usize = 4096;

/// Bytes pinned for a buffer of `size` bytes, as counted in the pool's statistics.
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

/// A pinned buffer lent by a `PinnedPool`; goes back to the pool on drop.
///
/// Thread safety: `Send` and `Sync`; it owns its memory exclusively.
#[derive(Debug)]
pub struct PinnedBuffer {
    raw: Option<RawPinned>,
    pool: Arc<Inner>,
}

// SAFETY: the buffer owns its pinned allocation exclusively; shared access only reads it.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    fn raw(&self) -> &RawPinned {
        self.raw.as_ref().expect("present until drop")
    }

    /// The buffer's length in bytes (the pool's buffer size when it was allocated).
    pub fn len(&self) -> usize {
        self.raw().size
    }

    /// Always false: buffers are at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The start of the pinned memory.
    pub fn as_ptr(&self) -> *const u8 {
        self.raw().ptr.as_ptr()
    }

    /// The start of the pinned memory, writable.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.raw().ptr.as_ptr()
    }

    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        let raw = self.raw();
        // SAFETY: `size` initialised bytes (zeroed at allocation), owned by self.
        unsafe { std::slice::from_raw_parts(raw.ptr.as_ptr(), raw.size) }
    }

    /// The buffer's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let raw = self.raw();
        // SAFETY: `size` initialised bytes, owned exclusively by self, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(raw.ptr.as_ptr(), raw.size) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            self.pool.give_back(raw);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_acquire_errs_and_counts_nothing() {
        if cuda().is_err() {
            let pool = PinnedPool::new(1 << 20, 2);
            assert!(pool.acquire().is_err());
            assert!(pool.try_acquire().is_err());
            pool.set_buffer_size(1 << 21);
            pool.clear();
            let s = pool.stats();
            assert_eq!((s.allocations, s.bytes_pinned, s.buffers_live), (0, 0, 0));
            assert_eq!((s.buffer_size, s.max_count), (1 << 21, 2));
        }
    }

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

    #[test]
    fn a_group_counts_the_pinned_bytes_of_its_pools_and_its_own_peak() {
        let group = PinnedGroup::default();
        group.add(4 << 20);
        group.add(4 << 20);
        group.sub(4 << 20);
        group.add(2 << 20);
        assert_eq!(group.usage(), (6 << 20, 8 << 20));
        if cuda().is_err() {
            let pool = PinnedPool::placed(1 << 20, 2, Some(0), Some(Arc::new(PinnedGroup::default())));
            assert!(pool.acquire().is_err());
            let s = pool.stats();
            assert_eq!((s.node, s.placement_refused, s.bytes_pinned), (Some(0), None, 0));
        }
    }
}
