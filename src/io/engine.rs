//! The engine: from a request, a read or a write, to tasks and back, written once for both
//! directions. Two entries: `run`, one synchronous call on the calling thread (KvikIO's `read` /
//! `write`), and `submit`, a parallel call handed back as an `Operation` (KvikIO's `pread` /
//! `pwrite`). Both count the call, check its range, read the settings once (`begin`), clip the
//! range to what the file has, classify the target and plan the route (`plan_call`, `route`);
//! `submit` then cuts the bytes into tasks (`task_split`, a `task_source::TaskSource`) and starts
//! them by the call's start condition and runner (`schedule`). Every task goes through
//! `dispatch`, which picks its backend and records it.
//!
//! One job, although over 450 lines: a call from its request to its tasks, for every start
//! condition (now, on a stream, relayed, through cuFile's own stream calls).

use super::dispatch::{self, Call};
use super::open_file::OpenFile;
use super::request::{Request, SendPtr, Target, check_range, target_of};
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::io::observe::CallWatch;
use crate::io::operation::{Operation, Stop};
use crate::io::route::{self, Plan};
use crate::io::schedule::{Runner, Start};
use crate::backend::cufile;
use crate::io::relay::{self, RegisteredRuns, RelayPlan};
use crate::io::stream_order::{self, Marked, Params, StreamCall};
use crate::io::warm_up;
use crate::io::task_source::Task;
use crate::io::task_split::{self, Chunk, Split};
use crate::settings::{self, CompatMode, CufileAsync, Snapshot, StreamOrdered};
use crate::stats::{self, Route, StatsCell, TaskOutcome};
use crate::sys::cuda::relay::RelayKernel;
use crate::sys::cuda::{self, MemoryKind};
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Moves the request's `size` bytes at `offset` in one synchronous call on the calling thread
/// (KvikIO's `read` / `write`: no task splitting and no GDS threshold), for the handle whose
/// counters are `stats` and whose open file `open_file` hands out (an error once closed).
/// Returns the bytes moved: a read's, fewer only at end of file; a write's, all of them (or an
/// error). The end of the file for a read is its size when the call starts (`OpenFile::extent`):
/// nothing past it is read, and a read at or past it reads nothing and runs no task, as a
/// zero-byte request.
///
/// # Safety
/// `request.buf` must be valid for `request.size` bytes for the duration of the call: writable
/// for a read; a write only reads it.
pub(crate) unsafe fn run(stats: &Arc<StatsCell>, compat_mode: CompatMode, open_file: impl FnOnce() -> Result<Arc<OpenFile>>, request: Request) -> Result<usize> {
    // Dropped on an early error return: observed as a call that failed before it was routed.
    let mut watch = CallWatch::start(&request, false);
    let (counted, snapshot) = begin(stats, &request, None)?;
    let file = open_file()?;
    if let Some(w) = &mut watch {
        w.file(&file);
    }
    let Some(planned) = plan_call(&file, request, None, snapshot, compat_mode, 0, false)? else {
        counted.finish(request.size as u64, 0, false);
        if let Some(w) = watch {
            w.end(&Ok(0));
        }
        return Ok(0);
    };
    if let Some(w) = &mut watch {
        w.routed(&planned.call);
    }
    let chunk = Chunk { buf_offset: 0, file_offset: request.offset, len: planned.len };
    let result = dispatch::run_and_record(&planned.call, &file, stats, chunk);
    let delivered = *result.as_ref().unwrap_or(&0) as u64;
    counted.finish(request.size as u64, delivered, result.is_err());
    if let Some(w) = watch {
        w.end(&result);
    }
    result
}

