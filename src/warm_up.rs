//! Preparing the device route before the first device read. When a file is opened on a thread
//! that has a CUDA context current (the application already uses CUDA: libcuda is loaded), every
//! pool worker creates its stream and events for that context, takes a pinned bounce buffer and
//! (at the context's first preparation) copies it once to a scratch allocation of the context, in
//! the background; the opening thread makes its own stream and events. Measured on the H200
//! (notes/benchmarks.md): first reads into a destination the application wrote before ran at
//! 41-43 GB/s with this and 28-30 without (session 2). The driver serialises this work (about
//! 10 ms for 16 workers, session 3's timeline), so a read issued right after the open still
//! overlaps part of it. CUDA is never loaded here, so host-only programs pay nothing.

use crate::cuda::{self, ContextHandle, DeviceScratch, ScopedContext};
use crate::thread_pool::ThreadPool;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a worker holding its warm-up buffer waits for the others, so that each worker (not
/// one worker N times) prepares itself; bounded so that busy workers never stall it for long.
const RENDEZVOUS: Duration = Duration::from_millis(50);

/// Workers prepared so far, by context address.
static PREPARED: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// Starts the background preparation for the calling thread's current context, unless it was done
/// for this context and at least this many workers. Never fails: whatever is not prepared is
/// prepared by the first read.
pub fn prepare_in_background() {
    if !cuda::in_use_by_the_application() {
        return;
    }
    let Ok(Some(ctx)) = cuda::current_context() else { return };
    let Ok(pool) = crate::thread_pool::global() else { return };
    if prepare_on(pool, ctx) {
        // The opening thread usually waits for its reads, and a waiter runs tasks too
        // (operation.rs): its stream and events are made here. No buffer is made for it: the
        // pool's bound (one buffer per worker plus one per waiting caller) must hold while
        // this preparation and a first read overlap.
        let _ = cuda::thread_stream();
        let _ = cuda::thread_events();
    }
}

/// Queues the preparation unless already done; true if queued. Runs on the opening thread, with
/// `ctx` current (the scratch allocation is made in it).
fn prepare_on(pool: &ThreadPool, ctx: ContextHandle) -> bool {
    let workers = pool.num_threads();
    let scratch = {
        let mut prepared = PREPARED.lock().unwrap_or_else(|p| p.into_inner());
        let map = prepared.get_or_insert_with(HashMap::new);
        let prepared_workers = map.entry(ctx.as_raw() as usize).or_default();
        if *prepared_workers >= workers {
            return false;
        }
        let first = *prepared_workers == 0;
        *prepared_workers = workers;
        // The warm-up copy only at a context's first preparation, into an allocation made for it
        // and never freed (it goes with the context): a later preparation (more workers) could
        // follow a device reset that freed an older allocation.
        first.then(|| DeviceScratch::new(crate::device_io::PINNED_BUFFER_MAX as usize).ok()).flatten()
    };
    crate::trace::event("prepare.queued", workers as u64);
    let arrivals = Arc::new((Mutex::new(0usize), Condvar::new()));
    for _ in 0..workers {
        let arrivals = Arc::clone(&arrivals);
        pool.submit(move || prepare_worker(ctx, workers, &arrivals, scratch));
    }
    true
}

fn prepare_worker(ctx: ContextHandle, workers: usize, arrivals: &(Mutex<usize>, Condvar), scratch: Option<DeviceScratch>) {
    crate::trace::event("prepare.start", 0);
    let Ok(_scope) = ScopedContext::push(ctx) else { return };
    let stream = cuda::thread_stream();
    let _ = cuda::thread_events();
    crate::trace::event("prepare.stream", 0);
    // The size in effect now, so that a setting changed since the open is not undone here.
    let Ok(settings) = crate::settings::global() else { return };
    let pool = crate::device_io::bounce_pool(crate::device_io::bounce_buffer_bytes(settings.bounce_buffer_size()));
    let buffer = pool.try_acquire();
    crate::trace::event("prepare.buffer", 0);
    if let (Ok(stream), Ok(Some(buffer)), Some(scratch)) = (stream, &buffer, scratch) {
        // One copy on the worker's stream before the first read (the effect of this copy alone
        // was not measurable: notes/benchmarks.md, runs 7 and 10).
        let len = buffer.len().min(scratch.len());
        // SAFETY: len fits both the buffer and the scratch allocation, which lives as long as
        // its context; the copy is synchronised before the buffer goes back.
        if unsafe { cuda::copy_host_to_device(scratch.address(), buffer.as_ptr(), len, stream) }.is_ok() {
            let _ = cuda::synchronize(stream);
        }
    }
    crate::trace::event("prepare.copied", 0);
    let (count, all_arrived) = arrivals;
    let mut arrived = count.lock().unwrap_or_else(|p| p.into_inner());
    *arrived += 1;
    all_arrived.notify_all();
    let deadline = Instant::now() + RENDEZVOUS;
    while *arrived < workers {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        arrived = all_arrived.wait_timeout(arrived, left).unwrap_or_else(|p| p.into_inner()).0;
    }
    drop(arrived);
    drop(buffer); // back to the pool, ready for the first read
    crate::trace::event("prepare.end", 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn does_nothing_without_cuda_in_use() {
        // Without libcuda loaded nothing is queued or recorded.
        if !cuda::in_use_by_the_application() {
            prepare_in_background();
            assert!(PREPARED.lock().unwrap().as_ref().is_none_or(|m| m.is_empty()));
        }
    }
}
