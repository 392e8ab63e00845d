//! cuFile's stream-ordered submission (`GDSROUTE_CUFILE_ASYNC=native`): one `cuFileReadAsync` /
//! `cuFileWriteAsync` per call on a stream registered with cuFile (`register`, behind
//! `gdsroute_stream_register`), its argument block kept alive until the stream passed the call.
//! The measured traps (docs/routing.md, "Stream-ordered calls"): without a current CUDA context
//! the call reports success and the stream later reports -12, so the caller makes the stream's
//! context current; with an unregistered buffer cuFile takes the first request's size as the
//! buffer's length and fails later requests at other offsets with -5, so the buffer is passed as
//! its own base with a zero buffer offset. On a stream cuFile has not registered, cuFile 1.15
//! blocks the caller until the stream's work is done: such streams are never given to it.

use super::gds::{CufileCall, opened, process_for};
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::settings::CompatMode;
use crate::sys::cuda::CallerStream;
use crate::sys::cufile::{CufileHandle, CufileLibrary, IoFailure, code_message};
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::Mutex;

/// Streams registered with cuFile by `register`, by address.
static REGISTERED: Mutex<Option<HashSet<CallerStream>>> = Mutex::new(None);

/// Registers `stream` with cuFile (`cuFileStreamRegister(stream, flags)`), opening cuFile if
/// needed for files of `compat_mode` (as a read's verdict would: AUTO's checks first). False
/// (nothing registered) under compat mode ON (cuFile is never called then), where cuFile cannot
/// be opened or lacks the stream API, or for a default stream (which names a different stream
/// on each thread or context). The stream's context must be current.
///
/// Errors: cuFile's refusal (`CUFILE_ERROR`).
pub(crate) fn register(stream: CallerStream, flags: u32, compat_mode: CompatMode) -> Result<bool> {
    if stream.is_default() || compat_mode == CompatMode::On {
        return Ok(false);
    }
    let Ok(gds) = process_for(compat_mode) else { return Ok(false) };
    let Some(_call) = CufileCall::enter() else { return Ok(false) };
    // SAFETY: the caller passes a live stream whose context is current.
    match unsafe { gds.library.stream_register(stream.as_raw().cast(), flags) } {
        None => Ok(false),
        Some(Err(e)) => Err(Error::Cufile(e.to_string())),
        Some(Ok(())) => {
            REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashSet::new).insert(stream);
            Ok(true)
        }
    }
}

/// Deregisters a stream `register` registered (`cuFileStreamDeregister`); nothing for another.
/// The stream's context must be current.
///
/// Errors: cuFile's refusal (`CUFILE_ERROR`).
pub(crate) fn deregister(stream: CallerStream) -> Result<()> {
    let was = REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).as_mut().is_some_and(|set| set.remove(&stream));
    let Some(gds) = opened().filter(|_| was) else { return Ok(()) };
    let Some(_call) = CufileCall::enter() else { return Ok(()) };
    // SAFETY: registered by `register`; the caller made its context current.
    match unsafe { gds.library.stream_deregister(stream.as_raw().cast()) } {
        Some(Err(e)) => Err(Error::Cufile(e.to_string())),
        _ => Ok(()),
    }
}

/// True when `register` registered `stream` (and it was not deregistered since).
pub(crate) fn is_registered(stream: CallerStream) -> bool {
    REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|set| set.contains(&stream))
}

/// Forgets `stream`'s registration without asking cuFile: a stream that can no longer be
/// deregistered (it, or its context, was destroyed first), so that a new stream made at its
/// address is not taken for a registered one.
pub(crate) fn forget(stream: CallerStream) {
    if let Some(set) = REGISTERED.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        set.remove(&stream);
    }
}

/// Counts `stream` as registered, as `register` does when cuFile took it (the CPU tests).
#[cfg(test)]
pub(crate) fn registered_for_tests(stream: CallerStream) {
    REGISTERED.lock().unwrap().get_or_insert_with(HashSet::new).insert(stream);
}

/// What cuFile reads and writes when the stream reaches the call: boxed, so that its address
/// stays put until the stream passed the call (the owner keeps it until then).
struct Block {
    size: usize,
    file_offset: i64,
    buf_offset: i64,
    bytes: isize,
}

/// A submitted call: its argument block, and what its result means.
pub(crate) struct Submitted {
    block: *mut Block,
    direction: Direction,
    path: String,
    offset: u64,
}

// SAFETY: the block is only read (by `result`) once the stream passed the call, when cuFile no
// longer writes it; it is freed by its one owner.
unsafe impl Send for Submitted {}

impl Submitted {
    /// The bytes moved, or the error cuFile wrote. Call once the stream passed the call.
    pub(crate) fn result(&self) -> Result<usize> {
        // SAFETY: the stream passed the call: cuFile has written `bytes` and touches the block no more.
        let (bytes, size) = unsafe { ((&raw const (*self.block).bytes).read_volatile(), (*self.block).size) };
        let op = match self.direction {
            Direction::Read => "cuFileReadAsync",
            Direction::Write => "cuFileWriteAsync",
        };
        if bytes >= 0 {
            let n = bytes as usize;
            if self.direction == Direction::Write && n != size {
                return Err(Error::Cufile(format!("{op} of {:?} at offset {} wrote {n} of {size} bytes", self.path, self.offset)));
            }
            return Ok(n);
        }
        // No errno travels with a -1 here (cuFile's own thread set it): reported as EIO.
        match IoFailure::decode(bytes, libc::EIO) {
            IoFailure::Errno(errno) => Err(Error::Io { op, path: self.path.clone(), offset: self.offset, source: std::io::Error::from_raw_os_error(errno) }),
            IoFailure::Cufile(code) => Err(Error::Cufile(format!("{op} of {:?} at offset {} returned {code}: {}", self.path, self.offset, code_message(code)))),
        }
    }
}

impl Drop for Submitted {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw in `submit`, freed once, after the stream passed the call
        // (the owner's contract; at exit it is never dropped).
        drop(unsafe { Box::from_raw(self.block) });
    }
}

/// Queues the transfer of `size` bytes at `offset` between the registered file and `buf` on
/// `stream`. `None` where the library lacks the call or cuFile was shut down (the caller then
/// takes the engine's stream mode).
///
/// # Safety
/// `buf .. buf + size` is device memory valid until the stream passed the call; the stream's
/// context is current; the returned value is kept until the stream passed the call (its block
/// is cuFile's until then).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn submit(
    direction: Direction,
    library: &CufileLibrary,
    handle: &CufileHandle<'_>,
    path: &str,
    buf: u64,
    size: usize,
    offset: u64,
    stream: CallerStream,
) -> Option<Result<Submitted>> {
    let _call = CufileCall::enter()?;
    let block = Box::into_raw(Box::new(Block { size, file_offset: offset as i64, buf_offset: 0, bytes: 0 }));
    let submitted = Submitted { block, direction, path: path.to_string(), offset };
    // SAFETY: the block lives until `submitted` is dropped, after the stream passed the call;
    // the buffer and context are the caller's contract.
    let r = unsafe {
        library.submit_async(
            direction == Direction::Write,
            handle,
            buf as *mut c_void,
            &raw mut (*block).size,
            &raw mut (*block).file_offset,
            &raw mut (*block).buf_offset,
            &raw mut (*block).bytes,
            stream.as_raw().cast(),
        )
    }?;
    Some(r.map(|()| submitted).map_err(|e| Error::Cufile(e.to_string())))
}
