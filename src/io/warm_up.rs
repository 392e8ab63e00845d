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

/// Pools (by `ThreadPool::identity`) whose workers made their first cuFile call ahead of a
/// stream-ordered call (`set_up_cufile_for_stream_ordered`), with how many workers each pool had
/// started by then (`ThreadPool::threads_started`): one started since has not.
static CUFILE_SET_UP: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

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
/// exits on the H200 (docs/routing.md, "Stream-ordered calls"). Done once per pool and again
/// after it started new workers: later calls cost one look-up. A worker that leaves the pool
/// meanwhile is not waited for. Never fails: a worker left without its set-up makes it in its
/// first task, as before.
pub(crate) fn set_up_cufile_for_stream_ordered(file: &std::sync::Arc<crate::io::open_file::OpenFile>, target: &Target, compat_mode: CompatMode) {
    let Target::Device { kind, .. } = *target else { return };
    if ThreadPool::on_pool_thread() {
        return; // a worker waiting for its own pool's broadcast would wait out the limit
    }
    let Ok(pool) = file.pool() else { return };
    let key = pool.identity();
    // Before the broadcast: a worker started after this look is set up by a later call.
    let started = pool.threads_started();
    {
        let set_up = CUFILE_SET_UP.lock().unwrap_or_else(|p| p.into_inner());
        if set_up.as_ref().and_then(|m| m.get(&key)) == Some(&started) {
            return;
        }
    }
    let job_file = std::sync::Arc::clone(file);
    let all_set_up = pool.broadcast_and_wait(
        move || {
            if let Ok(registered) = job_file.cufile(compat_mode) {
                crate::backend::cufile::synchronous::set_up_thread(registered.library(), registered.handle(), &job_file.path, &kind);
            }
        },
        CUFILE_SET_UP_WAIT,
    );
    if all_set_up {
        CUFILE_SET_UP.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(key, started);
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

    // `set_up_cufile_for_stream_ordered` against its pool: without cuFile the workers' set-up
    // does nothing, but the broadcast and the wait for it are the real ones.
    use crate::io::open_file::{OpenFile, OpenFlags, Opened};
    use crate::io::thread_pool::{Assigned, CallerPool};
    use crate::sys::cuda::MemoryKind;
    use std::os::fd::OwnedFd;
    use std::sync::{Arc, mpsc};
    use std::time::{Duration, Instant};

    fn device_target() -> Target {
        Target::Device { kind: MemoryKind::Device { ordinal: 0, context: None }, address: 0x1000, base: 0x1000, base_offset: 0 }
    }

    fn file_on(pool: &Arc<CallerPool>) -> Arc<OpenFile> {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let file = OpenFile::new(OwnedFd::from(tmp.reopen().unwrap()), "set-up".into(), Opened::Path(OpenFlags::Read)).unwrap();
        *file.pool.lock().unwrap() = Assigned::Caller(Arc::clone(pool));
        Arc::new(file)
    }

    /// Keeps `n` workers of `pool` busy until the returned sender is dropped.
    fn occupy(pool: &ThreadPool, n: usize) -> mpsc::Sender<()> {
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let (started_tx, started_rx) = mpsc::channel();
        for _ in 0..n {
            let (rx, started) = (Arc::clone(&release_rx), started_tx.clone());
            pool.submit(move || {
                started.send(()).unwrap();
                let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(60));
            });
        }
        for _ in 0..n {
            started_rx.recv_timeout(Duration::from_secs(60)).unwrap();
        }
        release_tx
    }

    fn set_up_in_thread(file: &Arc<OpenFile>) -> std::thread::JoinHandle<Duration> {
        let file = Arc::clone(file);
        std::thread::spawn(move || {
            let t0 = Instant::now();
            set_up_cufile_for_stream_ordered(&file, &device_target(), CompatMode::Off);
            t0.elapsed()
        })
    }

    /// Whether a set-up on `file`'s busy pool broadcasts (it then waits for the busy workers,
    /// which nothing releases for 300 ms) rather than taking the pool as set up.
    fn set_up_broadcasts(file: &Arc<OpenFile>, pool: &ThreadPool) -> bool {
        let release = occupy(pool, pool.num_threads());
        let setter = set_up_in_thread(file);
        std::thread::sleep(Duration::from_millis(300));
        let waiting = !setter.is_finished();
        drop(release);
        setter.join().unwrap();
        waiting
    }

    fn wait_for_live_threads(pool: &ThreadPool, n: usize) {
        let t0 = Instant::now();
        while pool.live_threads() > n && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn workers_started_after_the_set_up_get_theirs() {
        let owned = Arc::new(CallerPool::new(2, None).unwrap());
        let file = file_on(&owned);
        let pool = owned.pool().clone();
        set_up_cufile_for_stream_ordered(&file, &device_target(), CompatMode::Off);
        assert!(!set_up_broadcasts(&file, &pool), "a pool set up is not set up again");
        pool.resize(1).unwrap();
        wait_for_live_threads(&pool, 1);
        pool.resize(2).unwrap();
        assert!(set_up_broadcasts(&file, &pool), "the worker started since was taken as set up");
    }

    #[test]
    fn a_new_pool_is_never_taken_for_a_freed_one() {
        let first = Arc::new(CallerPool::new(2, None).unwrap());
        let file = file_on(&first);
        set_up_cufile_for_stream_ordered(&file, &device_target(), CompatMode::Off);
        let first_pool = first.pool().clone();
        *file.pool.lock().unwrap() = Assigned::Shared;
        drop(first);
        wait_for_live_threads(&first_pool, 0);
        let first_identity = first_pool.identity();
        drop(first_pool);
        // Made where the freed one lived, or elsewhere: a pool of its own either way.
        let second = Arc::new(CallerPool::new(2, None).unwrap());
        assert_ne!(second.pool().identity(), first_identity);
        *file.pool.lock().unwrap() = Assigned::Caller(Arc::clone(&second));
        assert!(set_up_broadcasts(&file, second.pool()), "the new pool was taken as set up");
    }

    #[test]
    fn a_worker_leaving_during_the_set_up_is_not_waited_for() {
        let owned = Arc::new(CallerPool::new(2, None).unwrap());
        let file = file_on(&owned);
        let pool = owned.pool().clone();
        let release = occupy(&pool, 2);
        pool.resize(1).unwrap(); // one of the two leaves after its job, without the broadcast
        let setter = set_up_in_thread(&file);
        std::thread::sleep(Duration::from_millis(100));
        drop(release);
        let waited = setter.join().unwrap();
        assert!(waited < Duration::from_secs(5), "waited {waited:?} (the limit: {CUFILE_SET_UP_WAIT:?}) for a worker that left");
    }

    #[test]
    fn a_pool_retired_during_the_set_up_is_not_waited_for() {
        let owned = Arc::new(CallerPool::new(2, None).unwrap());
        let file = file_on(&owned);
        let pool = owned.pool().clone();
        let release = occupy(&pool, 2);
        let setter = set_up_in_thread(&file);
        std::thread::sleep(Duration::from_millis(100));
        // `gdsroute_file_set_pool(file, NULL)` and `gdsroute_pool_free` meanwhile.
        *file.pool.lock().unwrap() = Assigned::Shared;
        drop(owned);
        drop(release);
        let waited = setter.join().unwrap();
        assert!(waited < Duration::from_secs(5), "waited {waited:?} (the limit: {CUFILE_SET_UP_WAIT:?}) for the workers of a retired pool");
    }
}
