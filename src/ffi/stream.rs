//! CUDA streams of stream-ordered calls: registration (cuFile's `cuFileStreamRegister`; the
//! Rust side is `api::stream`).

use super::guard;
use crate::abi::Status;
use std::ffi::c_void;

/// Registers `stream` (a `CUstream`) for stream-ordered calls, with cuFile's flags
/// (`CU_FILE_STREAM_*`: 1 buffer offset fixed at submission, 2 file offset fixed, 4 size fixed, 8
/// page-aligned inputs), as KvikIO's `stream_register`. Optional: every stream works
/// unregistered, on every route, through gdsroute's own stream mode. Under
/// `GDSROUTE_CUFILE_ASYNC=native`, unless the compat mode setting is ON (which never calls
/// cuFile), it calls `cuFileStreamRegister` (opening cuFile if needed, after AUTO's checks), and
/// later calls on this stream that cuFile serves go through `cuFileReadAsync` /
/// `cuFileWriteAsync` (counted in `stream_registrations_cufile`); deregister such a stream before
/// destroying it, and after a CUDA error on it (cuFile's rule). Otherwise, and for a default
/// stream, nothing is registered and the call is counted (`stream_registrations_skipped`).
/// Errors: `INVALID_ARGUMENT` (a flag outside 0..15), `CUDA_ERROR` (a bad stream, under
/// `native`), `CUFILE_ERROR` (cuFile refused).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_stream_register(stream: *mut c_void, flags: u32) -> Status {
    guard(|| crate::api::stream::register_stream(stream as usize, flags).map(|_| ()))
}

/// Undoes `gdsroute_stream_register` (KvikIO's `stream_deregister`): `cuFileStreamDeregister`
/// for a stream registered with cuFile, nothing for another (a stream never registered is
/// accepted). Errors: `CUDA_ERROR` (the stream or its context was destroyed first: the
/// registration is forgotten all the same), `CUFILE_ERROR`.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_stream_deregister(stream: *mut c_void) -> Status {
    guard(|| crate::api::stream::deregister_stream(stream as usize))
}

symbol_version!(GDSROUTE_0.2: gdsroute_stream_register, gdsroute_stream_deregister);