/// Starts a parallel call of the request's `size` bytes at `offset` (KvikIO's `pread` /
/// `pwrite`), once `start` allows: task-size tasks on the shared pool, or one task on the calling
/// thread for device requests below the GDS threshold (the plan's `Runner`). The returned
/// operation must be waited for (or dropped, which waits) before the buffer is released.
///
/// The route is chosen by the size asked for, as in KvikIO. A read's tasks cover only the bytes
/// the file has when the call starts (`OpenFile::extent`), so their number, and the work of the
/// call, are bounded by the file, not by `size`: a read at or past the end runs no task, as a
/// zero-byte one. A write's tasks cover its whole range; buffered writes of a file whose file
/// system writes one at a time get one pool worker (`OpenFile::buffered_write_workers`). The
/// operation's memory does not depend on the number of tasks: one pool job per pool thread (at
/// most one per task) claims tasks until none is left.
///
/// # Safety
/// `request.buf` must be valid for `request.size` bytes until the returned operation has
/// finished: writable for a read; a write only reads it.
pub(crate) unsafe fn submit(stats: &Arc<StatsCell>, compat_mode: CompatMode, open_file: impl FnOnce() -> Result<Arc<OpenFile>>, request: Request, start: Start) -> Result<Operation> {
    // SAFETY: forwarded from the caller.
    unsafe { submit_with(stats, compat_mode, open_file, request, start, None) }
}

