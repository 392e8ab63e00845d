//! The POSIX backend: `pread` into host memory (`pread`: a non-blocking first read, then the
//! kernel asked to read ahead, `readahead`), `O_DIRECT` reads of aligned middles (`direct_io`)
//! and `pwrite` from host memory (`pwrite`). Host-memory tasks and the device route's bounce
//! buffers both read and write through here.

pub mod direct_io;
mod pread;
mod pwrite;
mod readahead;

pub use pread::{Delivered, read_full_at, read_full_at_ahead};
pub use pwrite::{WriteFailure, write_full_at};
