//! Finds and dlopens libcufile at run time and resolves each symbol on its own, so a library that
//! lacks an optional API (statistics before 1.15, parameters, buffers, batches) still loads. Nothing here
//! opens the cuFile driver; `driver.rs` and `stats.rs` add the calls on top of these pointers.
//!
//! One job: the table of libcufile's symbols and the thin call for each.

use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

use libloading::Library;

/// Environment variable naming an explicit libcufile to try first (after a caller's path).
pub const LIBRARY_ENV_VAR: &str = "GDSROUTE_CUFILE_LIBRARY";

/// Names tried after the explicit paths: the SONAME the wheels and packages ship, then the
/// development symlink (which the wheels lack).
pub(crate) const DEFAULT_CANDIDATES: [&str; 2] = ["libcufile.so.0", "libcufile.so"];

/// `CUfileError_t` exactly as the C API returns it by value: `{int err; int cu_err;}`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawCufileError {
    /// cuFile status (0 or a `CUfileOpError` value); kept as `i32` on purpose.
    pub err: i32,
    /// The `CUresult` when `err` is 5011.
    pub cu_err: i32,
}

/// `CU_FILE_HANDLE_TYPE_OPAQUE_FD`: a Linux file descriptor.
pub(crate) const HANDLE_TYPE_OPAQUE_FD: c_int = 1;

/// The handle union inside `CUfileDescr_t` (an `int fd` or a `void *` Windows handle).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union RawDescrHandle {
    pub fd: c_int,
    pub handle: *mut c_void,
}

/// `CUfileDescr_t`: the C enum `type` is an `int` on x86-64/aarch64 Linux; `fs_ops` points to an
/// operations table that we never provide (user-space file systems are unimplemented upstream).
#[repr(C)]
pub(crate) struct RawCufileDescr {
    pub handle_type: c_int,
    pub handle: RawDescrHandle,
    pub fs_ops: *const c_void,
}

/// `CUFILE_BATCH`, the only `CUfileBatchMode_t`.
pub(crate) const BATCH_MODE: c_int = 1;
/// `CUFILE_READ` / `CUFILE_WRITE` (`CUfileOpcode_t`).
pub(crate) const BATCH_READ: c_int = 0;
pub(crate) const BATCH_WRITE: c_int = 1;

/// `CUfileIOParams_t` (64 bytes), its union flattened to the `batch` member, the only one.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawBatchIo {
    /// [`BATCH_MODE`].
    pub mode: c_int,
    /// `u.batch.devPtr_base`: device or host memory.
    pub dev_base: *mut c_void,
    pub file_offset: i64,
    /// `u.batch.devPtr_offset`.
    pub dev_offset: i64,
    pub size: usize,
    /// `fh`: a registered `CUfileHandle_t`.
    pub handle: *mut c_void,
    /// [`BATCH_READ`] or [`BATCH_WRITE`].
    pub opcode: c_int,
    /// Returned unchanged in the I/O's event.
    pub cookie: *mut c_void,
}

/// `CUfileStatus_t` bits of an event (`CUfileIOEvents_t::status`) that end an I/O; the other
/// two, WAITING (1) and PENDING (2), do not.
pub(crate) mod batch_status {
    pub(crate) const INVALID: u32 = 4;
    pub(crate) const CANCELED: u32 = 8;
    pub(crate) const COMPLETE: u32 = 16;
    pub(crate) const TIMEOUT: u32 = 32;
    pub(crate) const FAILED: u32 = 64;
}

/// `CUfileIOEvents_t` (24 bytes): one finished I/O of a batch.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawBatchEvent {
    pub cookie: *mut c_void,
    /// [`batch_status`] bits.
    pub status: u32,
    /// `size_t` in the header, but "-ve error or amount of I/O done": read it as `isize`.
    pub ret: usize,
}

pub(crate) type FnGetVersion = unsafe extern "C" fn(*mut c_int) -> RawCufileError;
pub(crate) type FnVoid = unsafe extern "C" fn() -> RawCufileError;
pub(crate) type FnGetProperties = unsafe extern "C" fn(*mut c_void) -> RawCufileError;
pub(crate) type FnHandleRegister =
    unsafe extern "C" fn(*mut *mut c_void, *mut RawCufileDescr) -> RawCufileError;
