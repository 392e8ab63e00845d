//! Relayed stream-ordered calls: a call on a stream the legacy default stream waits for (the
//! legacy and per-thread default streams, streams created blocking) under the default
//! `GDSROUTE_STREAM_ORDERED=auto`. Everything the stream does for the call is queued on it at the
//! call, and the call returns at once:
//! - **queued copies** where the size is given at the call (`Relay::queue`): copies between a
//!   ring of pinned host memory and the caller's device buffer, between waits and stores on the
//!   call's control words (`QueuedCopies::stream_ops`), so that the copy engine moves the bytes; a
//!   read's pieces that lie in the file's registered page-cache windows are copied straight from
//!   them (`RegisteredRuns`);
//! - **a relay kernel** otherwise (the pointer form, whose size is read when the stream gets
//!   there; a gate for host memory; `Relay::launch`, `sys::cuda::relay`), whose SMs move them.
//!
//! When the stream reaches the call it says so in host memory, the relay waiter (`stream_order`,
//! a waiter of its own that makes no CUDA call) hands the call to the engine, and the engine runs
//! it as tasks on the relay pool, each task one chunk of the call through one slot: a read
//! `pread`s a chunk into its slot and the stream copies it to the caller's buffer; a write's
//! stream fills the slot from the buffer and the task `pwrite`s it. The stream goes on once the
//! call has settled. No host thread makes a CUDA call while the stream waits, which is what a
//! program's synchronous legacy-stream call would make wait for it (docs/routing.md, "Relayed
//! stream-ordered calls").
//!
//! A task may wait for the stream (a read's slot to be free, a write's slot to be filled), only
//! for its own call, which the stream is at; tasks are claimed in file order and the stream moves
//! chunks in that order, so the earliest unfinished chunk never waits for a later one. The tasks
//! run on a pool of their own (`pool`): a shared worker could sit in a copy of another call that
//! waits for the driver's lock.
//!
//! One job: the host's part of the relay protocol, both ways; queued copies in `queued`, the
//! stream's part played for the CPU tests in `played`.

use crate::error::Result;
use crate::io::stream_order::{Gate, StreamKey};
use crate::io::task_split::Chunk;
use crate::io::thread_pool::ThreadPool;
use crate::sys::cuda::relay::{self, Control, KeepAlive, MAX_SLOTS, RelayKernel, Slots};
use crate::sys::cuda::{CallerStream, ContextHandle};
use queued::{QUEUED_SLOT_BYTES, QUEUED_SLOTS, QueuedCopies};
pub(crate) use queued::RegisteredRuns;

mod queued;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Bytes a slot holds: a chunk of a call. 2 MiB keeps 98 % of the bounce route's rate there
/// (`backend::device::bounce`'s piece). At least a page: the engine's split makes a request of at
/// most a page one task whatever the task size.
const SLOT_BYTES: u32 = 2 << 20;
const _: () = assert!(SLOT_BYTES as usize >= crate::io::task_split::PAGE_SIZE);


/// A relayed call: its control block, its ring (a kernel's is given once the kernel started; queued
/// copies have their stream's from the call), and where the kernel stops early (a short chunk:
/// end of file).
pub(crate) struct Relay {
    control: Control,
    /// The direction (a kernel's name) and, for `queued`, the copy engine's way instead.
    kernel: RelayKernel,
    queued: Option<QueuedCopies>,
    slot_bytes: u32,
    nslots: u32,
    slots: OnceLock<Arc<Slots>>,
    /// The first chunk shorter than a slot (the kernel stops after it); `u64::MAX`: none yet.
    short_chunk: AtomicU64,
    /// The bytes the call moves, as planned when the stream reached it (`go`).
    planned: AtomicU64,
    key: StreamKey,
    /// The caller's buffer (device memory), whose alignment its chunks keep in the slots.
    buffer: u64,
    /// Its stream's count in `IN_FLIGHT`; with it, its control block and ring go back to the
    /// pools when dropped. `None` for a test's relay, whose memory is the test's.
    in_flight: Option<StreamInFlight>,
    /// Where queued copies read pieces from registered windows (`RegisteredRuns`): the file's
    /// change count they were planned at, to be confirmed once the stream reached the call.
    registered_changes: Option<u64>,
    /// What keeps those windows registered, retired with the control block.
    keep: Option<KeepAlive>,
}

