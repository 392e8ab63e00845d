//! A batch: entries of several files, each a read or a write of one buffer, submitted together
//! and completed one by one (cuFile's `cuFileBatchIO*`, KvikIO's `BatchHandle`), on every route.
//! A submission plans every entry as a parallel call would be planned (`engine::plan_entry`:
//! range, extent, target, route), cuts each into tasks as a `pread` is cut, and runs the tasks
//! of all its entries as one operation per pool (`Operation`, claiming in entry order), whose
//! task source (`EntryTasks`) names each task's entry. What settles per entry (`Book`) is the
//! same tally a single call keeps (`operation::Tally`); a finished entry becomes a
//! `BatchCompletion` in its batch's queue (`Queue`), where `wait` finds it.
//!
//! Cancelling stops the entries none of whose tasks a worker has claimed: tasks are claimed in
//! entry order from the front, so those entries form the tail of each operation's source; an
//! entry already started runs to its end.
//!
//! One job in one file, although over 450 lines: a batch's queue, the planning and settlement of
//! its submissions and their task source share the entries' bookkeeping, which no other module
//! reads.

use super::dispatch::{self, Call};
use super::engine::{self, EntryPlan};
use super::observe::CallWatch;
use super::open_file::OpenFile;
use super::request::Request;
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::io::operation::{Operation, Stop, Tally};
use crate::io::task_source::{Task, TaskSource};
use crate::io::task_split::Split;
use crate::io::thread_pool::{Assigned, ThreadPool};
use crate::settings::{self, CompatMode, Snapshot};
use crate::stats::{self, StatsCell};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One entry as the engine takes it: the handle's counters, compat mode and open file (or why
/// it has none: a closed handle fails the entry, not the submission), the request and the
/// caller's cookie.
pub(crate) struct Entry {
    pub stats: Arc<StatsCell>,
    pub compat_mode: CompatMode,
    pub file: Result<Arc<OpenFile>>,
    pub request: Request,
    pub cookie: u64,
}

/// A finished entry: its cookie and its result (the bytes moved, fewer than asked only for a
/// read at the end of the file; or its error, `Error::Canceled` for an entry cancelled before
/// it started). The Rust API hands it out as it is (`gdsroute::BatchCompletion`).
#[derive(Clone, Debug)]
pub struct BatchCompletion {
    pub cookie: u64,
    pub result: Result<usize>,
}

/// A batch's completions and its submissions in flight.
pub(crate) struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

#[derive(Default)]
struct QueueState {
    /// Entries submitted whose completion `wait` has not returned yet.
    in_flight: usize,
    done: VecDeque<BatchCompletion>,
    /// Submissions with entries still running (pruned at each submit and wait).
    running: Vec<Running>,
}

/// A submission in flight and its operations. The operations are kept here, not in the
/// submission that their tasks hold: dropping one waits for its tasks, so it must never happen
/// on one of them (`prune`).
struct Running {
    submission: Arc<Submission>,
    groups: Vec<Group>,
}

/// Entries in flight once `count` more join the `in_flight` of a batch that takes `capacity`;
/// `InvalidArgument` when it does not take them.
fn room(capacity: usize, in_flight: usize, count: usize) -> Result<usize> {
    match in_flight.checked_add(count) {
        Some(after) if after <= capacity => Ok(after),
        _ => Err(Error::InvalidArgument(format!(
            "{count} entries submitted with {in_flight} in flight: the batch takes at most {capacity} in flight (wait for completions first)"
        ))),
    }
}

impl Queue {
    pub(crate) fn new() -> Arc<Queue> {
        Arc::new(Queue { state: Mutex::new(QueueState::default()), ready: Condvar::new() })
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries submitted whose completion has not been returned by `wait`.
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().in_flight
    }

    /// `Ok` when `count` more entries fit beside those in flight now; else the error `submit`
    /// would give them.
    pub(crate) fn check_room(&self, capacity: usize, count: usize) -> Result<()> {
        room(capacity, self.lock().in_flight, count).map(|_| ())
    }

