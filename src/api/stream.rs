//! CUDA streams of stream-ordered calls: their registration with cuFile (KvikIO's
//! `stream_register` / `stream_deregister`), which only `GDSROUTE_CUFILE_ASYNC=native` uses.

use crate::backend::cufile::stream_ordered;
use crate::error::{Error, Result};
use crate::settings::{self, CufileAsync};
use crate::sys::cuda::{self, CallerStream};

/// The flags `cuFileStreamRegister` takes: `FIXED_BUF_OFFSET` (1), `FIXED_FILE_OFFSET` (2),
/// `FIXED_FILE_SIZE` (4), `PAGE_ALIGNED_INPUTS` (8).
const STREAM_FLAGS: u32 = 0xF;

/// Registers the stream `stream` (a `CUstream` as an address) with cuFile under
/// `GDSROUTE_CUFILE_ASYNC=native`; otherwise (or where cuFile cannot take it) nothing, counted.
/// Returns whether cuFile registered it.
///
/// Errors: `InvalidArgument` for flags outside 0..15; CUDA's (a bad stream); cuFile's refusal.
pub fn register_stream(stream: usize, flags: u32) -> Result<bool> {
    if flags & !STREAM_FLAGS != 0 {
        return Err(Error::InvalidArgument(format!("stream flags {flags:#x} have bits outside 0xf (CU_FILE_STREAM_*)")));
    }
    let registered = if settings::global()?.cufile_async() == CufileAsync::Native {
        let stream = CallerStream::from_raw(stream);
        let (_, _scope) = cuda::enter_context_of(stream)?;
        stream_ordered::register(stream, flags)?
    } else {
        false
    };
    crate::stats::record_stream_registration(registered);
    Ok(registered)
}

/// Deregisters a stream `register_stream` registered with cuFile; nothing for another.
///
/// Errors: CUDA's (the stream's context); cuFile's refusal.
pub fn deregister_stream(stream: usize) -> Result<()> {
    let stream = CallerStream::from_raw(stream);
    if !stream_ordered::is_registered(stream) {
        return Ok(());
    }
    let (_, _scope) = cuda::enter_context_of(stream)?;
    stream_ordered::deregister(stream)
}
