//! Host-to-device copies for the bounce-buffer route: one CUDA stream per (thread, context),
//! created on first use and cached for the thread's life (as KvikIO does), plus
//! `cuMemcpyHtoDAsync` and stream synchronisation.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use cudarc::driver::sys::{self, CUstream};

use super::context::current_context;
use super::driver::cuda;
use super::error::{CudaFailure, check};
use super::stock::Stock;

/// A CUDA stream (`CUstream`), held as an address so that it can cross threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Stream(usize);

impl Stream {
    /// The legacy default stream of the current context (`CUstream` NULL).
    pub(crate) const DEFAULT: Stream = Stream(0);

    /// The raw `CUstream`.
    pub(crate) fn as_raw(self) -> CUstream {
        self.0 as CUstream
    }
}

thread_local! {
    /// This thread's streams, by context address and whether they are non-blocking. Never
    /// destroyed: destroying at thread or process exit can race CUDA's teardown, and pool threads
    /// live as long as the process.
    static STREAMS: RefCell<HashMap<(usize, bool), Stream>> = RefCell::new(HashMap::new());
    /// Set while the thread runs a task of a stream-ordered call (`StreamOrderedTask`).
    static NON_BLOCKING: Cell<bool> = const { Cell::new(false) };
    /// Set for the life of a thread that callers' streams may wait for (`streams_wait_for_this_thread`).
    static STREAMS_WAIT: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread, for its life, as one that callers' streams may be waiting for
/// whatever it runs: the stream-ordered calls' waiters and the relay pool's workers. What
/// `outside_stream_ordered_task` runs is left to another thread there even between tasks (the
/// last handle of a file whose page-cache windows are registered can go on such a thread).
pub(crate) fn streams_wait_for_this_thread() {
    STREAMS_WAIT.set(true);
}

/// Marks the calling thread, while alive, as running a task of a stream-ordered call: a caller's
/// stream waits on our flag until the task is done, so the task must not wait for the device.
/// `thread_stream` then hands out the thread's non-blocking stream (`CU_STREAM_NON_BLOCKING`)
/// instead of its blocking one (a copy on a blocking stream waits for the legacy default stream,
/// which waits for that stream, or is it: a deadlock), and calls that may wait for the device to
/// go idle (`cuMemHostUnregister` of page-cache windows and of stale bounce buffers) are left to
/// another thread (`outside_stream_ordered_task`). Synchronous calls keep the blocking stream, ordered after the
/// legacy stream's work as in KvikIO.
pub(crate) struct StreamOrderedTask {
    was: bool,
}

impl StreamOrderedTask {
    pub(crate) fn enter() -> StreamOrderedTask {
        StreamOrderedTask { was: NON_BLOCKING.replace(true) }
    }
}

/// Runs `f`, a call that may wait for the device to go idle (`cuMemHostUnregister`), now; or, in a
/// task of a stream-ordered call (`StreamOrderedTask`) or on a thread streams wait for
/// (`streams_wait_for_this_thread`), on a thread of its own, since a caller's stream may wait for
/// this one. (Without a thread, should the spawn fail, it runs here after all.)
pub(crate) fn outside_stream_ordered_task(f: impl FnOnce() + Send + 'static) {
    if !NON_BLOCKING.get() && !STREAMS_WAIT.get() {
        return f();
    }
    on_release_thread(f);
}

/// Runs `f`, a release that may wait for the device, on a thread of its own (`gdsroute-release`),
/// whatever the calling thread. A failed spawn drops the closure, which holds what `f` would
/// release: it is released here after all.
pub(crate) fn on_release_thread(f: impl FnOnce() + Send + 'static) {
    let _ = std::thread::Builder::new().name("gdsroute-release".into()).spawn(f);
}

impl Drop for StreamOrderedTask {
    fn drop(&mut self) {
        NON_BLOCKING.set(self.was);
    }
}

/// The calling thread's stream for its current context, created on the first call per
/// (thread, context): `CU_STREAM_DEFAULT`, or `CU_STREAM_NON_BLOCKING` under `StreamOrderedTask`.
///
/// Errors: `Unavailable`/`Forked`; `NoContext` when no context is current (push one with
/// `ScopedContext`); the CUresult of `cuStreamCreate`.
pub(crate) fn thread_stream() -> Result<Stream, CudaFailure> {
    cuda()?;
    let ctx = current_context()?.ok_or(CudaFailure::NoContext("thread_stream"))?;
    let non_blocking = NON_BLOCKING.get();
    let key = (ctx.as_raw() as usize, non_blocking);
    let known = STREAMS.try_with(|m| m.borrow().get(&key).copied()).map_err(|_| CudaFailure::ThreadExiting("thread_stream"))?;
    if let Some(stream) = known {
        return Ok(stream);
    }
    // A stream-ordered task takes a stream made ahead at the call (`stock`): creating one here
    // could wait for the transfer this task is part of.
    let stocked = if non_blocking { NON_BLOCKING_STOCK.take(key.0) } else { None };
    let stream = match stocked {
        Some(stream) => stream,
        None => create_stream(non_blocking)?,
    };
    // Gone since the check above only if a destructor runs CUDA work, which none does.
    let _ = STREAMS.try_with(|m| m.borrow_mut().insert(key, stream));
    Ok(stream)
}

fn create_stream(non_blocking: bool) -> Result<Stream, CudaFailure> {
    let flags = if non_blocking { sys::CUstream_flags::CU_STREAM_NON_BLOCKING } else { sys::CUstream_flags::CU_STREAM_DEFAULT };
    let mut raw: CUstream = std::ptr::null_mut();
    // SAFETY: cuda() succeeded (callers); a context is current; valid out-pointer.
    check("cuStreamCreate", unsafe { sys::cuStreamCreate(&mut raw, flags as u32) })?;
    Ok(Stream(raw as usize))
}

/// Non-blocking streams made ahead for the tasks of stream-ordered calls (`stock`).
static NON_BLOCKING_STOCK: Stock<Stream> = Stock::new();

/// True while the calling thread runs a task of a stream-ordered call (`StreamOrderedTask`).
pub(crate) fn in_stream_ordered_task() -> bool {
    NON_BLOCKING.get()
}

/// Makes, on the calling thread (a caller at a stream-ordered call, which may wait for the
/// driver), the non-blocking streams and event pairs that `count` threads will take for the
/// current context when they run the call's tasks, unless made before.
///
/// Errors: `Unavailable`/`Forked`; `NoContext`; the CUresult of `cuStreamCreate` or
/// `cuEventCreate`.
pub(crate) fn stock_for_stream_ordered_tasks(count: usize) -> Result<(), CudaFailure> {
    cuda()?;
    let ctx = current_context()?.ok_or(CudaFailure::NoContext("stock_for_stream_ordered_tasks"))?;
    NON_BLOCKING_STOCK.fill(ctx.as_raw() as usize, count, || create_stream(true))?;
    super::event::stock_event_pairs(ctx.as_raw() as usize, count)
}

/// Queues a copy of `len` bytes from host `src` to device address `dst` on `stream`; it has
/// finished only after `synchronize(stream)`. A zero length does nothing.
///
/// Errors: `Unavailable`/`Forked`; the CUresult of `cuMemcpyHtoDAsync` (e.g.
/// `CUDA_ERROR_INVALID_CONTEXT` when the stream's context is not current).
///
/// # Safety
/// `src` must be readable for `len` bytes and stay unchanged until the stream is synchronised
/// (pinned memory for a truly asynchronous copy); `dst..dst+len` must be device memory the
/// caller may overwrite; `stream` must belong to the context current on this thread.
pub(crate) unsafe fn copy_host_to_device(
    dst: u64,
    src: *const u8,
    len: usize,
    stream: Stream,
) -> Result<(), CudaFailure> {
    cuda()?;
    if len == 0 {
        return Ok(());
    }
    // SAFETY: cuda() succeeded; the caller guarantees the ranges and the stream (see above).
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, stream.as_raw())
    })
}

