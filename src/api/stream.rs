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
    let stream = CallerStream::from_raw(stream);
    // A default stream names a different stream on each thread or context: never registered,
    // and its context (the calling thread's) is not asked for.
    let registered = if settings::global()?.cufile_async() == CufileAsync::Native && !stream.is_default() {
        let (_, _scope) = cuda::enter_context_of(stream)?;
        stream_ordered::register(stream, flags, settings::global()?.compat_mode())?
    } else {
        false
    };
    crate::stats::record_stream_registration(registered);
    Ok(registered)
}

/// Deregisters a stream `register_stream` registered with cuFile; nothing for another.
///
/// Errors: CUDA's (the stream's context: the stream or its context was destroyed first, and
/// the registration is forgotten all the same); cuFile's refusal.
pub fn deregister_stream(stream: usize) -> Result<()> {
    let stream = CallerStream::from_raw(stream);
    if !stream_ordered::is_registered(stream) {
        return Ok(());
    }
    match cuda::enter_context_of(stream) {
        Ok((_, _scope)) => stream_ordered::deregister(stream),
        Err(e) => {
            stream_ordered::forget(stream);
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the stream's context cannot be entered (here: no CUDA at all; on a GPU, a stream
    /// destroyed before its deregistration), the call fails and the registration is forgotten,
    /// so that a later stream at the same address is not handed to cuFile as registered.
    #[test]
    fn a_stream_that_cannot_be_deregistered_is_forgotten() {
        if cuda::cuda().is_ok() {
            return; // a machine with CUDA: the bogus stream below must not reach the driver
        }
        let stream = CallerStream::from_raw(0x5eed_0000);
        stream_ordered::registered_for_tests(stream);
        assert!(deregister_stream(0x5eed_0000).is_err());
        assert!(!stream_ordered::is_registered(stream));
        deregister_stream(0x5eed_0000).unwrap();
    }
}
