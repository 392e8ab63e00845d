//! A bounded pool of pinned host bounce buffers of one configured size, the staging area of
//! device transfers through POSIX (`pools` keeps one per device): buffers are reused across
//! calls, freed when the configured size changes, and counted (bytes pinned, peak, calls), per
//! pool and for a group of pools together (`PinnedGroup`). One buffer's allocation, placement
//! and release are the binding `sys::cuda::PinnedAllocation`.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::sys::cuda::{CudaFailure, PinnedAllocation, cuda};

#[derive(Debug)]
struct State {
    buffer_size: usize,
    idle: Vec<PinnedAllocation>,
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
    placement_refused: AtomicI32,
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
                placement_refused: AtomicI32::new(0),
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

    /// Changes the size of future buffers. Idle buffers of the old size are freed now (in a task
    /// of a stream-ordered call, on a thread of its own: unregistering pinned memory waits while
    /// a stream is held, and the task's own stream may be); lent-out ones are freed when returned.
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
        if stale.is_empty() {
            return;
        }
        let inner = Arc::clone(&self.inner);
        crate::sys::cuda::outside_stream_ordered_task(move || {
            stale.into_iter().for_each(|raw| {
                inner.free(raw);
            });
        });
    }

    /// Frees every idle buffer (lent-out buffers are unaffected) and returns the pinned bytes
    /// released (a buffer CUDA refused to release stays pinned and is not among them).
    pub fn clear(&self) -> u64 {
        let idle = {
            let mut state = self.inner.lock();
            let idle = std::mem::take(&mut state.idle);
            state.live -= idle.len();
            idle
        };
        self.inner.returned.notify_all();
        idle.into_iter().map(|raw| self.inner.free(raw)).sum()
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

    fn lend(&self, raw: PinnedAllocation) -> PinnedBuffer {
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
        match PinnedAllocation::allocate(size, self.inner.node) {
            Ok((raw, refused)) => {
                if let Some(errno) = refused {
                    self.inner.placement_refused.store(errno, Ordering::Relaxed);
                }
                self.inner.allocations.fetch_add(1, Ordering::Relaxed);
                let pinned = raw.pinned_bytes();
                let now = self.inner.bytes_pinned.fetch_add(pinned, Ordering::Relaxed) + pinned;
                self.inner
                    .peak_bytes_pinned
                    .fetch_max(now, Ordering::Relaxed);
                if let Some(group) = &self.inner.group {
                    group.add(pinned);
                }
                Ok(self.lend(raw))
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

    /// Takes a buffer back: kept if it has the current size, freed otherwise (in a task of a
    /// stream-ordered call on a thread of its own: `cuda::outside_stream_ordered_task`).
    fn give_back(self: &Arc<Self>, raw: PinnedAllocation) {
        let stale = {
            let mut state = self.lock();
            if raw.size() == state.buffer_size {
                state.idle.push(raw);
                None
            } else {
                state.live -= 1;
                Some(raw)
            }
        };
        self.returned.notify_one();
        if let Some(raw) = stale {
            let inner = Arc::clone(self);
            crate::sys::cuda::outside_stream_ordered_task(move || {
                inner.free(raw);
            });
        }
    }

    /// Frees one buffer; returns the pinned bytes released (0 when CUDA refused).
    fn free(&self, raw: PinnedAllocation) -> u64 {
        let pinned = raw.pinned_bytes();
        self.bytes_pinned.fetch_sub(pinned, Ordering::Relaxed);
        if let Some(group) = &self.group {
            group.sub(pinned);
        }
        self.frees.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = raw.release() {
            // Leaked and still registered (`PinnedAllocation::release`): still pinned, so still
            // counted.
            self.bytes_pinned.fetch_add(pinned, Ordering::Relaxed);
            if let Some(group) = &self.group {
                group.add(pinned);
            }
            crate::log::cleanup_error("releasing a pinned bounce buffer (it stays pinned and counted)", &e);
            return 0;
        }
        pinned
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let idle = std::mem::take(&mut self.lock().idle);
        idle.into_iter().for_each(|raw| {
            self.free(raw);
        });
    }
}

/// A pinned buffer lent by a `PinnedPool`; goes back to the pool on drop.
///
/// Thread safety: `Send` and `Sync` (as `PinnedAllocation`); it owns its memory exclusively.
#[derive(Debug)]
pub struct PinnedBuffer {
    raw: Option<PinnedAllocation>,
    pool: Arc<Inner>,
}

impl PinnedBuffer {
    fn raw(&self) -> &PinnedAllocation {
        self.raw.as_ref().expect("present until drop")
    }

    fn raw_mut(&mut self) -> &mut PinnedAllocation {
        self.raw.as_mut().expect("present until drop")
    }

    /// The buffer's length in bytes (the pool's buffer size when it was allocated).
    pub fn len(&self) -> usize {
        self.raw().size()
    }

    /// Always false: buffers are at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The start of the pinned memory.
    pub fn as_ptr(&self) -> *const u8 {
        self.raw().as_ptr()
    }

    /// The start of the pinned memory, writable.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.raw_mut().as_ptr()
    }

    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.raw().as_slice()
    }

    /// The buffer's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.raw_mut().as_mut_slice()
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
