//! The process-wide calls: the routing diagnostic as text, and the start and shutdown of the
//! device route (CUDA and cuFile).

use super::{TextOut, guard};
use crate::abi::Status;
use std::ffi::{CStr, c_char};

/// Writes a human-readable report on routing into `buf` (snprintf semantics; full length in
/// `*length`; `buf` may be NULL when `buf_len` is 0): library path and version (and the paths
/// that failed), CUDA, whether real GDS (nvidia-fs) is available, the udev database, the compat
/// mode and its source, and, if `path` is not NULL, that file's cuFile verdict and its reason
/// (`GDSROUTE_FALLBACK_REASON_*` names); the last line is a one-line conclusion (where device
/// reads of the file, or of any file, will go, and why). May load libcufile and open its driver.
/// Call it first when reads are slower than expected.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_diagnose(path: *const c_char, buf: *mut c_char, buf_len: usize, length: *mut usize) -> Status {
    guard(|| {
        let text_out = TextOut::new(buf, buf_len, length)?;
        // SAFETY: path is NULL or NUL-terminated.
        let path = (!path.is_null()).then(|| unsafe { CStr::from_ptr(path) }.to_bytes());
        let text = crate::diagnose::report(path);
        // SAFETY: the caller's buffer and length pointer (checked by `TextOut::new`).
        unsafe { text_out.write(&text) };
        Ok(())
    })
}

/// Tells whether cuFile can serve device reads in this process under the compat mode setting,
/// without opening a file (KvikIO's `is_compat_mode_preferred()`, negated) and, if not, why:
/// `*reason` receives a `gdsroute_fallback_reason` (`GDSROUTE_FALLBACK_REASON_NONE` when it can)
/// and `buf` the explanation (snprintf semantics; full length in `*length`; `buf` may be NULL when
/// `buf_len` is 0). Compat mode ON answers at once (`COMPAT_ON`) and loads nothing. Otherwise
/// this checks CUDA, libcufile, AUTO's environment heuristics (under AUTO) and opens cuFile's
/// driver, unless it is open or opening already (`gdsroute_begin_device_setup`, which this
/// waits for): 0.4 to 0.5 s once per process, and cuFile's threads. The verdict is kept for the
/// process. A file can still fail its own half (`gdsroute_file_cufile_verdict`).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_cufile_usable(reason: *mut u32, buf: *mut c_char, buf_len: usize, length: *mut usize) -> Status {
    guard(|| {
        let reason = super::out(reason, "reason")?;
        let text_out = TextOut::new(buf, buf_len, length)?;
        let (code, text) = match crate::api::process::cufile_usable()? {
            Ok(()) => (crate::abi::FallbackReason::None, "cuFile can serve device reads in this process".to_string()),
            Err(u) => (u.reason, u.message),
        };
        // SAFETY: the caller's buffer and out-pointers (checked above).
        unsafe {
            text_out.write(&text);
            super::write_out(reason, code as u32);
        }
        Ok(())
    })
}

/// Closes the cuFile driver reference gdsroute opened, which ends cuFile's own threads (its
/// statistics thread included; cuFileStatsStop is never called: with cuFile 1.15 it can crash
/// that thread). Optional: the library does this itself at process exit, before cuFile's and
/// CUDA's own teardown. Afterwards cuFile is never called again: device reads use the POSIX
/// backend (AUTO, reason `GDSROUTE_FALLBACK_REASON_DRIVER_OPEN_FAILED`) or fail with
/// `GDSROUTE_STATUS_CUFILE_UNAVAILABLE` (OFF), and cuFile's counters are no longer read. No cuFile
/// call starts once it began; calls in flight get up to 300 ms to finish, else the driver is left
/// open. If cuFile was never opened, nothing is closed and cuFile is not opened later either;
/// in a forked child, or when called again, it does nothing; it returns OK in each case.
/// Blocking: typically 20-200 ms (the driver close).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_shutdown() -> Status {
    guard(|| {
        crate::backend::cufile::gds::shutdown();
        Ok(())
    })
}

/// Begins, on a background thread, the process-wide set-up the first device read needs, and
/// returns at once: CUDA's initialisation (`cuInit`, device 0's primary context) and, unless the
/// compat mode setting is ON, the cuFile verdict with libcufile's driver open, the 0.4-0.7 s that
/// a fresh process's first read through cuFile otherwise waits for. Call it at the start of
/// `main`, before the program sets up CUDA itself: the two then overlap (docs/performance.md,
/// "The first read of a fresh process"). Loads libcuda and libcufile on the calling thread (a few
/// milliseconds): a program that may never touch the GPU should not call it. The first device
/// read, `gdsroute_file_cufile_verdict` and `gdsroute_diagnose` wait for what is still running;
/// the verdict and its reason are those the first read would have reached itself. Returns OK
/// also where CUDA or libcufile is missing (the first device read reports why), when the set-up
/// is done or running already, after `gdsroute_shutdown` and in a forked child (where it does
/// nothing). Process exit waits up to 5 s for a set-up still running. Returns
/// `INVALID_SETTING` only when a setting in the environment is invalid (as every call does).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_begin_device_setup() -> Status {
    guard(crate::api::process::begin_device_setup)
}

symbol_version!(gdsroute_diagnose, gdsroute_shutdown);
symbol_version!(GDSROUTE_0.2: gdsroute_begin_device_setup);
symbol_version!(GDSROUTE_0.2: gdsroute_cufile_usable);
