//! Relayed stream-ordered calls: a call on a stream the legacy default stream waits for (the
//! legacy and per-thread default streams, streams created blocking) under the default
//! `GDSROUTE_STREAM_ORDERED=auto`. Everything the stream does for the call is queued on it at the
//! call, and the call returns at once:
//! - **queued copies** where the size is given at the call (`Relay::queue`): copies between a
//!   ring of pinned, mapped host memory and the caller's device buffer, between waits and stores
//!   on the call's control words (`stream_ops`), so that the copy engine moves the bytes;
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
//! One job in one file, although over 700 lines: the host's part of the relay protocol, both
//! ways; over half of the length is its CPU tests, which play the stream's part.

use crate::error::Result;
use crate::io::stream_order::{Gate, StreamKey};
use crate::io::task_split::Chunk;
use crate::io::thread_pool::ThreadPool;
use crate::sys::cuda::relay::{self, Control, MAX_SLOTS, RelayKernel, Slots, StreamOp};
use crate::sys::cuda::{CallerStream, ContextHandle};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Bytes a slot holds: a chunk of a call. 2 MiB keeps 98 % of the bounce route's rate there
/// (`backend::device::bounce`'s piece). At least a page: the engine's split makes a request of at
/// most a page one task whatever the task size.
const SLOT_BYTES: u32 = 2 << 20;
const _: () = assert!(SLOT_BYTES as usize >= crate::io::task_split::PAGE_SIZE);

/// The copy engine's ring (`QueuedCopies`): slots of a task each (4 MiB, the default task size, as
/// the synchronous route's bounce buffers), copied two at a time, so that a 1 GiB call queues 128
/// copies (each a few microseconds of the caller's time at the call) and 16 slots (64 MiB, as
/// the synchronous route's 17 bounce buffers) keep the relay pool's 16 threads reading.
const QUEUED_SLOT_BYTES: u32 = 4 << 20;
const QUEUED_PIECE_SLOTS: u32 = 2;
const QUEUED_SLOTS: u32 = 16;
const _: () = assert!(QUEUED_SLOTS.is_multiple_of(QUEUED_PIECE_SLOTS) && QUEUED_SLOTS / QUEUED_PIECE_SLOTS <= MAX_SLOTS);

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
}

/// The copy engine's way of relaying a call whose size is known at the call: its copies between
/// the ring and the caller's buffer queued on the caller's stream at the call (`stream_ops`,
/// `relay::queue`) between waits and stores on the control block's words, so that the copy engine
/// moves the bytes (52 GB/s on the H200 where a relay kernel moved 20.6) and the stream needs no
/// SM. A piece is `piece_slots` consecutive slots, copied at once; group `g` of the ring holds
/// pieces `g`, `g + groups`, ...
struct QueuedCopies {
    /// Bytes the queued copies move (a read's clipped to the file's size at the call).
    len: u64,
    piece_slots: u32,
    /// Per group: tasks done of the piece it holds now.
    done: Box<[AtomicU32]>,
}

impl QueuedCopies {
    fn piece_bytes(&self, slot_bytes: u32) -> u64 {
        self.piece_slots as u64 * slot_bytes as u64
    }

    fn pieces(&self, slot_bytes: u32) -> u64 {
        self.len.div_ceil(self.piece_bytes(slot_bytes))
    }

    fn groups(&self) -> u32 {
        self.done.len() as u32
    }
}