    /// Submits `entries` if no more than `capacity` entries are then in flight; an entry that
    /// fails before it starts (a closed handle, a write to an "r" handle, a range past `off_t`)
    /// completes at once with its error. Errors here (nothing submitted): `InvalidArgument` for
    /// too many entries in flight.
    ///
    /// # Safety
    /// Every entry's buffer is valid for its size until its completion has been returned by
    /// `wait` (or the batch was dropped): writable for a read; a write only reads it.
    pub(crate) unsafe fn submit(self: &Arc<Queue>, capacity: usize, entries: Vec<Entry>) -> Result<()> {
        // SAFETY: forwarded from the caller.
        if let Some(prepared) = unsafe { self.prepare(capacity, entries, engine::plan_entry) }? {
            self.start(prepared);
        }
        Ok(())
    }

    /// The first half of `submit`: takes the entries' room in flight, plans them with
    /// `plan_entry` (`engine::plan_entry`; a test's may panic) and posts the completions of those
    /// that settled at once. `None` when no task is left to start.
    ///
    /// # Safety
    /// As `submit`.
    unsafe fn prepare(self: &Arc<Queue>, capacity: usize, entries: Vec<Entry>, plan_entry: impl PlanEntry) -> Result<Option<Prepared>> {
        if entries.is_empty() {
            return Ok(None);
        }
        let finished = {
            let mut state = self.lock();
            state.in_flight = room(capacity, state.in_flight, entries.len())?;
            prune(&mut state)
        };
        drop(finished);
        let reserved = Reserved { queue: self, entries: entries.len() };
        let (submission, groups, settled) = Submission::plan(self, entries, plan_entry)?;
        // Every entry completes from here on: those settled now, the others by their tasks.
        reserved.keep();
        self.complete(settled);
        Ok((!groups.is_empty()).then_some(Prepared { submission, groups }))
    }

    /// The second half of `submit`: starts the operations of a prepared submission.
    fn start(&self, prepared: Prepared) {
        // Started under the queue's lock, so that a cancel reaches every submission whose
        // workers run (their completions wait for the lock a moment).
        let mut state = self.lock();
        for group in &prepared.groups {
            group.operation.start(&group.pool, usize::MAX);
        }
        state.running.push(Running { submission: prepared.submission, groups: prepared.groups });
    }

    /// Waits until `min` completions are there (at most until `timeout`; `None`: no limit), then
    /// takes up to `max` of them, oldest first. Returns fewer than `min` only when the timeout
    /// passed, or when fewer than `min` entries are in flight at all (then it waits for those).
    pub(crate) fn wait(&self, min: usize, max: usize, timeout: Option<Duration>) -> Vec<BatchCompletion> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut state = self.lock();
        loop {
            let reachable = min.min(state.in_flight);
            if state.done.len() >= reachable || timeout == Some(Duration::ZERO) {
                break;
            }
            state = match deadline {
                None => self.ready.wait(state).unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    self.ready.wait_timeout(state, deadline - now).unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
        let take = max.min(state.done.len());
        let taken: Vec<BatchCompletion> = state.done.drain(..take).collect();
        state.in_flight -= taken.len();
        let finished = prune(&mut state);
        drop(state);
        drop(finished);
        taken
    }

    /// Cancels every entry not started yet (each completes with `Error::Canceled`); entries
    /// already running finish or fail as they would. Returns how many were cancelled.
    pub(crate) fn cancel(&self) -> usize {
        let mut state = self.lock();
        let mut completions = Vec::new();
        for running in &state.running {
            for Group { operation, tasks, .. } in &running.groups {
                let range = operation.cancel_unclaimed(|front| tasks.first_unstarted_entry_start(front));
                completions.extend(running.submission.cancel(tasks.entries_from(range.start)));
            }
        }
        let n = completions.len();
        if n > 0 {
            state.done.extend(completions);
            self.ready.notify_all();
        }
        n
    }

    fn complete(&self, completions: impl IntoIterator<Item = BatchCompletion>) {
        let mut state = self.lock();
        let before = state.done.len();
        state.done.extend(completions);
        if state.done.len() > before {
            self.ready.notify_all();
        }
    }
}

/// The room in flight a submission took while it is planned: given back if planning fails or
/// unwinds (a panic the C boundary catches), or `wait` would wait for completions that never
/// come and the room would be lost.
struct Reserved<'q> {
    queue: &'q Queue,
    entries: usize,
}

