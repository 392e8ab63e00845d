//! A batch of reads and writes over several files (KvikIO's `BatchHandle`, cuFile's batch API),
//! on every route: entries of any open handles, memory kinds and directions, submitted
//! together, each completing on its own with the synchronous calls' rules (a read short only at
//! the end of the file; a write whole or failed). The engine side is `io::batch`.

use crate::api::file::File;
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::io::batch::{self, Queue};
use crate::io::request::Request;
use std::sync::Arc;
use std::time::Duration;

/// The C ABI's forms: the entry and completion structs and their constants.
pub use crate::abi::{BATCH_MAX_ENTRIES, BATCH_READ, BATCH_WRITE, BatchEntry, BatchResult};

/// One read or write of a batch: `size` bytes between `buf` and `file` at `offset`; `cookie`
/// comes back with its completion.
#[derive(Clone, Copy)]
pub struct BatchOp<'a> {
    pub file: &'a File,
    pub buf: *mut u8,
    pub size: usize,
    pub offset: u64,
    pub direction: Direction,
    pub cookie: u64,
}

/// A finished entry: its cookie and the bytes it moved, or its error (`Error::Canceled` when it
/// was cancelled before it started).
pub use crate::io::batch::BatchCompletion;

/// A batch: a queue of completions with room for `max_entries` entries in flight (submitted,
/// their completion not yet returned by `wait`). Dropping it cancels the entries not started
/// and waits for the running ones.
pub struct Batch {
    queue: Arc<Queue>,
    max_entries: usize,
}

impl Batch {
    /// A batch for at most `max_entries` entries in flight (1 ..= `BATCH_MAX_ENTRIES`).
    pub fn new(max_entries: usize) -> Result<Batch> {
        if !(1..=BATCH_MAX_ENTRIES).contains(&max_entries) {
            return Err(Error::InvalidArgument(format!("max_entries {max_entries}: a batch takes 1 to {BATCH_MAX_ENTRIES} entries in flight")));
        }
        crate::api::report::arm();
        Ok(Batch { queue: Queue::new(), max_entries })
    }

    /// The most entries in flight, as created.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Entries submitted whose completion `wait` has not returned yet.
    pub fn in_flight(&self) -> usize {
        self.queue.in_flight()
    }

    /// Whether `count` more entries fit beside those in flight: `InvalidArgument`, with the
    /// message a refused submission has, when they do not. The C ABI asks before it reads a
    /// caller's array of `count` entries.
    pub(crate) fn check_room(&self, count: usize) -> Result<()> {
        self.queue.check_room(self.max_entries, count)
    }

    /// Submits `ops`, all or none: `InvalidArgument` (nothing submitted) when they would put
    /// more than `max_entries` in flight. An entry that cannot start (a closed handle, a write to
    /// an "r" handle, a range past `off_t`) is submitted and completes at once with its error.
    ///
    /// # Safety
    /// Each op's `buf` is valid for `size` bytes until its completion has been returned by
    /// `wait` or the batch was dropped: writable for a read; a write only reads it.
    pub unsafe fn submit(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let entries = ops.iter().map(|op| op.file.batch_entry(Request { direction: op.direction, buf: op.buf, size: op.size, offset: op.offset }, op.cookie)).collect();
        // SAFETY: forwarded from the caller.
        unsafe { self.queue.submit(self.max_entries, entries) }
    }

    /// Waits until at least `min` entries have completed (or `timeout` passed; `None`: no
    /// limit; `Some(Duration::ZERO)`: a poll), then returns up to `max` completions in the order
    /// the entries completed. Fewer than `min` only when the timeout passed or fewer than `min`
    /// are in flight (it then waits for all of those).
    pub fn wait(&self, min: usize, max: usize, timeout: Option<Duration>) -> Vec<BatchCompletion> {
        self.queue.wait(min, max, timeout)
    }

    /// Cancels the entries none of whose bytes has started moving (each completes with
    /// `Error::Canceled`); running entries finish or fail as they would. Returns how many were
    /// cancelled.
    pub fn cancel(&self) -> usize {
        self.queue.cancel()
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        batch::cancel_and_drain(&self.queue);
    }
}
