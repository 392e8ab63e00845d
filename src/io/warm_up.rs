//! Preparing the device route before the first device read (unless `GDSROUTE_PREPARE_AT_OPEN` is
//! off). For a handle whose compat mode is not ON, cuFile's process-level verdict and driver open
//! start on a background thread (`gds::begin_in_background`; 0.4-0.7 s that the first read joins
//! instead of paying in full: docs/performance.md, "The first read of a fresh process"). When a file is opened on a thread
//! that has a CUDA context current (the application already uses CUDA: libcuda is loaded), every
//! pool worker, before the next queued job it takes (`ThreadPool::broadcast`), creates its stream
//! and events for that context and pins one bounce buffer for the pool of that context's device;
//! then it takes read tasks at once, while others may still be preparing. The opening thread
//! makes its own stream and events, and the workers pin one buffer for it too (a waiting caller
//! runs tasks: operation.rs). CUDA is never loaded here, so host-only programs pay nothing.
//! Before a stream-ordered call makes its stream wait, the same objects are made for its context
//! on the calling thread, and on cuFile's route each worker makes its first cuFile call
//! (`prepare_for_stream_ordered`, `set_up_cufile_for_stream_ordered`).
//!
//! Several GPUs: the bounce buffers are per device (`backend::device::bounce_pool`), so the
//! preparation is per device too: the current context's device, and every other device whose
//! primary context the application has made active (the CUDA runtime's `cudaSetDevice` and
//! first call on it do), in its primary context, since a process that drives several GPUs
//! typically opens its files on one thread and reads into all of them. A device the process has
//! not used yet is not prepared (that would create a context and pin memory for a device that
//! may never be read into); its first reads prepare what they need, as without this module. The
//! device the first read of a handle targets is not known at the open, and preparing at that
//! read gains nothing: its tasks would wait for the same work.
//!
//! Why this shape (2026-11-30; docs/routing.md, "Preparing the device route at open"): the driver serialises stream creation and
//! registration (about 10 ms for 16 workers on the H200), so a read issued right after the open
//! overlaps part of it. Until 2026-11-30 the workers met after preparing and only then took read
//! tasks; now a prepared worker's `pread`s overlap the others' registrations.

use crate::backend::cufile::gds;
use crate::settings::CompatMode;
use crate::sys::cuda::{self, ContextHandle, ScopedContext};
use crate::io::request::Target;
use crate::io::thread_pool::ThreadPool;
use std::collections::HashMap;
use std::sync::Mutex;

/// Workers prepared so far, by context address.
static PREPARED: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// Starts the background preparation for the calling thread's current context and for the
/// active primary contexts of the other devices, unless it was done for that context and at
/// least this many workers. Never fails: whatever is not prepared is prepared by the first read.
pub(crate) fn prepare_in_background(compat_mode: CompatMode) {
    if !crate::settings::live().prepare_at_open() || !cuda::in_use_by_the_application() {
        return;
    }
    gds::begin_in_background(compat_mode, gds::Preload::Cufile);
    crate::trace::event("open.cufile_start_asked", 0);
    let Ok(Some(ctx)) = cuda::current_context() else { return };
    let Ok(Some(ordinal)) = cuda::current_device() else { return };
    let Ok(pool) = crate::io::thread_pool::global() else { return };
    crate::trace::event("open.context_found", 0);
    if prepare_on(pool, ctx, ordinal) {
        // The opening thread usually waits for its reads, and a waiter runs tasks too.
        let _ = cuda::thread_stream();
        let _ = cuda::thread_events();
    }
    for (other, ctx) in other_devices_in_use(ordinal) {
        prepare_on(pool, ctx, other);
    }
}

/// The devices other than `current` whose primary context is active, with that context.
fn other_devices_in_use(current: i32) -> Vec<(i32, ContextHandle)> {
    let count = cuda::device_count().unwrap_or(0);
    (0..count).filter(|&d| d != current).filter_map(|d| Some((d, cuda::active_primary_context(d).ok()??))).collect()
}

/// Broadcasts the preparation for context `ctx` of device `ordinal` to the pool's workers unless
/// already done; true if it did.
fn prepare_on(pool: &ThreadPool, ctx: ContextHandle, ordinal: i32) -> bool {
    // The target count: while a resize is under way the broadcast reaches the live workers,
    // which may be fewer or more; the first reads prepare whatever is missing.
    let workers = pool.num_threads();
    {
        let mut prepared = PREPARED.lock().unwrap_or_else(|p| p.into_inner());
        let prepared_workers = prepared.get_or_insert_with(HashMap::new).entry(ctx.as_raw() as usize).or_default();
        if *prepared_workers >= workers {
            return false;
        }
        *prepared_workers = workers;
    }
    crate::trace::event("prepare.queued", workers as u64);
    // One buffer per worker and one for the opening thread.
    let buffers = workers + 1;
    pool.broadcast(move || prepare_worker(ctx, ordinal, buffers));
    true
}