/// How a relayed call moves its bytes, decided at the call (`engine::on_stream`).
pub(crate) struct RelayPlan {
    /// The direction (and, where no copies are queued, the kernel).
    pub(crate) kernel: RelayKernel,
    /// The caller's buffer (device memory; 0 for the gate).
    pub(crate) buffer: u64,
    /// The call's size where it is given at the call (not behind the caller's pointers): its
    /// copies are queued on the stream (`Relay::queue`) instead of a kernel's.
    pub(crate) known_len: Option<u64>,
    /// A read's parts in registered page-cache windows, which queued copies read from there.
    pub(crate) registered: Option<RegisteredRuns>,
    /// The device whose memory the buffer is (`None`: host or managed memory).
    pub(crate) device: Option<i32>,
}

impl RelayPlan {
    /// Whether the buffer is host or managed memory, or device memory of the device whose
    /// context is current (the stream's): a relay kernel on another device, or copies queued
    /// there, may not reach it (the call blocks instead; docs/routing.md).
    ///
    /// Errors: the current context's device cannot be asked.
    pub(crate) fn on_the_streams_device(&self) -> Result<bool> {
        let Some(device) = self.device else { return Ok(true) };
        Ok(crate::sys::cuda::current_device()? == Some(device))
    }

    /// Queues the call's copies, or launches its kernel, on `stream` (of `context`, current).
    pub(crate) fn start(self, stream: CallerStream, context: ContextHandle, key: StreamKey) -> Result<Arc<Relay>> {
        match self.known_len {
            Some(len) if self.kernel != RelayKernel::Gate && relay::can_queue() => Relay::queue(self.kernel, stream, self.buffer, len, key, self.registered),
            _ => Relay::launch(self.kernel, stream, context, self.buffer, key),
        }
    }
}