/// `submit`, under `call_settings` where a stream-ordered call read them at the call (`None`: read
/// now), so that what the stream reaches runs as the call was prepared for.
///
/// # Safety
/// As `submit`.
unsafe fn submit_with(stats: &Arc<StatsCell>, compat_mode: CompatMode, open_file: impl FnOnce() -> Result<Arc<OpenFile>>, request: Request, start: Start, call_settings: Option<Snapshot>) -> Result<Operation> {
    let (stream_ordered, relay) = match start {
        Start::Now => (false, None),
        Start::StreamReached => (true, None),
        Start::Relayed(relay) => (true, Some(relay)),
        // SAFETY: forwarded from the caller (valid until the stream passed the call).
        Start::OnStream(call) => return unsafe { on_stream(stats, compat_mode, open_file, request, call) },
    };
    // On the waiter thread, the planning (a write drops page-cache windows) is part of the
    // stream-ordered call too; each task enters its own below.
    let _planning = stream_ordered.then(cuda::StreamOrderedTask::enter);
    let event = match request.direction {
        Direction::Read => "pread",
        Direction::Write => "pwrite",
    };
    crate::trace::event(event, request.size as u64);
    // A stream-ordered call (its settings read at the call) is observed as one also where it
    // blocks and so starts now.
    let mut watch = CallWatch::start(&request, stream_ordered || call_settings.is_some());
    let (counted, snapshot) = begin(stats, &request, call_settings)?;
    let file = open_file()?;
    if let Some(w) = &mut watch {
        w.file(&file);
    }
    if let Some(changes) = relay.as_ref().and_then(|r| r.registered_changes())
        && !file.page_cache.unchanged_since(file.fd.as_raw_fd(), changes)
    {
        // Its queued copies read registered windows that may no longer hold the file's bytes
        // (the file changed between the call and now): the call fails rather than deliver them.
        return Err(Error::Io {
            op: "a stream-ordered read planned from the registered page cache (the file changed before the stream reached it)",
            path: file.path.to_string(),
            offset: request.offset,
            source: std::io::Error::from_raw_os_error(libc::ESTALE),
        });
    }
    let pool = match &relay {
        Some(_) => relay::pool()?.clone(),
        None => file.pool()?,
    };
    // A relayed call's target is host memory, known at the call: the relay's slots (device
    // memory's bytes pass through them) or the caller's host buffer. Not classified again: that
    // is a CUDA call, which must not be made while the stream waits.
    let host = relay.as_ref().map(|r| Target::Host(SendPtr::new(if r.moves_bytes() { r.slots_base() } else { request.buf })));
    let Some(Planned { call, len, size_known }) = plan_call(&file, request, host, snapshot, compat_mode, snapshot.gds_threshold, stream_ordered)? else {
        // Nothing to move: no task, no cuFile probe, an operation that is already done.
        if let Some(relay) = &relay {
            relay.nothing_to_move();
        }
        counted.handed_over();
        if let Some(w) = watch {
            w.end(&Ok(0));
        }
        return Ok(Operation::finished(request.direction, request.size as u64, Arc::clone(stats)));
    };
    if let Some(w) = &mut watch {
        w.routed(&call);
    }
    let direction = call.direction;
    let (runner, direct_io) = (call.plan.runner, snapshot.direct_io(direction));
    let buffered_write = direction == Direction::Write && matches!(call.plan.route, Route::Posix(_));
    let tasks = match &relay {
        Some(relay) if relay.moves_bytes() => task_split::split(relay.tasks_len(len), request.offset, relay.task_size()),
        _ => split_of(&call, len, request.offset, spread_over(&call, len, pool.num_threads())),
    };
    // Where the size is unknown the request is not clipped: stop at the first short or failed
    // task instead of running one per task size of the request.
    let stop = if size_known { Stop::Never } else { Stop::AtFirstShortOrFailed };
    let run = {
        // The call's files, which its tasks name by index (one here).
        let files = [Arc::clone(&file)];
        let stats = Arc::clone(stats);
        let relay = relay.clone();
        move |task: Task| {
            let _task = stream_ordered.then(cuda::StreamOrderedTask::enter);
            let move_bytes = |chunk| dispatch::run_and_record(&call, &files[task.file], &stats, chunk);
            match &relay {
                Some(relay) => relay.run_task(task.chunk, move_bytes, |chunk| dispatch::record_registered(&call, &files[task.file], &stats, chunk)),
                None => move_bytes(task.chunk),
            }
        }
    };
    let operation = Operation::new(direction, tasks, request.size as u64, Arc::clone(stats), stop, run);
    if let Some(w) = watch {
        operation.observe(move |outcome| w.end(outcome));
    }
    counted.handed_over();
    if let Some(relay) = &relay {
        relay.go(len as u64);
    }
    // A stream-ordered call's calling thread is a waiter, which must never move bytes itself: the
    // other streams' calls would wait behind the transfer (a slow file system's as well).
    let runner = if stream_ordered { Runner::Pool } else { runner };
    match runner {
        Runner::CallingThread => operation.run_here(),
        Runner::Pool => {
            // Measured on the H200 machine (ext4, 1 GiB from device memory into a new file,
            // docs/performance.md): 1 worker 4.01 GB/s, 16 workers 3.43; the kernel writes one
            // file's page cache under the inode's lock, so more workers only wait on it.
            // A synchronous caller runs tasks too while it waits (the D2H copy of one piece
            // overlaps the `pwrite` of another); a stream-ordered call has no waiting caller, so
            // it gets one worker more (its writes were 6-10 % slower without, 2026-12-02).
            let one_at_a_time = buffered_write && file.direct_fd(direct_io).is_none();
            let workers = if one_at_a_time { file.buffered_write_workers().saturating_add(usize::from(stream_ordered)) } else { usize::MAX };
            operation.start(&pool, workers);
        }
    }
    Ok(operation)
}