pub(crate) type FnHandleDeregister = unsafe extern "C" fn(*mut c_void);
pub(crate) type FnRead = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, i64, i64) -> isize;
pub(crate) type FnWrite = unsafe extern "C" fn(*mut c_void, *const c_void, usize, i64, i64) -> isize;
pub(crate) type FnBufRegister = unsafe extern "C" fn(*const c_void, usize, c_int) -> RawCufileError;
pub(crate) type FnBufDeregister = unsafe extern "C" fn(*const c_void) -> RawCufileError;
pub(crate) type FnSetInt = unsafe extern "C" fn(c_int) -> RawCufileError;
pub(crate) type FnGetInt = unsafe extern "C" fn(*mut c_int) -> RawCufileError;
pub(crate) type FnGetStats = unsafe extern "C" fn(*mut c_void) -> RawCufileError;
pub(crate) type FnSetPollMode = unsafe extern "C" fn(bool, usize) -> RawCufileError;
pub(crate) type FnSetSize = unsafe extern "C" fn(usize) -> RawCufileError;
pub(crate) type FnSetParamString = unsafe extern "C" fn(c_int, *const c_char) -> RawCufileError;
/// `cuFileReadAsync` / `cuFileWriteAsync(fh, bufPtr_base, size_t *size_p, off_t *file_offset_p,
/// off_t *bufPtr_offset_p, ssize_t *bytes_p, CUstream)`: the numbers are read through the
/// pointers when the stream reaches the call.
pub(crate) type FnAsync = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut usize, *mut i64, *mut i64, *mut isize, *mut c_void) -> RawCufileError;
pub(crate) type FnStreamRegister = unsafe extern "C" fn(*mut c_void, u32) -> RawCufileError;
pub(crate) type FnStreamDeregister = unsafe extern "C" fn(*mut c_void) -> RawCufileError;
/// `cuFileBatchIOSetUp(CUfileBatchHandle_t *, unsigned max_nr)`.
pub(crate) type FnBatchSetUp = unsafe extern "C" fn(*mut *mut c_void, u32) -> RawCufileError;
/// `cuFileBatchIOSubmit(handle, unsigned nr, CUfileIOParams_t *, unsigned flags)`.
pub(crate) type FnBatchSubmit = unsafe extern "C" fn(*mut c_void, u32, *mut RawBatchIo, u32) -> RawCufileError;
/// `cuFileBatchIOGetStatus(handle, unsigned min_nr, unsigned *nr, CUfileIOEvents_t *, struct timespec *)`.
pub(crate) type FnBatchGetStatus = unsafe extern "C" fn(*mut c_void, u32, *mut u32, *mut RawBatchEvent, *mut libc::timespec) -> RawCufileError;
/// `cuFileBatchIOCancel(handle)`.
pub(crate) type FnBatchCancel = unsafe extern "C" fn(*mut c_void) -> RawCufileError;
/// `cuFileBatchIODestroy(handle)`.
pub(crate) type FnBatchDestroy = unsafe extern "C" fn(*mut c_void);

