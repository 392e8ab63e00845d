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
//!
//! One job in one file, although over 450 lines: the host's part of the relay protocol; half of
//! the length is its CPU tests, which play the kernel's part.

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
/// (`backend::device::bounce`'s piece). At least a page: the engine's split makes a request of at
/// most a page one task whatever the task size.
const SLOT_BYTES: u32 = 2 << 20;
const _: () = assert!(SLOT_BYTES as usize >= crate::io::task_split::PAGE_SIZE);

/// A relayed call: its kernel's control block, the ring it was given once started, and where the
/// kernel stops early (a short chunk: end of file).
pub(crate) struct Relay {
    control: Control,
    kernel: RelayKernel,
    slot_bytes: u32,
    nslots: u32,
    slots: OnceLock<Slots>,
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
        let in_flight = StreamInFlight::take(key)?;
        let control = relay::launch(kernel, stream, context, buffer)?;
        Ok(std::sync::Arc::new(Relay::new(control, kernel, SLOT_BYTES, nslots, key, buffer, Some(in_flight))))
    }

    fn new(control: Control, kernel: RelayKernel, slot_bytes: u32, nslots: u32, key: StreamKey, buffer: u64, in_flight: Option<StreamInFlight>) -> Relay {
        Relay { control, kernel, slot_bytes, nslots, slots: OnceLock::new(), short_chunk: AtomicU64::new(u64::MAX), planned: AtomicU64::new(0), key, buffer, in_flight }
    }

    /// The bytes per task of the call: one slot.
    pub(crate) fn task_size(&self) -> u64 {
        self.slot_bytes as u64
    }

    /// True for a call into or from device memory (the kernel moves the bytes).
    pub(crate) fn moves_bytes(&self) -> bool {
        self.kernel != RelayKernel::Gate
    }

    /// The host address the tasks' chunks are placed from (chunk `i` in slot `i % nslots`, at
    /// `Slots::chunk_offset`); null for the gate.
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
        match self.kernel {
            RelayKernel::In => {
                // The slot is free once the kernel moved the chunk that used it before.
                if index >= self.nslots as u64 && !self.wait_for_kernel(index - self.nslots as u64 + 1) {
                    return Ok(0);
                }
                let moved = move_bytes(at_slot).inspect_err(|_| self.control.abort())?;
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
                let written = move_bytes(at_slot).inspect_err(|_| self.control.abort())?;
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
        if self.in_flight.is_some() {
            relay::retire(self.control.clone(), self.slots.take());
        }
    }
}

/// Relayed calls in flight (launched, not yet dropped), by stream. Only the first of a stream's
/// calls runs; the others wait behind it on the stream and hold no SM. A call on a stream that
/// has none is relayed only while fewer streams than `relay::streams_at_once` have some, so that
/// the kernels at the streams' heads always fit on the GPU together.
static IN_FLIGHT: std::sync::Mutex<Option<std::collections::HashMap<StreamKey, usize>>> = std::sync::Mutex::new(None);

/// A stream's share of `IN_FLIGHT`, given back when dropped.
struct StreamInFlight(StreamKey);

impl StreamInFlight {
    /// Counts a relayed call on `key`'s stream, or refuses it: too many streams have relayed calls
    /// (the call then blocks, as where no kernel can be launched).
    fn take(key: StreamKey) -> Result<StreamInFlight> {
        let mut streams = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
        let streams = streams.get_or_insert_with(std::collections::HashMap::new);
        if !streams.contains_key(&key) && streams.len() >= relay::streams_at_once() {
            return Err(crate::error::Error::Internal(format!("relayed calls are in flight on {} streams, as many as the GPU holds relay kernels for", streams.len())));
        }
        *streams.entry(key).or_default() += 1;
        Ok(StreamInFlight(key))
    }
}

impl Drop for StreamInFlight {
    fn drop(&mut self) {
        let mut streams = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(streams) = streams.as_mut()
            && let Some(count) = streams.get_mut(&self.0)
        {
            *count -= 1;
            if *count == 0 {
                streams.remove(&self.0);
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
        self.0.control.stop();
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
        let relay = Relay::new(Control::for_tests(page, 1), kernel, SLOT, NSLOTS, StreamKey::for_tests(page.as_ptr() as usize), buffer, None);
        let memory: &'static mut [u8] = Box::leak(vec![0u8; STRIDE * NSLOTS as usize].into_boxed_slice());
        relay.slots.set(Slots::for_tests(memory, SLOT, NSLOTS)).unwrap();
        (Arc::new(relay), page)
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