/// A stream-ordered call (`Start::OnStream`): checked and counted now as far as its arguments
/// are known (a size and offset behind pointers are read when the stream reaches the call), its
/// file taken now (the handle may be closed before the stream gets there), marked on its stream
/// (`stream_order`), and submitted by the waiter as a parallel call once the stream reached it;
/// or, where the stream cannot wait, submitted now after the stream was synchronised.
///
/// # Safety
/// As `submit`, until the stream has passed the call.
unsafe fn on_stream(stats: &Arc<StatsCell>, compat_mode: CompatMode, open_file: impl FnOnce() -> Result<Arc<OpenFile>>, request: Request, call: StreamCall) -> Result<Operation> {
    // A call refused at its checks is observed as a failed one (`CallWatch`'s `Drop`); past
    // them, its transfer, or cuFile's own call, is the call observed, and this watch is dismissed.
    let refused = CallWatch::start(&request, true);
    let counted = stats::PendingCall::queued_on_stream(stats, request.direction);
    match call.params {
        Params::Given => check_range(request.size, request.offset)?,
        Params::Behind(pointers) => pointers.check(request.direction)?,
    }
    // One reading of the settings decides the whole call (a setting changed by another thread
    // meanwhile cannot make its route, relay and preparation disagree).
    let snapshot = settings::global()?.snapshot();
    let ordered_setting = snapshot.stream_ordered;
    let file = open_file()?;
    if request.direction == Direction::Write {
        // A handle opened "r" is refused at the call, as `submit` refuses it.
        file.extent(Direction::Write, 0, request.offset)?;
    }
    call.refuse_if_capturing()?;
    // Until it starts, no relayed read takes the file's registered windows (`RegisteredRuns::plan`).
    let queued_write = (request.direction == Direction::Write).then(|| file.page_cache.write_queued());
    if let Some(w) = refused {
        w.dismiss();
    }
    // SAFETY: forwarded from the caller.
    if let Some(operation) = unsafe { native_cufile(stats, compat_mode, &file, request, &call, snapshot)? } {
        counted.handed_over();
        return Ok(operation);
    }
    // The route's one-time preparation (cuFile's driver open and the file's registration, on the
    // first cuFile call) happens here, before the stream waits for the call, not on the waiter
    // thread while it does (the pointer form's size is not known yet: prepared as a large one);
    // an error shows again, and counts, when the stream reaches the call.
    let probe_size = if let Params::Given = call.params { request.size } else { usize::MAX };
    // The relay kernel the call takes if `mark` relays it: one that moves the bytes for device
    // memory, a gate for host memory; none where the call must go through cuFile (compat OFF).
    let mut relay = None;
    let relay_setting = snapshot.stream_relay;
    if let Ok(target) = target_of(request.buf) {
        let planned = plan(&file, &target, probe_size, snapshot.gds_threshold, compat_mode);
        let cufile_required = compat_mode == CompatMode::Off && planned.as_ref().is_ok_and(|p| p.route == Route::Cufile);
        // A size given at the call is what the queued copies move, not clipped to the file's
        // size now: an earlier write on the same stream may still extend the file.
        let known_len = matches!(call.params, Params::Given).then_some(request.size as u64);
        relay = match (&target, request.direction) {
            _ if cufile_required || !relay_setting => None,
            (Target::Host(_), _) => Some(RelayPlan { kernel: RelayKernel::Gate, buffer: 0, known_len, registered: None, device: None }),
            (Target::Device { address, kind, .. }, Direction::Read) => {
                let registered = known_len.filter(|_| call.will_relay(ordered_setting)).and_then(|len| RegisteredRuns::plan(&file, kind, request.offset, len, &snapshot));
                Some(RelayPlan { kernel: RelayKernel::In, buffer: *address, known_len, registered, device: device_of(kind) })
            }
            (Target::Device { address, kind, .. }, Direction::Write) => Some(RelayPlan { kernel: RelayKernel::Out, buffer: *address, known_len, registered: None, device: device_of(kind) }),
        };
        // Likewise the CUDA objects its tasks need, and on cuFile's route each worker's first
        // cuFile call: made once the stream waits, they could wait for it
        // (`warm_up::prepare_for_stream_ordered`, `set_up_cufile_for_stream_ordered`). With the
        // setting off the stream never waits for the call (`mark` synchronises it), and a relayed
        // call's tasks make no CUDA call (`io::relay`), so nothing is made ahead for those.
        if ordered_setting != StreamOrdered::Off && !(relay.is_some() && call.will_relay(ordered_setting)) {
            warm_up::prepare_for_stream_ordered(&target, snapshot.bounce_buffer_size);
            if planned.is_ok_and(|p| p.route == Route::Cufile) {
                warm_up::set_up_cufile_for_stream_ordered(&file, &target, compat_mode);
            }
        }
    }
    let (marked, params) = call.mark(stats, ordered_setting, relay)?;
    // The transfer counts the call (a failure before it starts is counted by `stream_order`).
    counted.handed_over();
    let start = match &marked {
        Marked::Blocking => Start::Now,
        Marked::Ordered(..) => Start::StreamReached,
        Marked::Relayed(relay, _) => Start::Relayed(Arc::clone(relay)),
    };
    let handle = Arc::clone(stats);
    let transfer = move |request: Request| {
        // SAFETY: the caller keeps the buffer valid until the stream passed the call.
        unsafe { submit_on_file(&handle, compat_mode, file, request, start, snapshot) }
    };
    // A write counts as queued until it has started (its planning drops the windows).
    stream_order::run_marked(marked, params, request, Arc::clone(stats), queued_write, transfer)
}

