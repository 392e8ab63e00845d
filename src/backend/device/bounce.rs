//! Moving file bytes into device memory through our POSIX backend: pread into a pinned bounce
//! buffer, copy to the GPU, repeat; or one copy from the registered page cache. Each runs on the
//! thread that calls it, with the destination's CUDA context made current there. Writes take the
//! same buffers the other way: copy a piece from the GPU into a pinned half, `pwrite` it while
//! the next piece's copy runs. cuFile's own transfer is `backend::cufile::transfer`.

use super::pools::bounce_pool_for;
use crate::sys::cuda::{self, MemoryKind, ScopedContext};
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::backend::posix::{self, Delivered};
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
pub fn bounce_buffer_bytes(configured: u64) -> u64 {
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

/// Moves `len` bytes at `offset` of `fd` between the file and device memory at `dev` through
/// pinned bounce buffers, in `direction` (a write: `bounce_out`). A read
/// preads a piece into one half of the buffer while the other half's copy runs. Only the
/// first piece's read is non-blocking (`posix::read_full_at_ahead`): if it finds its bytes not
/// all cached, the whole range is advised ahead; a range whose first piece is cached and later
/// ones are not is read with plain `pread`s and not counted. With `direct` (an `O_DIRECT`
/// descriptor of the file: the `auto_direct_io_read` setting) every piece is read by
/// `direct_io::read_full_at_direct` instead, into the page-aligned halves of the buffer (a write:
/// `posix::write_range`, whole pages direct). Returns the bytes read (short only at end of
/// file); a write returns `len` or an error.
///
/// # Safety
/// `dev .. dev + len` is device memory of `kind` that the caller may overwrite (a read) or read
/// (a write).
#[allow(clippy::too_many_arguments)] // the range, its descriptors and its buffer size
pub unsafe fn bounce(direction: Direction, fd: RawFd, direct: Option<RawFd>, path: &str, kind: &MemoryKind, dev: u64, len: usize, offset: u64, buffer_size: u64) -> Result<Delivered> {
    match direction {
        // SAFETY: forwarded from the caller.
        Direction::Read => unsafe { bounce_in(fd, direct, path, kind, dev, len, offset, buffer_size) },
        // SAFETY: forwarded from the caller.
        Direction::Write => unsafe { bounce_out(fd, direct, path, kind, dev, len, offset, buffer_size) },
    }
}

/// `bounce` from device memory at `src` into the file: piece k is copied from the GPU into one
/// pinned half while piece k - 1, whose copy finished (its event), is written with
/// `posix::write_range` (with `direct`, pieces are placed in the halves as `bounce_in` places
/// them, so that the whole pages go straight from the pinned memory to the `O_DIRECT`
/// descriptor). Returns `len`, or the first error (a `pwrite` error names the file offset where
/// it failed; the pieces before it reached the file).
///
/// # Safety
/// `src .. src + len` is device memory of `kind`, not changed by the caller during the call.
#[allow(clippy::too_many_arguments)] // as `bounce`
unsafe fn bounce_out(fd: RawFd, direct: Option<RawFd>, path: &str, kind: &MemoryKind, src: u64, len: usize, offset: u64, buffer_size: u64) -> Result<Delivered> {
    crate::trace::event("bounce_out.start", len as u64);
    let _context = ScopedContext::for_kind(kind).map_err(cuda_error)?;
    let stream = cuda::thread_stream().map_err(cuda_error)?;
    let events = cuda::thread_events().map_err(cuda_error)?;
    let mut buffer = bounce_pool_for(kind, bounce_buffer_bytes(buffer_size))?.acquire().map_err(cuda_error)?;
    // Direct writes go to the device in requests as large as the buffer (4 MiB): on the H200
    // machine's disk, 2 MiB requests wrote a new file at 1.33 GB/s where 4 MiB ones reach 2.1;
    // the copy of a piece (under 0.1 ms at 55 GB/s) is not worth overlapping with a 2 ms write.
    let halves = if buffer.len() >= 2 && direct.is_none() { 2 } else { 1 };
    let (piece, align_pieces) = piece_size(buffer.len() / halves, direct.is_some());
    let base = buffer.as_mut_ptr();
    // Every exit path waits for the copies before the buffer goes back to the pool.
    let _drain = DrainOnDrop(stream);
    // The piece whose copy was queued last and is not written yet: (its memory, bytes, file offset).
    let mut queued: Option<(usize, *mut u8, usize, u64)> = None;
    let mut direct_bytes = 0usize;
    let mut flush = |(slot, host, n, pos): (usize, *mut u8, usize, u64)| -> Result<()> {
        events[slot].synchronize().map_err(cuda_error)?;
        // SAFETY: host .. host + n lies in the buffer's half `slot`, whose copy has finished.
        let written = unsafe { posix::write_range(fd, direct, host, n, pos) }
            .map_err(|f| Error::Io { op: "pwrite", path: path.to_string(), offset: f.offset, source: f.error })?;
        direct_bytes += written.direct_bytes;
        Ok(())
    };
    let mut done = 0usize;
    let mut step = 0usize;
    while done < len {
        let slot = step % halves;
        if halves == 1 {
            // One half: its previous piece must be written before the next copy overwrites it.
            if let Some(previous) = queued.take() {
                flush(previous)?;
            }
        }
        let pos = offset + done as u64;
        let lead = if align_pieces { (pos % crate::backend::posix::direct_io::ALIGN as u64) as usize } else { 0 };
        let want = (len - done).min(piece - lead);
        // SAFETY: slot * piece + lead + want <= buffer.len(); the piece that used this half last
        // was written already (with two halves, when the piece after it was queued).
        let host = unsafe { base.add(slot * piece + lead) };
        // SAFETY: src + done .. + want lies in the caller's range; the half is ours until its
        // event completes.
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

/// `bounce` from the file into device memory at `dst`.
///
/// # Safety
/// As `bounce`.
#[allow(clippy::too_many_arguments)]
unsafe fn bounce_in(fd: RawFd, direct: Option<RawFd>, path: &str, kind: &MemoryKind, dst: u64, len: usize, offset: u64, buffer_size: u64) -> Result<Delivered> {
    crate::trace::event("bounce.start", len as u64);
    let _context = ScopedContext::for_kind(kind).map_err(cuda_error)?;
    let stream = cuda::thread_stream().map_err(cuda_error)?;
    let events = cuda::thread_events().map_err(cuda_error)?;
    let mut buffer = bounce_pool_for(kind, bounce_buffer_bytes(buffer_size))?.acquire().map_err(cuda_error)?;
    crate::trace::event("bounce.buffer", 0);
    let halves = if buffer.len() >= 2 { 2 } else { 1 };
    let (piece, align_pieces) = piece_size(buffer.len() / halves, direct.is_some());
    let base = buffer.as_mut_ptr();
    let _drain = DrainOnDrop(stream);
    let mut in_flight = [false; 2];
    let mut done = 0usize;
    let mut step = 0usize;
    let mut not_cached = false;
    let mut direct_bytes = 0usize;
    while done < len {
        let slot = step % halves;
        if in_flight[slot] {
            events[slot].synchronize().map_err(cuda_error)?;
        }
        let pos = offset + done as u64;
        let lead = if align_pieces { (pos % crate::backend::posix::direct_io::ALIGN as u64) as usize } else { 0 };
        let want = (len - done).min(piece - lead);
        // SAFETY: slot * piece + lead + want <= buffer.len(); no copy reads this half any more.
        let host = unsafe { base.add(slot * piece + lead) };
        // SAFETY: as above.
        let read = unsafe { read_piece(fd, direct, host, want, pos, (step == 0).then_some(len)) };
        let read = read.map(|d| {
            not_cached |= d.not_cached;
            direct_bytes += d.direct_bytes;
            d.bytes
        });
        let n = read.map_err(|e| Error::Io { op: "pread", path: path.to_string(), offset: pos, source: e })?;
        if n == 0 {
            break;
        }
        // SAFETY: dst + done .. + n lies in the caller's range; the half stays untouched until
        // its event completes (checked above) or the stream drains (DrainOnDrop).
        unsafe { cuda::copy_host_to_device(dst + done as u64, host, n, stream) }.map_err(cuda_error)?;
        events[slot].record(stream).map_err(cuda_error)?;
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

/// The piece of a half moved per step, and whether pieces are aligned for direct I/O: with
/// direct I/O, pieces of whole pages, so that both halves start on a page; each piece is then
/// placed at its file offset's distance past a page (`lead`, non-zero for the first piece of an
/// unaligned range only), so that the pages of the file and of the half line up and the direct
/// reads go straight into the pinned memory.
fn piece_size(half: usize, direct: bool) -> (usize, bool) {
    let align = direct && half >= crate::backend::posix::direct_io::ALIGN;
    if align { (half - half % crate::backend::posix::direct_io::ALIGN, true) } else { (half, false) }
}

/// One piece read into the bounce buffer at `host`: through the `O_DIRECT` descriptor when there
/// is one, else with a first read that does not wait for the disk and asks the kernel to read the
/// rest of the task (`ahead`: the first piece of a task), else plain `pread`s.
///
/// # Safety
/// `host .. host + want` is writable and not read by a copy in flight.
unsafe fn read_piece(fd: RawFd, direct: Option<RawFd>, host: *mut u8, want: usize, pos: u64, ahead: Option<usize>) -> std::io::Result<Delivered> {
    if let Some(direct) = direct {
        // SAFETY: forwarded from the caller.
        let r = unsafe { crate::backend::posix::direct_io::read_full_at_direct(fd, direct, host, want, pos) }?;
        return Ok(Delivered { bytes: r.bytes, not_cached: false, direct_bytes: r.direct_bytes });
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
pub unsafe fn copy_from_registered(kind: &MemoryKind, dst: u64, src: *const u8, len: usize) -> Result<()> {
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
