//! Moving file bytes between the file and device memory through our POSIX backend and pinned
//! bounce buffers: a read (`bounce_in`) preads into a pinned half, copies it to the GPU, repeats;
//! a write (`bounce_out`) copies a piece from the GPU into a pinned half and `pwrite`s it while
//! the next piece's copy runs; both cut the task into the same pieces (`Pieces`). A read may
//! also take one copy from the registered page cache (`copy_from_registered`). Each runs on the
//! thread that calls it, with the memory's CUDA context made current there; which of them a task
//! takes is `task`'s. cuFile's own call is `backend::cufile::synchronous`.

use super::pools::bounce_pool_for;
use crate::backend::TaskFile;
use crate::backend::posix::direct_io::ALIGN;
use crate::backend::posix::{self, Delivered};
use crate::error::{Error, Result};
use crate::sys::cuda::{self, MemoryKind, ScopedContext};
use std::os::fd::RawFd;

fn cuda_error(e: cuda::CudaFailure) -> Error {
    e.into()
}

/// Piece of a task moved per pread/copy step. Two pieces per thread alternate, so the read of
/// one overlaps the copy of the other. Measured on the H200 (1 GiB warm, 16 threads, steady /
/// first read in the process, GB/s): 256 KiB 17.6/15.6, 1 MiB 36.7/24.7, 2 MiB 41.2/18.9,
/// 4 MiB 41.9/14.6, 8 MiB 42.6/9.9. Larger pinned buffers cost first reads (pinning), smaller
/// pieces cost per-step overhead; 2 MiB keeps 98% of the steady rate.
pub(crate) const PIPELINE_PIECE: u64 = 2 << 20;

/// Size of the pinned buffers: two pieces, or the configured bounce buffer size if smaller.
pub(crate) fn bounce_buffer_bytes(configured: u64) -> u64 {
    configured.min(2 * PIPELINE_PIECE)
}

/// Size of the pinned buffers for the bounce buffer size in effect now.
///
/// Errors: the settings could not be read (a bad environment value).
pub fn current_bounce_buffer_bytes() -> Result<u64> {
    Ok(bounce_buffer_bytes(crate::settings::global()?.bounce_buffer_size()))
}

/// Synchronises the stream when dropped, so that no copy still reads the bounce buffer after it
/// goes back to the pool, on every exit path.
struct DrainOnDrop(cuda::Stream);

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let _ = cuda::synchronize(self.0);
    }
}

/// The pieces a task moves through a pinned buffer of `buffer_len` bytes at `base`: its halves
/// (two where the buffer has room and the caller wants them, so that the transfer of one piece
/// overlaps the copy of the other) and the piece of a half moved per step. With direct I/O,
/// pieces of whole pages, so that both halves start on a page; each piece is then placed at its
/// file offset's distance past a page (`lead`, non-zero for the first piece of an unaligned range
/// only), so that the pages of the file and of the half line up and the direct transfers go
/// straight between the file and the pinned memory.
#[derive(Clone, Copy)]
struct Pieces {
    base: *mut u8,
    halves: usize,
    piece: usize,
    align: bool,
}

impl Pieces {
    fn new(base: *mut u8, buffer_len: usize, two_halves: bool, direct: bool) -> Pieces {
        let halves = if two_halves && buffer_len >= 2 { 2 } else { 1 };
        let half = buffer_len / halves;
        let align = direct && half >= ALIGN;
        let piece = if align { half - half % ALIGN } else { half };
        Pieces { base, halves, piece, align }
    }

    /// Step `step`'s piece, with `left` bytes of the task left from file offset `pos`: the half
    /// it uses, its memory in that half and its length (at most `left`).
    fn at(&self, step: usize, pos: u64, left: usize) -> (usize, *mut u8, usize) {
        let slot = step % self.halves;
        let lead = if self.align { (pos % ALIGN as u64) as usize } else { 0 };
        // slot * piece + lead + want <= the buffer's length: inside the buffer.
        (slot, self.base.wrapping_add(slot * self.piece + lead), left.min(self.piece - lead))
    }
}