/// A stream-ordered call that cuFile queues on the stream itself (`GDSROUTE_CUFILE_ASYNC=native`,
/// `backend::cufile::stream_ordered`): only where the call's route is cuFile, its stream was
/// registered with cuFile, and its size and offset are given. `None` otherwise: the stream mode
/// takes it. Counted as a call of one cuFile task when the stream passed it.
///
/// # Safety
/// As `submit`, until the stream has passed the call.
unsafe fn native_cufile(stats: &Arc<StatsCell>, compat_mode: CompatMode, file: &Arc<OpenFile>, request: Request, call: &StreamCall, snapshot: Snapshot) -> Result<Option<Operation>> {
    let Some(stream) = call.stream.cuda() else { return Ok(None) };
    if snapshot.cufile_async != CufileAsync::Native || !matches!(call.params, Params::Given) || !cufile::stream_ordered::is_registered(stream) {
        return Ok(None);
    }
    let Some(Planned { call: planned, .. }) = plan_call(file, request, None, snapshot, compat_mode, snapshot.gds_threshold, true)? else { return Ok(None) };
    let (Route::Cufile, Target::Device { kind, .. }) = (planned.plan.route, planned.target) else { return Ok(None) };
    let Ok(registered) = file.cufile(compat_mode) else { return Ok(None) };
    let direction = request.direction;
    // The whole call is one cuFile task that the stream runs: observed as a call when it settles
    // (handed to `finish` with the submission), or as a failed one where it fails before; where
    // cuFile cannot take it, dismissed: the stream mode's transfer is the call observed.
    let mut watch = CallWatch::start(&request, true);
    if let Some(w) = &mut watch {
        w.file(file);
        w.routed(&planned);
    }
    let watched = &mut watch;
    let submit = || {
        // SAFETY: the caller keeps the buffer valid until the stream passed the call; the
        // stream's context is current (`run_native`); the buffer is its own base (offset 0).
        let submitted = unsafe { cufile::stream_ordered::submit(direction, registered.library(), registered.handle(), &file.path, request.buf as u64, request.size, request.offset, stream) };
        submitted.map(|submitted| submitted.map(|submitted| (submitted, watched.take())))
    };
    // A write counts as queued until cuFile has written it: this count is the call's own, since
    // the caller's ends when a call cuFile took returns (and goes on where cuFile did not).
    let queued_write = (direction == Direction::Write).then(|| file.page_cache.write_queued());
    let (handle, file) = (Arc::clone(stats), Arc::clone(file));
    let finish = move |(submitted, watch): (cufile::stream_ordered::Submitted, Option<CallWatch>)| {
        // On the waiter thread, which must not wait for the device (other streams wait for it).
        let _task = cuda::StreamOrderedTask::enter();
        let result = submitted.result();
        if direction == Direction::Write {
            // Windows registered while the write ran must not serve later reads.
            file.page_cache.file_written();
        }
        let outcome = TaskOutcome { bytes: *result.as_ref().unwrap_or(&0), ..TaskOutcome::default() };
        stats::record_task(&handle, direction, Route::Cufile, kind.device_ordinal(), &outcome, result.is_err());
        // Moved by cuFile on the stream, so never seen in flight: started and ended here.
        stats::PendingCall::new(&handle, direction).finish(request.size as u64, outcome.bytes as u64, result.is_err());
        if let Some(w) = watch {
            w.end(&result);
        }
        result
    };
    let taken = stream_order::run_native(stream, request, Arc::clone(stats), queued_write, submit, finish);
    if let (Ok(None), Some(w)) = (&taken, watch) {
        w.dismiss();
    }
    taken
}

