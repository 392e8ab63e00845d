//! Preparing the device route before the first device read. When a file is opened on a thread
//! that has a CUDA context current (so the application already uses CUDA), every pool worker
//! creates its stream and events for that context and the pinned bounce pool is filled to one
//! buffer per worker, which each worker copies once to a scratch allocation, in the background. The first read then runs at the steady-state rate
//! instead of paying for this setup (measured in notes/benchmarks.md), and the open itself does
//! not wait. CUDA is never initialised here, so host-only users pay nothing.

use crate::cuda::{self, ContextHandle, ScopedContext};
use crate::thread_pool::ThreadPool;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a worker holding its warm-up buffer waits for the others, so that each worker (not
/// one worker N times) prepares itself; bounded so that busy workers never stall it for long.
const RENDEZVOUS: Duration = Duration::from_millis(50);

/// Contexts prepared so far, with the worker count they were prepared for.
static PREPARED: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// Starts the background preparation for the calling thread's current context, unless it was done
/// for this context and at least this many workers. Never blocks on CUDA work and never fails:
/// whatever is not prepared is prepared by the first read as before.
pub fn prepare_in_background(bounce_buffer_size: u64) {
    if !cuda::is_initialised() {
        return;
    }
    let Ok(Some(ctx)) = cuda::current_context() else { return };
    let Ok(pool) = crate::thread_pool::global() else { return };
    if prepare_on(pool, ctx, bounce_buffer_size) {
        // The opening thread usually waits for its reads, and a waiter runs tasks too
        // (operation.rs): its stream and events are made here. No buffer is made for it: the
        // pool's bound (one buffer per worker plus one per waiting caller) must hold while
        // this preparation and a first read overlap.
        let _ = cuda::thread_stream();
        let _ = cuda::thread_events();
    }
}

/// Queues the preparation unless already done; true if queued.
fn prepare_on(pool: &ThreadPool, ctx: ContextHandle, bounce_buffer_size: u64) -> bool {
    let workers = pool.num_threads();
    {
        let mut prepared = PREPARED.lock().unwrap_or_else(|p| p.into_inner());
        let map = prepared.get_or_insert_with(HashMap::new);
        let key = ctx.as_raw() as usize;
        if map.get(&key).is_some_and(|&n| n >= workers) {
            return false;
        }
        map.insert(key, workers);
    }
    let arrivals = Arc::new((Mutex::new(0usize), Condvar::new()));
    // Where each worker copies its buffer once: the first copies on a stream cost more than the
    // steady ones, so they are made here rather than in the first read.
    let scratch = Arc::new(cuda::DeviceScratch::new(crate::device_io::bounce_buffer_bytes(bounce_buffer_size) as usize).ok());
    for _ in 0..workers {
        let arrivals = Arc::clone(&arrivals);
        let scratch = Arc::clone(&scratch);
        pool.submit(move || prepare_worker(ctx, bounce_buffer_size, workers, &arrivals, &scratch));
    }
    true
}

fn prepare_worker(
    ctx: ContextHandle,
    bounce_buffer_size: u64,
    workers: usize,
    arrivals: &(Mutex<usize>, Condvar),
    scratch: &Option<cuda::DeviceScratch>,
) {
    let Ok(_scope) = ScopedContext::push(ctx) else { return };
    let stream = cuda::thread_stream();
    let _ = cuda::thread_events();
    let pool = crate::device_io::bounce_pool(crate::device_io::bounce_buffer_bytes(bounce_buffer_size));
    let buffer = pool.try_acquire();
    if let (Ok(stream), Ok(Some(buffer)), Some(scratch)) = (stream, &buffer, scratch) {
        // SAFETY: the scratch allocation holds a whole buffer and lives until every worker has
        // dropped its share; the copy is synchronised before the buffer goes back.
        if unsafe { cuda::copy_host_to_device(scratch.address(), buffer.as_ptr(), buffer.len(), stream) }.is_ok() {
            let _ = cuda::synchronize(stream);
        }
    }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn does_nothing_without_cuda_in_use() {
        // Without an initialised driver and a current context nothing is queued or recorded.
        if !cuda::is_initialised() {
            prepare_in_background(4 << 20);
            assert!(PREPARED.lock().unwrap().as_ref().is_none_or(|m| m.is_empty()));
        }
    }
}
