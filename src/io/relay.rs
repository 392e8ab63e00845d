//! Relayed stream-ordered calls: a call on a stream the legacy default stream waits for (the
//! legacy and per-thread default streams, streams created blocking) under the default
//! `GDSROUTE_STREAM_ORDERED=auto`. At the call a relay kernel is launched on the caller's stream
//! (`sys::cuda::relay`); the call returns at once. When the stream reaches the kernel it says so
//! in host memory, the relay waiter (`stream_order`, a waiter of its own that makes no CUDA call)
//! gives it a ring of slots, and the engine runs the call as tasks on the relay pool, each task
//! one chunk of the call through one slot: a read `pread`s a chunk into its slot and the kernel
//! copies it to the caller's buffer; a write's kernel fills the slot from the buffer and the task
//! `pwrite`s it. The stream goes on once the kernel has moved the last byte (a read) or the host
//! has written it (a write). No host thread makes a CUDA call while the stream waits, which is
//! what a program's synchronous legacy-stream call would make wait for it (docs/routing.md,
//! "Relayed stream-ordered calls").
//!
//! A task may wait for the kernel (a read's slot to be free, a write's slot to be filled), only
//! for its own call, whose kernel is running; tasks are claimed in file order and the kernel moves
//! chunks in that order, so the earliest unfinished chunk never waits for a later one. The tasks
//! run on a pool of their own (`pool`): a shared worker could sit in a copy of another call that
//! waits for the driver's lock.

use crate::error::Result;
use crate::io::stream_order::{Gate, StreamKey};
use crate::io::task_split::Chunk;
use crate::io::thread_pool::ThreadPool;
use crate::sys::cuda::relay::{self, Control, MAX_SLOTS, RelayKernel, Slots};
use crate::sys::cuda::{CallerStream, ContextHandle};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bytes a slot holds: a chunk of a call. 2 MiB keeps 98 % of the bounce route's rate there
/// (`backend::device::bounce`'s piece).
const SLOT_BYTES: u32 = 2 << 20;

/// A relayed call: its kernel's control block, the ring it was given once started, and where the
/// kernel stops early (a short chunk: end of file).
pub(crate) struct Relay {
    control: Control,
    kernel: RelayKernel,
    nslots: u32,
    slots: OnceLock<Slots>,
    /// The first chunk shorter than a slot (the kernel stops after it); `u64::MAX`: none yet.
    short_chunk: AtomicU64,
    /// The bytes the call moves, as planned when the stream reached it (`go`).
    planned: AtomicU64,
    key: StreamKey,
}

/// The relay's pool, started at the first relayed call with as many threads as the shared pool.
pub(crate) fn pool() -> Result<&'static ThreadPool> {
    static POOL: OnceLock<ThreadPool> = OnceLock::new();
    if let Some(pool) = POOL.get() {
        return Ok(pool);
    }
    let threads = crate::io::thread_pool::global()?.num_threads();
    let pool = ThreadPool::new(threads)?;
    Ok(POOL.get_or_init(|| pool))
}

/// The ring's slots: two per relay worker, so that each has one to fill while the kernel drains
/// another.
fn slots_per_ring() -> Result<u32> {
    Ok((2 * pool()?.num_threads() as u32).clamp(4, MAX_SLOTS))
}

impl Relay {
    /// Launches the kernel of a call on `stream` (of `context`, current) for the caller's
    /// `buffer` (device memory for `In`/`Out`), with a ring made ready for it. Called with the
    /// stream's marks held, as the other gates are made.
    ///
    /// Errors: the relay pool cannot start; the CUDA layer's (`relay::launch`, `reserve_ring`).
    pub(crate) fn launch(kernel: RelayKernel, stream: CallerStream, context: ContextHandle, buffer: u64, key: StreamKey) -> Result<std::sync::Arc<Relay>> {
        let nslots = slots_per_ring()?;
        if kernel != RelayKernel::Gate {
            relay::reserve_ring(SLOT_BYTES, nslots)?;
        }
        let control = relay::launch(kernel, stream, context, buffer)?;
        Ok(std::sync::Arc::new(Relay { control, kernel, nslots, slots: OnceLock::new(), short_chunk: AtomicU64::new(u64::MAX), planned: AtomicU64::new(0), key }))
    }

    /// The bytes per task of the call: one slot.
    pub(crate) fn task_size(&self) -> u64 {
        SLOT_BYTES as u64
    }

