//! The copy engine's way of relaying (`io::relay`'s queued copies): the operations a call queues on
//! the caller's stream at the call (copies between the ring and the caller's buffer, waits and
//! stores on the call's control words), and their driver calls.

use super::{Control, Slots, take_control};
use crate::sys::cuda::driver::cuda;
use crate::sys::cuda::error::{CudaFailure, check};
use crate::sys::cuda::stream::CallerStream;
use cudarc::driver::sys;
use once_cell::sync::OnceCell;
use std::ffi::c_void;

/// One operation of a call's queued copies on the caller's stream (`queue`): the copy engine's
/// way of relaying, where the call's size is known at the call. `io::relay` lists them; the CPU
/// tests play the same list over host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamOp {
    /// Stores `value` in control word `word` once the stream's earlier work has finished (its
    /// writes visible first).
    Write { word: usize, value: u32 },
    /// Holds the stream until control word `word` is at or past `value` (a cyclic comparison).
    Wait { word: usize, value: u32 },
    /// Copies `len` bytes from the ring at `ring_offset` to the caller's buffer at `buffer_offset`.
    ToBuffer { ring_offset: usize, buffer_offset: u64, len: usize },
    /// Copies `len` bytes from the caller's buffer at `buffer_offset` to the ring at `ring_offset`.
    ToRing { ring_offset: usize, buffer_offset: u64, len: usize },
    /// Copies `len` bytes from registered host memory at `host` (a registered page-cache window,
    /// kept registered until the stream has passed the call) to the caller's buffer at
    /// `buffer_offset`.
    FromRegistered { host: usize, buffer_offset: u64, len: usize },
}

/// True when the driver has the stream memory operations `queue` needs (checked once).
pub(crate) fn can_queue() -> bool {
    static PRESENT: OnceCell<bool> = OnceCell::new();
    *PRESENT.get_or_init(|| crate::sys::cuda::stream::stream_wait_available() && crate::sys::cuda::driver::has_symbol("cuStreamWriteValue32_v2"))
}

/// A control block for a call's queued copies (one progress word).
///
/// Errors: the CUresult of `cuMemHostAlloc` (a new page of control blocks).
pub(crate) fn control_for_queue() -> Result<Control, CudaFailure> {
    take_control(1)
}

/// Queues `ops` on `stream` (of the context current on this thread), with `control`'s words, the
/// packed `ring`, and the caller's device `buffer`. Once they are queued, the call needs no CUDA
/// call: host threads fill or drain the ring and store words.
///
/// On an error part of the list may be queued: the caller lets it pass (`Control::stop` and
/// `release_pieces`) and synchronises the stream before touching the buffer.
///
/// Errors: `Unavailable`/`Forked`; `Unavailable` without stream memory operations (`can_queue`);
/// the CUresult of `cuStreamWriteValue32_v2`, `cuStreamWaitValue32_v2`, `cuMemcpyHtoDAsync` or
/// `cuMemcpyDtoHAsync`.
pub(crate) fn queue(ops: &[StreamOp], stream: CallerStream, control: &Control, ring: &Slots, buffer: u64) -> Result<(), CudaFailure> {
    cuda()?;
    if !can_queue() {
        return Err(CudaFailure::Unavailable("the CUDA driver lacks cuStreamWriteValue32_v2 or cuStreamWaitValue32_v2".into()));
    }
    let word = |w: usize| control.device + 4 * w as u64;
    for op in ops {
        // SAFETY (each): cuda() succeeded and the symbols are present (`can_queue`); the control
        // block and the ring are pinned, mapped and never freed; the caller's buffer is valid
        // device memory of at least the offsets' reach (the call's contract) on the stream's
        // context, which is current.
        match *op {
            StreamOp::Write { word: w, value } => check("cuStreamWriteValue32_v2", unsafe {
                sys::cuStreamWriteValue32_v2(stream.as_raw(), word(w), value, sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32)
            })?,
            StreamOp::Wait { word: w, value } => check("cuStreamWaitValue32_v2", unsafe {
                sys::cuStreamWaitValue32_v2(stream.as_raw(), word(w), value, sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32)
            })?,
            StreamOp::ToBuffer { ring_offset, buffer_offset, len } => check("cuMemcpyHtoDAsync", unsafe {
                sys::cuMemcpyHtoDAsync_v2(buffer + buffer_offset, (ring.host + ring_offset) as *const c_void, len, stream.as_raw())
            })?,
            StreamOp::ToRing { ring_offset, buffer_offset, len } => check("cuMemcpyDtoHAsync", unsafe {
                sys::cuMemcpyDtoHAsync_v2((ring.host + ring_offset) as *mut c_void, buffer + buffer_offset, len, stream.as_raw())
            })?,
            // SAFETY: as above; the host range is registered and stays so until the call is
            // retired and the stream has left it (`retire`'s `keep`).
            StreamOp::FromRegistered { host, buffer_offset, len } => check("cuMemcpyHtoDAsync", unsafe {
                sys::cuMemcpyHtoDAsync_v2(buffer + buffer_offset, host as *const c_void, len, stream.as_raw())
            })?,
        }
    }
    Ok(())
}
