//! When a call's tasks start and who runs them: the two choices besides the route that the
//! engine's parallel entry (`engine::submit`) makes and matches on. Today every call starts at
//! once, and the runner is the calling thread for device requests below the GDS threshold and the
//! shared pool otherwise (`io::route` decides which).

/// Who runs the tasks of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Runner {
    /// The calling thread, every task in file order, before the call returns.
    CallingThread,
    /// Jobs on the shared pool (one per pool thread at most, fewer for buffered writes of a file
    /// whose file system writes one at a time), helped by the thread that waits
    /// (`Operation::wait_in`).
    Pool,
}

/// When the tasks of a call may start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// At once: every call today.
    Now,
    // A stream-ordered call (KvikIO's `read_async` / `write_async`) comes next as a second
    // variant: its tasks start once a CUDA stream reaches an event recorded when it was
    // submitted, and its completion is recorded on that stream in turn.
}
