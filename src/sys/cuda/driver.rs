//! Loads and initialises the CUDA driver once per process and caches the verdict with its reason.
//! Every other file in this module goes through `cuda()` before touching cudarc, because cudarc
//! panics when libcuda or a symbol is missing, and CUDA must not be used in a forked child.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use cudarc::driver::sys;
use once_cell::sync::OnceCell;

use super::error::{CudaFailure, check, result_name};

/// The library we require: the driver's SONAME (not the `libcuda.so` dev symlink, which may be
/// a toolkit stub).
const LIBCUDA: &str = "libcuda.so.1";

/// Every driver symbol this module calls (the exact names cudarc resolves). All are checked at
/// initialisation so that cudarc's lazy lookup can never panic later.
const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetUuid_v2",
    "cuDeviceGetPCIBusId",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxGetState",
    "cuCtxGetCurrent",
    "cuCtxGetDevice",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuPointerGetAttribute",
    "cuPointerGetAttributes",
    "cuMemGetAddressRange_v2",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuStreamCreate",
    "cuStreamSynchronize",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    // Stream-ordered calls (`stream`); all from CUDA 10 or earlier. `cuStreamWaitValue32_v2`
    // (11.7) is optional: `has_symbol`.
    "cuEventQuery",
    "cuEventDestroy_v2",
    "cuDeviceGetAttribute",
    "cuStreamGetCtx",
    "cuStreamIsCapturing",
    "cuStreamGetFlags",
    "cuMemHostAlloc",
    "cuMemHostGetDevicePointer_v2",
];

/// Proof that the CUDA driver is loaded and initialised in this process.
#[derive(Debug)]
pub struct CudaDriver {
    pid: u32,
    driver_version: i32,
    device_count: i32,
    // Kept open so the library (and thus every symbol cudarc resolved) stays mapped.
    _lib: libloading::Library,
}

impl CudaDriver {
    /// The PID that called `cuInit`.
    pub fn init_pid(&self) -> u32 {
        self.pid
    }

    /// The driver's CUDA version as `cuDriverGetVersion` reports it (e.g. 13000 for 13.0).
    pub fn driver_version(&self) -> i32 {
        self.driver_version
    }

    /// The number of CUDA devices visible at initialisation.
    pub fn device_count(&self) -> i32 {
        self.device_count
    }
}

static VERDICT: OnceCell<Result<CudaDriver, String>> = OnceCell::new();

/// The process that began initialising CUDA (0 before): a child forked while that ran on another
/// thread (a start in the background, `backend::cufile::gds`) must not wait for it.
static INITIALISER: AtomicU32 = AtomicU32::new(0);

/// Loads libcuda (without initialising it) and keeps it loaded; false if it cannot be loaded.
/// For a start in the background: a library loaded on the calling thread, before the exit
/// handler that waits for the start is registered, has its destructors run after that handler.
pub(crate) fn preload() -> bool {
    // SAFETY: loading libcuda runs its initialisers, which are safe in any process; the handle is
    // never closed, so the library stays mapped.
    !unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) }.is_null()
}

/// Loads libcuda and runs `cuInit(0)` on the first call; later calls return the cached verdict.
///
/// Returns: the driver handle when CUDA is usable in this process.
///
/// Errors: `Unavailable` with the reason (library missing, symbol missing, cuInit's CUresult);
/// `Forked` when the caller's PID differs from the PID that initialised CUDA.
///
/// Thread safety: any thread; initialisation runs once, concurrent callers wait for it.
pub fn cuda() -> Result<&'static CudaDriver, CudaFailure> {
    let initialiser = INITIALISER.load(Ordering::SeqCst);
    if VERDICT.get().is_none() && initialiser != 0 && initialiser != std::process::id() {
        return Err(CudaFailure::Forked { parent: initialiser, child: std::process::id() });
    }
    match VERDICT.get_or_init(init) {
        Ok(driver) => {
            let pid = std::process::id();
            if pid != driver.pid {
                return Err(CudaFailure::Forked {
                    parent: driver.pid,
                    child: pid,
                });
            }
            Ok(driver)
        }
        Err(reason) => Err(CudaFailure::Unavailable(reason.clone())),
    }
}

/// Why CUDA cannot be used, when an earlier `cuda()` found out (`None`: not tried yet, or
/// usable); loads and initialises nothing.
pub(crate) fn known_unavailable() -> Option<String> {
    VERDICT.get().and_then(|verdict| verdict.as_ref().err().cloned())
}