/// Every entry point this crate may call; `None` when the library does not export it.
#[derive(Clone, Copy, Default)]
pub(crate) struct Symbols {
    pub get_version: Option<FnGetVersion>,
    pub driver_open: Option<FnVoid>,
    /// `cuFileDriverClose_v2`, or the old `cuFileDriverClose` when `_v2` is absent.
    pub driver_close: Option<FnVoid>,
    pub driver_get_properties: Option<FnGetProperties>,
    pub handle_register: Option<FnHandleRegister>,
    pub handle_deregister: Option<FnHandleDeregister>,
    pub read: Option<FnRead>,
    /// `cuFileWrite`: optional, so that a library without it still serves reads; device writes
    /// that would need it fail with `CU_FILE_INVALID_VALUE`'s message naming it.
    pub write: Option<FnWrite>,
    pub buf_register: Option<FnBufRegister>,
    pub buf_deregister: Option<FnBufDeregister>,
    pub set_stats_level: Option<FnSetInt>,
    pub get_stats_level: Option<FnGetInt>,
    pub stats_start: Option<FnVoid>,
    pub stats_stop: Option<FnVoid>,
    pub stats_reset: Option<FnVoid>,
    pub get_stats_l3: Option<FnGetStats>,
    pub set_parameter_string: Option<FnSetParamString>,
    pub set_poll_mode: Option<FnSetPollMode>,
    pub set_max_direct_io_size: Option<FnSetSize>,
    pub set_max_cache_size: Option<FnSetSize>,
    pub set_max_pinned_mem_size: Option<FnSetSize>,
    /// The stream API (cuFile 1.7, CUDA 12.2): `cuFileReadAsync`, `cuFileWriteAsync`,
    /// `cuFileStreamRegister`, `cuFileStreamDeregister`; all optional.
    pub read_async: Option<FnAsync>,
    pub write_async: Option<FnAsync>,
    pub stream_register: Option<FnStreamRegister>,
    pub stream_deregister: Option<FnStreamDeregister>,
    /// The batch API (cuFile 1.2): `cuFileBatchIOSetUp`, `Submit`, `GetStatus`, `Cancel`,
    /// `Destroy`; all optional.
    pub batch_setup: Option<FnBatchSetUp>,
    pub batch_submit: Option<FnBatchSubmit>,
    pub batch_get_status: Option<FnBatchGetStatus>,
    pub batch_cancel: Option<FnBatchCancel>,
    pub batch_destroy: Option<FnBatchDestroy>,
}

/// One candidate that failed to dlopen, with the loader's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadAttempt {
    /// The path or library name passed to dlopen.
    pub candidate: String,
    /// The dlerror text.
    pub error: String,
}

/// Why no usable libcufile was loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// No candidate could be dlopened.
    #[error("libcufile not found; tried: {}", list_attempts(.attempts))]
    NotFound {
        /// Every candidate tried, in order.
        attempts: Vec<LoadAttempt>,
    },
    /// The first library that loaded lacks a symbol that reads need.
    #[error("{path} lacks required symbol {symbol}")]
    MissingSymbol {
        /// What was dlopened.
        path: String,
        /// The missing symbol.
        symbol: &'static str,
    },
}

fn list_attempts(attempts: &[LoadAttempt]) -> String {
    if attempts.is_empty() {
        return "(no candidates)".to_owned();
    }
    attempts
        .iter()
        .map(|a| format!("{} ({})", a.candidate, a.error))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A loaded libcufile: the library, the path that loaded, the failed candidates before it, its
/// version and its resolved entry points.
///
/// Thread safety: `Send + Sync`; every call goes straight to libcufile, which is thread-safe.
/// Dropping it dlcloses the library, so keep it for the process's life once the driver is open
/// (see [`CufileLibrary::leak`]).
pub struct CufileLibrary {
    pub(crate) sym: Symbols,
    path: String,
    failed: Vec<LoadAttempt>,
    version: Option<i32>,
    /// Successful `driver_open` calls not yet matched by `driver_close` (ours only).
    pub(crate) opens: AtomicUsize,
    /// Batch handles set up and idle, `(handle, capacity)`, for the next batch to reuse
    /// (`driver.rs`, `CufileBatch`); never destroyed once here.
    pub(crate) idle_batches: Mutex<Vec<(usize, u32)>>,
    _lib: Library,
}

impl fmt::Debug for CufileLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CufileLibrary")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("missing_optional", &self.missing_optional_symbols())
            .finish()
    }
}