/// The tasks of a planned call's `len` bytes at `offset`: one on the calling thread (a device
/// request below the GDS threshold), else tasks of `task_size` (the setting, or smaller for a
/// small read spread over the pool: `spread_over`), the first ending on a page boundary of the
/// file under direct I/O.
fn split_of(call: &Call, len: usize, offset: u64, task_size: u64) -> Split {
    match call.plan.runner {
        Runner::CallingThread => Split::one(len, offset),
        Runner::Pool if call.snapshot.direct_io(call.direction) => task_split::split_for_direct_io(len, offset, task_size),
        Runner::Pool => task_split::split(len, offset, task_size),
    }
}

/// The task size of a parallel call of `len` bytes on a pool of `threads`: the setting, except
/// for a read on the POSIX routes (host memory, bounce buffers) of fewer bytes than the pool's
/// share (`threads` x task size), which is spread so that every thread takes part, in tasks of at
/// least `GDSROUTE_MIN_TASK_SIZE` (0: never), when it is the only read in flight. One thread copies 5-6 GB/s out of the page cache, so
/// a 2 MiB read as one task takes about 0.37 ms on the H200 however many threads wait
/// (docs/routing.md, "Small reads spread over the pool"). cuFile's tasks keep the setting's size:
/// each is one cuFile call, which cuFile counts. Writes keep it too: a file's buffered writes
/// queue on its inode's lock.
fn spread_over(call: &Call, len: usize, threads: usize) -> u64 {
    let (task_size, min) = (call.snapshot.task_size, call.snapshot.min_task_size);
    if call.direction != Direction::Read || call.plan.route == Route::Cufile || min == 0 || min >= task_size || threads < 2 {
        return task_size;
    }
    // With other reads in flight the pool has their tasks too: smaller tasks would only add
    // overhead (many in flight from one thread: 8.6 against 11.2 GB/s on the H200, 2026-12-03).
    if stats::activity::calls_in_flight(Direction::Read) > 1 {
        return task_size;
    }
    task_split::spread_task_size(len, threads, min, task_size)
}

/// A batch entry (`io::batch`) planned as `submit` plans a parallel call: its tasks' shared
/// plan and its tasks.
pub(super) struct EntryPlan {
    pub(super) call: Call,
    pub(super) split: Split,
}

/// Plans one batch entry on `file` as `submit` plans a call (range, extent, target, route; the
/// GDS threshold applies per entry), without counting it: the batch counts its calls. `None`
/// when it has nothing to move. An entry on a file of unknown size (a character device) is one
/// task of its whole size, since nothing bounds it.
pub(super) fn plan_entry(file: &OpenFile, request: Request, snapshot: Snapshot, compat_mode: CompatMode) -> Result<Option<EntryPlan>> {
    check_range(request.size, request.offset)?;
    let Some(Planned { call, len, size_known }) = plan_call(file, request, None, snapshot, compat_mode, snapshot.gds_threshold, false)? else { return Ok(None) };
    // Entries already run side by side: each keeps the setting's task size.
    let split = if size_known { split_of(&call, len, request.offset, call.snapshot.task_size) } else { Split::one(len, request.offset) };
    Ok(Some(EntryPlan { call, split }))
}