/// Moves `len` bytes at `offset` of `file` from device memory at `src` into the file through
/// pinned bounce buffers: piece k is copied from the GPU into one pinned half while piece k - 1,
/// whose copy finished (its event), is written with `posix::write_range` (with `file.direct`, an
/// `O_DIRECT` descriptor of the file under `auto_direct_io_write`, the whole pages go straight
/// from the pinned memory to it). Returns `len`, or the first error (a `pwrite` error names the
/// file offset where it failed; the pieces before it reached the file).
///
/// # Safety
/// `src .. src + len` is device memory of `kind`, not changed by the caller during the call.
pub(super) unsafe fn bounce_out(file: TaskFile<'_>, kind: &MemoryKind, src: u64, len: usize, offset: u64, buffer_size: u64) -> Result<Delivered> {
    crate::trace::event("bounce_out.start", len as u64);
    let _context = ScopedContext::for_kind(kind).map_err(cuda_error)?;
    let stream = cuda::thread_stream().map_err(cuda_error)?;
    let events = cuda::thread_events().map_err(cuda_error)?;
    let mut buffer = bounce_pool_for(kind, bounce_buffer_bytes(buffer_size))?.acquire().map_err(cuda_error)?;
    // Direct writes go to the device in requests as large as the buffer (4 MiB): on the H200
    // machine's disk, 2 MiB requests wrote a new file at 1.33 GB/s where 4 MiB ones reach 2.1;
    // the copy of a piece (under 0.1 ms at 55 GB/s) is not worth overlapping with a 2 ms write.
    let pieces = Pieces::new(buffer.as_mut_ptr(), buffer.len(), file.direct.is_none(), file.direct.is_some());
    // Every exit path waits for the copies before the buffer goes back to the pool.
    let _drain = DrainOnDrop(stream);
    // The piece whose copy was queued last and is not written yet: (its half, memory, bytes, file offset).
    let mut queued: Option<(usize, *mut u8, usize, u64)> = None;
    let mut direct_bytes = 0usize;
    let mut flush = |(slot, host, n, pos): (usize, *mut u8, usize, u64)| -> Result<()> {
        events[slot].synchronize().map_err(cuda_error)?;
        // SAFETY: host .. host + n lies in the buffer's half `slot`, whose copy has finished.
        let written = unsafe { posix::write_range(file.fd, file.direct, host, n, pos) }
            .map_err(|f| Error::Io { op: "pwrite", path: file.path.to_string(), offset: f.offset, source: f.error })?;
        direct_bytes += written.direct_bytes;
        Ok(())
    };
    let mut done = 0usize;
    let mut step = 0usize;
    while done < len {
        let pos = offset + done as u64;
        let (slot, host, want) = pieces.at(step, pos, len - done);
        if pieces.halves == 1 {
            // One half: its previous piece must be written before the next copy overwrites it.
            if let Some(previous) = queued.take() {
                flush(previous)?;
            }
        }
        // SAFETY: src + done .. + want lies in the caller's range; host .. + want in the buffer's
        // half `slot`, whose last piece was written already (with two halves, when the piece
        // after it was queued) and which is ours until its event completes.
        unsafe { cuda::copy_device_to_host(host, src + done as u64, want, stream) }.map_err(cuda_error)?;
        events[slot].record(stream).map_err(cuda_error)?;
        if let Some(previous) = queued.replace((slot, host, want, pos)) {
            flush(previous)?;
        }
        done += want;
        step += 1;
    }
    if let Some(last) = queued.take() {
        flush(last)?;
    }
    crate::trace::event("bounce_out.end", done as u64);
    Ok(Delivered { bytes: done, not_cached: false, direct_bytes })
}

/// Moves `len` bytes at `offset` of `file` into device memory at `dst` through pinned bounce
/// buffers: preads a piece into one half of the buffer while the other half's copy runs. Only
/// the first piece's read is non-blocking (`posix::read_full_at_ahead`): if it finds its bytes
/// not all cached, the whole range is advised ahead; a range whose first piece is cached and
/// later ones are not is read with plain `pread`s and not counted. With `file.direct` (an
/// `O_DIRECT` descriptor of the file: the `auto_direct_io_read` setting) every piece is read by
/// `direct_io::read_full_at_direct` instead, into the page-aligned halves of the buffer. Returns
/// the bytes read (short only at end of file).
///
/// # Safety
/// `dst .. dst + len` is device memory of `kind` that the caller may overwrite.
pub(super) unsafe fn bounce_in(file: TaskFile<'_>, kind: &MemoryKind, dst: u64, len: usize, offset: u64, buffer_size: u64) -> Result<Delivered> {
    let fill = |step: usize, host: *mut u8, want: usize, pos: u64| {
        // SAFETY: `bounce_in_with` hands out a piece of its buffer that no copy reads any more.
        let read = unsafe { read_piece(file.fd, file.direct, host, want, pos, (step == 0).then_some(len)) };
        read.map_err(|f| Error::Io { op: "pread", path: file.path.to_string(), offset: f.offset, source: f.error })
    };
    // SAFETY: forwarded from the caller.
    unsafe { bounce_in_with(kind, dst, len, offset, buffer_size, file.direct.is_some(), fill) }
}

