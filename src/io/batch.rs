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
use crate::io::operation::{Operation, Tally};
use crate::io::task_source::{Task, TaskSource};
use crate::io::task_split::Split;
use crate::io::thread_pool::ThreadPool;
use crate::settings::{self, CompatMode};
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
    operations: Vec<(Operation, Arc<EntryTasks>)>,
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

    /// Submits `entries` if no more than `capacity` entries are then in flight; an entry that
    /// fails before it starts (a closed handle, a write to an "r" handle, a range past `off_t`)
    /// completes at once with its error. Errors here (nothing submitted): `InvalidArgument` for
    /// too many entries in flight.
    ///
    /// # Safety
    /// Every entry's buffer is valid for its size until its completion has been returned by
    /// `wait` (or the batch was dropped): writable for a read; a write only reads it.
    pub(crate) unsafe fn submit(self: &Arc<Queue>, capacity: usize, entries: Vec<Entry>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let finished = {
            let mut state = self.lock();
            let after = state.in_flight.saturating_add(entries.len());
            if after > capacity {
                return Err(Error::InvalidArgument(format!(
                    "{} entries submitted with {} in flight: the batch takes at most {capacity} in flight (wait for completions first)",
                    entries.len(),
                    state.in_flight
                )));
            }
            state.in_flight = after;
            prune(&mut state)
        };
        drop(finished);
        let count = entries.len();
        let (submission, operations) = match Submission::plan(self, entries) {
            Ok(planned) => planned,
            Err(e) => {
                self.lock().in_flight -= count;
                return Err(e);
            }
        };
        if operations.is_empty() {
            return Ok(());
        }
        // Started under the queue's lock, so that a cancel reaches every submission whose
        // workers run (their completions wait for the lock a moment).
        let mut state = self.lock();
        for (pool, operation, _) in &operations {
            operation.start(pool, usize::MAX);
        }
        let operations = operations.into_iter().map(|(_, operation, tasks)| (operation, tasks)).collect();
        state.running.push(Running { submission, operations });
        Ok(())
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
            for (operation, tasks) in &running.operations {
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

/// An operation of a submission, not started: its pool and the entries its tasks run.
type Built = (ThreadPool, Operation, Arc<EntryTasks>);

impl Submission {
    /// Plans every entry (failing ones complete at once, before any task runs), counts the
    /// calls as started, and builds one operation per pool among the entries' files, not
    /// started yet.
    fn plan(queue: &Arc<Queue>, entries: Vec<Entry>) -> Result<(Arc<Submission>, Vec<Built>)> {
        let snapshot = settings::global()?.snapshot();
        let mut planned = Vec::new();
        let mut states = Vec::with_capacity(entries.len());
        let mut early = Vec::new();
        let mut calls = [CallSum::default(); 2];
        let mut handles: Vec<(Arc<StatsCell>, [CallSum; 2])> = Vec::new();
        let mut handle_index: HashMap<*const StatsCell, usize> = HashMap::new();
        for entry in entries {
            let direction = entry.request.direction;
            let requested = entry.request.size as u64;
            let sum = &mut calls[direction as usize];
            if !sum.present {
                sum.present = true;
                stats::call_started(direction);
            }
            sum.add_requested(requested);
            let handle = *handle_index.entry(Arc::as_ptr(&entry.stats)).or_insert_with(|| {
                handles.push((Arc::clone(&entry.stats), [CallSum::default(); 2]));
                handles.len() - 1
            });
            handles[handle].1[direction as usize].add_requested(requested);
            let mut watch = CallWatch::start(&entry.request, false);
            let mut state = EntryState { cookie: entry.cookie, tasks_left: None, tally: Tally::default(), watch: None, direction, handle };
            let plan = entry.file.and_then(|file| {
                if let Some(w) = &mut watch {
                    w.file(&file);
                }
                engine::plan_entry(&file, entry.request, snapshot, entry.compat_mode).map(|p| (file, p))
            });
            match plan {
                Ok((file, Some(EntryPlan { call, split }))) => {
                    if let Some(w) = &mut watch {
                        w.routed(&call);
                    }
                    state.watch = watch;
                    state.tasks_left = Some(split.count());
                    planned.push(Planned { call, file, stats: entry.stats, split, entry: states.len() });
                }
                settled => {
                    let result = settled.map(|_| 0);
                    calls[direction as usize].failed |= result.is_err();
                    handles[handle].1[direction as usize].failed |= result.is_err();
                    if let Some(w) = watch {
                        w.end(&result);
                    }
                    early.push(BatchCompletion { cookie: entry.cookie, result });
                }
            }
            states.push(state);
        }
        let left = planned.len();
        let submission = Arc::new(Submission { queue: Arc::clone(queue), entries: planned, book: Mutex::new(Book { entries: states, left, calls, handles }) });
        queue.complete(early);
        if left == 0 {
            submission.lock_book().finish_calls();
            return Ok((submission, Vec::new()));
        }
        let operations = match submission.build_operations() {
            Ok(operations) => operations,
            Err(e) => {
                // No task started: every planned entry fails with the error.
                let failed: Vec<BatchCompletion> = {
                    let mut book = submission.lock_book();
                    submission.entries.iter().filter_map(|p| book.entries[p.entry].tasks_left.take().map(|_| book.entry_done(p.entry, Err(e.clone())))).collect()
                };
                queue.complete(failed);
                Vec::new()
            }
        };
        Ok((submission, operations))
    }

    fn lock_book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Groups the planned entries by their file's pool, each group one operation whose tasks run
    /// its entries in entry order.
    fn build_operations(self: &Arc<Submission>) -> Result<Vec<Built>> {
        let mut groups: Vec<(ThreadPool, Vec<usize>)> = Vec::new();
        for (index, entry) in self.entries.iter().enumerate() {
            let pool = entry.file.pool()?;
            match groups.iter_mut().find(|(p, _)| p.same_pool(&pool)) {
                Some((_, members)) => members.push(index),
                None => groups.push((pool, vec![index])),
            }
        }
        let operations = groups
            .into_iter()
            .map(|(pool, members)| {
                let tasks = Arc::new(EntryTasks::new(members.iter().map(|&i| (i, self.entries[i].split)).collect()));
                let submission = Arc::clone(self);
                let operation = Operation::uncounted(SharedTasks(Arc::clone(&tasks)), move |task: Task| {
                    let entry = &submission.entries[task.file];
                    let result = dispatch::run_and_record(&entry.call, &entry.file, &entry.stats, task.chunk);
                    submission.task_done(task, result.clone());
                    result
                });
                (pool, operation, tasks)
            })
            .collect();
        Ok(operations)
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
            let result = state.tally.outcome(|offset| offset, planned.split.size());
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
