//! The engine's stream mode: a call ordered on a caller's CUDA stream (KvikIO's `read_async` /
//! `write_async`) that never blocks the caller. At the call (`mark`) an event is recorded on the
//! stream and the stream is made to wait on a flag word (`cuStreamWaitValue32_v2` on pinned,
//! device-mapped host memory); the call returns an operation at once. One process-wide waiter
//! thread (started at the first such call) watches the events of the calls queued so far (of each
//! stream the first); when the stream has reached a call, the waiter hands the transfer to the
//! engine as a parallel call (`engine::submit` with `Start::StreamReached`: the usual routes,
//! tasks on the pool), and when its last task stops, the caller's operation settles and the flag
//! is released. The stream's later work then sees the bytes. A call that cuFile queues on the
//! stream itself (`GDSROUTE_CUFILE_ASYNC=native`, `run_native`) only has its event watched, so that
//! its operation settles and its argument block is freed once the stream passed it.
//!
//! Why so: pool workers never wait for an event (only the waiter does, and it never waits for a
//! transfer), so however many calls are queued on one stream, the transfers of those the stream
//! reached can run; one stream's calls complete in its order without the waiter ordering them,
//! since the event of a later call is behind the flag wait of the earlier one. Host functions
//! (`cuLaunchHostFunc`) are not used: they run one at a time on one driver thread for all
//! streams, and may not call CUDA (docs/routing.md, "Stream-ordered calls").
//!
//! Where a stream cannot wait on a flag (a driver without stream memory operations), or the
//! `stream_ordered` setting is off, the call does what KvikIO's fallback does: synchronises the
//! stream and moves the bytes on the calling thread, counted with its reason.
//!
//! At exit (an `atexit` handler, registered when the waiter starts) every flag still held is
//! released, so that no stream waits forever on a process that is going away: the transfers not
//! done by then are not done, and the bytes of their buffers are undefined.
//!
//! Relayed calls (`io::relay`) are queued the same way on a waiter of their own, which makes no
//! CUDA call (`Watch`).
//!
//! One job: the stream mode's queues, their waiter threads and the release of every
//! flag at exit, which share the queues' state.

use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::io::operation::{Operation, Settler};
use crate::io::relay::{Relay, RelayGate, RelayPlan};
use crate::io::request::Request;
use crate::page_cache::QueuedWrite;
use crate::settings::StreamOrdered;
use crate::stats::{self, StatsCell, StreamMode};
use crate::sys::cuda::{self, CallerStream, FlagWord, MemoryKind, StreamEvent};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The point in a stream a queued call waits for, and the stream's wait behind it.
pub(crate) trait Gate: Send + Sync {
    /// True once the stream has reached the call (its earlier work finished). Never blocks.
    fn is_reached(&self) -> Result<bool>;
    /// Lets the stream go past the call. Called once.
    fn release(&self);
    /// The stream, where known: a later call on the same stream cannot be reached before an
    /// earlier one was released, so the waiter asks only the first queued call of each stream.
    fn stream(&self) -> Option<StreamKey> {
        None
    }
}

/// One stream as the waiter tells streams apart: the context, the handle, and for the
/// per-thread default stream the thread that named it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct StreamKey {
    context: usize,
    stream: CallerStream,
    thread: i32,
}

impl StreamKey {
    /// A key of its own for test stream `n` (the CPU tests' fake streams).
    #[cfg(test)]
    pub(crate) fn for_tests(n: usize) -> StreamKey {
        StreamKey { context: n, stream: CallerStream::from_raw(0x10), thread: 0 }
    }

    /// The key of `stream` (of `context`), named on the calling thread.
    fn of(stream: CallerStream, context: cuda::ContextHandle) -> StreamKey {
        // SAFETY: gettid has no preconditions.
        let thread = if stream.is_per_thread() { unsafe { libc::gettid() } } else { 0 };
        StreamKey { context: context.as_raw() as usize, stream, thread }
    }
}

/// The gate of a call on a CUDA stream: an event recorded on it, then a wait on a flag word.
struct CudaGate {
    event: StreamEvent,
    flag: FlagWord,
    value: u32,
    key: StreamKey,
}

