//! cuFile's synchronous call, the one submission gdsroute makes today: a task's range moved
//! between the file and device memory by `cuFileRead` / `cuFileWrite` on the calling thread, with
//! the memory's CUDA context current, inside the process's call gate, looped over short counts.
//! The other submissions go beside it (`backend::cufile`'s doc says where).

use super::gds::CufileCall;
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::sys::cuda::{self, MemoryKind, ScopedContext};
use crate::sys::cufile::{CufileHandle, CufileLibrary, IoFailure, code_message};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Mutex;

thread_local! {
    /// This thread has made a cuFile read or write (cuFile's per-thread state exists).
    static THREAD_SET_UP: Cell<bool> = const { Cell::new(false) };
}
/// Held by a thread through its first cuFile read or write.
static FIRST_CALLS: Mutex<()> = Mutex::new(());

/// Moves `len` bytes at `offset` of the registered file between it and the device memory at
/// `base + base_offset`, in `direction`, looping over short counts. A read (`cuFileRead`) stops
/// early only at end of file and returns the bytes read. A write (`cuFileWrite`) returns `len` or
/// fails: any negative return is an error naming the file offset of the failing call (the bytes
/// before it reached the file; cuFile may have written part of the failing call's range too, as
/// after a file-size limit), and a call that writes nothing is an error too.
///
/// # Safety
/// `base + base_offset .. + len` is device memory of `kind`, inside the allocation at `base`
/// (a write only reads it).
#[allow(clippy::too_many_arguments)] // one flat call mirroring cuFileRead's own arguments
pub(crate) unsafe fn task(
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
    let op = match direction {
        Direction::Read => "cuFileRead",
        Direction::Write => "cuFileWrite",
    };
    let _call = CufileCall::enter().ok_or_else(|| Error::CufileUnavailable("cuFile was shut down".into()))?;
    let _context = ScopedContext::for_kind(kind).map_err(Error::from)?;
    crate::trace::event("cufile_task.start", len as u64);
    // A thread's first cuFile call sets up cuFile's state for that thread; those run one at a
    // time in the process. cuFile serialises that set-up itself (docs/performance.md, "The first
    // read of a fresh process"), so this costs nothing measurable, and it ended the SIGFPE inside
    // cuFileRead with thousands of small files in flight (docs/reliability.md, "Known issues in
    // detail": 6 crashes in 6 runs before, none in 20 after, on the H200).
    let _first_call = (!THREAD_SET_UP.get()).then(|| FIRST_CALLS.lock().unwrap_or_else(|p| p.into_inner()));
    // SAFETY: forwarded from the caller.
    let done = unsafe { transfer(direction, op, library, handle, path, base, base_offset, len, offset) };
    THREAD_SET_UP.set(true);
    crate::trace::event("cufile_task.end", *done.as_ref().unwrap_or(&0) as u64);
    done
}

/// Makes the calling thread's first cuFile call now, unless it has made one: a read of the
/// file's first [`cuda::SCRATCH_BYTES`] into the scratch device memory of `kind`'s context, its
/// result ignored (a file shorter than that reads what it has). cuFile sets up a thread's state
/// at its first call, creating a CUDA stream, and that waits while another thread sits in a
/// synchronous CUDA call behind a stream held by a stream-ordered call; so a pool's workers make
/// that call before such a call makes its stream wait (`io::warm_up`).
pub(crate) fn set_up_thread(library: &CufileLibrary, handle: &CufileHandle<'_>, path: &str, kind: &MemoryKind) {
    if THREAD_SET_UP.get() {
        return;
    }
    let Ok(_context) = ScopedContext::for_kind(kind) else { return };
    let Ok(scratch) = cuda::scratch_of_current_context() else { return };
    // SAFETY: the scratch piece is device memory of this context, SCRATCH_BYTES long, and no one
    // else's bytes.
    let _ = unsafe { task(Direction::Read, library, handle, path, kind, scratch, 0, cuda::SCRATCH_BYTES, 0) };
}

/// The loop of [`task`] over cuFile's short counts, inside the caller's call gate and context
/// (`batch` finishes a batch read that came back short with it).
///
/// # Safety
/// As for [`task`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn transfer(
    direction: Direction,
    op: &'static str,
    library: &CufileLibrary,
    handle: &CufileHandle<'_>,
    path: &str,
    base: u64,
    base_offset: u64,
    len: usize,
    offset: u64,
) -> Result<usize> {
    let mut done = 0usize;
    while done < len {
        let pos = offset + done as u64;
        let dev_offset = (base_offset + done as u64) as i64;
        // SAFETY: forwarded from the caller; offsets fit i64 (validated by the file handle).
        let result = unsafe {
            match direction {
                Direction::Read => Some(library.read(handle, base as *mut c_void, len - done, pos as i64, dev_offset)),
                Direction::Write => library.write(handle, base as *const c_void, len - done, pos as i64, dev_offset),
            }
        };
        match result {
            None => return Err(Error::CufileUnavailable(format!("the loaded libcufile has no cuFileWrite (writing {path:?})"))),
            Some(Ok(0)) => match direction {
                Direction::Read => break, // end of file
                Direction::Write => return Err(Error::Cufile(format!("cuFileWrite of {path:?} at offset {pos} wrote 0 of {} bytes", len - done))),
            },
            Some(Ok(n)) => done += n,
            Some(Err(IoFailure::Errno(errno))) => {
                return Err(Error::Io { op, path: path.to_string(), offset: pos, source: std::io::Error::from_raw_os_error(errno) });
            }
            Some(Err(IoFailure::Cufile(code))) => {
                return Err(Error::Cufile(format!("{op} of {path:?} at offset {pos} returned {code}: {}", code_message(code))));
            }
        }
    }
    Ok(done)
}