/// True when the calling thread has a CUDA context current that the application made: libcuda
/// is already loaded (checked without loading it) and `cuCtxGetCurrent` reports a context
/// (`CUDA_ERROR_NOT_INITIALIZED` otherwise, without initialising anything). Only then is our
/// driver layer initialised (`cuda()`), so host-only programs never load or initialise CUDA
/// through this.
pub(crate) fn in_use_by_the_application() -> bool {
    if matches!(VERDICT.get(), Some(Ok(driver)) if driver.pid == std::process::id()) {
        return true;
    }
    if VERDICT.get().is_some() {
        return false;
    }
    // Whether libcuda is loaded first: the cheap answer of a host-only program (no system call).
    let Some(handle) = LoadedLibcuda::find() else { return false };
    // A forked child must not touch CUDA state inherited from its parent (nor initialise it).
    if crate::sys::startup::forked_since_load() {
        return false;
    }
    // SAFETY: handle is live; the symbol, if present, is cuCtxGetCurrent(CUcontext*) -> CUresult.
    let symbol = unsafe { libc::dlsym(handle.0, c"cuCtxGetCurrent".as_ptr()) };
    let has_context = !symbol.is_null() && {
        type GetCurrent = unsafe extern "C" fn(*mut sys::CUcontext) -> sys::CUresult;
        // SAFETY: the symbol has this signature in every CUDA driver (cuda.h).
        let get_current: GetCurrent = unsafe { std::mem::transmute::<*mut libc::c_void, GetCurrent>(symbol) };
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer; answers NOT_INITIALIZED before cuInit, initialising nothing.
        let r = unsafe { get_current(&mut ctx) };
        r == sys::CUresult::CUDA_SUCCESS && !ctx.is_null()
    };
    drop(handle);
    has_context && cuda().is_ok()
}

/// Whether memory of CUDA's can exist in this process: our driver layer is initialised, or the
/// application has loaded libcuda (checked without loading it; device, managed and pinned memory
/// all come from libcuda). Classifying the buffers of a host-only program therefore loads and
/// initialises nothing, and starts none of CUDA's threads.
pub(crate) fn may_hold_cuda_memory() -> bool {
    matches!(VERDICT.get(), Some(Ok(_))) || LoadedLibcuda::find().is_some()
}

/// A reference to libcuda taken only if the process has it loaded already (`RTLD_NOLOAD`),
/// dropped with the value.
struct LoadedLibcuda(*mut libc::c_void);

/// `loaded_objects_ever` when libcuda was last found not loaded (`u64::MAX`: never asked).
static ABSENT_AT: AtomicU64 = AtomicU64::new(u64::MAX);

/// How many objects the dynamic loader has loaded into the process so far (`dlpi_adds`): while it
/// has not changed, no library was loaded since.
fn loaded_objects_ever() -> u64 {
    unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, size: usize, out: *mut libc::c_void) -> libc::c_int {
        let wanted = std::mem::offset_of!(libc::dl_phdr_info, dlpi_adds) + std::mem::size_of::<libc::c_ulonglong>();
        if size >= wanted {
            // SAFETY: the loader passes a valid info of `size` bytes, large enough for the field;
            // `out` is the u64 below.
            unsafe { *out.cast::<u64>() = (*info).dlpi_adds };
        }
        1 // the first object is enough: every entry carries the same counter
    }
    let mut adds = u64::MAX - 1;
    // SAFETY: the callback only reads the entry it is given and writes `adds`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut adds as *mut u64).cast()) };
    adds
}

impl LoadedLibcuda {
    /// libcuda if the process has it loaded. A `dlopen(RTLD_NOLOAD)` still searches the library
    /// path (about 35 µs of system calls here, 2026-12-02), so a negative answer is remembered
    /// until the loader loads another object.
    fn find() -> Option<LoadedLibcuda> {
        let generation = loaded_objects_ever();
        if ABSENT_AT.load(Ordering::Acquire) == generation {
            return None;
        }
        // SAFETY: RTLD_NOLOAD only looks the library up; nothing is loaded or run.
        let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            ABSENT_AT.store(generation, Ordering::Release);
            return None;
        }
        Some(LoadedLibcuda(handle))
    }
}

impl Drop for LoadedLibcuda {
    fn drop(&mut self) {
        // SAFETY: the handle was returned by dlopen; this drops the reference it took.
        unsafe { libc::dlclose(self.0) };
    }
}

/// True when the driver cudarc loaded has the symbol `name`: for the optional ones, which are
/// not in `REQUIRED_SYMBOLS` (cudarc panics on a call to a missing one). False before `cuda()`
/// succeeded.
pub(crate) fn has_symbol(name: &str) -> bool {
    if cuda().is_err() {
        return false;
    }
    // SAFETY: cuda() succeeded, so cudarc's library is loaded (`culib` does not panic); the
    // symbol is only looked up.
    unsafe { sys::culib().get::<*const ()>(name.as_bytes()) }.is_ok()
}

