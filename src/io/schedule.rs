//! When a call's tasks start and who runs them: the two choices besides the route that the
//! engine's parallel entry (`engine::submit`) makes and matches on. A call starts at once, or
//! (stream-ordered) once a CUDA stream reaches it (`io::stream_order`); the runner is the calling
//! thread for device requests below the GDS threshold and the shared pool otherwise (`io::route`
//! decides which).

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
pub(crate) enum Start {
    /// At once.
    Now,
    /// Once the stream reaches the call (KvikIO's `read_async` / `write_async`): the call is
    /// marked on the stream now and its tasks start, as `StreamReached`, when the stream gets
    /// there; the stream waits for them (`io::stream_order`).
    OnStream(crate::io::stream_order::StreamCall),
    /// At once, because the stream reached the call: the stream orders it, so the null stream is
    /// not synchronised (it may be the very stream waiting for this call), and device copies go
    /// on non-blocking streams (a blocking one would wait for the legacy stream, which may wait
    /// for this call).
    StreamReached,
    /// At once, because the stream reached the call's relay kernel (`io::relay`): its tasks run
    /// on the relay pool, each through a slot of the kernel's ring.
    Relayed(std::sync::Arc<crate::io::relay::Relay>),
}