/// The operations queued on the caller's stream for a call of `len` bytes in `direction`
/// (`In`: the ring to the buffer; `Out`: the buffer to the ring), through a ring of `groups`
/// groups of `piece_slots` slots of `slot_bytes`:
/// - the stream stores `started`; the relay waiter then hands the call to the relay pool;
/// - `In`: for piece `j` of group `g = j % groups`, it waits for the group's header to reach
///   `j + 1` (its tasks filled it), copies it to the buffer, and stores `progress = j + 1` (the
///   group is free for piece `j + groups`);
/// - `Out`: for piece `j`, once the tasks wrote piece `j - groups` of the group to the file
///   (header `j - groups + 1`), it copies the buffer's piece into the group and stores
///   `progress = j + 1` (the tasks may write it);
/// - at the end it waits for `stop` (the call is settled, so that later work on the stream sees
///   it done) and stores `exited` (the control block and ring may be reused).
fn stream_ops(direction: RelayKernel, len: u64, slot_bytes: u32, piece_slots: u32, groups: u32) -> Vec<StreamOp> {
    use crate::sys::cuda::relay::{W_EXITED, W_HEADERS, W_PROGRESS, W_STARTED, W_STOP};
    let piece_bytes = piece_slots as u64 * slot_bytes as u64;
    let pieces = len.div_ceil(piece_bytes);
    let mut ops = Vec::with_capacity(3 * pieces as usize + 3);
    ops.push(StreamOp::Write { word: W_STARTED, value: 1 });
    for j in 0..pieces {
        let group = (j % groups as u64) as usize;
        let (ring_offset, buffer_offset) = (group * piece_bytes as usize, j * piece_bytes);
        let n = (len - buffer_offset).min(piece_bytes) as usize;
        let header = W_HEADERS + 2 * group;
        match direction {
            RelayKernel::In => {
                ops.push(StreamOp::Wait { word: header, value: j as u32 + 1 });
                ops.push(StreamOp::ToBuffer { ring_offset, buffer_offset, len: n });
            }
            _ => {
                if j >= groups as u64 {
                    ops.push(StreamOp::Wait { word: header, value: (j - groups as u64) as u32 + 1 });
                }
                ops.push(StreamOp::ToRing { ring_offset, buffer_offset, len: n });
            }
        }
        ops.push(StreamOp::Write { word: W_PROGRESS, value: j as u32 + 1 });
    }
    ops.push(StreamOp::Wait { word: W_STOP, value: 1 });
    ops.push(StreamOp::Write { word: W_EXITED, value: 1 });
    ops
}

/// How a relayed call moves its bytes, decided at the call (`engine::on_stream`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RelayPlan {
    /// The direction (and, where no copies are queued, the kernel).
    pub(crate) kernel: RelayKernel,
    /// The caller's buffer (device memory; 0 for the gate).
    pub(crate) buffer: u64,
    /// The call's size where it is given at the call (not behind the caller's pointers): its
    /// copies are queued on the stream (`Relay::queue`) instead of a kernel's.
    pub(crate) known_len: Option<u64>,
}

impl RelayPlan {
    /// Queues the call's copies, or launches its kernel, on `stream` (of `context`, current).
    pub(crate) fn start(self, stream: CallerStream, context: ContextHandle, key: StreamKey) -> Result<Arc<Relay>> {
        match self.known_len {
            Some(len) if self.kernel != RelayKernel::Gate && relay::can_queue() => Relay::queue(self.kernel, stream, self.buffer, len, key),
            _ => Relay::launch(self.kernel, stream, context, self.buffer, key),
        }
    }
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
    pub(crate) fn queue(direction: RelayKernel, stream: CallerStream, buffer: u64, len: u64, key: StreamKey) -> Result<Arc<Relay>> {
        debug_assert!(direction != RelayKernel::Gate);
        pool()?;
        let in_flight = StreamInFlight::take(key)?;
        let ring = in_flight.ring()?;
        let control = relay::control_for_queue()?;
        let groups = QUEUED_SLOTS / QUEUED_PIECE_SLOTS;
        let copies = QueuedCopies { len, piece_slots: QUEUED_PIECE_SLOTS, done: (0..groups).map(|_| AtomicU32::new(0)).collect() };
        let ops = stream_ops(direction, len, QUEUED_SLOT_BYTES, QUEUED_PIECE_SLOTS, groups);
        let relay = Relay::new(control, direction, Some(copies), QUEUED_SLOT_BYTES, QUEUED_SLOTS, key, buffer, Some(in_flight));
        let _ = relay.slots.set(Arc::clone(&ring));
        if let Err(e) = relay::queue(&ops, stream, &relay.control, &ring, buffer) {
            relay.stop();
            // What was queued must have run before the caller touches the buffer.
            let _ = stream.synchronize();
            return Err(e.into());
        }
        Ok(Arc::new(relay))
    }

