//! Which way a request moves bytes: from the file into memory (`Read`) or from memory into the
//! file (`Write`), as KvikIO's `IOOperationType`. The engine, the backends and the counters all
//! take it and give each direction its own arm.

/// The direction of a request and of each of its tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// File to memory.
    Read,
    /// Memory to file.
    Write,
}