impl Reserved<'_> {
    /// Every entry will complete: the room is theirs until `wait` returns them.
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.queue.lock().in_flight -= self.entries;
        // A waiter for more than are now in flight waits for fewer.
        self.queue.ready.notify_all();
    }
}

/// How a submission plans an entry: `engine::plan_entry` (a test's may fail or panic).
trait PlanEntry: Fn(&OpenFile, Request, Snapshot, CompatMode) -> Result<Option<EntryPlan>> {}

impl<F: Fn(&OpenFile, Request, Snapshot, CompatMode) -> Result<Option<EntryPlan>>> PlanEntry for F {}

/// A submission planned, its operations not started yet.
struct Prepared {
    submission: Arc<Submission>,
    groups: Vec<Group>,
}

/// The operation of a submission's entries whose files share a pool. `_owner` keeps that pool
/// running until the group is dropped: a caller's pool retires when its last owner lets go
/// (`CallerPool`), and a `set_pool` of the file racing the submission may drop the file's, after
/// which tasks queued there would never run. Dropped after `operation` (field order), which waits
/// for its tasks.
struct Group {
    operation: Operation,
    tasks: Arc<EntryTasks>,
    pool: ThreadPool,
    _owner: Assigned,
}

/// Takes the submissions whose entries have all completed out of the running list, to be
/// dropped after the queue's lock is released (dropping their operations waits for the last
/// task's return, which takes that lock to post its completion).
fn prune(state: &mut QueueState) -> Vec<Running> {
    let (finished, running) = std::mem::take(&mut state.running).into_iter().partition(|r| r.submission.is_done());
    state.running = running;
    finished
}

/// What dropping the batch does: cancels the entries not started and waits for the running ones,
/// so that no entry touches its buffer after the batch is gone.
pub(crate) fn cancel_and_drain(queue: &Queue) {
    queue.cancel();
    let running = std::mem::take(&mut queue.lock().running);
    // Dropping an operation waits for its tasks; none is left unclaimed after the cancel.
    drop(running);
}

/// One submission: its planned entries and what has settled of them. Its tasks hold it.
struct Submission {
    queue: Arc<Queue>,
    entries: Vec<Planned>,
    book: Mutex<Book>,
}

/// An entry with bytes to move, planned.
struct Planned {
    call: Call,
    file: Arc<OpenFile>,
    stats: Arc<StatsCell>,
    split: Split,
    /// Its index among the submission's entries (`Book::entries`).
    entry: usize,
}

/// What has settled of a submission's entries.
struct Book {
    entries: Vec<EntryState>,
    /// Entries not complete yet.
    left: usize,
    /// Per direction (read, write): what the submission counts as a call, process-wide.
    calls: [CallSum; 2],
    /// The same per handle among the entries' (`EntryState::handle`).
    handles: Vec<(Arc<StatsCell>, [CallSum; 2])>,
    /// The calls in flight until `finish_calls` counts them.
    started: StartedCalls,
}

/// The directions whose call a submission started (`stats::call_started`) and has not counted:
/// ended when dropped uncounted, so that a submission whose planning unwinds leaves no call in
/// flight.
#[derive(Default)]
struct StartedCalls([bool; 2]);

impl StartedCalls {
    fn start(&mut self, direction: Direction) {
        let started = &mut self.0[direction as usize];
        if !*started {
            *started = true;
            stats::call_started(direction);
        }
    }

    /// The calls were counted, which ended them (`stats::record_batch_call`).
    fn counted(&mut self) {
        self.0 = [false; 2];
    }
}

impl Drop for StartedCalls {
    fn drop(&mut self) {
        for direction in [Direction::Read, Direction::Write] {
            if self.0[direction as usize] {
                stats::activity::call_ended(direction);
            }
        }
    }
}

struct EntryState {
    cookie: u64,
    /// Tasks that have not reported; `None` once complete (or for an entry that had none).
    tasks_left: Option<usize>,
    tally: Tally,
    watch: Option<CallWatch>,
    direction: Direction,
    /// Its handle's index in `Book::handles`.
    handle: usize,
}

/// A direction's share of a submission: bytes asked for and delivered, whether any entry
/// failed, and whether it has entries at all.
#[derive(Default, Clone, Copy)]
struct CallSum {
    requested: u64,
    delivered: u64,
    failed: bool,
    present: bool,
}