    #[allow(clippy::too_many_arguments)]
    fn new(control: Control, kernel: RelayKernel, queued: Option<QueuedCopies>, slot_bytes: u32, nslots: u32, key: StreamKey, buffer: u64, in_flight: Option<StreamInFlight>) -> Relay {
        Relay { control, kernel, queued, slot_bytes, nslots, slots: OnceLock::new(), short_chunk: AtomicU64::new(u64::MAX), planned: AtomicU64::new(0), key, buffer, in_flight }
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
    /// copies still copy every piece, so the ring is made zeros first (it is the stream's, and
    /// the stream is at this call, so no copy reads it). Then `stop` lets the stream go on.
    pub(crate) fn nothing_to_move(&self) {
        if let (Some(q), Some(ring)) = (&self.queued, self.slots.get())
            && self.kernel == RelayKernel::In
            && q.len > 0
        {
            ring.zero();
        }
    }

    /// Tells what the stream runs for the call to move no more and wait for `stop`: a task
    /// failed. Queued copies can only be let pass (they move whatever the slots hold).
    fn abort(&self) {
        self.control.abort();
        if let Some(q) = &self.queued {
            self.control.release_pieces(q.groups(), q.pieces(self.slot_bytes));
        }
    }

    /// Lets the stream go on past the call: it is settled, or the process exits. Idempotent.
    pub(crate) fn stop(&self) {
        if let Some(q) = &self.queued {
            self.control.release_pieces(q.groups(), q.pieces(self.slot_bytes));
        }
        self.control.stop();
    }

    /// Runs the task of `chunk` (offsets as the call's split gives them: chunk `i` at
    /// `i * slot_bytes` of the buffer) through its slot; `move_bytes` is the backend's transfer of
    /// a chunk between the file and host memory at the slot.
    pub(crate) fn run_task(&self, chunk: Chunk, move_bytes: impl FnOnce(Chunk) -> Result<usize>) -> Result<usize> {
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
            return self.run_queued_task(q, index, at_slot, move_bytes);
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

    /// `run_task` for queued copies: task `index` (at `at_slot` in the ring) belongs to piece
    /// `index / piece_slots`; the task that finishes its piece publishes it.
    fn run_queued_task(&self, q: &QueuedCopies, index: u64, at_slot: Chunk, move_bytes: impl FnOnce(Chunk) -> Result<usize>) -> Result<usize> {
        let piece = index / q.piece_slots as u64;
        let group = (piece % q.groups() as u64) as u32;
        let pieces = q.pieces(self.slot_bytes);
        let moved = match self.kernel {
            RelayKernel::In => {
                // The group is free once the stream copied the piece that used it before.
                if piece >= q.groups() as u64 && !self.wait_for_kernel(piece - q.groups() as u64 + 1) {
                    return Ok(0);
                }
                // Only what the file held once the stream reached the call (`go`) is read; the
                // rest of the slot becomes zeros, which the queued copy moves.
                let from = (index * self.slot_bytes as u64) as usize;
                let want = self.read_len().saturating_sub(from).min(at_slot.len);
                let moved = if want == 0 { 0 } else { move_bytes(Chunk { len: want, ..at_slot }).inspect_err(|_| self.abort())? };
                if moved < at_slot.len {
                    // SAFETY: the task's part of its slot, inside the ring, which only this task
                    // writes until it publishes the piece.
                    unsafe { std::ptr::write_bytes(self.slots_base().add(at_slot.buf_offset + moved), 0, at_slot.len - moved) };
                }
                moved
            }
            _ => {
                if !self.wait_for_kernel(piece + 1) {
                    return Ok(0);
                }
                move_bytes(at_slot).inspect_err(|_| self.abort())?
            }
        };
        let piece_start = piece * q.piece_bytes(self.slot_bytes);
        let tasks_in_piece = (q.len - piece_start).min(q.piece_bytes(self.slot_bytes)).div_ceil(self.slot_bytes as u64) as u32;
        let group_done = &q.done[group as usize];
        if group_done.fetch_add(1, Ordering::AcqRel) + 1 == tasks_in_piece {
            group_done.store(0, Ordering::Release);
            self.control.publish_piece(group, piece);
            // A read settles once its last byte is in device memory.
            if self.kernel == RelayKernel::In && piece + 1 == pieces {
                self.wait_for_kernel(pieces);
            }
        }
        Ok(moved)
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
        if self.in_flight.is_some() {
            relay::retire(self.control.clone(), self.slots.take());
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

/// A relay whose kernel a thread plays (one block), over host memory: for the CPU tests of the
/// host's part of the protocol (below) and of relayed calls through the engine
/// (`api::stream_order_tests`).
#[cfg(test)]
pub(crate) mod played {
    use super::*;
    use crate::sys::cuda::relay::{LAST_CHUNK, W_ABORT, W_EXITED, W_GO, W_HEADERS, W_PROGRESS, W_SLOTS, W_STARTED, W_STOP, W_TOTAL};
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    pub(crate) type Page = [AtomicU32; 1024];
    /// A page: the engine's split makes a request of at most a page one task, so a slot holds at
    /// least that.
    pub(crate) const SLOT: u32 = 4096;
    pub(crate) const NSLOTS: u32 = 4;
    /// Bytes from one slot to the next (`SLOT_PAD` past a chunk).
    const STRIDE: usize = SLOT as usize + 4096;

    /// A relay of `kernel` for the caller's buffer at `buffer` (host memory standing for the
    /// device's), with a ring, not pooled.
    pub(crate) fn relay(kernel: RelayKernel, buffer: u64) -> (Arc<Relay>, &'static Page) {
        let page: &'static Page = Box::leak(Box::new(std::array::from_fn(|_| AtomicU32::new(0))));
        let relay = Relay::new(Control::for_tests(page, 1), kernel, None, SLOT, NSLOTS, StreamKey::for_tests(page.as_ptr() as usize), buffer, None);
        let memory: &'static mut [u8] = Box::leak(vec![0u8; STRIDE * NSLOTS as usize].into_boxed_slice());
        relay.slots.set(Arc::new(Slots::for_tests(memory, SLOT, NSLOTS, false))).unwrap();
        (Arc::new(relay), page)
    }

    /// Slots per piece of the played queued copies (two groups of two in the ring).
    pub(crate) const PIECE_SLOTS: u32 = 2;

    /// Queued copies of `len` bytes in `direction` for the caller's buffer at `buffer` (host
    /// memory standing for the device's), through a packed ring that is not pooled, and a thread
    /// playing the stream: it runs the very operations `stream_ops` lists for the GPU (`play_ops`).
    pub(crate) fn queued(direction: RelayKernel, buffer: u64, len: u64) -> (Arc<Relay>, std::thread::JoinHandle<()>) {
        let page: &'static Page = Box::leak(Box::new(std::array::from_fn(|_| AtomicU32::new(0))));
        let groups = NSLOTS / PIECE_SLOTS;
        let copies = QueuedCopies { len, piece_slots: PIECE_SLOTS, done: (0..groups).map(|_| AtomicU32::new(0)).collect() };
        let relay = Relay::new(Control::for_tests(page, 1), direction, Some(copies), SLOT, NSLOTS, StreamKey::for_tests(page.as_ptr() as usize), buffer, None);
        let memory: &'static mut [u8] = Box::leak(vec![0xA5u8; (SLOT * NSLOTS) as usize].into_boxed_slice());
        let ring = memory.as_ptr() as usize;
        relay.slots.set(Arc::new(Slots::for_tests(memory, SLOT, NSLOTS, true))).unwrap();
        let ops = stream_ops(direction, len, SLOT, PIECE_SLOTS, groups);
        (Arc::new(relay), std::thread::spawn(move || play_ops(page, &ops, ring, buffer as usize)))
    }

    /// The stream's part of queued copies: each operation in turn, as the GPU runs them (a wait
    /// holds until its word reaches the value, whatever else happens; a test that would hang
    /// there fails after 20 s instead).
    fn play_ops(page: &'static Page, ops: &[StreamOp], ring: usize, buffer: usize) {
        for op in ops {
            match *op {
                StreamOp::Write { word, value } => page[word].store(value, Ordering::SeqCst),
                StreamOp::Wait { word, value } => {
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                    while (page[word].load(Ordering::Acquire).wrapping_sub(value) as i32) < 0 {
                        assert!(std::time::Instant::now() < deadline, "the stream waits for ever at {op:?}");
                        std::thread::yield_now();
                    }
                }
                // SAFETY (both): the test's ring and buffer, kept alive until this thread is joined.
                StreamOp::ToBuffer { ring_offset, buffer_offset, len } => unsafe {
                    std::ptr::copy_nonoverlapping((ring + ring_offset) as *const u8, (buffer + buffer_offset as usize) as *mut u8, len)
                },
                StreamOp::ToRing { ring_offset, buffer_offset, len } => unsafe {
                    std::ptr::copy_nonoverlapping((buffer + buffer_offset as usize) as *const u8, (ring + ring_offset) as *mut u8, len)
                },
            }
        }
    }

    /// The kernel's `wait_for`: true once `w` reaches `want`, false on abort or stop.
    fn wait(page: &Page, w: usize, want: u32) -> bool {
        loop {
            if page[w].load(Ordering::Acquire).wrapping_sub(want) as i32 >= 0 {
                return true;
            }
            if page[W_STOP].load(Ordering::Acquire) != 0 || page[W_ABORT].load(Ordering::Acquire) != 0 {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// The kernel's `hold_until_settled`, then its leaving.
    fn hold_and_leave(page: &Page) {
        while page[W_STOP].load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        page[W_EXITED].store(1, Ordering::SeqCst);
    }

    /// Where chunk `i` lies: its slot, at the buffer's distance past a 16-byte boundary.
    fn chunk_in_slot(page: &Page, i: usize, buffer: u64) -> *mut u8 {
        let slots = (page[W_SLOTS].load(Ordering::Acquire) as u64 | (page[W_SLOTS + 1].load(Ordering::Acquire) as u64) << 32) as *mut u8;
        slots.wrapping_add(i % NSLOTS as usize * STRIDE + (buffer & 15) as usize)
    }

    /// relay_in's part: chunks from the slots to `buffer + i * SLOT`, in order, until the last or
    /// a short one. Returns the chunks moved.
    pub(crate) fn play_in(page: &'static Page, buffer: u64) -> std::thread::JoinHandle<u64> {
        std::thread::spawn(move || {
            page[W_STARTED].store(1, Ordering::SeqCst);
            let mut moved = 0;
            if wait(page, W_GO, 1) {
                for i in 0usize.. {
                    let s = i % NSLOTS as usize;
                    if !wait(page, W_HEADERS + 2 * s, i as u32 + 1) {
                        break;
                    }
                    let header = page[W_HEADERS + 2 * s + 1].load(Ordering::Acquire);
                    let len = (header & !LAST_CHUNK) as usize;
                    // SAFETY: the slot the host published, and the test's buffer, which it keeps
                    // alive until this thread is joined.
                    unsafe { std::ptr::copy_nonoverlapping(chunk_in_slot(page, i, buffer), (buffer as usize + i * SLOT as usize) as *mut u8, len) };
                    moved += 1;
                    page[W_PROGRESS].store(i as u32 + 1, Ordering::SeqCst);
                    if header & LAST_CHUNK != 0 || len < SLOT as usize {
                        break;
                    }
                }
            }
            hold_and_leave(page);
            moved
        })
    }

    /// relay_out's part: fills slot `i % NSLOTS` from `buffer + i * SLOT` once the host wrote
    /// chunk `i - NSLOTS`.
    pub(crate) fn play_out(page: &'static Page, buffer: u64) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            page[W_STARTED].store(1, Ordering::SeqCst);
            if wait(page, W_GO, 1) {
                let total = page[W_TOTAL].load(Ordering::Acquire) as usize;
                for i in 0..total.div_ceil(SLOT as usize) {
                    let s = i % NSLOTS as usize;
                    if i >= NSLOTS as usize && !wait(page, W_HEADERS + 2 * s, (i - NSLOTS as usize) as u32 + 1) {
                        break;
                    }
                    let n = (total - i * SLOT as usize).min(SLOT as usize);
                    // SAFETY: as in `play_in`.
                    unsafe { std::ptr::copy_nonoverlapping((buffer as usize + i * SLOT as usize) as *const u8, chunk_in_slot(page, i, buffer), n) };
                    page[W_PROGRESS].store(i as u32 + 1, Ordering::SeqCst);
                }
            }
            hold_and_leave(page);
        })
    }
}

#[cfg(test)]
mod tests {
    //! The host's part of the protocol against the played kernel: every byte through the slots in
    //! order, the end of a file, a failing chunk, a write.
    use super::played::{SLOT, play_in, play_out, relay};
    use super::*;
    use std::sync::Arc;

    /// A buffer that outlives the played kernel, 5 bytes past a 16-byte boundary: chunks lie 5
    /// bytes into their slots.
    fn buffer(len: usize, fill: u8) -> &'static mut [u8] {
        let memory: &'static mut [u8] = Box::leak(vec![fill; len + 100 + 21].into_boxed_slice());
        let lead = (16 - memory.as_ptr() as usize % 16) % 16 + 5;
        &mut memory[lead..lead + len + 100]
    }

    /// Runs the call's chunks on `threads` threads claiming them in order, as the pool's jobs do.
    fn run_chunks(relay: &Arc<Relay>, len: usize, threads: usize, read: impl Fn(Chunk) -> Result<usize> + Send + Sync + 'static) -> Vec<Result<usize>> {
        let chunks = len.div_ceil(SLOT as usize);
        let next = Arc::new(AtomicU64::new(0));
        let read = Arc::new(read);
        let results = Arc::new(std::sync::Mutex::new(vec![None; chunks]));
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (relay, next, read, results) = (Arc::clone(relay), Arc::clone(&next), Arc::clone(&read), Arc::clone(&results));
                std::thread::spawn(move || loop {
                    let i = next.fetch_add(1, Ordering::SeqCst) as usize;
                    if i >= chunks {
                        return;
                    }
                    let chunk = Chunk { buf_offset: i * SLOT as usize, file_offset: (i * SLOT as usize) as u64, len: (len - i * SLOT as usize).min(SLOT as usize) };
                    let result = relay.run_task(chunk, |c| read(c));
                    results.lock().unwrap()[i] = Some(result);
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        Arc::try_unwrap(results).unwrap().into_inner().unwrap().into_iter().map(Option::unwrap).collect()
    }

    /// A read of `file`'s bytes into the slot at `c.buf_offset`, as the host route would.
    fn reader(relay: &Arc<Relay>, file: Arc<Vec<u8>>) -> impl Fn(Chunk) -> Result<usize> + Send + Sync + 'static {
        let base = relay.slots_base() as usize;
        move |c: Chunk| {
            let from = (c.file_offset as usize).min(file.len());
            let n = c.len.min(file.len() - from);
            // SAFETY: the chunk's slot inside the test's ring.
            unsafe { std::ptr::copy_nonoverlapping(file[from..].as_ptr(), (base + c.buf_offset) as *mut u8, n) };
            Ok(n)
        }
    }

    #[test]
    fn a_read_passes_every_chunk_through_the_slots_in_order() {
        for (len, threads) in [(SLOT as usize * 23 + 17, 3), (SLOT as usize * 4, 8), (5, 2), (SLOT as usize * 9, 1)] {
            let dst = buffer(len, 0xEE);
            let (relay, page) = relay(RelayKernel::In, dst.as_ptr() as u64);
            let file: Arc<Vec<u8>> = Arc::new((0..len).map(|i| (i * 7 + 3) as u8).collect());
            let kernel = play_in(page, dst.as_ptr() as u64);
            relay.go(len as u64);
            let results = run_chunks(&relay, len, threads, reader(&relay, Arc::clone(&file)));
            let total: usize = results.iter().map(|r| *r.as_ref().unwrap()).sum();
            assert_eq!(total, len);
            assert_eq!(relay.control.chunks_moved() as usize, len.div_ceil(SLOT as usize), "the last task waited for the kernel");
            relay.control.stop();
            kernel.join().unwrap();
            assert!(dst[..len] == file[..], "{len} bytes on {threads} threads");
            assert!(dst[len..].iter().all(|&b| b == 0xEE), "nothing past the range");
        }
    }

    #[test]
    fn the_end_of_the_file_stops_the_kernel_and_no_task_waits_for_ever() {
        // Planned for 20 chunks, but the file ends in chunk 5 (it shrank after the plan).
        let len = SLOT as usize * 20;
        let dst = buffer(len, 0);
        let (relay, page) = relay(RelayKernel::In, dst.as_ptr() as u64);
        let file: Arc<Vec<u8>> = Arc::new((0..SLOT as usize * 5 + 9).map(|i| i as u8).collect());
        let kernel = play_in(page, dst.as_ptr() as u64);
        relay.go(len as u64);
        let results = run_chunks(&relay, len, 3, reader(&relay, Arc::clone(&file)));
        assert_eq!(*results[5].as_ref().unwrap(), 9);
        assert!(results[..5].iter().all(|r| *r.as_ref().unwrap() == SLOT as usize));
        relay.control.stop();
        assert_eq!(kernel.join().unwrap(), 6, "the kernel stopped after the short chunk");
        assert!(dst[..file.len()] == file[..]);
    }

    #[test]
    fn a_failing_chunk_stops_the_kernel_and_the_other_tasks() {
        let len = SLOT as usize * 30;
        let dst = buffer(len, 0);
        let (relay, page) = relay(RelayKernel::In, dst.as_ptr() as u64);
        let kernel = play_in(page, dst.as_ptr() as u64);
        relay.go(len as u64);
        let good = reader(&relay, Arc::new(vec![1u8; len]));
        let results = run_chunks(&relay, len, 4, move |c| if c.file_offset == 6 * SLOT as u64 { Err(crate::error::Error::Internal("EIO".into())) } else { good(c) });
        assert!(results[6].is_err());
        assert!(relay.control.stopped(), "the kernel is told to move no more");
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!kernel.is_finished(), "the stream is held until the call is settled");
        relay.control.stop();
        kernel.join().unwrap();
    }

    /// Plays the stream reaching the call (the waiter's part): once it stored `started`.
    fn wait_started(relay: &Relay) {
        while !relay.control.started() {
            std::thread::yield_now();
        }
    }

    #[test]
    fn queued_copies_of_a_read_move_every_byte_and_zeros_past_the_end_of_the_file() {
        let piece = (SLOT * super::played::PIECE_SLOTS) as usize;
        // (bytes asked, bytes the file has past the offset once the stream reached the call, threads)
        for (len, file_len, threads) in [(SLOT as usize * 23 + 17, SLOT as usize * 23 + 17, 3), (piece * 4, piece * 4, 8), (5, 5, 2), (SLOT as usize * 9, SLOT as usize * 9, 1), (SLOT as usize * 11, SLOT as usize * 4 + 7, 3)] {
            let dst = buffer(len, 0xEE);
            let (relay, stream) = super::played::queued(RelayKernel::In, dst.as_ptr() as u64, len as u64);
            wait_started(&relay);
            let file: Arc<Vec<u8>> = Arc::new((0..file_len).map(|i| (i * 7 + 3) as u8).collect());
            relay.go(file_len as u64);
            let results = run_chunks(&relay, relay.tasks_len(file_len), threads, reader(&relay, Arc::clone(&file)));
            let total: usize = results.iter().map(|r| *r.as_ref().unwrap()).sum();
            assert_eq!(total, file_len);
            assert_eq!(relay.control.chunks_moved() as usize, len.div_ceil(piece), "the last task waited for the last copy");
            relay.stop();
            stream.join().unwrap();
            assert!(dst[..file_len] == file[..], "{len} bytes on {threads} threads");
            assert!(dst[file_len..len].iter().all(|&b| b == 0), "zeros past the end of the file");
            assert!(dst[len..].iter().all(|&b| b == 0xEE), "nothing past the range");
        }
    }

    #[test]
    fn queued_copies_of_a_read_past_the_end_of_the_file_copy_zeros_and_let_the_stream_go() {
        let len = SLOT as usize * 9 + 3;
        let dst = buffer(len, 0xEE);
        let (relay, stream) = super::played::queued(RelayKernel::In, dst.as_ptr() as u64, len as u64);
        wait_started(&relay);
        // The engine's path where the call has nothing to move.
        relay.nothing_to_move();
        relay.stop();
        stream.join().unwrap();
        assert!(dst[..len].iter().all(|&b| b == 0));
        assert!(dst[len..].iter().all(|&b| b == 0xEE));
    }

    #[test]
    fn a_failing_chunk_lets_queued_copies_pass_but_holds_the_stream_until_the_call_settles() {
        let len = SLOT as usize * 30;
        let dst = buffer(len, 0);
        let (relay, stream) = super::played::queued(RelayKernel::In, dst.as_ptr() as u64, len as u64);
        wait_started(&relay);
        relay.go(len as u64);
        let good = reader(&relay, Arc::new(vec![1u8; len]));
        let results = run_chunks(&relay, len, 4, move |c| if c.file_offset == 6 * SLOT as u64 { Err(crate::error::Error::Internal("EIO".into())) } else { good(c) });
        assert!(results[6].is_err());
        assert!(relay.control.stopped());
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!stream.is_finished(), "the stream is held until the call is settled");
        relay.stop();
        stream.join().unwrap();
    }

    #[test]
    fn queued_copies_of_a_write_give_the_tasks_every_byte() {
        for (len, threads) in [(SLOT as usize * 13 + 5, 3), (SLOT as usize * 2, 1), (1, 2)] {
            let src = buffer(len, 0);
            for (i, b) in src.iter_mut().enumerate() {
                *b = (i * 11) as u8;
            }
            let (relay, stream) = super::played::queued(RelayKernel::Out, src.as_ptr() as u64, len as u64);
            wait_started(&relay);
            relay.go(len as u64);
            let file = Arc::new(std::sync::Mutex::new(vec![0u8; len]));
            let base = relay.slots_base() as usize;
            let out = Arc::clone(&file);
            let results = run_chunks(&relay, len, threads, move |c: Chunk| {
                // SAFETY: the chunk's slot inside the test's ring.
                let bytes = unsafe { std::slice::from_raw_parts((base + c.buf_offset) as *const u8, c.len) };
                out.lock().unwrap()[c.file_offset as usize..c.file_offset as usize + c.len].copy_from_slice(bytes);
                Ok(c.len)
            });
            assert!(results.iter().all(|r| r.is_ok()));
            relay.stop();
            stream.join().unwrap();
            assert!(file.lock().unwrap()[..] == src[..len], "{len} bytes on {threads} threads");
        }
    }

    #[test]
    fn a_gibibyte_queues_128_copies_between_waits_and_stores() {
        let groups = QUEUED_SLOTS / QUEUED_PIECE_SLOTS;
        let ops = stream_ops(RelayKernel::In, 1 << 30, QUEUED_SLOT_BYTES, QUEUED_PIECE_SLOTS, groups);
        let copies = ops.iter().filter(|op| matches!(op, StreamOp::ToBuffer { .. })).count();
        assert_eq!((copies, ops.len()), (128, 3 * 128 + 3));
        let write = stream_ops(RelayKernel::Out, (1 << 30) + 1, QUEUED_SLOT_BYTES, QUEUED_PIECE_SLOTS, groups);
        assert_eq!(write.iter().filter(|op| matches!(op, StreamOp::ToRing { len: 1, .. })).count(), 1, "the last piece is one byte");
        assert_eq!(write.iter().filter(|op| matches!(op, StreamOp::Wait { .. })).count(), 129 - groups as usize + 1, "a write's piece waits only for its group's piece before");
    }

    #[test]
    fn a_write_takes_every_chunk_the_kernel_fills() {
        let len = SLOT as usize * 13 + 5;
        let src = buffer(len, 0);
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i * 11) as u8;
        }
        let (relay, page) = relay(RelayKernel::Out, src.as_ptr() as u64);
        let kernel = play_out(page, src.as_ptr() as u64);
        relay.go(len as u64);
        let file = Arc::new(std::sync::Mutex::new(vec![0u8; len]));
        let base = relay.slots_base() as usize;
        let out = Arc::clone(&file);
        let results = run_chunks(&relay, len, 3, move |c: Chunk| {
            // SAFETY: the chunk's slot inside the test's ring.
            let bytes = unsafe { std::slice::from_raw_parts((base + c.buf_offset) as *const u8, c.len) };
            out.lock().unwrap()[c.file_offset as usize..c.file_offset as usize + c.len].copy_from_slice(bytes);
            Ok(c.len)
        });
        assert!(results.iter().all(|r| r.is_ok()));
        relay.control.stop();
        kernel.join().unwrap();
        assert!(file.lock().unwrap()[..] == src[..len]);
    }
}
