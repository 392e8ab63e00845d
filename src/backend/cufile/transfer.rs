//! The cuFile call of a task: its range moved between the file and device memory through cuFile,
//! on the calling thread with the memory's CUDA context current, inside the process's call gate.
//! A write is `cuFileWrite`, looped over short counts until the whole range is written.

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
        // SAFETY: forwarded from the caller.
        return unsafe { write(library, handle, path, kind, base, base_offset, len, offset) };
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

/// The `Write` arm of `transfer`: `cuFileWrite` until `len` bytes are written. Any negative
/// return is an error naming the file offset of the failing call (the bytes before it reached
/// the file; cuFile may have written part of the failing call's range too, as after a file-size
/// limit); a call that writes nothing is an error too, so a write either covers its range or
/// fails.
///
/// # Safety
/// As `transfer`, the memory only read.
#[allow(clippy::too_many_arguments)]
unsafe fn write(library: &CufileLibrary, handle: &CufileHandle<'_>, path: &str, kind: &MemoryKind, base: u64, base_offset: u64, len: usize, offset: u64) -> Result<usize> {
    let _call = CufileCall::enter().ok_or_else(|| Error::CufileUnavailable("cuFile was shut down".into()))?;
    let _context = ScopedContext::for_kind(kind).map_err(Error::from)?;
    let mut done = 0usize;
    while done < len {
        let pos = offset + done as u64;
        // SAFETY: forwarded from the caller; offsets fit i64 (validated by the file handle).
        let result = unsafe { library.write(handle, base as *const std::ffi::c_void, len - done, pos as i64, (base_offset + done as u64) as i64) };
        match result {
            None => return Err(Error::CufileUnavailable(format!("the loaded libcufile has no cuFileWrite (writing {path:?})"))),
            Some(Ok(0)) => return Err(Error::Cufile(format!("cuFileWrite of {path:?} at offset {pos} wrote 0 of {} bytes", len - done))),
            Some(Ok(n)) => done += n,
            Some(Err(IoFailure::Errno(errno))) => {
                return Err(Error::Io { op: "cuFileWrite", path: path.to_string(), offset: pos, source: std::io::Error::from_raw_os_error(errno) });
            }
            Some(Err(IoFailure::Cufile(code))) => {
                return Err(Error::Cufile(format!("cuFileWrite of {path:?} at offset {pos} returned {code}: {}", code_message(code))));
            }
        }
    }
    Ok(done)
}
