//! CUDA streams of stream-ordered calls: registration (cuFile's `cuFileStreamRegister`).

use super::guard;
use crate::abi::Status;
use std::ffi::c_void;

/// The flags `cuFileStreamRegister` takes: `FIXED_BUF_OFFSET` (1), `FIXED_FILE_OFFSET` (2),
/// `FIXED_FILE_SIZE` (4), `PAGE_ALIGNED_INPUTS` (8).
const STREAM_FLAGS: u32 = 0xF;

/// Registers `stream` for stream-ordered calls, with cuFile's flags (`CU_FILE_STREAM_*`: 1 buffer
/// offset fixed at submission, 2 file offset fixed, 4 size fixed, 8 page-aligned inputs), as
/// KvikIO's `stream_register`. Optional: every stream works unregistered. This version serves
/// every stream-ordered call through its own waiter, on every route, and registers nothing with
/// cuFile: the call validates its arguments and is counted (`stream_registrations_skipped`).
/// Errors: `INVALID_ARGUMENT` (a flag outside 0..15).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_stream_register(stream: *mut c_void, flags: u32) -> Status {
    guard(|| {
        let _ = stream;
        if flags & !STREAM_FLAGS != 0 {
            return Err(crate::Error::InvalidArgument(format!("stream flags {flags:#x} have bits outside 0xf (CU_FILE_STREAM_*)")));
        }
        crate::stats::record_stream_registration_skipped();
        Ok(())
    })
}

/// Undoes `gdsroute_stream_register` (KvikIO's `stream_deregister`); call it before destroying a
/// registered stream. A stream never registered is accepted. Never fails.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_stream_deregister(stream: *mut c_void) -> Status {
    guard(|| {
        let _ = stream;
        Ok(())
    })
}

symbol_version!(GDSROUTE_0.2: gdsroute_stream_register, gdsroute_stream_deregister);
