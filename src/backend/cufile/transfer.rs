//! The cuFile call of a task: its range moved between the file and device memory through cuFile,
//! on the calling thread with the memory's CUDA context current, inside the process's call gate.
//! A `Write` (`cuFileWrite`) is `Direction::unsupported` today.

use super::gds::CufileCall;
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::sys::cuda::{MemoryKind, ScopedContext};
use crate::sys::cufile::{CufileHandle, CufileLibrary, IoFailure, code_message};

/// Moves `len` bytes at `offset` of the registered file between it and the device memory at
/// `base + base_offset`, in `direction`: `cuFileRead` looped over short counts until the range is
/// full or the file ends. Returns the bytes moved (fewer only at end of file).
///
/// # Safety
/// `base + base_offset .. + len` is device memory of `kind`, inside the allocation at `base`.
#[allow(clippy::too_many_arguments)] // one flat call mirroring cuFileRead's own arguments
pub unsafe fn transfer(
    direction: Direction,
    library: &CufileLibrary,
    handle: &CufileHandle<'_>,
    path: &str,
    kind: &MemoryKind,
    base: u64,
    base_offset: u64,
    len: usize,
    offset: u64,
) -> Result<usize> {
    if direction == Direction::Write {
        return Err(direction.unsupported("a cuFile transfer")); // cuFileWrite comes with writes
    }
    let _call = CufileCall::enter().ok_or_else(|| Error::CufileUnavailable("cuFile was shut down".into()))?;
    let _context = ScopedContext::for_kind(kind).map_err(Error::from)?;
    let mut done = 0usize;
    while done < len {
        let pos = offset + done as u64;
        // SAFETY: forwarded from the caller; offsets fit i64 (validated by the file handle).
        let result = unsafe {
            library.read(handle, base as *mut std::ffi::c_void, len - done, pos as i64, (base_offset + done as u64) as i64)
        };
        match result {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(IoFailure::Errno(errno)) => {
                return Err(Error::Io { op: "cuFileRead", path: path.to_string(), offset: pos, source: std::io::Error::from_raw_os_error(errno) });
            }
            Err(IoFailure::Cufile(code)) => {
                return Err(Error::Cufile(format!("cuFileRead of {path:?} at offset {pos} returned {code}: {}", code_message(code))));
            }
        }
    }
    Ok(done)
}