/// One line for diagnostics: "available: driver 13000, 1 device(s)" or the reason CUDA is not.
/// Initialises CUDA if nothing has yet.
pub(crate) fn describe() -> String {
    match cuda() {
        Ok(d) => format!(
            "available: driver {}, {} device(s)",
            d.driver_version, d.device_count
        ),
        Err(e) => format!("unavailable: {e}"),
    }
}

/// libloading's Display says only "dlopen failed"; the dlerror text is in the source.
fn dl_reason(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(source) => source.to_string(),
        None => e.to_string(),
    }
}

fn init() -> Result<CudaDriver, String> {
    INITIALISER.store(std::process::id(), Ordering::SeqCst);
    crate::trace::event("cuda.init.start", 0);
    // cudarc panics rather than erring in a few corners; a panic here becomes a verdict.
    let verdict = match catch_unwind(AssertUnwindSafe(init_inner)) {
        Ok(verdict) => verdict,
        Err(payload) => {
            let text = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(format!("CUDA initialisation panicked: {text}"))
        }
    };
    crate::trace::event("cuda.init.end", 0);
    verdict
}

fn init_inner() -> Result<CudaDriver, String> {
    // SAFETY: loading libcuda runs its initialisers, which are safe to run in any process.
    let lib = unsafe { libloading::Library::new(LIBCUDA) }
        .map_err(|e| format!("{LIBCUDA} not found: {}", dl_reason(&e)))?;
    for name in REQUIRED_SYMBOLS {
        // SAFETY: we only check the symbol's presence; the pointer is never called through here.
        let found = unsafe { lib.get::<*const ()>(name.as_bytes()) };
        if let Err(e) = found {
            return Err(format!("{LIBCUDA} lacks {name}: {}", dl_reason(&e)));
        }
    }
    // cudarc opens its own handle from a candidate list that starts with `libcuda.so`; make sure
    // it resolves to the library we probed and not to a different file such as a toolkit stub.
    // SAFETY: is_culib_present only tries to dlopen the candidates.
    if !unsafe { sys::is_culib_present() } {
        return Err(format!(
            "cudarc cannot load libcuda although {LIBCUDA} loads"
        ));
    }
    // SAFETY: presence was checked just above, so culib() finds a library and does not panic.
    let theirs = unsafe { sys::culib().get::<*const ()>(b"cuInit") }
        .map(|s| *s)
        .map_err(|e| format!("cudarc's libcuda lacks cuInit: {}", dl_reason(&e)))?;
    // SAFETY: presence of cuInit in our handle was checked in the loop above.
    let ours = unsafe { lib.get::<*const ()>(b"cuInit") }
        .map(|s| *s)
        .map_err(|e| format!("{LIBCUDA} lacks cuInit: {}", dl_reason(&e)))?;
    if theirs != ours {
        return Err(format!(
            "cudarc loaded a different libcuda than {LIBCUDA} (a stub `libcuda.so` on the library path?)"
        ));
    }

    // SAFETY: the library and every symbol we use are present (checked above).
    let r = unsafe { sys::cuInit(0) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuInit failed: {} ({})", result_name(r), r as u32));
    }
    let mut driver_version = 0;
    // SAFETY: valid out-pointer; symbol present.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&mut driver_version)
    })
    .map_err(|e| e.to_string())?;
    let mut device_count = 0;
    // SAFETY: valid out-pointer; symbol present; cuInit succeeded.
    check("cuDeviceGetCount", unsafe {
        sys::cuDeviceGetCount(&mut device_count)
    })
    .map_err(|e| e.to_string())?;
    Ok(CudaDriver {
        pid: std::process::id(),
        driver_version,
        device_count,
        _lib: lib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_is_stable_and_never_panics() {
        let first = cuda().map(|d| d.init_pid()).map_err(|e| e.to_string());
        let second = cuda().map(|d| d.init_pid()).map_err(|e| e.to_string());
        assert_eq!(first, second);
        let line = describe();
        assert!(line.starts_with("available: ") || line.starts_with("unavailable: "));
    }

    #[test]
    fn absent_driver_gives_a_readable_reason() {
        // SAFETY: only probes for the library.
        let present = unsafe { libloading::Library::new(LIBCUDA) }.is_ok();
        if !present {
            let e = cuda().unwrap_err();
            assert!(matches!(e, CudaFailure::Unavailable(_)), "{e:?}");
            assert!(e.to_string().starts_with("libcuda.so.1 not found: "), "{e}");
        }
    }
}
