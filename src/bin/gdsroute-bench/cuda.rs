//! The CUDA driver as the bench uses it directly (never through the library): whether it is
//! there, the GPUs' primary contexts, how many GPUs there are.

use cudarc::driver::sys;

/// Ok when libcuda is there and initialised; else why not.
pub fn available() -> Result<(), String> {
    // SAFETY: is_culib_present only tries to dlopen the driver library.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda cannot be loaded".into());
    }
    // SAFETY: the library is loaded (just checked), so the call does not panic.
    cu(unsafe { sys::cuInit(0) }, "cuInit")
}

/// A driver call's result as a Result naming the call.
pub fn cu(result: sys::CUresult, what: &str) -> Result<(), String> {
    if result == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {result:?}"))
    }
}

/// Makes the primary context of GPU `ordinal` current on the calling thread.
pub fn context_of(ordinal: i32) -> Result<sys::CUcontext, String> {
    available().map_err(|e| format!("CUDA unavailable: {e}"))?;
    let mut dev: sys::CUdevice = 0;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: available() confirmed libcuda is loaded and initialised; out-pointers are writable.
    unsafe {
        cu(sys::cuInit(0), "cuInit")?;
        cu(sys::cuDeviceGet(&mut dev, ordinal), "cuDeviceGet")?;
        cu(
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            "cuDevicePrimaryCtxRetain",
        )?;
        cu(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
    }
    Ok(ctx)
}

/// How many GPUs the CUDA driver sees.
pub fn device_count() -> Result<i32, String> {
    available().map_err(|e| format!("CUDA unavailable: {e}"))?;
    let mut n: std::ffi::c_int = 0;
    // SAFETY: available() confirmed libcuda is loaded; the out-pointer is writable.
    unsafe {
        cu(sys::cuInit(0), "cuInit")?;
        cu(sys::cuDeviceGetCount(&mut n), "cuDeviceGetCount")?;
    }
    Ok(n)
}

/// Makes `ctx` (a retained primary context) current on the calling thread.
pub fn set_current(ctx: sys::CUcontext) -> Result<(), String> {
    // SAFETY: the context was retained by context_of and is never released.
    cu(unsafe { sys::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent")
}