impl Gate for CudaGate {
    fn is_reached(&self) -> Result<bool> {
        Ok(self.event.is_reached()?)
    }

    fn release(&self) {
        self.flag.release(self.value);
    }

    fn stream(&self) -> Option<StreamKey> {
        Some(self.key)
    }
}

/// The gate of a call cuFile queued on the stream itself (`cuFileReadAsync`): an event recorded
/// after it; the stream needs no release.
struct EventGate {
    event: StreamEvent,
    key: StreamKey,
}

impl Gate for EventGate {
    fn is_reached(&self) -> Result<bool> {
        Ok(self.event.is_reached()?)
    }

    fn release(&self) {}

    fn stream(&self) -> Option<StreamKey> {
        Some(self.key)
    }
}

/// A call's size and file offset: given at the call, or behind the caller's pointers, read when
/// the stream reaches the call (KvikIO's `read_async(..., size_p, file_offset_p, bytes_p, stream)`),
/// which then also receives the bytes moved.
#[derive(Clone, Copy)]
pub(crate) enum Params {
    Given,
    Behind(ParamPointers),
}

/// The caller's pointers of `Params::Behind`: host, pinned or managed memory, alive until the
/// stream has passed the call.
#[derive(Clone, Copy)]
pub(crate) struct ParamPointers {
    pub(crate) size: *const usize,
    pub(crate) offset: *const u64,
    pub(crate) bytes: *mut isize,
}

// SAFETY: the caller guarantees the pointers stay valid until the stream passed the call; they
// are read and written by one thread at a time (the waiter, then the thread that ends the call).
unsafe impl Send for ParamPointers {}
// SAFETY: as above: never accessed by two threads at once.
unsafe impl Sync for ParamPointers {}