impl CufileLibrary {
    /// Loads libcufile: `explicit` if given, then `$GDSROUTE_CUFILE_LIBRARY` if set and not
    /// empty, then [`DEFAULT_CANDIDATES`].
    ///
    /// Returns the first library that dlopens. Errors: [`LoadError::NotFound`] listing every
    /// candidate and its dlerror; [`LoadError::MissingSymbol`] when that library lacks one of
    /// `cuFileDriverOpen`, `cuFileHandleRegister`, `cuFileHandleDeregister`, `cuFileRead` (later
    /// candidates are then not tried: the user pointed at that library).
    pub fn load(explicit: Option<&Path>) -> Result<Self, LoadError> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(p) = explicit {
            candidates.push(p.to_path_buf());
        }
        if let Some(p) = std::env::var_os(LIBRARY_ENV_VAR).filter(|p| !p.is_empty()) {
            candidates.push(PathBuf::from(p));
        }
        candidates.extend(DEFAULT_CANDIDATES.iter().map(PathBuf::from));
        Self::load_candidates(&candidates)
    }

    /// Tries exactly `candidates`, in order, with the same rules as [`CufileLibrary::load`].
    pub fn load_candidates<P: AsRef<Path>>(candidates: &[P]) -> Result<Self, LoadError> {
        let mut failed = Vec::new();
        for cand in candidates {
            let cand = cand.as_ref();
            // RTLD_NODELETE (as KvikIO): a CufileLibrary that is dropped (the diagnostic's, a
            // failed probe's) never unmaps libcufile or runs its destructors while the driver
            // may be open through another handle.
            let flags = libloading::os::unix::RTLD_LAZY | libloading::os::unix::RTLD_LOCAL | libc::RTLD_NODELETE;
            // SAFETY: loading libcufile runs its ELF constructors; libcufile's only set up
            // logging/config state and do not call back into us. A non-cuFile library at a
            // user-given path is the user's choice, and is rejected below if it lacks the symbols.
            match unsafe { libloading::os::unix::Library::open(Some(cand), flags) } {
                Ok(lib) => return Self::from_library(lib.into(), cand.display().to_string(), failed),
                Err(e) => failed.push(LoadAttempt {
                    candidate: cand.display().to_string(),
                    error: dl_error_text(&e),
                }),
            }
        }
        Err(LoadError::NotFound { attempts: failed })
    }

    fn from_library(
        lib: Library,
        path: String,
        failed: Vec<LoadAttempt>,
    ) -> Result<Self, LoadError> {
        // SAFETY (all `resolve` calls): each type alias matches the C prototype in cufile.h
        // 1.15–1.20 (x86-64/aarch64 SysV ABI: off_t = i64, ssize_t = isize, enums = int,
        // CUfileError_t = two ints returned by value); the pointers stay valid while `_lib` lives,
        // and `CufileLibrary` owns `_lib`.
        let sym = unsafe {
            Symbols {
                get_version: resolve(&lib, "cuFileGetVersion"),
                driver_open: resolve(&lib, "cuFileDriverOpen"),
                driver_close: resolve(&lib, "cuFileDriverClose_v2")
                    .or_else(|| resolve(&lib, "cuFileDriverClose")),
                driver_get_properties: resolve(&lib, "cuFileDriverGetProperties"),
                handle_register: resolve(&lib, "cuFileHandleRegister"),
                handle_deregister: resolve(&lib, "cuFileHandleDeregister"),
                read: resolve(&lib, "cuFileRead"),
                write: resolve(&lib, "cuFileWrite"),
                buf_register: resolve(&lib, "cuFileBufRegister"),
                buf_deregister: resolve(&lib, "cuFileBufDeregister"),
                set_stats_level: resolve(&lib, "cuFileSetStatsLevel"),
                get_stats_level: resolve(&lib, "cuFileGetStatsLevel"),
                stats_start: resolve(&lib, "cuFileStatsStart"),
                stats_stop: resolve(&lib, "cuFileStatsStop"),
                stats_reset: resolve(&lib, "cuFileStatsReset"),
                get_stats_l3: resolve(&lib, "cuFileGetStatsL3"),
                set_parameter_string: resolve(&lib, "cuFileSetParameterString"),
                set_poll_mode: resolve(&lib, "cuFileDriverSetPollMode"),
                set_max_direct_io_size: resolve(&lib, "cuFileDriverSetMaxDirectIOSize"),
                set_max_cache_size: resolve(&lib, "cuFileDriverSetMaxCacheSize"),
                set_max_pinned_mem_size: resolve(&lib, "cuFileDriverSetMaxPinnedMemSize"),
                read_async: resolve(&lib, "cuFileReadAsync"),
                write_async: resolve(&lib, "cuFileWriteAsync"),
                stream_register: resolve(&lib, "cuFileStreamRegister"),
                stream_deregister: resolve(&lib, "cuFileStreamDeregister"),
                batch_setup: resolve(&lib, "cuFileBatchIOSetUp"),
                batch_submit: resolve(&lib, "cuFileBatchIOSubmit"),
                batch_get_status: resolve(&lib, "cuFileBatchIOGetStatus"),
                batch_cancel: resolve(&lib, "cuFileBatchIOCancel"),
                batch_destroy: resolve(&lib, "cuFileBatchIODestroy"),
            }
        };
        let required = [
            ("cuFileDriverOpen", sym.driver_open.is_some()),
            ("cuFileHandleRegister", sym.handle_register.is_some()),
            ("cuFileHandleDeregister", sym.handle_deregister.is_some()),
            ("cuFileRead", sym.read.is_some()),
        ];
        if let Some((symbol, _)) = required.iter().find(|(_, present)| !present) {
            return Err(LoadError::MissingSymbol { path, symbol });
        }
        let version = sym.get_version.and_then(|f| {
            let mut v: c_int = 0;
            // SAFETY: `v` is a valid, writable int for the call; cuFileGetVersion does not open
            // the driver (it answers before cuFileDriverOpen, measured on 1.15–1.20).
            let r = unsafe { f(&mut v) };
            (r.err == 0 && v > 0).then_some(v)
        });
        Ok(CufileLibrary {
            sym,
            path,
            failed,
            version,
            opens: AtomicUsize::new(0),
            idle_batches: Mutex::new(Vec::new()),
            _lib: lib,
        })
    }

    /// The path or name that dlopen accepted.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Candidates that failed before this one loaded, with their dlerror texts.
    pub fn failed_attempts(&self) -> &[LoadAttempt] {
        &self.failed
    }

    /// `cuFileGetVersion` as the library reports it (1000 × major + 10 × minor, e.g. 1150), or
    /// `None` when the symbol is absent or the call failed.
    pub fn version(&self) -> Option<i32> {
        self.version
    }

    /// The version as "major.minor" (1150 → "1.15"), or "unknown".
    pub fn version_string(&self) -> String {
        match self.version {
            Some(v) => format!("{}.{}", v / 1000, (v % 1000) / 10),
            None => "unknown".to_owned(),
        }
    }

    /// Names of the optional symbols this library does not export (for diagnostics).
    pub fn missing_optional_symbols(&self) -> Vec<&'static str> {
        let s = &self.sym;
        [
            ("cuFileGetVersion", s.get_version.is_some()),
            (
                "cuFileDriverClose_v2/cuFileDriverClose",
                s.driver_close.is_some(),
            ),
            (
                "cuFileDriverGetProperties",
                s.driver_get_properties.is_some(),
            ),
            ("cuFileBufRegister", s.buf_register.is_some()),
            ("cuFileBufDeregister", s.buf_deregister.is_some()),
            ("cuFileSetStatsLevel", s.set_stats_level.is_some()),
            ("cuFileGetStatsLevel", s.get_stats_level.is_some()),
            ("cuFileStatsStart", s.stats_start.is_some()),
            ("cuFileStatsStop", s.stats_stop.is_some()),
            ("cuFileStatsReset", s.stats_reset.is_some()),
            ("cuFileGetStatsL3", s.get_stats_l3.is_some()),
            ("cuFileSetParameterString", s.set_parameter_string.is_some()),
            ("cuFileDriverSetPollMode", s.set_poll_mode.is_some()),
            ("cuFileDriverSetMaxDirectIOSize", s.set_max_direct_io_size.is_some()),
            ("cuFileDriverSetMaxCacheSize", s.set_max_cache_size.is_some()),
            ("cuFileDriverSetMaxPinnedMemSize", s.set_max_pinned_mem_size.is_some()),
            ("cuFileReadAsync", s.read_async.is_some()),
            ("cuFileWriteAsync", s.write_async.is_some()),
            ("cuFileStreamRegister", s.stream_register.is_some()),
            ("cuFileStreamDeregister", s.stream_deregister.is_some()),
            ("cuFileBatchIOSetUp", s.batch_setup.is_some()),
            ("cuFileBatchIOSubmit", s.batch_submit.is_some()),
            ("cuFileBatchIOGetStatus", s.batch_get_status.is_some()),
            ("cuFileBatchIOCancel", s.batch_cancel.is_some()),
            ("cuFileBatchIODestroy", s.batch_destroy.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, present)| (!present).then_some(name))
        .collect()
    }

    /// Leaks the library so it is never dlclosed: the right owner once the driver is open,
    /// because cuFile's threads and exit handlers run code from it until the process ends.
    pub fn leak(self) -> &'static CufileLibrary {
        Box::leak(Box::new(self))
    }
}

