//! Device memory of the library's own, for a call that needs a device destination other than the
//! caller's buffer (a worker's first cuFile read, made ahead of a stream-ordered call): one piece
//! of [`SCRATCH_BYTES`] per context, allocated at its first use and kept for the context's life.
//! The library never frees it: `cuMemFree` waits while a stream is held by a stream-ordered call
//! (docs/routing.md, "Stream-ordered calls"), and a context's memory goes with the context.

use super::error::{CudaFailure, check};
use cudarc::driver::sys;
use std::sync::Mutex;

/// The size of each context's piece: one page, the smallest read cuFile's direct I/O takes.
pub(crate) const SCRATCH_BYTES: usize = 4096;

/// (context address, device pointer) of the pieces made so far.
static PIECES: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());

/// The current context's piece, allocated now if it has none.
///
/// Errors: no current context, or `cuMemAlloc` failed.
pub(crate) fn scratch_of_current_context() -> Result<u64, CudaFailure> {
    let context = super::current_context()?.ok_or(CudaFailure::NoContext("scratch device memory"))?;
    let key = context.as_raw() as usize;
    let mut pieces = PIECES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&(_, ptr)) = pieces.iter().find(|(c, _)| *c == key) {
        return Ok(ptr);
    }
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: cuda() succeeded (current_context asks it first); a context is current; valid
    // out-pointer.
    check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, SCRATCH_BYTES) })?;
    pieces.push((key, ptr));
    Ok(ptr)
}