impl CallSum {
    /// An entry of `requested` bytes joins the call.
    fn add_requested(&mut self, requested: u64) {
        self.present = true;
        self.requested = self.requested.saturating_add(requested);
    }
}

impl Submission {
    /// Plans every entry with `plan_entry`, counts the calls as started, and builds one
    /// operation per pool among the entries' files, not started yet. Returns those and the
    /// completions of the entries that settled at once (failed, or nothing to move), which
    /// the caller posts: nothing is posted here, so that a planning that fails or unwinds leaves
    /// no completion of a submission that was refused.
    fn plan(queue: &Arc<Queue>, entries: Vec<Entry>, plan_entry: impl PlanEntry) -> Result<(Arc<Submission>, Vec<Group>, Vec<BatchCompletion>)> {
        let snapshot = settings::global()?.snapshot();
        let mut planned = Vec::new();
        let mut settled = Vec::new();
        // Built before the first call starts: unwinding drops it, which ends the calls started.
        let mut book = Book { entries: Vec::with_capacity(entries.len()), left: 0, calls: [CallSum::default(); 2], handles: Vec::new(), started: StartedCalls::default() };
        let mut handle_index: HashMap<*const StatsCell, usize> = HashMap::new();
        for entry in entries {
            let direction = entry.request.direction;
            let requested = entry.request.size as u64;
            book.started.start(direction);
            book.calls[direction as usize].add_requested(requested);
            let handle = *handle_index.entry(Arc::as_ptr(&entry.stats)).or_insert_with(|| {
                book.handles.push((Arc::clone(&entry.stats), [CallSum::default(); 2]));
                book.handles.len() - 1
            });
            book.handles[handle].1[direction as usize].add_requested(requested);
            let mut watch = CallWatch::start(&entry.request, false);
            let mut state = EntryState { cookie: entry.cookie, tasks_left: None, tally: Tally::default(), watch: None, direction, handle };
            let plan = entry.file.and_then(|file| {
                if let Some(w) = &mut watch {
                    w.file(&file);
                }
                plan_entry(&file, entry.request, snapshot, entry.compat_mode).map(|p| (file, p))
            });
            match plan {
                Ok((file, Some(EntryPlan { call, split }))) => {
                    if let Some(w) = &mut watch {
                        w.routed(&call);
                    }
                    state.watch = watch;
                    state.tasks_left = Some(split.count());
                    planned.push(Planned { call, file, stats: entry.stats, split, entry: book.entries.len() });
                }
                outcome => {
                    let result = outcome.map(|_| 0);
                    book.calls[direction as usize].failed |= result.is_err();
                    book.handles[handle].1[direction as usize].failed |= result.is_err();
                    if let Some(w) = watch {
                        w.end(&result);
                    }
                    settled.push(BatchCompletion { cookie: entry.cookie, result });
                }
            }
            book.entries.push(state);
        }
        book.left = planned.len();
        if book.left == 0 {
            book.finish_calls();
        }
        let submission = Arc::new(Submission { queue: Arc::clone(queue), entries: planned, book: Mutex::new(book) });
        if submission.entries.is_empty() {
            return Ok((submission, Vec::new(), settled));
        }
        let groups = match submission.build_operations() {
            Ok(groups) => groups,
            Err(e) => {
                // No task started: every planned entry fails with the error.
                let mut book = submission.lock_book();
                settled.extend(submission.entries.iter().filter_map(|p| book.entries[p.entry].tasks_left.take().map(|_| book.entry_done(p.entry, Err(e.clone())))));
                Vec::new()
            }
        };
        Ok((submission, groups, settled))
    }