fn prepare_worker(ctx: ContextHandle, ordinal: i32, buffers: usize) {
    crate::trace::event("prepare.start", 0);
    let Ok(_scope) = ScopedContext::push(ctx) else { return };
    let _ = cuda::thread_stream();
    let _ = cuda::thread_events();
    crate::trace::event("prepare.stream", 0);
    // The size in effect now, so that a setting changed since the open is not undone here.
    let Ok(buffer_bytes) = crate::backend::device::current_bounce_buffer_bytes() else { return };
    let pool = crate::backend::device::bounce_pool(ordinal, buffer_bytes);
    // Usually one buffer per worker; a worker that finds the others slower pins the rest (the
    // driver serialises registration, so the total time is the same whoever does it).
    while let Ok(true) = pool.fill_to(buffers) {}
    crate::trace::event("prepare.end", 0);
}

/// Before a stream-ordered call into device memory makes its stream wait (`engine::on_stream`),
/// on the calling thread: the non-blocking streams and event pairs of the pool's workers (and of
/// one waiting caller) for the buffer's context, and as many bounce buffers in its device's pool.
/// Made by a task once the stream waits, they could wait for the transfer itself: while another
/// thread is inside a synchronous CUDA call behind that stream (`cuStreamSynchronize`,
/// `cuMemcpyDtoH`), the driver holds a lock that creating a stream waits for (stacks taken on the
/// H200 machine, 2026-12-02; `sys::cuda::stock`). Done once per context and pool size; never fails:
/// what is missing is made by the task, as before. `bounce_buffer_size`: the setting the call read.
pub(crate) fn prepare_for_stream_ordered(target: &Target, bounce_buffer_size: u64) {
    let Target::Device { kind, .. } = target else { return };
    let Ok(workers) = crate::io::thread_pool::global().map(|pool| pool.num_threads() + 1) else { return };
    let Ok(_scope) = ScopedContext::for_kind(kind) else { return };
    if cuda::stock_for_stream_ordered_tasks(workers).is_err() {
        return;
    }
    let buffer_bytes = crate::backend::device::bounce_buffer_bytes(bounce_buffer_size);
    let Ok(pool) = crate::backend::device::bounce_pool_for(kind, buffer_bytes) else { return };
    while let Ok(true) = pool.fill_to(workers) {}
}

/// Pools (by the address of their state) and how many of their workers have made their first
/// cuFile call ahead of a stream-ordered call (`set_up_cufile_for_stream_ordered`).
static CUFILE_SET_UP: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// How long a stream-ordered call waits for the workers' first cuFile calls: they take 9 ms for
/// 16 workers on the H200 (docs/performance.md, "The first read of a fresh process"); past this,
/// the call goes on, and a worker still without its set-up makes it in its first task, as before.
const CUFILE_SET_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Before a stream-ordered call whose route is cuFile makes its stream wait (`engine::on_stream`),
/// on the calling thread: every worker of the file's pool makes its first cuFile call now
/// (`cufile::synchronous::set_up_thread`, a small read into device memory of the library's own),
/// and the call waits for them. That first call creates a CUDA stream inside cuFile, and made by a
/// task once the stream waits it could wait for the transfer itself, as the objects of
/// `prepare_for_stream_ordered` could: it stalled the cuFile route's stream-ordered tests and
/// exits on the H200 (docs/routing.md, "Stream-ordered calls"). Done once per pool and size: later
/// calls cost one look-up (a caller's pool freed and another made at its address counts as set
/// up). Never fails: a worker left without its set-up makes it in its first task, as before.
pub(crate) fn set_up_cufile_for_stream_ordered(file: &std::sync::Arc<crate::io::open_file::OpenFile>, target: &Target, compat_mode: CompatMode) {
    let Target::Device { kind, .. } = *target else { return };
    if ThreadPool::on_pool_thread() {
        return; // a worker waiting for its own pool's broadcast would wait out the limit
    }
    let Ok(pool) = file.pool() else { return };
    let workers = pool.num_threads();
    let key = pool.identity();
    {
        let set_up = CUFILE_SET_UP.lock().unwrap_or_else(|p| p.into_inner());
        if set_up.as_ref().and_then(|m| m.get(&key)).is_some_and(|&done| done >= workers) {
            return;
        }
    }
    let done = std::sync::Arc::new((Mutex::new(0usize), std::sync::Condvar::new()));
    let (job_file, job_done) = (std::sync::Arc::clone(file), std::sync::Arc::clone(&done));
    let reached = pool.broadcast(move || {
        if let Ok(registered) = job_file.cufile(compat_mode) {
            crate::backend::cufile::synchronous::set_up_thread(registered.library(), registered.handle(), &job_file.path, &kind);
        }
        let (count, ready) = &*job_done;
        *count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        ready.notify_all();
    });
    let (count, ready) = &*done;
    let count = count.lock().unwrap_or_else(|p| p.into_inner());
    let (count, waited) = ready.wait_timeout_while(count, CUFILE_SET_UP_WAIT, |n| *n < reached).unwrap_or_else(|p| p.into_inner());
    if !waited.timed_out() {
        drop(count);
        CUFILE_SET_UP.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(key, workers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn does_nothing_without_cuda_in_use() {
        // Without libcuda loaded nothing is queued or recorded.
        if !cuda::in_use_by_the_application() {
            prepare_in_background(CompatMode::Auto);
            assert!(PREPARED.lock().unwrap().as_ref().is_none_or(|m| m.is_empty()));
        }
    }
}