    /// True for a call into or from device memory (the kernel moves the bytes).
    pub(crate) fn moves_bytes(&self) -> bool {
        self.kernel != RelayKernel::Gate
    }

    /// The host address the tasks' chunks are placed from (slot `i % nslots` at `buf_offset`
    /// `(i % nslots) * SLOT_BYTES`); null for the gate.
    pub(crate) fn slots_base(&self) -> *mut u8 {
        self.slots.get().map_or(std::ptr::null_mut(), Slots::base)
    }

    /// Lets the kernel start moving `total` bytes (after the call was planned).
    pub(crate) fn go(&self, total: u64) {
        self.planned.store(total, Ordering::Relaxed);
        if let Some(slots) = self.slots.get() {
            self.control.go(slots, total);
        }
    }

    /// Runs the task of `chunk` (offsets as the call's split gives them: chunk `i` at
    /// `i * SLOT_BYTES` of the buffer) through its slot; `move_bytes` is the backend's transfer of
    /// a chunk between the file and host memory at the slot.
    pub(crate) fn run_task(&self, chunk: Chunk, move_bytes: impl FnOnce(Chunk) -> Result<usize>) -> Result<usize> {
        if !self.moves_bytes() {
            return move_bytes(chunk);
        }
        let index = (chunk.buf_offset / SLOT_BYTES as usize) as u64;
        let slot = (index % self.nslots as u64) as u32;
        let at_slot = Chunk { buf_offset: slot as usize * SLOT_BYTES as usize, ..chunk };
        match self.kernel {
            RelayKernel::In => {
                // The slot is free once the kernel moved the chunk that used it before.
                if index >= self.nslots as u64 && !self.wait_for_kernel(index - self.nslots as u64 + 1) {
                    return Ok(0);
                }
                let moved = move_bytes(at_slot).inspect_err(|_| self.control.stop())?;
                let short = moved < chunk.len;
                if short {
                    self.short_chunk.fetch_min(index, Ordering::SeqCst);
                }
                let last = short || chunk.buf_offset + chunk.len >= self.read_len();
                self.control.publish_filled(slot, index, moved as u32, last);
                // The call settles once its last byte is in device memory.
                if last {
                    self.wait_for_kernel(index + 1);
                }
                Ok(moved)
            }
            RelayKernel::Out => {
                if !self.wait_for_kernel(index + 1) {
                    return Ok(0);
                }
                let written = move_bytes(at_slot).inspect_err(|_| self.control.stop())?;
                self.control.publish_written(slot, index);
                Ok(written)
            }
            RelayKernel::Gate => unreachable!("checked above"),
        }
    }

    /// The bytes of the read as planned (`go`'s total).
    fn read_len(&self) -> usize {
        self.planned.load(Ordering::Relaxed) as usize
    }

    /// Waits until the kernel has moved `chunks` chunks: true; false when it never will (it
    /// stopped: an error, the end of the file before them, or exit).
    fn wait_for_kernel(&self, chunks: u64) -> bool {
        let mut pause = Duration::from_micros(2);
        let mut spins = 0u32;
        loop {
            if u64::from(self.control.chunks_moved()) >= chunks {
                return true;
            }
            if self.control.stopped() || self.short_chunk.load(Ordering::SeqCst) < chunks - 1 {
                return false;
            }
            // Spin briefly (a chunk moves in about 50 µs), then sleep, longer each time.
            if spins < 200 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_micros(100));
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.control.stop();
        relay::retire(self.control.clone(), self.slots.take());
    }
}

/// The gate of a relayed call: reached when the kernel has started and, for a call that moves
/// bytes, a ring was free for it.
pub(crate) struct RelayGate(pub(crate) std::sync::Arc<Relay>);

impl Gate for RelayGate {
    fn is_reached(&self) -> Result<bool> {
        let relay = &self.0;
        if !relay.control.started() {
            return Ok(false);
        }
        if relay.moves_bytes() && relay.slots.get().is_none() {
            // Rings are made at the calls; one that is busy frees up when its call ends.
            let Some(ring) = relay::take_ring(SLOT_BYTES, relay.nslots) else { return Ok(false) };
            let _ = relay.slots.set(ring);
        }
        Ok(true)
    }

    fn release(&self) {
        self.0.control.stop();
    }

    fn stream(&self) -> Option<StreamKey> {
        Some(self.0.key)
    }
}