    fn lock_book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Groups the planned entries by their file's pool, each group one operation whose tasks run
    /// its entries in entry order, holding the pool's owner as it was taken from the file.
    fn build_operations(self: &Arc<Submission>) -> Result<Vec<Group>> {
        let mut groups: Vec<(Assigned, ThreadPool, Vec<usize>)> = Vec::new();
        for (index, entry) in self.entries.iter().enumerate() {
            let assigned = entry.file.pool.lock().unwrap_or_else(|p| p.into_inner());
            let pool = assigned.pool()?;
            match groups.iter_mut().find(|(_, p, _)| p.same_pool(&pool)) {
                Some((_, _, members)) => members.push(index),
                None => groups.push((assigned.clone(), pool, vec![index])),
            }
        }
        let groups = groups
            .into_iter()
            .map(|(owner, pool, members)| {
                let tasks = Arc::new(EntryTasks::new(members.iter().map(|&i| (i, self.entries[i].split)).collect()));
                let submission = Arc::clone(self);
                let operation = Operation::uncounted(SharedTasks(Arc::clone(&tasks)), move |task: Task| {
                    let entry = &submission.entries[task.file];
                    let result = dispatch::run_and_record(&entry.call, &entry.file, &entry.stats, task.chunk);
                    submission.task_done(task, result.clone());
                    result
                });
                Group { operation, tasks, pool, _owner: owner }
            })
            .collect();
        Ok(groups)
    }

    fn is_done(&self) -> bool {
        self.lock_book().left == 0
    }

    /// A task of planned entry `task.file` reported `result`.
    fn task_done(&self, task: Task, result: Result<usize>) {
        let planned = &self.entries[task.file];
        let completion = {
            let mut book = self.lock_book();
            let state = &mut book.entries[planned.entry];
            // The buffer offset orders an entry's tasks as their index does.
            state.tally.record(task.chunk.buf_offset, task.chunk.len, result);
            let Some(left) = state.tasks_left.as_mut() else { return };
            *left -= 1;
            if *left > 0 {
                return;
            }
            state.tasks_left = None;
            // Every task of an entry runs (its file's size bounds it): no stop at a short one.
            let result = state.tally.outcome(|offset| offset, planned.split.size(), Stop::Never);
            book.entry_done(planned.entry, result)
        };
        self.queue.complete([completion]);
    }

    /// Cancels the planned entries `cancelled` (none of their tasks was claimed): their
    /// completions.
    fn cancel(&self, cancelled: impl Iterator<Item = usize>) -> Vec<BatchCompletion> {
        let mut book = self.lock_book();
        cancelled
            .filter_map(|planned| {
                let p = &self.entries[planned];
                book.entries[p.entry].tasks_left.take()?;
                let error = Error::Canceled(format!("the entry (cookie {}) was cancelled before it started", book.entries[p.entry].cookie));
                Some(book.entry_done(p.entry, Err(error)))
            })
            .collect()
    }
}

impl Book {
    /// Entry `index` settled with `result`: observed, added to its direction's call, and its
    /// completion made; the submission's calls are counted with its last entry.
    fn entry_done(&mut self, index: usize, result: Result<usize>) -> BatchCompletion {
        let state = &mut self.entries[index];
        let delivered = *result.as_ref().unwrap_or(&0) as u64;
        // Monitors' callbacks run here, under the submission's book lock (as a call's run under
        // its operation's lock): they must not call into this batch.
        if let Some(w) = state.watch.take() {
            w.end(&result);
        }
        let direction = state.direction as usize;
        for sum in [&mut self.calls[direction], &mut self.handles[state.handle].1[direction]] {
            sum.delivered += delivered;
            sum.failed |= result.is_err();
        }
        let completion = BatchCompletion { cookie: state.cookie, result };
        self.left -= 1;
        if self.left == 0 {
            self.finish_calls();
        }
        completion
    }

    /// Counts the submission as one call per direction it holds, process-wide and on each handle
    /// with entries of that direction.
    fn finish_calls(&mut self) {
        self.started.counted();
        for (i, direction) in [Direction::Read, Direction::Write].into_iter().enumerate() {
            let sum = self.calls[i];
            if sum.present {
                stats::record_batch_call(direction, sum.requested, sum.delivered, sum.failed);
            }
            for (handle, sums) in &self.handles {
                let sum = sums[i];
                if sum.present {
                    stats::record_handle_call(handle, direction, sum.requested, sum.delivered, sum.failed);
                }
            }
        }
    }
}

/// The tasks of one operation of a submission: its entries' splits one after another, each task
/// naming its planned entry (`Task::file`).
struct EntryTasks {
    /// (planned entry, its split, the index of its first task).
    entries: Vec<(usize, Split, usize)>,
    count: usize,
    size: usize,
}

impl EntryTasks {
    fn new(members: Vec<(usize, Split)>) -> EntryTasks {
        let (mut count, mut size) = (0, 0);
        let entries = members
            .into_iter()
            .map(|(entry, split)| {
                let first = count;
                count += split.count();
                size += split.size();
                (entry, split, first)
            })
            .collect();
        EntryTasks { entries, count, size }
    }

