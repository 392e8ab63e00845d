//! The POSIX backend: `pread` into host memory (`pread`: a non-blocking first read, then the
//! kernel asked to read ahead, `readahead`), and `O_DIRECT` reads of aligned middles
//! (`direct_io`). Host-memory tasks and the device route's bounce buffers both read through here.

pub mod direct_io;
mod pread;
mod readahead;

pub use pread::{Delivered, read_full_at, read_full_at_ahead};
