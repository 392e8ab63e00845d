//! CUDA contexts for worker threads: picks the context KvikIO would (the pointer's own context,
//! else the retained primary context of its device) and makes it current for a scope with
//! push/pop. Primary contexts are retained once per device, cached and never released.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Mutex;

use cudarc::driver::sys::{self, CUcontext};
use once_cell::sync::Lazy;

use super::driver::cuda;
use super::error::{CudaFailure, check};

/// A CUDA context (`CUcontext`), held as an address so that it can cross threads; a context is
/// usable from any thread once made current there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContextHandle(usize);

impl ContextHandle {
    /// Wraps a raw `CUcontext`; `None` for NULL.
    ///
    /// # Safety
    /// A non-NULL `ctx` must be a context that stays alive while the handle is used
    /// (`ScopedContext::push` hands it to the driver).
    pub unsafe fn from_raw(ctx: CUcontext) -> Option<Self> {
        Self::from_address(ctx as usize)
    }

    /// Internal constructor for addresses the driver itself reported.
    pub(crate) fn from_address(address: usize) -> Option<Self> {
        (address != 0).then_some(Self(address))
    }

    /// The raw `CUcontext`.
    pub fn as_raw(self) -> CUcontext {
        self.0 as CUcontext
    }
}

/// The device handle of `ordinal` (the caller has checked `cuda()`).
fn device(ordinal: i32) -> Result<sys::CUdevice, CudaFailure> {
    let mut device: sys::CUdevice = 0;
    // SAFETY: the driver is initialised (callers ran cuda()); valid out-pointer.
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ordinal) })?;
    Ok(device)
}

/// Primary contexts retained so far, by device ordinal.
static PRIMARY: Lazy<Mutex<HashMap<i32, ContextHandle>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// The primary context of device `ordinal`, retained on first use and cached for the life of the
/// process (never released, as in KvikIO: releasing at exit races CUDA's own teardown).
///
/// Errors: `Unavailable`/`Forked`; the CUresult of `cuDeviceGet` or `cuDevicePrimaryCtxRetain`
/// (e.g. `CUDA_ERROR_INVALID_DEVICE` for a bad ordinal).
///
/// Thread safety: any thread; concurrent first calls retain once.
pub fn primary_context(ordinal: i32) -> Result<ContextHandle, CudaFailure> {
    cuda()?;
    let mut cache = PRIMARY.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(ctx) = cache.get(&ordinal) {
        return Ok(*ctx);
    }
    let device = device(ordinal)?;
    let mut raw: CUcontext = std::ptr::null_mut();
    // SAFETY: cuda() succeeded; `device` came from cuDeviceGet; valid out-pointer.
    check("cuDevicePrimaryCtxRetain", unsafe {
        sys::cuDevicePrimaryCtxRetain(&mut raw, device)
    })?;
    let ctx = ContextHandle::from_address(raw as usize).ok_or_else(|| CudaFailure::Call {
        call: "cuDevicePrimaryCtxRetain",
        name: "returned a NULL context".to_string(),
        code: 0,
    })?;
    cache.insert(ordinal, ctx);
    Ok(ctx)
}

/// The primary context of device `ordinal` if it is active (the application, or this library,
/// has retained it), retained for this process; `None` when it is not active, so that callers
/// that only need it opportunistically never create one.
///
/// Errors: `Unavailable`/`Forked`; the CUresult of `cuDeviceGet`, `cuDevicePrimaryCtxGetState` or
/// `cuDevicePrimaryCtxRetain`.
pub(crate) fn active_primary_context(ordinal: i32) -> Result<Option<ContextHandle>, CudaFailure> {
    cuda()?;
    if let Some(ctx) = PRIMARY.lock().unwrap_or_else(|p| p.into_inner()).get(&ordinal) {
        return Ok(Some(*ctx));
    }
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: cuda() succeeded; the device came from cuDeviceGet; valid out-pointers.
    check("cuDevicePrimaryCtxGetState", unsafe { sys::cuDevicePrimaryCtxGetState(device(ordinal)?, &mut flags, &mut active) })?;
    if active == 0 {
        return Ok(None);
    }
    primary_context(ordinal).map(Some)
}

/// The context current on the calling thread, `None` when there is none.
///
/// Errors: `Unavailable`/`Forked`; the CUresult of `cuCtxGetCurrent`.
pub fn current_context() -> Result<Option<ContextHandle>, CudaFailure> {
    cuda()?;
    let mut raw: CUcontext = std::ptr::null_mut();
    // SAFETY: cuda() succeeded; valid out-pointer.
    check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut raw) })?;
    Ok(ContextHandle::from_address(raw as usize))
}

/// Makes a context current on the calling thread for its lifetime: pushes on creation, pops on
/// drop. Not `Send`: it must be dropped on the thread that pushed it.
#[derive(Debug)]
pub struct ScopedContext {
    ctx: ContextHandle,
    _same_thread: PhantomData<*const ()>,
}

impl ScopedContext {
    /// Pushes `ctx` onto the calling thread's context stack.
    ///
    /// Errors: `Unavailable`/`Forked`; the CUresult of `cuCtxPushCurrent`.
    pub fn push(ctx: ContextHandle) -> Result<Self, CudaFailure> {
        cuda()?;
        // SAFETY: cuda() succeeded; ContextHandle only holds contexts reported by the driver or
        // promised alive by the caller of `from_raw`.
        check("cuCtxPushCurrent", unsafe {
            sys::cuCtxPushCurrent_v2(ctx.as_raw())
        })?;
        Ok(Self {
            ctx,
            _same_thread: PhantomData,
        })
    }

    /// The context this scope made current.
    pub fn context(&self) -> ContextHandle {
        self.ctx
    }
}

/// Makes some context current if the thread has none (host registration needs one; PORTABLE
/// registrations are then usable from every context). `None` when one was already current.
///
/// Errors: `Unavailable`/`Forked`; those of `primary_context(0)` and `push`.
pub(crate) fn any_context() -> Result<Option<ScopedContext>, CudaFailure> {
    cuda()?;
    match current_context()? {
        Some(_) => Ok(None),
        None => ScopedContext::push(primary_context(0)?).map(Some),
    }
}

impl Drop for ScopedContext {
    fn drop(&mut self) {
        // A forked child inherits the value but not the CUDA state: leave the driver alone.
        if cuda().is_err() {
            return;
        }
        let mut popped: CUcontext = std::ptr::null_mut();
        // SAFETY: cuda() succeeded in this process, and a ScopedContext only exists after a
        // successful push on this thread (it is not Send), so there is an entry to pop.
        let r = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
        // Drop cannot fail; like KvikIO, report and carry on.
        if let Err(e) = check("cuCtxPopCurrent", r) {
            crate::log::cleanup_error("restoring the caller's CUDA context", &e);
        } else if popped as usize != self.ctx.0 {
            crate::log::cleanup_error("restoring the caller's CUDA context", &"cuCtxPopCurrent popped a context other than the one pushed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_contexts_are_errors_not_panics() {
        if cuda().is_err() {
            assert!(primary_context(0).is_err());
            assert!(current_context().is_err());
            let fake = ContextHandle::from_address(0x1000).unwrap();
            assert!(ScopedContext::push(fake).is_err());
        }
    }
}