    /// The position in `entries` of the entry that holds task `index`.
    fn position_of(&self, index: usize) -> usize {
        self.entries.partition_point(|&(_, _, first)| first <= index) - 1
    }

    /// Where the unstarted tail begins when tasks up to `front` (exclusive) were claimed: `front`
    /// itself when it is an entry's first task, else the end of the entry it is in (that entry
    /// started and runs to its end).
    fn first_unstarted_entry_start(&self, front: usize) -> usize {
        if front == 0 || front >= self.count {
            return front;
        }
        let (_, split, first) = self.entries[self.position_of(front)];
        if first == front { front } else { first + split.count() }
    }

    /// The planned entries whose tasks begin at or after task `start`.
    fn entries_from(&self, start: usize) -> impl Iterator<Item = usize> + '_ {
        self.entries.iter().filter(move |&&(_, split, first)| first >= start && split.count() > 0).map(|&(entry, _, _)| entry)
    }
}

/// `EntryTasks` shared between the operation and the submission (which cancels by it).
struct SharedTasks(Arc<EntryTasks>);

impl TaskSource for SharedTasks {
    fn count(&self) -> usize {
        self.0.count
    }

    fn task(&self, index: usize) -> Task {
        let (entry, split, first) = self.0.entries[self.0.position_of(index)];
        Task { file: entry, chunk: split.chunk(index - first) }
    }