impl ParamPointers {
    /// Checks at the call that each pointer is there, aligned for its type (the values are read
    /// and written as whole words), and memory the host can read or write while GPU work runs
    /// (not device memory, nor managed memory of a device without concurrent managed access:
    /// the waiter reads it while other streams' kernels may run, which faults the process there).
    /// `direction` names the bytes' pointer as the C function does.
    pub(crate) fn check(&self, direction: Direction) -> Result<()> {
        let bytes_name = match direction {
            Direction::Read => "bytes_read_p",
            Direction::Write => "bytes_written_p",
        };
        let pointers = [
            (self.size as *const u8, "size_p", std::mem::align_of::<usize>(), "size_t"),
            (self.offset as *const u8, "file_offset_p", std::mem::align_of::<u64>(), "off_t"),
            (self.bytes as *const u8, bytes_name, std::mem::align_of::<isize>(), "ssize_t"),
        ];
        for (pointer, name, align, c_type) in pointers {
            if pointer.is_null() {
                return Err(Error::NullArgument(name));
            }
            if !(pointer as usize).is_multiple_of(align) {
                return Err(Error::InvalidArgument(format!("`{name}` is not aligned for a {c_type} ({align} bytes)")));
            }
            match cuda::classify(pointer.cast()) {
                Ok(MemoryKind::Device { .. }) => {
                    return Err(Error::InvalidArgument(format!("`{name}` points to device memory; it must be host, pinned or managed memory")));
                }
                Ok(MemoryKind::Managed { ordinal, .. }) if !cuda::concurrent_managed_access(ordinal).unwrap_or(false) => {
                    return Err(Error::InvalidArgument(format!(
                        "`{name}` points to managed memory of device {ordinal}, which the host may not access while GPU work runs (no concurrent managed access); use host or pinned memory"
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl Params {
    /// The request as the stream sees it: with the values behind the pointers read now.
    fn resolve(&self, request: Request) -> Request {
        match self {
            Params::Given => request,
            // SAFETY: checked at the call; the caller keeps them valid until the stream passed it.
            Params::Behind(p) => unsafe { Request { size: p.size.read_volatile(), offset: p.offset.read_volatile(), ..request } },
        }
    }

    /// Writes the bytes moved (or -1 on error) behind the caller's pointer, before the stream
    /// is released.
    fn report(&self, outcome: &Result<usize>) {
        if let Params::Behind(p) = self {
            let value = outcome.as_ref().map_or(-1, |&n| n as isize);
            // SAFETY: checked at the call; the caller keeps it valid until the stream passed it.
            unsafe { p.bytes.write_volatile(value) };
        }
    }
}

/// How a stream-ordered call starts: its stream, and where its size and offset are.
pub(crate) struct StreamCall {
    pub(crate) stream: StreamSource,
    pub(crate) params: Params,
}

/// The stream of a call.
pub(crate) enum StreamSource {
    /// A caller's CUDA stream.
    Cuda(CallerStream),
    /// A gate made by a test (the CPU tests of the ordering, without CUDA).
    #[cfg(test)]
    Fake(Box<dyn Gate>),
    /// A relay whose kernel a test's thread plays (`io::relay::played`).
    #[cfg(test)]
    FakeRelay(Arc<Relay>),
    /// A stream the call blocks on (as one with the `stream_ordered` setting off).
    #[cfg(test)]
    FakeBlocking,
}

impl StreamSource {
    /// The caller's CUDA stream; `None` for a test's gate.
    pub(crate) fn cuda(&self) -> Option<CallerStream> {
        match self {
            StreamSource::Cuda(stream) => Some(*stream),
            #[cfg(test)]
            StreamSource::Fake(_) | StreamSource::FakeRelay(_) | StreamSource::FakeBlocking => None,
        }
    }
}

/// What the call does, decided at the call (`mark`).
pub(crate) enum Marked {
    /// Queued behind its gate, `Mark` its place among all marks.
    Ordered(Box<dyn Gate>, Mark),
    /// Queued behind a relay kernel (`io::relay`), which the relay waiter watches.
    Relayed(Arc<Relay>, Mark),
    /// The stream was synchronised: move the bytes now, on the calling thread.
    Blocking,
}

impl StreamCall {
    /// Refuses a call on a stream being captured into a CUDA graph, first of all, before the
    /// call makes any CUDA object or pinned memory (the route's preparation), which a capture
    /// in the global mode does not allow and would be broken by. Errors: `StreamCapturing`; no
    /// context for a default stream; the driver's errors.
    pub(crate) fn refuse_if_capturing(&self) -> Result<()> {
        let Some(stream) = self.stream.cuda() else { return Ok(()) };
        let (_, _scope) = cuda::enter_context_of(stream)?;
        if stream.is_capturing()? {
            return Err(capturing());
        }
        Ok(())
    }

    /// True when `mark` will relay the call, given a relay kernel for it: under `auto`, on a stream
    /// the legacy default stream waits for (not one being captured, which `mark` refuses).
    /// Asked before the preparation that relayed calls do not need; false where it cannot tell.
    pub(crate) fn will_relay(&self, ordered_setting: StreamOrdered) -> bool {
        let Some(stream) = self.stream.cuda() else { return false };
        if ordered_setting != StreamOrdered::Auto {
            return false;
        }
        let Ok((_, _scope)) = cuda::enter_context_of(stream) else { return false };
        matches!(stream.is_capturing(), Ok(false)) && stream.legacy_stream_waits_for_it().unwrap_or(false)
    }

    /// Marks the call's point on its stream, or (no stream wait, or the setting off) synchronises
    /// the stream, and counts which on `stats`. `relay`: how the call would be relayed (its queued
    /// copies or its kernel, `RelayPlan`), where it may be relayed (under `auto`, on a stream the
    /// legacy stream waits for). The call was checked for graph capture first
    /// (`refuse_if_capturing`). Errors: no context for a default stream; the driver's errors.
    // The match has one arm outside tests.
    #[allow(clippy::infallible_destructuring_match)]
    pub(crate) fn mark(self, stats: &StatsCell, ordered_setting: StreamOrdered, relay: Option<RelayPlan>) -> Result<(Marked, Params)> {
        let stream = match self.stream {
            StreamSource::Cuda(stream) => stream,
            #[cfg(test)]
            StreamSource::Fake(gate) => {
                stats::record_stream_call(stats, StreamMode::Ordered);
                return Ok((Marked::Ordered(gate, Mark::next(&mut MARKS.lock().unwrap_or_else(|p| p.into_inner()))), self.params));
            }
            #[cfg(test)]
            StreamSource::FakeRelay(relay) => {
                stats::record_stream_call(stats, StreamMode::Relayed);
                return Ok((Marked::Relayed(relay, Mark::next(&mut MARKS.lock().unwrap_or_else(|p| p.into_inner()))), self.params));
            }
            #[cfg(test)]
            StreamSource::FakeBlocking => {
                stats::record_stream_call(stats, StreamMode::BlockingSetting);
                return Ok((Marked::Blocking, self.params));
            }
        };
        // A capturing stream was refused at the call (`refuse_if_capturing`).
        let (context, _scope) = cuda::enter_context_of(stream)?;
        let blocking = if ordered_setting == StreamOrdered::Off {
            Some(StreamMode::BlockingSetting)
        } else if !ordered_setting.queues_on(|| stream.legacy_stream_waits_for_it())? {
            if let Some(plan) = relay.filter(|plan| match plan.on_the_streams_device() {
                Ok(true) => true,
                // Expected of such a program on every call: not a warning each time.
                Ok(false) => {
                    crate::log::log(crate::log::Level::Debug, || "a stream-ordered call blocks: its buffer is memory of another device than its stream's".into());
                    false
                }
                Err(e) => {
                    crate::log::log(crate::log::Level::Warn, || format!("a stream-ordered call blocks: its stream's device is not known: {e}"));
                    false
                }
            }) {
                let marks = MARKS.lock().unwrap_or_else(|p| p.into_inner());
                match plan.start(stream, context, StreamKey::of(stream, context)) {
                    Ok(relay) => {
                        let mut marks = marks;
                        let mark = Mark::next(&mut marks);
                        stats::record_stream_call(stats, StreamMode::Relayed);
                        return Ok((Marked::Relayed(relay, mark), self.params));
                    }
                    Err(e) => crate::log::log(crate::log::Level::Warn, || format!("a stream-ordered call blocks: it could not be relayed: {e}")),
                }
            }
            Some(StreamMode::BlockingLegacyWaits)
        } else if !cuda::stream_wait_available() {
            Some(StreamMode::BlockingNoStreamWait)
        } else {
            None
        };
        if let Some(reason) = blocking {
            stream.synchronize()?;
            stats::record_stream_call(stats, reason);
            return Ok((Marked::Blocking, self.params));
        }
        // Under the marks' lock: two threads marking calls on one stream get marks in the order
        // of their calls on it (`Mark`).
        let mut marks = MARKS.lock().unwrap_or_else(|p| p.into_inner());
        let event = StreamEvent::record(stream, context)?;
        let (flag, value) = FlagWord::take()?;
        let mark = Mark::next(&mut marks);
        match stream.wait_for(&flag, value) {
            Ok(()) => {}
            Err(e) if e.code() == Some(cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_SUPPORTED as u32) => {
                // The event recorded above completes on its own; nothing waits for it.
                drop(marks);
                stream.synchronize()?;
                stats::record_stream_call(stats, StreamMode::BlockingNoStreamWait);
                return Ok((Marked::Blocking, self.params));
            }
            Err(e) => return Err(e.into()),
        }
        drop(marks);
        stats::record_stream_call(stats, StreamMode::Ordered);
        let key = StreamKey::of(stream, context);
        Ok((Marked::Ordered(Box::new(CudaGate { event, flag, value, key }), mark), self.params))
    }
}

/// A call's place among all calls marked on streams: the waiter keeps its queue in this order,
/// so that for each stream the first queued call is the first on the stream (it asks only that
/// one: `Gate::stream`), whatever order the marking threads queue them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Mark(u64);

impl Mark {
    fn next(last: &mut u64) -> Mark {
        *last += 1;
        Mark(*last)
    }
}

/// The last mark given; held while a call is marked on its stream.
static MARKS: Mutex<u64> = Mutex::new(0);

/// A call queued behind `gate` whose transfer is `start` (the CPU tests' own transfers).
#[cfg(test)]
pub(crate) fn queue_behind_for_tests(gate: Box<dyn Gate>, request: Request, start: impl FnOnce(Request) -> Result<Operation> + Send + 'static) -> Result<Operation> {
    let mark = Mark::next(&mut MARKS.lock().unwrap());
    run_marked(Marked::Ordered(gate, mark), Params::Given, request, Arc::new(StatsCell::default()), None, start)
}

/// Runs `start` (the transfer, a parallel call of the engine) with the request resolved once the
/// stream reached the call; for a blocking call, now, waiting for it. Returns the caller's
/// operation. `start` is the engine's, with `Start::StreamReached` (or `Start::Now` for a
/// blocking call). A write's `queued_write` count ends once `start` returned, or the call failed.
pub(crate) fn run_marked(
    marked: Marked,
    params: Params,
    request: Request,
    stats: Arc<StatsCell>,
    queued_write: Option<QueuedWrite>,
    start: impl FnOnce(Request) -> Result<Operation> + Send + 'static,
) -> Result<Operation> {
    let (gate, mark, waiter) = match marked {
        Marked::Blocking => {
            let operation = match start(params.resolve(request)) {
                Ok(operation) => operation,
                // The pointer form's size and offset are checked when read, and fail the
                // operation, not the call, whether the stream orders the call or not.
                Err(e) if matches!(params, Params::Behind(_)) => {
                    let (operation, settler) = Operation::awaiting(request.direction, stats);
                    settler.settle(Err(e));
                    operation
                }
                Err(e) => return Err(e),
            };
            drop(queued_write);
            params.report(&operation.wait_in_its_pool());
            return Ok(operation);
        }
        Marked::Ordered(gate, mark) => (gate, mark, waiter(Watch::Events)),
        Marked::Relayed(relay, mark) => (Box::new(RelayGate(relay)) as Box<dyn Gate>, mark, waiter(Watch::HostWords)),
    };
    let waiter = match waiter {
        Ok(waiter) => waiter,
        Err(e) => {
            // The stream already waits for this call: it must not wait forever.
            gate.release();
            // Counted here: the transfer that would have counted it never starts.
            stats::record_refused_call(Some(&stats), request.direction);
            return Err(e);
        }
    };
    let (operation, settler) = Operation::awaiting(request.direction, Arc::clone(&stats));
    let ticket = Arc::new(Ticket { gate, released: AtomicBool::new(false) });
    let queued = Queued { ticket, start: Box::new(start), request: SendRequest(request), params, settler, stats, mark, queued_write };
    waiter.queue(queued);
    Ok(operation)
}

/// A call that cuFile queues on the stream itself (`GDSROUTE_CUFILE_ASYNC=native`): with the
/// stream's context current and the stream checked for graph capture, `submit` queues it and
/// returns what gives its result once the stream passed it; an event recorded after it tells
/// the waiter when, and the caller's operation settles then with that result (`finish` counts
/// it). `None` from `submit`: cuFile cannot take it after all (the caller takes the stream mode).
/// A write's `queued_write` count ends once `finish` returned, or the call failed.
pub(crate) fn run_native<R: Send + 'static>(
    stream: CallerStream,
    request: Request,
    stats: Arc<StatsCell>,
    queued_write: Option<QueuedWrite>,
    submit: impl FnOnce() -> Option<Result<R>>,
    finish: impl FnOnce(R) -> Result<usize> + Send + 'static,
) -> Result<Option<Operation>> {
    let waiter = waiter(Watch::Events)?;
    // A capturing stream was refused at the call (`StreamCall::refuse_if_capturing`).
    let (context, _scope) = cuda::enter_context_of(stream)?;
    // Made before cuFile queues the call: once it has, the call must not fail (its bytes move).
    let event = StreamEvent::new(context)?;
    let mut marks = MARKS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(submitted) = submit() else { return Ok(None) };
    let submitted = submitted?;
    stats::record_stream_call(&stats, StreamMode::CufileAsync);
    if let Err(e) = event.record_on(stream) {
        drop(marks);
        // The waiter cannot be told when the stream passed the call: this thread waits for it,
        // and the call settles as it would have there.
        crate::log::log(crate::log::Level::Warn, || format!("a call cuFile queued blocks: its event could not be recorded: {e}"));
        if let Err(e) = stream.synchronize() {
            // cuFile owns the argument block until the stream passed the call, which can no
            // longer be told: leaked rather than freed under it.
            std::mem::forget(submitted);
            return Err(e.into());
        }
        let (operation, settler) = Operation::awaiting(request.direction, stats);
        settler.settle(finish(submitted));
        drop(queued_write);
        return Ok(Some(operation));
    }
    let mark = Mark::next(&mut marks);
    drop(marks);
    let (direction, handle) = (request.direction, Arc::clone(&stats));
    let start = move |_: Request| {
        let (operation, settler) = Operation::awaiting(direction, handle);
        settler.settle(finish(submitted));
        Ok(operation)
    };
    let (operation, settler) = Operation::awaiting(request.direction, Arc::clone(&stats));
    let key = StreamKey::of(stream, context);
    let ticket = Arc::new(Ticket { gate: Box::new(EventGate { event, key }), released: AtomicBool::new(false) });
    let queued = Queued { ticket, start: Box::new(start), request: SendRequest(request), params: Params::Given, settler, stats, mark, queued_write };
    waiter.queue(queued);
    Ok(Some(operation))
}

fn capturing() -> Error {
    Error::StreamCapturing(
        "the stream is being captured into a CUDA graph: a stream-ordered read or write runs on the host and cannot be captured; \
         call it on a stream that is not capturing"
            .into(),
    )
}

/// A queued call's gate, released once (by the end of its transfer, or at exit).
struct Ticket {
    gate: Box<dyn Gate>,
    released: AtomicBool,
}

impl Ticket {
    fn release(&self) {
        if !self.released.swap(true, Ordering::SeqCst) {
            self.gate.release();
        }
    }
}

impl Drop for Ticket {
    /// A call dropped without its release (a panic while it started or failed) lets its stream go.
    fn drop(&mut self) {
        self.release();
    }
}

/// The request's buffer pointer, moved to the waiter: the caller keeps it valid until the
/// stream passed the call.
struct SendRequest(Request);
// SAFETY: see above; the pointer is only used by the transfer the waiter starts.
unsafe impl Send for SendRequest {}

/// A call the stream has not reached yet.
struct Queued {
    ticket: Arc<Ticket>,
    start: Box<dyn FnOnce(Request) -> Result<Operation> + Send>,
    request: SendRequest,
    params: Params,
    settler: Settler,
    /// Where the call is counted when it fails before its transfer started.
    stats: Arc<StatsCell>,
    mark: Mark,
    /// A write's count among its file's queued writes (`PageCache::write_queued`): kept out of
    /// `start`, which a failed call forgets, so that it ends however the call does.
    queued_write: Option<QueuedWrite>,
}

impl Queued {
    /// The stream reached the call: the transfer starts, and when it has stopped, the bytes are
    /// reported, the caller's operation settled and the stream released, in that order (so that
    /// a caller who saw the stream pass the call, e.g. after `cuStreamSynchronize`, finds the
    /// operation settled).
    fn start(self) {
        let Queued { ticket, start, request, params, settler, queued_write, .. } = self;
        let request = params.resolve(request.0);
        let finish = move |outcome: &Result<usize>| {
            params.report(outcome);
            settler.settle(outcome.clone());
            ticket.release();
        };
        let started = start(request);
        // The write has planned its tasks (and dropped the file's windows), or failed.
        drop(queued_write);
        match started {
            Ok(transfer) => transfer.when_settled(finish),
            Err(e) => finish(&Err(e)),
        }
    }

    /// The stream failed before the call (an earlier fault on it), or the process is exiting:
    /// the call fails with that, counted as a call that moved nothing.
    fn fail(self, error: Error) {
        let Queued { ticket, start, request, params, settler, stats, queued_write, .. } = self;
        // Not dropped: a call cuFile queued owns its argument block through it, and cuFile may
        // still write it (leaked instead, with the file it holds: on faults and at exit only).
        std::mem::forget(start);
        drop(queued_write);
        // Counted at the call as not in flight yet (`PendingCall::queued_on_stream`).
        stats::record_refused_call(Some(&stats), request.0.direction);
        params.report(&Err(error.clone()));
        settler.settle(Err(error));
        ticket.release();
    }
}

/// The waiter: the calls whose streams have not reached them, and every gate not released yet.
struct Waiter {
    state: Mutex<WaiterState>,
    wake: Condvar,
    /// The longest pause between two looks (`POLL_MAX`, or `POLL_MAX_HOST_WORDS`).
    poll_max: Duration,
}

#[derive(Default)]
struct WaiterState {
    queued: Vec<Queued>,
    /// Gates of queued and running calls, for the exit handler.
    live: Vec<std::sync::Weak<Ticket>>,
    exiting: bool,
}

/// What a waiter looks at: events on the streams (CUDA calls), or words in host memory that relay
/// kernels write (`io::relay`). Relayed calls have a waiter of their own, which makes no CUDA
/// call: while a program's synchronous legacy-stream call waits for a relayed call, an event
/// query can wait for the driver's lock, and the relayed call must still start.
#[derive(Clone, Copy)]
enum Watch {
    Events,
    HostWords,
}

static WAITERS: [once_cell::sync::OnceCell<Arc<Waiter>>; 2] = [once_cell::sync::OnceCell::new(), once_cell::sync::OnceCell::new()];

/// Whether the exit handler has run (or runs now). Held while a waiter starts, so that a waiter
/// is either started before the handler, which then stops it, or refused after it: a call made
/// while another thread is in `exit` is never left holding its stream.
static EXITING: Mutex<bool> = Mutex::new(false);

/// The process that registered the exit handler. A forked child inherits the registration but
/// neither the waiter threads nor its parent's streams: the handler does nothing there (it would
/// wait for a lock held at the fork, or release the parent's streams through pinned memory the
/// child shares with it).
static EXIT_HANDLER_PID: AtomicU32 = AtomicU32::new(0);

/// The waiter of `watch`, started on first use (its thread; the exit handler once).
fn waiter(watch: Watch) -> Result<&'static Arc<Waiter>> {
    let (cell, name, poll_max) = match watch {
        Watch::Events => (&WAITERS[0], "gdsroute-stream", POLL_MAX),
        Watch::HostWords => (&WAITERS[1], "gdsroute-relay", POLL_MAX_HOST_WORDS),
    };
    if let Some(waiter) = cell.get() {
        return Ok(waiter);
    }
    let exiting = EXITING.lock().unwrap_or_else(|p| p.into_inner());
    if *exiting {
        return Err(Error::Internal("the process is exiting: stream-ordered call not run".into()));
    }
    cell.get_or_try_init(|| {
        let waiter = Arc::new(Waiter { state: Mutex::new(WaiterState::default()), wake: Condvar::new(), poll_max });
        let running = Arc::clone(&waiter);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // Streams wait for what this thread releases: nothing it drops may wait for the device.
                crate::sys::cuda::streams_wait_for_this_thread();
                running.run()
            })
            .map_err(|e| Error::Internal(format!("cannot start the {name} waiter thread: {e}")))?;
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        AT_EXIT.call_once(|| {
            EXIT_HANDLER_PID.store(std::process::id(), Ordering::SeqCst);
            // SAFETY: registering a plain extern "C" function without arguments.
            unsafe { libc::atexit(release_all_at_exit) };
        });
        Ok(waiter)
    })
}

/// Shortest and longest pause between two looks at the queued calls' events. A call the stream
/// reached starts within the longest pause; a look costs about a microsecond per queued call.
const POLL_MIN: Duration = Duration::from_micros(5);
const POLL_MAX: Duration = Duration::from_micros(200);
/// The relay waiter's longest pause: a look is a load of a word per queued call, so it looks
/// often; a relayed 64 MiB read takes about 1.3 ms, and a late start is part of it.
const POLL_MAX_HOST_WORDS: Duration = Duration::from_micros(20);

impl Waiter {
    fn lock(&self) -> std::sync::MutexGuard<'_, WaiterState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn queue(&self, queued: Queued) {
        let mut state = self.lock();
        if state.exiting {
            drop(state);
            queued.fail(Error::Internal("the process is exiting: stream-ordered call not run".into()));
            return;
        }
        state.live.retain(|t| t.strong_count() > 0);
        state.live.push(Arc::downgrade(&queued.ticket));
        // In mark order (usually the end: marks are queued in the order they were given).
        let at = state.queued.partition_point(|q| q.mark < queued.mark);
        state.queued.insert(at, queued);
        self.wake.notify_one();
    }

    /// The waiter thread: looks at the queued calls' gates, starts those reached (in queue
    /// order), pauses a little longer after each look that found none.
    fn run(&self) {
        let mut pause = POLL_MIN;
        loop {
            let mut state = self.lock();
            while state.queued.is_empty() && !state.exiting {
                state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.exiting {
                return;
            }
            let mut ready = Vec::new();
            let mut failed = Vec::new();
            // Streams whose first queued call is not reached: their later calls cannot be.
            let mut held: Vec<StreamKey> = Vec::new();
            let mut i = 0;
            while i < state.queued.len() {
                let stream = state.queued[i].ticket.gate.stream();
                if stream.is_some_and(|key| held.contains(&key)) {
                    i += 1;
                    continue;
                }
                match state.queued[i].ticket.gate.is_reached() {
                    Ok(false) => {
                        held.extend(stream);
                        i += 1;
                    }
                    Ok(true) => ready.push(state.queued.remove(i)),
                    Err(e) => failed.push((state.queued.remove(i), e)),
                }
            }
            drop(state);
            let found = !ready.is_empty() || !failed.is_empty();
            // Outside the lock: a transfer that settles at once releases and settles in here. A
            // panic there fails that call (its settler and ticket are dropped: `Settler`'s and
            // `Ticket`'s `Drop`), and the waiter goes on with the other streams' calls.
            for queued in ready {
                survive_panic(|| queued.start());
            }
            for (queued, e) in failed {
                survive_panic(|| queued.fail(e));
            }
            pause = if found { POLL_MIN.min(self.poll_max) } else { (pause * 2).min(self.poll_max) };
            if !found {
                std::thread::sleep(pause);
            }
        }
    }
}

/// Runs `f`, a queued call's start or failure on a waiter thread, which must go on whatever
/// happens to one call.
fn survive_panic(f: impl FnOnce()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
}

/// At exit: stops the waiter and releases every gate still held, so that no stream is left
/// waiting on this process (docs/routing.md, "Stream-ordered calls at exit").
extern "C" fn release_all_at_exit() {
    if EXIT_HANDLER_PID.load(Ordering::SeqCst) != std::process::id() {
        return;
    }
    // A waiter started from now on is refused; one started before is in its cell.
    *EXITING.lock().unwrap_or_else(|p| p.into_inner()) = true;
    for waiter in WAITERS.iter().filter_map(|cell| cell.get()) {
        let live = {
            let mut state = waiter.lock();
            state.exiting = true;
            waiter.wake.notify_all();
            std::mem::take(&mut state.live)
        };
        for ticket in live.iter().filter_map(std::sync::Weak::upgrade) {
            ticket.release();
        }
    }
}

/// The exit handler, run by a test as `exit` would run it.
#[cfg(test)]
pub(crate) fn release_all_at_exit_for_tests() {
    release_all_at_exit();
}

/// Runs `f` with every started waiter's lock held, as the waiter thread holds it while it looks at
/// its queue (a fork then leaves the lock held in the child).
#[cfg(test)]
pub(crate) fn with_waiters_locked_for_tests<R>(f: impl FnOnce() -> R) -> R {
    let _held: Vec<_> = WAITERS.iter().filter_map(|cell| cell.get()).map(|waiter| waiter.lock()).collect();
    f()
}
