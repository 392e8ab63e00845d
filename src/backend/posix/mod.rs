//! The POSIX backend: `pread` into host memory (`pread`: a non-blocking first read, then the
//! kernel asked to read ahead, `readahead`), `pwrite` from host memory (`pwrite`), and
//! `O_DIRECT` reads and writes of aligned middles (`direct_io`). Host-memory tasks and the device route's bounce
//! buffers both read and write through here.

pub mod direct_io;
mod pread;
mod pwrite;
mod readahead;

pub use pread::{Delivered, read_full_at, read_full_at_ahead};
pub use pwrite::{WriteFailure, write_full_at, write_range};

#[cfg(test)]
mod tests;
