//! The ways bytes move between a file and memory: `posix` (pread, readahead, direct I/O),
//! `device` (bounce buffers and registered page-cache copies into GPU memory) and `cufile` (the
//! process's cuFile state, per-file registration, the cuFile call). A backend serves one task;
//! which backend serves it is `io::route`'s decision.

pub mod cufile;
pub mod device;
pub mod posix;
