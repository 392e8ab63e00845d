//! Where an operation's tasks come from: a `TaskSource` yields them one by one as they are
//! claimed (task `i` is computed then, so the memory of a call does not depend on how many tasks
//! it has), each a `Task`: a chunk of one of the call's files. Today's source is the split of one
//! file's range (`task_split::Split`, every task of file 0); a batch spanning several files
//! implements it too, its tasks naming their files.

use crate::io::task_split::{Chunk, Split};

/// One task of a call: which of the call's files it moves bytes of (an index into them; 0 for a
/// call on one file) and its chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Task {
    pub file: usize,
    pub chunk: Chunk,
}

/// The tasks of a call, in the order their results settle it (file order for one file).
pub(crate) trait TaskSource: Send + Sync + 'static {
    /// Number of tasks.
    fn count(&self) -> usize;
    /// Task `index` (< `count()`).
    fn task(&self, index: usize) -> Task;
    /// Bytes of all tasks in the caller's buffer: what the call delivers when no task is short.
    fn size(&self) -> usize;
}

/// One file's range cut into tasks.
impl TaskSource for Split {
    fn count(&self) -> usize {
        Split::count(self)
    }

    fn task(&self, index: usize) -> Task {
        Task { file: 0, chunk: self.chunk(index) }
    }

    fn size(&self) -> usize {
        Split::size(self)
    }
}
