//! Which way a request moves bytes: from the file into memory (`Read`) or from memory into the
//! file (`Write`), as KvikIO's `IOOperationType`. The engine, the backends and the counters all
//! take it, so writes are added by filling in the `Write` arms, each of which returns
//! `Direction::unsupported` today.

use crate::error::Error;

/// The direction of a request and of each of its tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// File to memory.
    Read,
    /// Memory to file: no public call makes one yet.
    #[allow(dead_code)] // constructed by the write calls of the next issue
    Write,
}

impl Direction {
    /// The direction in one word, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }

    /// The error of a `what` that has no arm for this direction yet.
    pub fn unsupported(self, what: &str) -> Error {
        Error::InvalidArgument(format!("{what}: {} is not supported yet", self.name()))
    }
}