/// The relay's pool, started at the first relayed call with as many threads as the shared pool.
pub(crate) fn pool() -> Result<&'static ThreadPool> {
    // Made by one caller while the others wait (two first relayed calls at once made two pools,
    // and the one not kept left its workers parked for the process's life).
    static POOL: once_cell::sync::OnceCell<ThreadPool> = once_cell::sync::OnceCell::new();
    POOL.get_or_try_init(|| {
        let threads = crate::io::thread_pool::global()?.num_threads();
        // Callers' streams wait for its workers whatever they run.
        ThreadPool::with_thread_start(threads, crate::sys::cuda::streams_wait_for_this_thread)
    })
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
    pub(crate) fn launch(kernel: RelayKernel, stream: CallerStream, context: ContextHandle, buffer: u64, key: StreamKey) -> Result<Arc<Relay>> {
        let nslots = slots_per_ring()?;
        if kernel != RelayKernel::Gate {
            relay::reserve_ring(SLOT_BYTES, nslots)?;
        }
        let in_flight = StreamInFlight::take(key)?;
        let control = relay::launch(kernel, stream, context, buffer)?;
        Ok(Arc::new(Relay::new(control, kernel, None, SLOT_BYTES, nslots, key, buffer, Some(in_flight))))
    }

    /// Queues the copies of a call of `len` bytes (known at the call) in `direction` (`In` or
    /// `Out`) on `stream` (of the context current here) for the caller's device `buffer`, through
    /// the stream's ring (`QueuedCopies`). Called with the stream's marks held.
    ///
    /// Errors: the relay pool cannot start; the CUDA layer's (`relay::queue`, the ring's or the
    /// control block's allocation). Where part of the copies was queued, they are let pass and
    /// the stream is synchronised before the error returns, so that the caller may move the
    /// bytes itself.
    pub(crate) fn queue(direction: RelayKernel, stream: CallerStream, buffer: u64, len: u64, key: StreamKey, registered: Option<RegisteredRuns>) -> Result<Arc<Relay>> {
        debug_assert!(direction != RelayKernel::Gate);
        pool()?;
        let in_flight = StreamInFlight::take(key)?;
        let ring = in_flight.ring()?;
        let control = relay::control_for_queue()?;
        let (relay, ops) = Relay::with_queued_copies(control, direction, len, queued::shape(direction), QUEUED_SLOT_BYTES, key, buffer, Some(in_flight), registered);
        let _ = relay.slots.set(Arc::clone(&ring));
        if let Err(e) = relay::queue(&ops, stream, &relay.control, &ring, buffer) {
            relay.stop();
            // What was queued must have run before the caller touches the buffer; then the
            // control block and the ring are free again, whether or not the last store was queued.
            if stream.synchronize().is_ok() {
                relay.control.mark_left();
            }
            return Err(e.into());
        }
        Ok(Arc::new(relay))
    }

    #[allow(clippy::too_many_arguments)]
    fn new(control: Control, kernel: RelayKernel, queued: Option<QueuedCopies>, slot_bytes: u32, nslots: u32, key: StreamKey, buffer: u64, in_flight: Option<StreamInFlight>) -> Relay {
        Relay { control, kernel, queued, slot_bytes, nslots, slots: OnceLock::new(), short_chunk: AtomicU64::new(u64::MAX), planned: AtomicU64::new(0), key, buffer, in_flight, registered_changes: None, keep: None }
    }

    /// The file's change count at which the registered windows its queued copies read were
    /// planned (`RegisteredRuns`), if
    /// any: once the stream reached the call, the engine confirms that they still hold the
    /// file's bytes, or fails the call.
    pub(crate) fn registered_changes(&self) -> Option<u64> {
        self.registered_changes
    }

    /// The bytes per task of the call: one slot.
    pub(crate) fn task_size(&self) -> u64 {
        self.slot_bytes as u64
    }

    /// True for a call into or from device memory (the kernel or the queued copies move the
    /// bytes).
    pub(crate) fn moves_bytes(&self) -> bool {
        self.kernel != RelayKernel::Gate
    }

    /// The bytes the call's tasks cover, given the `planned` bytes of the call once the stream
    /// reached it: queued copies move the bytes queued at the call, whatever the file holds now
    /// (tasks past its end fill their slots with zeros).
    pub(crate) fn tasks_len(&self, planned: usize) -> usize {
        match &self.queued {
            Some(q) => q.len as usize,
            None => planned,
        }
    }

    /// The host address the tasks' chunks are placed from (chunk `i` in slot `i % nslots`, at
    /// `Slots::chunk_offset`); null for the gate.
    pub(crate) fn slots_base(&self) -> *mut u8 {
        self.slots.get().map_or(std::ptr::null_mut(), |s| s.base())
    }

    /// Lets the kernel start moving `total` bytes (after the call was planned); for queued
    /// copies, what the tasks read of the file.
    pub(crate) fn go(&self, total: u64) {
        self.planned.store(total, Ordering::Relaxed);
        if self.queued.is_none()
            && let Some(slots) = self.slots.get()
        {
            self.control.go(slots, total);
        }
    }

    /// The call moves nothing (the file ends before it, once the stream reached it): queued
    /// copies still copy every piece, so the part of the ring they read is made zeros first (it
    /// is the stream's, and the stream is at this call, so no copy reads it), and no more: this
    /// runs on the relay waiter, which starts every stream's calls (the whole ring, 128 MiB, took
    /// 15 ms). Then `stop` lets the stream go on.
    pub(crate) fn nothing_to_move(&self) {
        if let (Some(q), Some(ring)) = (&self.queued, self.slots.get())
            && self.kernel == RelayKernel::In
            && q.len > 0
        {
            // The copies read each group's slots from the ring's start: at most this much.
            let read = q.len.min(u64::from(q.groups()) * q.piece_bytes(self.slot_bytes));
            ring.zero_prefix(usize::try_from(read).unwrap_or(usize::MAX));
        }
    }

    /// Tells what the stream runs for the call to move no more and wait for `stop`: a task
    /// failed. The other tasks then stop at their next wait for the stream. Queued copies can
    /// only be let pass, which `stop` does once the call has settled: no task writes a slot while
    /// they move whatever the slots hold.
    fn abort(&self) {
        self.control.abort();
    }

    /// Lets the stream go on past the call: it is settled (no task runs), or the process exits.
    /// Idempotent.
    pub(crate) fn stop(&self) {
        if let Some(q) = &self.queued {
            self.control.release_pieces(q.groups(), q.pieces(self.slot_bytes));
        }
        self.control.stop();
    }

    /// Runs the task of `chunk` (offsets as the call's split gives them: chunk `i` at
    /// `i * slot_bytes` of the buffer) through its slot; `move_bytes` is the backend's transfer of
    /// a chunk between the file and host memory at the slot, `registered` counts a chunk of a
    /// read that the queued copies take from registered windows (`RegisteredRuns`) instead.
    pub(crate) fn run_task(&self, chunk: Chunk, move_bytes: impl FnOnce(Chunk) -> Result<usize>, registered: impl FnOnce(Chunk) -> Result<usize>) -> Result<usize> {
        if !self.moves_bytes() {
            return move_bytes(chunk);
        }
        if chunk.len > self.slot_bytes as usize {
            return Err(crate::error::Error::Internal(format!("a relayed task of {} bytes is larger than its slot", chunk.len)));
        }
        let index = (chunk.buf_offset / self.slot_bytes as usize) as u64;
        let slot = (index % self.nslots as u64) as u32;
        let Some(slots) = self.slots.get() else { return Err(crate::error::Error::Internal("a relayed task ran before its ring".into())) };
        let at_slot = Chunk { buf_offset: slots.chunk_offset(slot, self.buffer), ..chunk };
        if let Some(q) = &self.queued {
            return self.run_queued_task(q, index, (chunk, at_slot), move_bytes, registered);
        }
        match self.kernel {
            RelayKernel::In => {
                // The slot is free once the kernel moved the chunk that used it before.
                if index >= self.nslots as u64 && !self.wait_for_kernel(index - self.nslots as u64 + 1) {
                    return Ok(0);
                }
                let moved = move_bytes(at_slot).inspect_err(|_| self.abort())?;
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
                let written = move_bytes(at_slot).inspect_err(|_| self.abort())?;
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

    /// Waits until the kernel (or the queued copies) has moved `chunks` chunks (pieces): true;
    /// false when it never will (it stopped: an error, the end of the file before them, or exit).
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
        self.stop();
        // Registered windows are let go now once the stream has made every copy (a read that
        // settled); else with the control block, once the stream has left the call.
        let copies_made = self.queued.as_ref().is_some_and(|q| u64::from(self.control.chunks_moved()) >= q.pieces(self.slot_bytes));
        let keep = if copies_made { None } else { self.keep.take() };
        if self.in_flight.is_some() {
            relay::retire(self.control.clone(), self.slots.take(), keep);
        }
    }
}

/// Relayed calls in flight (launched, not yet dropped), by stream, and the stream's ring for
/// queued copies. Only the first of a stream's calls runs; the others wait behind it on the
/// stream and hold no SM, and the stream's calls use its ring one after another. A call on a
/// stream that has none is relayed only while fewer streams than `relay::streams_at_once` have
/// some, so that the kernels at the streams' heads always fit on the GPU together (and the rings
/// stay few).
static IN_FLIGHT: std::sync::Mutex<Option<std::collections::HashMap<StreamKey, StreamRelays>>> = std::sync::Mutex::new(None);

#[derive(Default)]
struct StreamRelays {
    calls: usize,
    ring: Option<Arc<Slots>>,
}

fn in_flight() -> std::sync::MutexGuard<'static, Option<std::collections::HashMap<StreamKey, StreamRelays>>> {
    IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner())
}

