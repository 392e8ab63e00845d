//! Parallel reads in flight (KvikIO's futures).

use super::{arg, guard, out, write_out};
use crate::io::operation::Operation;
use crate::abi::Status;

/// Sets `*done` to true once every task of the operation has stopped. Never blocks.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_op_poll(op: *const Operation, done: *mut bool) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live operation or NULL.
        let op = unsafe { arg(op, "op")? };
        let done = out(done, "done")?;
        // SAFETY: checked by `out`.
        unsafe { write_out(done, op.is_done()) };
        Ok(())
    })
}

/// Blocks until every task of the operation has stopped, then returns its result: on success the
/// bytes read in `*bytes_read` (contiguous from the requested offset; fewer than requested only
/// at end of file); otherwise the first error in file order (`IO_ERROR`, ...). May be called
/// again, and returns the same result. After it returns, the library writes nothing more into the
/// buffer. With a pool of more than one thread, the calling thread runs this read's tasks that no
/// worker has started (so it may call `pread`, CUDA and cuFile: do not wait inside a CUDA host
/// callback); with one pool thread it only waits, as KvikIO does. Called from inside a pool task
/// it also runs other queued tasks (no deadlock). For a `gdsroute_file_pwrite` operation
/// `*bytes_read` receives the bytes written, always the whole request; on error no count is given
/// (see `gdsroute_file_pwrite` for what reached the file). For a stream-ordered operation
/// (`gdsroute_file_read_async`, ...) it waits until the stream has reached the call and its
/// transfer ended; it returns at once once the stream has passed the call.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_op_wait(op: *const Operation, bytes_read: *mut usize) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live operation or NULL.
        let op = unsafe { arg(op, "op")? };
        let bytes_read = out(bytes_read, "bytes_read")?;
        let n = op.wait()?;
        // SAFETY: checked by `out`.
        unsafe { write_out(bytes_read, n) };
        Ok(())
    })
}

/// Frees an operation, first waiting for it if it is still running, as `gdsroute_op_wait` does
/// (so the buffer is no longer written when this returns). NULL is a no-op. A stream-ordered
/// operation is not waited for: its transfer still happens in stream order, and the buffer must
/// stay valid until the stream has passed the call (`gdsroute_file_read_async`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_op_free(op: *mut Operation) {
    let _ = guard(|| {
        if !op.is_null() {
            // SAFETY: the pointer came from Box::into_raw in gdsroute_file_pread, freed once.
            drop(unsafe { Box::from_raw(op) });
        }
        Ok(())
    });
}

symbol_version!(gdsroute_op_poll, gdsroute_op_wait, gdsroute_op_free);
