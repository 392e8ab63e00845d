//! The POSIX backend: one task entry for both directions (`task`), over `pread` into host memory
//! (`pread`: a non-blocking first read, then the kernel asked to read ahead, `readahead`),
//! `pwrite` from host memory (`pwrite`), and `O_DIRECT` reads and writes of aligned middles
//! (`direct_io`). Host-memory tasks and the device route's bounce buffers both read and write
//! through here; the system-call loop itself is `sys::fs::transfer_full`.

pub(crate) mod direct_io;
mod pread;
mod pwrite;
mod readahead;
mod task;

pub(crate) use pread::{Delivered, ReadFailure, read_full_at, read_full_at_ahead};
pub(crate) use pwrite::write_range;
pub(crate) use task::task;

#[cfg(test)]
mod tests;
