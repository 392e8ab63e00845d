//! A relay whose stream a thread plays, over host memory: for the CPU tests of the host's part of
//! the protocol (`tests`) and of relayed calls through the engine (`api::stream_order_tests`).

use super::*;
use crate::sys::cuda::relay::{LAST_CHUNK, StreamOp, W_ABORT, W_EXITED, W_GO, W_HEADERS, W_PROGRESS, W_SLOTS, W_STARTED, W_STOP, W_TOTAL};
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

/// Slots per copy and groups of the played queued copies, over a ring of `NSLOTS`: a read uses
/// the whole ring (two groups of two), as `queued::shape`'s reads do; a write part of it (two
/// groups of one), as `queued::shape`'s writes use part of theirs.
pub(crate) fn shape(direction: RelayKernel) -> (u32, u32) {
    match direction {
        RelayKernel::In => (2, NSLOTS / 2),
        _ => (1, NSLOTS / 2),
    }
}

/// Queued copies of `len` bytes in `direction` for the caller's buffer at `buffer` (host
/// memory standing for the device's), through a packed ring that is not pooled, and a thread
/// playing the stream: it runs the very operations `QueuedCopies::stream_ops` lists for the GPU (`play_ops`).
pub(crate) fn queued(direction: RelayKernel, buffer: u64, len: u64) -> (Arc<Relay>, std::thread::JoinHandle<()>) {
    queued_with_registered(direction, buffer, len, None)
}

/// `queued`, where a read's pieces that lie wholly in `registered`'s runs (host memory standing
/// for registered page-cache windows) are copied from there (`QueuedCopies::take_from_registered`).
pub(crate) fn queued_with_registered(direction: RelayKernel, buffer: u64, len: u64, registered: Option<RegisteredRuns>) -> (Arc<Relay>, std::thread::JoinHandle<()>) {
    let page: &'static Page = Box::leak(Box::new(std::array::from_fn(|_| AtomicU32::new(0))));
    let key = StreamKey::for_tests(page.as_ptr() as usize);
    let (relay, ops) = Relay::with_queued_copies(Control::for_tests(page, 1), direction, len, shape(direction), SLOT, key, buffer, None, registered);
    let memory: &'static mut [u8] = Box::leak(vec![0xA5u8; (SLOT * NSLOTS) as usize].into_boxed_slice());
    let ring = memory.as_ptr() as usize;
    relay.slots.set(Arc::new(Slots::for_tests(memory, SLOT, NSLOTS, true))).unwrap();
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
            // SAFETY: the test's memory standing for registered windows, kept by the relay.
            StreamOp::FromRegistered { host, buffer_offset, len } => unsafe {
                std::ptr::copy_nonoverlapping(host as *const u8, (buffer + buffer_offset as usize) as *mut u8, len)
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
