//! Batches of reads and writes over several files (the Rust side is `api::batch`).

use super::{arg, guard, out, write_out};
use crate::abi::{BATCH_READ, BATCH_WRITE, BatchEntry, BatchResult, Status};
use crate::api::batch::{Batch, BatchOp};
use crate::direction::Direction;
use crate::error::Error;
use std::time::Duration;

/// Makes a batch with room for `max_entries` entries in flight (1 to
/// `GDSROUTE_BATCH_MAX_ENTRIES`): submitted with `gdsroute_batch_submit`, their completions not
/// yet returned by `gdsroute_batch_wait`. Entries may mix files, memory kinds (host, pinned,
/// device, managed) and directions, on every route: each entry is routed as a
/// `gdsroute_file_pread` or `_pwrite` of its size would be (the GDS threshold applies per entry;
/// an entry above the task size is split into tasks), and the tasks of a submission run on the
/// pool of their files (unlike KvikIO's batch, handles in compat mode are taken). Free it with
/// `gdsroute_batch_free`. Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (`max_entries` out of
/// range).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_batch_create(max_entries: usize, batch: *mut *mut Batch) -> Status {
    guard(|| {
        let batch = out(batch, "batch")?;
        let made = Box::new(Batch::new(max_entries)?);
        // SAFETY: checked by `out`.
        unsafe { write_out(batch, Box::into_raw(made)) };
        Ok(())
    })
}

/// Submits `count` entries at `entries` (read from there during the call only), all or none.
/// The call plans every entry on the calling thread, then returns without waiting for any bytes
/// to move (they move on the pool), but planning may wait: a file's first device entry routed
/// to cuFile may open cuFile's driver and register the file, and every device entry routed to
/// cuFile synchronises the CUDA null stream of its context first (cuFile is not ordered with
/// it), as `gdsroute_file_pread` does. Every entry is checked first: on `NULL_ARGUMENT`
/// (`entries` with `count` > 0, an entry's `file`, or its `buf` with `size` > 0),
/// `INVALID_ENUM` (`opcode`), `INVALID_ARGUMENT` (`reserved` not 0, or more than `max_entries`
/// in flight after the submission, checked before `entries` is read) nothing is submitted, and
/// the message names the entry (`entries[i]`). An entry that cannot start (a closed handle:
/// `CLOSED_HANDLE`; a write to a handle opened "r": `IO_ERROR`, `EBADF`; a range past `off_t`:
/// `OVERFLOW`) is submitted and completes at once with that status. Each entry's buffer must
/// stay valid, and a write's unchanged, until its completion has been returned by
/// `gdsroute_batch_wait` (or `gdsroute_batch_free` returned). A handle may be closed or freed
/// while its entries run: they keep its descriptor. `count` 0 does nothing. Counters: a
/// submission is one call for its reads (`calls`) and one for its writes (`write_calls`),
/// process-wide and on each handle with entries of that direction, counted once all of them
/// settled (failed if any did); each entry's tasks and bytes are its handle's.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_batch_submit(batch: *mut Batch, entries: *const BatchEntry, count: usize) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live batch or NULL.
        let batch = unsafe { arg(batch.cast_const(), "batch")? };
        if count == 0 {
            return Ok(());
        }
        // SAFETY: the caller passes `count` entries at `entries`, or NULL.
        let entries = unsafe { arg(entries, "entries")? };
        // Checked before the array is read, since `count` sizes the slice and the list below:
        // bounded by the batch's room (at most BATCH_MAX_ENTRIES), `count * sizeof(entry)`
        // cannot overflow.
        batch.check_room(count)?;
        // SAFETY: the caller passes `count` readable entries at `entries`.
        let entries = unsafe { std::slice::from_raw_parts(entries, count) };
        let mut ops = Vec::with_capacity(count);
        for (index, entry) in entries.iter().enumerate() {
            let refused = |source| Error::BatchEntry { index, source: Box::new(source) };
            let direction = match entry.opcode {
                BATCH_READ => Direction::Read,
                BATCH_WRITE => Direction::Write,
                value => return Err(refused(Error::InvalidEnum { what: "opcode (GDSROUTE_BATCH_READ or _WRITE)", value })),
            };
            if entry.reserved != 0 {
                return Err(refused(Error::InvalidArgument(format!("`reserved` is {}, must be 0", entry.reserved))));
            }
            // SAFETY: the caller passes live handles or NULL.
            let file = unsafe { entry.file.as_ref() }.ok_or_else(|| refused(Error::NullArgument("file")))?;
            if entry.buf.is_null() && entry.size > 0 {
                return Err(refused(Error::NullArgument("buf")));
            }
            ops.push(BatchOp { file, buf: entry.buf.cast(), size: entry.size, offset: entry.file_offset, direction, cookie: entry.cookie });
        }
        // SAFETY: the caller keeps every buffer valid until its completion was returned.
        unsafe { batch.submit(&ops) }
    })
}

