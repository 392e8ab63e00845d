//! What a stream-ordered call needs of a caller's CUDA stream: the stream as the caller names it
//! (`CallerStream`: a handle, `CU_STREAM_LEGACY` or `CU_STREAM_PER_THREAD`), its context, whether
//! it is being captured into a graph, events recorded on it and queried from another thread
//! (`StreamEvent`), and the stream made to wait on a flag word in pinned, device-mapped host
//! memory (`FlagWord`, `cuStreamWaitValue32_v2`) that the host releases with a store. Bindings
//! only; the engine's stream mode (`io::stream_order`) decides what to do with them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use cudarc::driver::sys::{self, CUevent, CUstream};
use once_cell::sync::OnceCell;

use super::context::{ContextHandle, ScopedContext, current_context, primary_context};
use super::device::current_device;
use super::driver::{cuda, has_symbol};
use super::error::{CudaFailure, check};

/// `CU_STREAM_LEGACY`: the legacy default stream of the current context (0 means it too).
pub(crate) const STREAM_LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD`: the calling thread's per-thread default stream.
pub(crate) const STREAM_PER_THREAD: usize = 0x2;

/// A stream as a caller passes it: 0 and `CU_STREAM_LEGACY` are the legacy default stream of the
/// context current on the calling thread, `CU_STREAM_PER_THREAD` that thread's per-thread default
/// stream, anything else a `CUstream` the caller created (and keeps alive while it uses it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CallerStream(usize);

impl CallerStream {
    /// The stream the caller passed as `raw` (0 taken as `CU_STREAM_LEGACY`).
    pub(crate) fn from_raw(raw: usize) -> CallerStream {
        CallerStream(if raw == 0 { STREAM_LEGACY } else { raw })
    }

    pub(crate) fn as_raw(self) -> CUstream {
        self.0 as CUstream
    }

    /// True for `CU_STREAM_PER_THREAD`, which names a different stream on each thread.
    pub(crate) fn is_per_thread(self) -> bool {
        self.0 == STREAM_PER_THREAD
    }

    /// True for the two default streams, which name a stream of the calling thread's current
    /// context (and, for the per-thread one, of the calling thread) rather than one object.
    pub(crate) fn is_default(self) -> bool {
        self.0 == STREAM_LEGACY || self.0 == STREAM_PER_THREAD
    }

    /// The stream's context: its own for a created stream, the calling thread's current one for
    /// the default streams.
    ///
    /// Errors: `Unavailable`/`Forked`; `NoContext` for a default stream on a thread without a
    /// current context; the CUresult of `cuStreamGetCtx` (e.g. `CUDA_ERROR_INVALID_HANDLE`, or
    /// `CUDA_ERROR_INVALID_CONTEXT` for a stream of a destroyed context).
    pub(crate) fn context(self) -> Result<ContextHandle, CudaFailure> {
        cuda()?;
        if self.is_default() {
            return current_context()?.ok_or(CudaFailure::NoContext("a stream-ordered call on a default stream"));
        }
        let mut raw: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: cuda() succeeded; the caller passes a live stream (its contract); valid out-pointer.
        check("cuStreamGetCtx", unsafe { sys::cuStreamGetCtx(self.as_raw(), &mut raw) })?;
        ContextHandle::from_address(raw as usize).ok_or(CudaFailure::NoContext("cuStreamGetCtx"))
    }

    /// True while the stream is being captured into a CUDA graph (`cuStreamIsCapturing`): work
    /// queued on it then is recorded, not run, so nothing can be ordered on it at run time.
    /// Needs the stream's context current.
    ///
    /// Errors: `Unavailable`/`Forked`; the CUresult (e.g. `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`
    /// for the legacy stream while another stream captures in global mode).
    pub(crate) fn is_capturing(self) -> Result<bool, CudaFailure> {
        cuda()?;
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: cuda() succeeded; the caller passes a live stream; valid out-pointer.
        check("cuStreamIsCapturing", unsafe { sys::cuStreamIsCapturing(self.as_raw(), &mut status) })?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Whether a call on the legacy default stream waits for work queued on this stream: true for
    /// the legacy and per-thread default streams (CUDA synchronises the per-thread one with the
    /// legacy one) and for streams created without `CU_STREAM_NON_BLOCKING`. Needs the stream's
    /// context current; not asked of a capturing stream (`is_capturing` first).
    ///
    /// Errors: `Unavailable`/`Forked`; the CUresult of `cuStreamGetFlags`.
    pub(crate) fn legacy_stream_waits_for_it(self) -> Result<bool, CudaFailure> {
        if self.is_default() {
            return Ok(true);
        }
        cuda()?;
        let mut flags: std::ffi::c_uint = 0;
        // SAFETY: cuda() succeeded; the caller passes a live stream; valid out-pointer.
        check("cuStreamGetFlags", unsafe { sys::cuStreamGetFlags(self.as_raw(), &mut flags) })?;
        Ok(flags & sys::CUstream_flags::CU_STREAM_NON_BLOCKING as std::ffi::c_uint == 0)
    }

    /// Waits until all work queued on the stream has finished (KvikIO's fallback before its
    /// blocking transfer). Needs the stream's context current.
    ///
    /// Errors: `Unavailable`/`Forked`; the CUresult of `cuStreamSynchronize`.
    pub(crate) fn synchronize(self) -> Result<(), CudaFailure> {
        cuda()?;
        // SAFETY: cuda() succeeded; the caller passes a live stream.
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(self.as_raw()) })
    }

    /// Makes the stream wait until `flag` holds a value at or past `value` (a cyclic
    /// comparison, `CU_STREAM_WAIT_VALUE_GEQ`, so the word may wrap). Needs the stream's
    /// context current.
    ///
    /// Errors: `Unavailable`/`Forked`; `Unsupported` when the driver lacks
    /// `cuStreamWaitValue32_v2` (before CUDA 11.7); the CUresult (e.g. `CUDA_ERROR_NOT_SUPPORTED`
    /// where stream memory operations are off).
    pub(crate) fn wait_for(self, flag: &FlagWord, value: u32) -> Result<(), CudaFailure> {
        cuda()?;
        if !stream_wait_available() {
            return Err(CudaFailure::Unavailable("the CUDA driver lacks cuStreamWaitValue32_v2 (CUDA 11.7 or later has it)".into()));
        }
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: cuda() succeeded; the word lies in a cuMemHostAlloc(PORTABLE | DEVICEMAP)
        // allocation that is never freed; valid out-pointer.
        check("cuMemHostGetDevicePointer", unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, flag.host().cast(), 0) })?;
        // SAFETY: the symbol is present (checked above); the address is the device view of the
        // mapped word, which lives for the whole process.
        check("cuStreamWaitValue32_v2", unsafe {
            sys::cuStreamWaitValue32_v2(self.as_raw(), device, value, sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32)
        })
    }
}

/// True when the driver has `cuStreamWaitValue32_v2` (checked once; cudarc would panic on a call
/// to a missing symbol).
pub(crate) fn stream_wait_available() -> bool {
    static PRESENT: OnceCell<bool> = OnceCell::new();
    *PRESENT.get_or_init(|| cuda().is_ok() && has_symbol("cuStreamWaitValue32_v2"))
}

/// One line for diagnostics: how stream-ordered calls will run on this machine, with what the
/// driver says of stream memory operations on device 0 (`CAN_USE_STREAM_MEM_OPS_V1` and
/// `CAN_USE_STREAM_WAIT_VALUE_NOR`: the `_v1` attribute read 0 on the H200 machine although the
/// `_v2` calls worked, so they are shown, not obeyed; gdsroute uses greater-or-equal waits, not
/// NOR, and falls back only when the call itself is refused).
pub(crate) fn describe_stream_wait() -> String {
    if let Err(e) = cuda() {
        return format!("need CUDA ({e})");
    }
    if !stream_wait_available() {
        return "blocking (KvikIO's fallback): the driver lacks cuStreamWaitValue32_v2".into();
    }
    let attribute = |which: sys::CUdevice_attribute| {
        let mut value = -1;
        let mut device: sys::CUdevice = 0;
        // SAFETY: cuda() succeeded; valid out-pointers; ordinal 0 exists when any device does.
        let ok = unsafe { sys::cuDeviceGet(&mut device, 0) } == sys::CUresult::CUDA_SUCCESS
            && unsafe { sys::cuDeviceGetAttribute(&mut value, which, device) } == sys::CUresult::CUDA_SUCCESS;
        if ok { value.to_string() } else { "unknown".into() }
    };
    format!(
        "queued on their streams (cuStreamWaitValue32_v2 present; device 0 attributes: stream mem ops v1 {}, wait value NOR {})",
        attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1),
        attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR)
    )
}

/// An event recorded on a caller's stream and queried from another thread; destroyed when
/// dropped (not pooled: a caller may destroy its context, and a later context at the same
/// address must not be handed that context's events).
#[derive(Debug)]
pub(crate) struct StreamEvent {
    raw: usize,
    context: ContextHandle,
}

impl StreamEvent {
    /// An event of `context`, recorded on `stream` now: it completes when the work queued on the
    /// stream before it has. `context` must be current and be the stream's.
    ///
    /// Errors: `Unavailable`/`Forked`; the CUresult of `cuEventCreate` or `cuEventRecord`.
    pub(crate) fn record(stream: CallerStream, context: ContextHandle) -> Result<StreamEvent, CudaFailure> {
        let event = StreamEvent::new(context)?;
        event.record_on(stream)?;
        Ok(event)
    }

    /// An event of `context`, not recorded yet (`record_on`). `context` must be current.
    ///
    /// Errors: `Unavailable`/`Forked`; the CUresult of `cuEventCreate`.
    pub(crate) fn new(context: ContextHandle) -> Result<StreamEvent, CudaFailure> {
        cuda()?;
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: cuda() succeeded; `context` is current (the caller's contract); valid out-pointer.
        check("cuEventCreate", unsafe { sys::cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) })?;
        Ok(StreamEvent { raw: raw as usize, context })
    }

    /// Records the event on `stream` (of the event's context, current on this thread).
    ///
    /// Errors: the CUresult of `cuEventRecord`.
    pub(crate) fn record_on(&self, stream: CallerStream) -> Result<(), CudaFailure> {
        // SAFETY: the event belongs to its context, current on this thread, as is the stream's.
        check("cuEventRecord", unsafe { sys::cuEventRecord(self.raw as CUevent, stream.as_raw()) })
    }

    /// True once the work before the event has finished; never blocks.
    ///
    /// Errors: `Unavailable`/`Forked`; the context is gone (`cuCtxPushCurrent`); a CUresult other
    /// than `CUDA_ERROR_NOT_READY` (an earlier fault on the stream: `CUDA_ERROR_ILLEGAL_ADDRESS`, ...).
    pub(crate) fn is_reached(&self) -> Result<bool, CudaFailure> {
        cuda()?;
        // Its context current while it is asked (the waiter thread has none of its own).
        let _scope = ScopedContext::push(self.context)?;
        // SAFETY: a live event of the context made current above.
        match unsafe { sys::cuEventQuery(self.raw as CUevent) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check("cuEventQuery", r).map(|()| true),
        }
    }
}

impl Drop for StreamEvent {
    fn drop(&mut self) {
        // A forked child, or a context the caller destroyed (which took the event with it):
        // nothing to do.
        let Ok(_scope) = ScopedContext::push(self.context) else { return };
        // SAFETY: created by `record`, destroyed once; a pending event is released when done.
        let _ = unsafe { sys::cuEventDestroy_v2(self.raw as CUevent) };
    }
}

/// A 32-bit word in pinned host memory mapped into every context's address space
/// (`cuMemHostAlloc(PORTABLE | DEVICEMAP)`): a stream waits on it (`CallerStream::wait_for`), the
/// host releases it with a store. Words come from slabs that are never freed (a stream may still
/// read a word after its operation ended) and are reused with their value kept, which only ever
/// grows (cyclically): a late reader of an old value still sees a released word.
#[derive(Debug)]
pub(crate) struct FlagWord {
    word: &'static AtomicU32,
}

/// Words per slab: one page.
const SLAB_WORDS: usize = 1024;

/// Free words.
static FREE_WORDS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

impl FlagWord {
    /// A free word and the value a wait on it must reach to be released: one past its current
    /// value. A new slab is allocated in the primary context of the current context's device,
    /// which this library retains for the life of the process (memory of a context the caller
    /// destroys would go with it); portable, it is mapped in every context. Needs a current
    /// context.
    ///
    /// Errors: `Unavailable`/`Forked`; `NoContext`; the CUresult of `cuCtxGetDevice`,
    /// `cuDevicePrimaryCtxRetain` or `cuMemHostAlloc` (a new slab).
    pub(crate) fn take() -> Result<(FlagWord, u32), CudaFailure> {
        cuda()?;
        let mut free = FREE_WORDS.lock().unwrap_or_else(|p| p.into_inner());
        if free.is_empty() {
            let device = current_device()?.ok_or(CudaFailure::NoContext("FlagWord::take"))?;
            let _scope = ScopedContext::push(primary_context(device)?)?;
            let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
            let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
            // SAFETY: cuda() succeeded; a context is current (pushed above); valid out-pointer.
            check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut host, SLAB_WORDS * 4, flags) })?;
            // cuMemHostAlloc's memory is page-aligned and zeroed by the kernel; made atomic words here.
            free.extend((0..SLAB_WORDS).rev().map(|i| host as usize + 4 * i));
        }
        let address = free.pop().expect("a slab was just added");
        // SAFETY: the address is a 4-byte aligned word of a slab that lives for the whole
        // process and that only FlagWords access, through atomics.
        let word = unsafe { AtomicU32::from_ptr(address as *mut u32) };
        let value = word.load(Ordering::SeqCst).wrapping_add(1);
        Ok((FlagWord { word }, value))
    }

    fn host(&self) -> *mut u32 {
        self.word.as_ptr()
    }

    /// Releases a wait for `value`: every write of the transfer before this call is visible to
    /// the stream's later work before the stream sees the word (a sequentially consistent store
    /// after a full fence; the GPU reads the word over the bus after the host wrote it).
    pub(crate) fn release(&self, value: u32) {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.word.store(value, Ordering::SeqCst);
    }
}

impl Drop for FlagWord {
    fn drop(&mut self) {
        FREE_WORDS.lock().unwrap_or_else(|p| p.into_inner()).push(self.word.as_ptr() as usize);
    }
}

/// Makes `stream`'s context current for a scope when it is not already.
///
/// Errors: those of `CallerStream::context` and `ScopedContext::push`.
pub(crate) fn enter_context_of(stream: CallerStream) -> Result<(ContextHandle, Option<ScopedContext>), CudaFailure> {
    let context = stream.context()?;
    if current_context()? == Some(context) {
        return Ok((context, None));
    }
    Ok((context, Some(ScopedContext::push(context)?)))
}
