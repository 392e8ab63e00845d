//! What a Rust caller does with an operation in flight: wait for its result the way
//! `gdsroute_op_wait` does (the calling thread helps the pool the operation runs on). The
//! operation itself, its tasks and its `wait_in(pool)` are the engine's (`io::operation`).

use crate::error::Result;
use crate::io::operation::Operation;

impl Operation {
    /// Blocks until every task has stopped and returns the bytes read (or written), or the
    /// first error in file order; the calling thread runs this operation's tasks that no worker
    /// started. May be called again, with the same result.
    pub fn wait(&self) -> Result<usize> {
        self.wait_in_its_pool()
    }
}