/// Waits until at least `min_completions` entries have completed, or `timeout_ns` nanoseconds
/// passed (negative: no limit; 0: a poll that never waits), then writes up to
/// `max_completions` completions into `completions`, in the order the entries completed, and
/// their number into `*count`. Fewer than `min_completions` only when the timeout passed, or when
/// fewer are in flight at all (it then waits for all of those). An entry's bytes are in its
/// buffer (a read), or in the file (a write), once its completion is returned; its status
/// follows the synchronous calls' rules (`IO_ERROR` with `errno_value` for a failed read or
/// write, `CANCELED` for one cancelled before it started). When a returned completion failed,
/// the thread's last error (`gdsroute_last_error_message`, `_errno`) describes the first one
/// that did, although the call itself returns `OK`. Errors: `NULL_ARGUMENT` (`batch`, `count`,
/// or `completions` with `max_completions` > 0), `INVALID_ARGUMENT` (`min_completions` >
/// `max_completions`).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_batch_wait(
    batch: *mut Batch,
    min_completions: usize,
    max_completions: usize,
    timeout_ns: i64,
    completions: *mut BatchResult,
    count: *mut usize,
) -> Status {
    let mut first_failure = None;
    let status = guard(|| {
        // SAFETY: the caller passes a live batch or NULL.
        let batch = unsafe { arg(batch.cast_const(), "batch")? };
        let count = out(count, "count")?;
        if max_completions > 0 {
            out(completions, "completions")?;
        }
        if min_completions > max_completions {
            return Err(Error::InvalidArgument(format!("min_completions {min_completions} is above max_completions {max_completions}")));
        }
        let timeout = u64::try_from(timeout_ns).ok().map(Duration::from_nanos);
        let done = batch.wait(min_completions, max_completions, timeout);
        for (i, completion) in done.iter().enumerate() {
            let (status, errno_value, bytes) = match &completion.result {
                Ok(n) => (Status::Ok, 0, *n),
                Err(e) => {
                    first_failure.get_or_insert_with(|| e.clone());
                    (e.status(), e.os_error().unwrap_or(0), 0)
                }
            };
            // SAFETY: `completions` holds `max_completions` >= `done.len()` writable entries.
            unsafe { completions.add(i).write(BatchResult { cookie: completion.cookie, status, errno_value, bytes }) };
        }
        // SAFETY: checked by `out`.
        unsafe { write_out(count, done.len()) };
        Ok(())
    });
    if let Some(error) = first_failure {
        super::record_last_error(&error);
    }
    status
}

/// Cancels the entries of the batch none of whose bytes has started moving: each completes with
/// `CANCELED` (returned by `gdsroute_batch_wait`). Entries already running finish or fail as they
/// would; an entry split into several tasks that has started runs to its end. The number
/// cancelled goes into `*cancelled` (which may be NULL). Errors: `NULL_ARGUMENT` (`batch`).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_batch_cancel(batch: *mut Batch, cancelled: *mut usize) -> Status {
    guard(|| {
        // SAFETY: the caller passes a live batch or NULL.
        let batch = unsafe { arg(batch.cast_const(), "batch")? };
        let n = batch.cancel();
        if !cancelled.is_null() {
            // SAFETY: the caller passes NULL or a writable `size_t`.
            unsafe { write_out(cancelled, n) };
        }
        Ok(())
    })
}

/// Frees a batch: cancels its entries not started, then waits for the running ones, so that no
/// buffer of it is touched once this returns; completions not yet returned are dropped. NULL is a
/// no-op; freeing twice, or while another thread is inside a call on the batch, is undefined
/// behaviour.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_batch_free(batch: *mut Batch) {
    let _ = guard(|| {
        if !batch.is_null() {
            // SAFETY: the pointer came from Box::into_raw in gdsroute_batch_create, freed once.
            drop(unsafe { Box::from_raw(batch) });
        }
        Ok(())
    });
}

symbol_version!(GDSROUTE_0.2: gdsroute_batch_create, gdsroute_batch_submit, gdsroute_batch_wait, gdsroute_batch_cancel, gdsroute_batch_free);