    fn size(&self) -> usize {
        self.0.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::open_file::{OpenFlags, Opened};
    use crate::io::thread_pool::CallerPool;
    use crate::test_support::{random_bytes, temp_file_in};
    use std::os::fd::OwnedFd;

    fn open(tmp: &tempfile::NamedTempFile) -> Arc<OpenFile> {
        Arc::new(OpenFile::new(OwnedFd::from(tmp.reopen().unwrap()), "test".into(), Opened::Path(OpenFlags::Read)).unwrap())
    }

    /// A read of `buf.len()` bytes at offset 0 of `file`, in host memory (never cuFile).
    fn read_entry(file: Result<Arc<OpenFile>>, buf: &mut [u8], cookie: u64) -> Entry {
        let request = Request { direction: Direction::Read, buf: buf.as_mut_ptr(), size: buf.len(), offset: 0 };
        Entry { stats: Arc::new(StatsCell::default()), compat_mode: CompatMode::On, file, request, cookie }
    }

    /// Submits a read and a write of a closed handle (both settle at once) and a read of `file`,
    /// whose planning panics: the panic is caught, as the C boundary catches it.
    fn submit_panicking_while_planning(queue: &Arc<Queue>, file: &Arc<OpenFile>, buf: &mut [u8]) {
        let closed = || Err(Error::ClosedHandle { path: "closed".into() });
        let mut entries = vec![read_entry(closed(), buf, 0), read_entry(closed(), buf, 1), read_entry(Ok(Arc::clone(file)), buf, 2)];
        entries[1].request.direction = Direction::Write;
        let panicking = |_: &OpenFile, _: Request, _: Snapshot, _: CompatMode| -> Result<Option<EntryPlan>> { panic!("a bug while planning") };
        // SAFETY: the buffer outlives the queue's use of it (nothing is submitted).
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { queue.prepare(4, entries, panicking) }));
        assert!(caught.is_err(), "planning did not panic");
    }

    #[test]
    fn a_panic_while_planning_gives_back_the_room_and_posts_nothing() {
        let data = random_bytes(4096, 40);
        let tmp = temp_file_in(None, &data);
        let file = open(&tmp);
        let queue = Queue::new();
        let mut buf = vec![0u8; 4096];
        submit_panicking_while_planning(&queue, &file, &mut buf);
        assert_eq!(queue.in_flight(), 0, "the refused submission's room was kept");
        assert!(queue.wait(1, 4, Some(Duration::ZERO)).is_empty(), "a completion of the refused submission was posted");
        // The whole room is there again, and a wait with no time limit returns.
        let mut bufs = vec![vec![0u8; 4096]; 4];
        let entries = bufs.iter_mut().enumerate().map(|(i, b)| read_entry(Ok(Arc::clone(&file)), b, i as u64)).collect();
        // SAFETY: the buffers outlive the waits below.
        unsafe { queue.submit(4, entries) }.unwrap();
        let mut done = Vec::new();
        while done.len() < 4 {
            done.extend(queue.wait(1, 4, None));
        }
        assert!(done.iter().all(|c| matches!(c.result, Ok(4096))), "{done:?}");
        assert!(bufs.iter().all(|b| *b == data));
        // The calls it started ended: in a process of its own, where no other test's calls run.
        let text = crate::test_support::run_ignored_test("io::batch::tests::calls_in_flight_after_a_panic_while_planning", &[]);
        assert!(text.contains("in flight after the panic: 0 reads, 0 writes"), "{text}");
    }

    #[test]
    #[ignore = "a child process of a_panic_while_planning_gives_back_the_room_and_posts_nothing"]
    fn calls_in_flight_after_a_panic_while_planning() {
        use crate::stats::activity::calls_in_flight;
        let tmp = temp_file_in(None, &[1u8; 4096]);
        let mut buf = vec![0u8; 4096];
        submit_panicking_while_planning(&Queue::new(), &open(&tmp), &mut buf);
        println!("in flight after the panic: {} reads, {} writes", calls_in_flight(Direction::Read), calls_in_flight(Direction::Write));
    }

    /// `gdsroute_file_set_pool` on another thread between the submission's planning and its
    /// start drops the file's owner of a caller's pool: the submission's tasks still run.
    #[test]
    fn a_submission_keeps_the_pool_it_took_running() {
        let data = random_bytes(3 * 4096, 41);
        let tmp = temp_file_in(None, &data);
        let file = open(&tmp);
        let owner = Arc::new(CallerPool::new(1, None).unwrap());
        let (pool, weak) = (owner.pool().clone(), Arc::downgrade(&owner));
        // The caller's own value is gone: the file holds the pool's last owner.
        *file.pool.lock().unwrap() = Assigned::Caller(owner);
        let queue = Queue::new();
        let mut buf = vec![0u8; data.len()];
        // SAFETY: the buffer outlives the wait and the drain below.
        let prepared = unsafe { queue.prepare(1, vec![read_entry(Ok(Arc::clone(&file)), &mut buf, 7)], engine::plan_entry) }.unwrap().unwrap();
        *file.pool.lock().unwrap() = Assigned::Shared;
        if weak.upgrade().is_none() {
            // Retired: once its workers left, nothing runs a job queued there.
            let since = Instant::now();
            while pool.live_threads() > 0 && since.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        queue.start(prepared);
        let done = queue.wait(1, 1, Some(Duration::from_secs(60)));
        cancel_and_drain(&queue);
        assert_eq!(done.len(), 1, "the entry's tasks never ran: its pool retired under it");
        assert!(matches!(done[0].result, Ok(n) if n == data.len()), "{:?}", done[0].result);
        assert!(buf == data);
    }

    #[test]
    fn entry_tasks_name_their_entries_and_cancel_at_entry_boundaries() {
        // Entries of 3, 1 and 2 tasks of a page.
        const P: usize = 4096;
        let t = EntryTasks::new(vec![(0, crate::io::task_split::split(3 * P, 0, P as u64)), (1, Split::one(P, 100)), (2, crate::io::task_split::split(2 * P, 200, P as u64))]);
        let s = SharedTasks(Arc::new(t));
        assert_eq!((s.count(), s.size()), (6, 6 * P));
        let files: Vec<usize> = (0..6).map(|i| s.task(i).file).collect();
        assert_eq!(files, [0, 0, 0, 1, 2, 2]);
        assert_eq!(s.task(3).chunk.file_offset, 100);
        assert_eq!((s.task(5).chunk.file_offset, s.task(5).chunk.buf_offset), (200 + P as u64, P));
        let t = &s.0;
        assert_eq!(t.first_unstarted_entry_start(0), 0);
        assert_eq!(t.first_unstarted_entry_start(1), 3, "entry 0 started: it runs to its end");
        assert_eq!(t.first_unstarted_entry_start(3), 3);
        assert_eq!(t.first_unstarted_entry_start(5), 6);
        assert_eq!(t.entries_from(3).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(t.entries_from(6).count(), 0);
    }
}