/// Queues a copy of `len` bytes from device address `src` to host `dst` on `stream`; it has
/// finished only after `synchronize(stream)` (or an event recorded after it completed). A zero
/// length does nothing.
///
/// Errors: `Unavailable`/`Forked`; the CUresult of `cuMemcpyDtoHAsync`.
///
/// # Safety
/// `dst` must be writable for `len` bytes and not otherwise used until the copy finished (pinned
/// memory for a truly asynchronous copy); `src..src+len` must be device memory; `stream` must
/// belong to the context current on this thread.
pub(crate) unsafe fn copy_device_to_host(dst: *mut u8, src: u64, len: usize, stream: Stream) -> Result<(), CudaFailure> {
    cuda()?;
    if len == 0 {
        return Ok(());
    }
    // SAFETY: cuda() succeeded; the caller guarantees the ranges and the stream (see above).
    check("cuMemcpyDtoHAsync", unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, stream.as_raw()) })
}

/// Waits until all work queued on `stream` has finished.
///
/// Errors: `Unavailable`/`Forked`; the CUresult of `cuStreamSynchronize` (which also reports
/// failures of earlier asynchronous copies).
///
/// Blocking: yes.
pub(crate) fn synchronize(stream: Stream) -> Result<(), CudaFailure> {
    cuda()?;
    // SAFETY: cuda() succeeded; a Stream is NULL or one this module created.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(stream.as_raw())
    })
}

/// Copies `src` to device address `dst` on this thread's stream and waits for it.
///
/// Errors: those of `thread_stream`, `copy_host_to_device` and `synchronize`.
///
/// # Safety
/// `dst..dst+src.len()` must be device memory, reachable from the current context, that the
/// caller may overwrite.
#[cfg(test)] // the GPU tests' way to fill device memory
pub(crate) unsafe fn copy_host_to_device_sync(dst: u64, src: &[u8]) -> Result<(), CudaFailure> {
    let stream = thread_stream()?;
    // SAFETY: `src` is borrowed until after the synchronisation below; the caller guarantees
    // `dst`; the stream belongs to the current context.
    unsafe { copy_host_to_device(dst, src.as_ptr(), src.len(), stream)? };
    synchronize(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_copies_are_errors_not_panics() {
        if cuda().is_err() {
            assert!(thread_stream().is_err());
            assert!(synchronize(Stream::DEFAULT).is_err());
            let src = [1u8; 16];
            // SAFETY: CUDA is absent, so nothing is written anywhere.
            assert!(unsafe { copy_host_to_device_sync(0x1000, &src) }.is_err());
        }
    }

    /// The name of the thread `outside_stream_ordered_task` runs its work on, asked from a new
    /// thread after `setup`.
    fn released_on(setup: fn()) -> String {
        std::thread::spawn(move || {
            setup();
            let (sender, receiver) = std::sync::mpsc::channel();
            outside_stream_ordered_task(move || sender.send(std::thread::current().name().unwrap_or("").to_string()).unwrap());
            receiver.recv_timeout(std::time::Duration::from_secs(20)).unwrap()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn what_may_wait_for_the_device_leaves_the_threads_streams_wait_for() {
        assert_eq!(released_on(|| {}), "", "an unmarked thread runs it itself");
        assert_eq!(released_on(|| std::mem::forget(StreamOrderedTask::enter())), "gdsroute-release", "in a stream-ordered task");
        assert_eq!(released_on(streams_wait_for_this_thread), "gdsroute-release", "on a thread streams wait for, between tasks too");
    }
}
