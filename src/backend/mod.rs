//! The ways bytes move between a file and memory, each with one task entry that takes the
//! direction: `posix::task` (pread, readahead, direct I/O, pwrite; host memory), `device::task`
//! (bounce buffers and registered page-cache copies; GPU memory without cuFile) and
//! `cufile::synchronous::task` (the cuFile call; `cufile` also holds the process's cuFile state
//! and per-file registration). A backend serves one task; which backend serves it is
//! `io::dispatch`'s match on `io::route`'s decision. Beside them, `mapping`: the copies out of a
//! file mapping of the mapping handle (`api::mapping`), which no route leads to.

pub(crate) mod cufile;
pub(crate) mod device;
pub(crate) mod mapping;
pub(crate) mod posix;

use std::os::fd::RawFd;

/// The file as a device task sees it: its descriptor, the `O_DIRECT` one where the task takes
/// direct I/O (`auto_direct_io_read` / `_write`), and its path for messages.
#[derive(Clone, Copy)]
pub(crate) struct TaskFile<'a> {
    pub fd: RawFd,
    pub direct: Option<RawFd>,
    pub path: &'a str,
}
