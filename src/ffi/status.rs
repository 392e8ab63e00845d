//! Status codes and the thread's last error.

use super::{copy_to_c_buffer, with_last_error};
use crate::abi::Status;
use std::ffi::c_char;

/// A static, NUL-terminated description of a status code.
///
/// Returns "unknown status code" for values that are not a `gdsroute_status`. The string is
/// never freed. Thread safety: any thread.
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_status_str(code: u32) -> *const c_char {
    match Status::from_code(code) {
        Some(status) => status.description().as_ptr(),
        None => c"unknown status code".as_ptr(),
    }
}

/// The status of the last failed gdsroute call on this thread, or `GDSROUTE_STATUS_OK` if none
/// failed yet. Successful calls do not clear it.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_last_error_status() -> Status {
    with_last_error(|last| last.map_or(Status::Ok, |e| e.status))
}

/// The errno behind the last failed call on this thread (0 if it was not a system-call failure).
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_last_error_errno() -> i32 {
    with_last_error(|last| last.map_or(0, |e| e.os_error))
}

/// Copies the message of the last failed call on this thread into `buf`, with snprintf
/// semantics: at most `buf_len - 1` bytes plus a NUL.
///
/// Returns the message's full length (without the NUL); call with `buf = NULL, buf_len = 0` to
/// size a buffer. The message names what failed with its context (path, offset, errno text,
/// offending setting). An empty string if no call has failed on this thread.
///
/// Safety: `buf` must be writable for `buf_len` bytes (or NULL with `buf_len` 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_last_error_message(buf: *mut c_char, buf_len: usize) -> usize {
    with_last_error(|last| {
        let text = last.map_or(&[][..], |e| e.message.as_bytes());
        // SAFETY: the caller's contract above.
        unsafe { copy_to_c_buffer(text, buf, buf_len) }
    })
}

symbol_version!(gdsroute_status_str, gdsroute_last_error_status, gdsroute_last_error_errno, gdsroute_last_error_message);