/// The loop of `bounce_in`, for any source of bytes: `fill(step, host, want, pos)` puts up to
/// `want` bytes of the source at file offset `pos` into pinned memory at `host` (step `step` of
/// the loop) and says what it delivered; each piece is copied to the GPU on the thread's stream
/// while the next one is filled into the other half of the buffer. A piece shorter than asked
/// ends the loop (end of the source). With `direct`, pieces of whole pages placed as the file's
/// (`Pieces`). Returns the bytes copied, the pieces' `not_cached` and `direct_bytes` together;
/// every copy has finished when it returns, on every path. `api::mapping` fills from a file
/// mapping.
///
/// # Safety
/// `dst .. dst + len` is device memory of `kind` that the caller may overwrite.
pub(crate) unsafe fn bounce_in_with(
    kind: &MemoryKind,
    dst: u64,
    len: usize,
    offset: u64,
    buffer_size: u64,
    direct: bool,
    mut fill: impl FnMut(usize, *mut u8, usize, u64) -> Result<Delivered>,
) -> Result<Delivered> {
    crate::trace::event("bounce.start", len as u64);
    let _context = ScopedContext::for_kind(kind).map_err(cuda_error)?;
    let stream = cuda::thread_stream().map_err(cuda_error)?;
    let events = cuda::thread_events().map_err(cuda_error)?;
    let mut buffer = bounce_pool_for(kind, bounce_buffer_bytes(buffer_size))?.acquire().map_err(cuda_error)?;
    crate::trace::event("bounce.buffer", 0);
    let pieces = Pieces::new(buffer.as_mut_ptr(), buffer.len(), true, direct);
    let _drain = DrainOnDrop(stream);
    let mut in_flight = [false; 2];
    let mut done = 0usize;
    let mut step = 0usize;
    let mut not_cached = false;
    let mut direct_bytes = 0usize;
    while done < len {
        let pos = offset + done as u64;
        let (slot, host, want) = pieces.at(step, pos, len - done);
        if in_flight[slot] {
            events[slot].synchronize().map_err(cuda_error)?;
        }
        // host .. host + want lies in the buffer's half `slot`; no copy reads it any more.
        let filled = fill(step, host, want, pos)?;
        crate::trace::event("bounce.filled", filled.bytes as u64);
        not_cached |= filled.not_cached;
        direct_bytes += filled.direct_bytes;
        let n = filled.bytes;
        if n == 0 {
            break;
        }
        // SAFETY: dst + done .. + n lies in the caller's range; the half stays untouched until
        // its event completes (checked above) or the stream drains (DrainOnDrop).
        unsafe { cuda::copy_host_to_device(dst + done as u64, host, n, stream) }.map_err(cuda_error)?;
        events[slot].record(stream).map_err(cuda_error)?;
        crate::trace::event("bounce.queued", n as u64);
        in_flight[slot] = true;
        done += n;
        step += 1;
        if n < want {
            break;
        }
    }
    cuda::synchronize(stream).map_err(cuda_error)?;
    crate::trace::event("bounce.end", done as u64);
    Ok(Delivered { bytes: done, not_cached, direct_bytes })
}

/// One piece read into the bounce buffer at `host`: through the `O_DIRECT` descriptor when there
/// is one, else with a first read that does not wait for the disk and asks the kernel to read the
/// rest of the task (`ahead`: the first piece of a task), else plain `pread`s.
///
/// # Safety
/// `host .. host + want` is writable and not read by a copy in flight.
unsafe fn read_piece(fd: RawFd, direct: Option<RawFd>, host: *mut u8, want: usize, pos: u64, ahead: Option<usize>) -> std::result::Result<Delivered, posix::ReadFailure> {
    if let Some(direct) = direct {
        // SAFETY: forwarded from the caller.
        return unsafe { posix::direct_io::read_full_at_direct(fd, direct, host, want, pos) }.map(Delivered::from);
    }
    match ahead {
        // SAFETY: forwarded from the caller.
        Some(ahead) => unsafe { posix::read_full_at_ahead(fd, host, want, pos, ahead) },
        // SAFETY: forwarded from the caller.
        None => unsafe { posix::read_full_at(fd, host, want, pos) }.map(|bytes| Delivered { bytes, not_cached: false, direct_bytes: 0 }),
    }
}

/// Copies `len` bytes from a registered page-cache mapping at `src` to device memory at `dst`
/// on the calling thread's stream, and waits for the copy (the mapping must outlive it).
///
/// # Safety
/// `src .. src + len` lies in a live `RegisteredMapping`; `dst .. dst + len` is device memory of
/// `kind` that the caller may overwrite.
pub(super) unsafe fn copy_from_registered(kind: &MemoryKind, dst: u64, src: *const u8, len: usize) -> Result<()> {
    let _context = ScopedContext::for_kind(kind).map_err(cuda_error)?;
    let stream = cuda::thread_stream().map_err(cuda_error)?;
    let _drain = DrainOnDrop(stream);
    // SAFETY: forwarded from the caller; registered memory is pinned, so the copy is a DMA read.
    unsafe { cuda::copy_host_to_device(dst, src, len, stream) }.map_err(cuda_error)?;
    cuda::synchronize(stream).map_err(cuda_error)
}

impl From<cuda::CudaFailure> for Error {
    fn from(e: cuda::CudaFailure) -> Error {
        match e {
            cuda::CudaFailure::Unavailable(_) | cuda::CudaFailure::Forked { .. } => Error::CudaUnavailable(e.to_string()),
            other => Error::Cuda(other.to_string()),
        }
    }
}