/// Resolves one symbol, `None` if absent.
///
/// # Safety
/// `T` must be the exact function-pointer type of the C symbol `name`.
unsafe fn resolve<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: the caller guarantees `T` matches the symbol; copying the pointer out of the
    // `Symbol` is sound as long as `lib` stays loaded, which `CufileLibrary` guarantees.
    unsafe { lib.get::<T>(name).ok().map(|s| *s) }
}

/// libloading's Display is only "dlopen failed"; the dlerror text is in the source.
fn dl_error_text(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(src) => src.to_string(),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// cufile.h (1.15 and 1.20) on x86-64: `enum type` at 0, the 8-byte union at 8, `fs_ops` at
    /// 16, 24 bytes in all; `CUfileError_t` is two ints.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn descriptor_layout_matches_header() {
        assert_eq!(size_of::<RawCufileDescr>(), 24);
        assert_eq!(offset_of!(RawCufileDescr, handle_type), 0);
        assert_eq!(offset_of!(RawCufileDescr, handle), 8);
        assert_eq!(offset_of!(RawCufileDescr, fs_ops), 16);
        assert_eq!(size_of::<RawDescrHandle>(), 8);
        assert_eq!(size_of::<RawCufileError>(), 8);
        assert_eq!(offset_of!(RawCufileError, cu_err), 4);
    }

    /// `CUfileIOParams_t` and `CUfileIOEvents_t` as measured with gcc against cufile.h 1.15 and
    /// 1.20 on x86-64 (identical in both).
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn batch_layouts_match_header() {
        assert_eq!(size_of::<RawBatchIo>(), 64);
        assert_eq!(offset_of!(RawBatchIo, mode), 0);
        assert_eq!(offset_of!(RawBatchIo, dev_base), 8);
        assert_eq!(offset_of!(RawBatchIo, file_offset), 16);
        assert_eq!(offset_of!(RawBatchIo, dev_offset), 24);
        assert_eq!(offset_of!(RawBatchIo, size), 32);
        assert_eq!(offset_of!(RawBatchIo, handle), 40);
        assert_eq!(offset_of!(RawBatchIo, opcode), 48);
        assert_eq!(offset_of!(RawBatchIo, cookie), 56);
        assert_eq!(size_of::<RawBatchEvent>(), 24);
        assert_eq!(offset_of!(RawBatchEvent, cookie), 0);
        assert_eq!(offset_of!(RawBatchEvent, status), 8);
        assert_eq!(offset_of!(RawBatchEvent, ret), 16);
    }

    /// Opt-in: with `GDSROUTE_CUFILE_INCLUDE` naming a directory holding NVIDIA's cufile.h,
    /// compiles a probe against it (with a stub cuda.h) and compares every layout we rely on.
    #[test]
    fn layouts_match_the_real_header_when_available() {
        let Some(include) = std::env::var_os("GDSROUTE_CUFILE_INCLUDE") else {
            eprintln!("GDSROUTE_CUFILE_INCLUDE not set; skipped");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cuda.h"),
            "typedef struct CUstream_st *CUstream;\ntypedef int CUresult;\n",
        )
        .unwrap();
        let probe = r#"#include <stdio.h>
#include <stddef.h>
#include "cufile.h"
#define P(x) printf("%zu\n", (size_t)(x))
int main(void) {
  P(sizeof(CUfileDescr_t)); P(offsetof(CUfileDescr_t, handle)); P(offsetof(CUfileDescr_t, fs_ops));
  P(sizeof(CUfileError_t)); P(sizeof(CUfileDrvProps_t)); P(offsetof(CUfileDrvProps_t, fflags));
  P(sizeof(CUfileStatsLevel3_t)); P(offsetof(CUfileStatsLevel3_t, num_gpus));
  P(offsetof(CUfileStatsLevel3_t, per_gpu_stats)); P(sizeof(CUfilePerGpuStats_t));
  P(offsetof(CUfilePerGpuStats_t, n_total_reads)); P(offsetof(CUfilePerGpuStats_t, n_reads_err));
  P(CU_FILE_HANDLE_TYPE_OPAQUE_FD); P(CUFILE_PARAM_ENV_LOGFILE_PATH);
  P(sizeof(CUfileIOParams_t)); P(offsetof(CUfileIOParams_t, u.batch.devPtr_base));
  P(offsetof(CUfileIOParams_t, u.batch.size)); P(offsetof(CUfileIOParams_t, fh));
  P(offsetof(CUfileIOParams_t, opcode)); P(offsetof(CUfileIOParams_t, cookie));
  P(sizeof(CUfileIOEvents_t)); P(offsetof(CUfileIOEvents_t, status)); P(offsetof(CUfileIOEvents_t, ret));
  P(CUFILE_BATCH); P(CUFILE_WRITE); P(CUFILE_COMPLETE); P(CUFILE_FAILED);
  return 0;
}"#;
        std::fs::write(dir.path().join("probe.c"), probe).unwrap();
        let exe = dir.path().join("probe");
        let ok = std::process::Command::new("cc")
            .arg("-I")
            .arg(dir.path())
            .arg("-I")
            .arg(&include)
            .arg(dir.path().join("probe.c"))
            .arg("-o")
            .arg(&exe)
            .status()
            .unwrap()
            .success();
        assert!(ok, "probe did not compile");
        let out = std::process::Command::new(&exe).output().unwrap();
        let v: Vec<usize> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(
            v[..6],
            [
                size_of::<RawCufileDescr>(),
                offset_of!(RawCufileDescr, handle),
                offset_of!(RawCufileDescr, fs_ops),
                size_of::<RawCufileError>(),
                crate::sys::cufile::DriverProperties::C_SIZE,
                32
            ]
        );
        let version = if v[6] > 5000 { 1190 } else { 1150 };
        let (num_at, gpus_at) = crate::sys::cufile::l3_offsets(version);
        assert_eq!(v[6..14], [v[6], num_at, gpus_at, 248, 48, 112, 1, 1]);
        assert_eq!(
            v[14..],
            [
                size_of::<RawBatchIo>(),
                offset_of!(RawBatchIo, dev_base),
                offset_of!(RawBatchIo, size),
                offset_of!(RawBatchIo, handle),
                offset_of!(RawBatchIo, opcode),
                offset_of!(RawBatchIo, cookie),
                size_of::<RawBatchEvent>(),
                offset_of!(RawBatchEvent, status),
                offset_of!(RawBatchEvent, ret),
                BATCH_MODE as usize,
                BATCH_WRITE as usize,
                batch_status::COMPLETE as usize,
                batch_status::FAILED as usize,
            ]
        );
        assert!(v[6] <= 8192, "L3 no longer fits the 8 KiB buffer");
    }

    #[test]
    fn missing_candidates_are_all_reported() {
        let err =
            CufileLibrary::load_candidates(&["/nonexistent/a/libcufile.so.0", "/nonexistent/b.so"])
                .unwrap_err();
        let LoadError::NotFound { attempts } = &err else {
            panic!("{err}")
        };
        assert_eq!(attempts.len(), 2);
        assert_eq!(attempts[0].candidate, "/nonexistent/a/libcufile.so.0");
        assert!(
            attempts[0].error.contains("No such file"),
            "{}",
            attempts[0].error
        );
        let text = err.to_string();
        assert!(
            text.contains("/nonexistent/a/libcufile.so.0") && text.contains("/nonexistent/b.so"),
            "{text}"
        );
    }

    #[test]
    fn library_without_cufile_symbols_names_the_first_missing() {
        // libc is loaded in every process and has none of the cuFile symbols.
        let err = CufileLibrary::load_candidates(&["libc.so.6"]).unwrap_err();
        assert_eq!(
            err,
            LoadError::MissingSymbol {
                path: "libc.so.6".into(),
                symbol: "cuFileDriverOpen"
            }
        );
    }
}