/// A stream's share of `IN_FLIGHT`, given back when dropped.
struct StreamInFlight(StreamKey);

impl StreamInFlight {
    /// Counts a relayed call on `key`'s stream, or refuses it: too many streams have relayed calls
    /// (the call then blocks, as where no kernel can be launched).
    fn take(key: StreamKey) -> Result<StreamInFlight> {
        let mut streams = in_flight();
        let streams = streams.get_or_insert_with(std::collections::HashMap::new);
        if !streams.contains_key(&key) && streams.len() >= relay::streams_at_once() {
            return Err(crate::error::Error::Internal(format!("relayed calls are in flight on {} streams, as many as the GPU holds relay kernels for", streams.len())));
        }
        streams.entry(key).or_default().calls += 1;
        Ok(StreamInFlight(key))
    }

    /// The stream's ring for queued copies, taken (or allocated) now if it has none. The calls
    /// of one stream use it one after another: a call's tasks start once the stream reached it,
    /// after the copies of the calls before it.
    fn ring(&self) -> Result<Arc<Slots>> {
        let mut streams = in_flight();
        let Some(entry) = streams.as_mut().and_then(|s| s.get_mut(&self.0)) else {
            return Err(crate::error::Error::Internal("a relayed call's stream is not in flight".into()));
        };
        if let Some(ring) = &entry.ring {
            return Ok(Arc::clone(ring));
        }
        let ring = relay::take_packed_ring(QUEUED_SLOT_BYTES, QUEUED_SLOTS)?;
        entry.ring = Some(Arc::clone(&ring));
        Ok(ring)
    }
}

impl Drop for StreamInFlight {
    fn drop(&mut self) {
        let mut streams = in_flight();
        if let Some(streams) = streams.as_mut()
            && let Some(entry) = streams.get_mut(&self.0)
        {
            entry.calls -= 1;
            if entry.calls == 0
                && let Some(entry) = streams.remove(&self.0)
                && let Some(ring) = entry.ring
            {
                // Free again once the last call's copies have passed (that call's `retire`).
                relay::give_back_ring(ring);
            }
        }
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
            let Some(ring) = relay::take_ring(relay.slot_bytes, relay.nslots) else { return Ok(false) };
            let _ = relay.slots.set(ring);
        }
        Ok(true)
    }

    fn release(&self) {
        self.0.stop();
    }

    fn stream(&self) -> Option<StreamKey> {
        Some(self.0.key)
    }
}

#[cfg(test)]
pub(crate) mod played;
#[cfg(test)]
mod tests;