/// `submit` of a stream-ordered call's transfer, on a file already taken from its handle, under
/// the settings read at the call (not generic, so that `submit` and `on_stream` do not
/// instantiate each other without end).
///
/// # Safety
/// As `submit`.
unsafe fn submit_on_file(stats: &Arc<StatsCell>, compat_mode: CompatMode, file: Arc<OpenFile>, request: Request, start: Start, settings: Snapshot) -> Result<Operation> {
    // SAFETY: forwarded from the caller.
    unsafe { submit_with(stats, compat_mode, || Ok(file), request, start, Some(settings)) }
}

/// The start of every call: counted once (an early error return included: the `PendingCall`
/// records it when dropped), its range checked, the settings read once for the whole call
/// (`given`: a stream-ordered call's, read at the call).
fn begin<'s>(stats: &'s StatsCell, request: &Request, given: Option<Snapshot>) -> Result<(stats::PendingCall<'s>, Snapshot)> {
    let counted = stats::PendingCall::new(stats, request.direction);
    check_range(request.size, request.offset)?;
    let snapshot = match given {
        Some(snapshot) => snapshot,
        None => settings::global()?.snapshot(),
    };
    Ok((counted, snapshot))
}

/// A call that has bytes to move, planned: what its tasks share, the bytes they cover and whether
/// the file's size bounds them.
struct Planned {
    call: Call,
    len: usize,
    size_known: bool,
}

/// A call on `file` from its range to its plan: the range clipped to what the file has (a read)
/// or refused on an "r" handle (a write, whose page-cache windows are then dropped), the target
/// classified, the route planned (`gds_threshold`: 0 for a synchronous call) and, for cuFile, the
/// null stream synchronised (not for a `stream_ordered` call, which its stream orders). `None` when there is nothing to move: no task, no cuFile probe.
fn plan_call(file: &OpenFile, request: Request, known_target: Option<Target>, snapshot: Snapshot, compat_mode: CompatMode, gds_threshold: u64, stream_ordered: bool) -> Result<Option<Planned>> {
    let Request { direction, buf, size, offset } = request;
    let (len, size_known) = file.extent(direction, size, offset)?;
    if direction == Direction::Write && len > 0 {
        file.page_cache.file_written();
    }
    if len == 0 {
        return Ok(None);
    }
    let target = match known_target {
        Some(target) => target,
        None => target_of(buf)?,
    };
    let plan = plan(file, &target, size, gds_threshold, compat_mode)?;
    if plan.route == Route::Cufile && !stream_ordered {
        sync_default_stream(&target)?;
    }
    let observed = !crate::stats::monitor::in_a_callback();
    Ok(Some(Planned { call: Call { direction, plan, target, snapshot, compat_mode, observed }, len, size_known }))
}

/// The device whose memory `kind` is, for a relay (`None`: managed memory, which the kernels and
/// copies of any device reach).
fn device_of(kind: &MemoryKind) -> Option<i32> {
    match *kind {
        MemoryKind::Device { ordinal, .. } => Some(ordinal),
        _ => None,
    }
}

fn plan(file: &OpenFile, target: &Target, size: usize, gds_threshold: u64, compat_mode: CompatMode) -> Result<Plan> {
    let kind = match target {
        Target::Host(_) => MemoryKind::Host,
        Target::Device { kind, .. } => *kind,
    };
    route::plan(&kind, size, gds_threshold, compat_mode, || file.cufile_serves(compat_mode))
}

/// cuFile is not ordered with the CUDA null stream, so work queued there (e.g. a kernel still
/// using the buffer) is finished first, once per call, as KvikIO does.
fn sync_default_stream(target: &Target) -> Result<()> {
    if let Target::Device { kind, .. } = target {
        let _context = cuda::ScopedContext::for_kind(kind)?;
        cuda::synchronize(cuda::Stream::DEFAULT)?;
    }
    Ok(())
}
