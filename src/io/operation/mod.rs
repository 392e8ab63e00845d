//! A call in flight, a read or a write, like KvikIO's future. The operation finishes only after
//! every one of its tasks has stopped, so when a caller sees the result (success or error)
//! nothing will touch its buffer any more. The result is the first error in task order, or the
//! number of bytes delivered contiguously from the requested offset (all of a write's, or none).
//!
//! The tasks are not listed: the operation holds the call's task source (`io::task_source`) and
//! the state its threads share (`progress`: the tasks not yet claimed, a summary of the results).
//! A bounded number of pool jobs (one per pool thread, at most one per task) each claim tasks from
//! the front until none is left.
//!
//! A thread that waits runs tasks of its own operation that no worker has started yet (from the
//! end, while workers take them from the front; from the front too where the operation stops at
//! its first short task), instead of sleeping: the caller's thread is blocked anyway, and with it
//! a call of N pool threads runs on N + 1 threads (N + W with W waiting threads). KvikIO's waiter
//! only sleeps, and so does ours with a pool of one thread, so that `KVIKIO_NTHREADS=1` still
//! means one thread doing the transfers, in order.
//!
//! One job in one file, although over 450 lines: the handle on a call in flight; most of the
//! length is its unit tests.

mod progress;

use crate::direction::Direction;
use crate::error::Result;
use crate::io::task_source::{Task, TaskSource};
use crate::io::task_split::Split;
use crate::io::thread_pool::ThreadPool;
use crate::stats::StatsCell;
use progress::{End, Progress, Shared, State, Worker};
pub(crate) use progress::Tally;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// When the operation stops starting tasks before the last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Every task runs (the range was clipped to the bytes the file has, or is a write's, so all
    /// can deliver).
    Never,
    /// No task after the first short or failed one starts: where the file's size is unknown
    /// (pipes, character devices, directories), so that a request far larger than what a read
    /// can return does not run one task per task size of it. Tasks already running finish.
    AtFirstShortOrFailed,
}

/// A read or write in flight.
pub struct Operation {
    shared: Arc<Shared>,
}

impl Operation {
    /// An operation of `direction` (counted in that direction's counters when it settles) over
    /// the tasks of `tasks`, each run by `run`, none started yet (see `run_here`, `start`).
    /// `requested` is the size the caller asked for (counted in `bytes_requested`; the tasks may
    /// cover less). With no tasks the operation is already finished with 0 bytes.
    pub(crate) fn new(
        direction: Direction,
        tasks: impl TaskSource,
        requested: u64,
        stats: Arc<StatsCell>,
        stop: Stop,
        run: impl Fn(Task) -> Result<usize> + Send + Sync + 'static,
    ) -> Operation {
        Operation::with_record(direction, tasks, requested, Some(stats), stop, run)
    }

    /// A read over the tasks of `tasks`, each run by `run`, that is in no counters: the mapping
    /// handle's (`api::mapping`), whose copies out of memory are none of the counters' routes.
    /// Every task runs (`Stop::Never`); started as `new`'s.
    pub(crate) fn uncounted(tasks: impl TaskSource, run: impl Fn(Task) -> Result<usize> + Send + Sync + 'static) -> Operation {
        let requested = tasks.size() as u64;
        Operation::with_record(Direction::Read, tasks, requested, None, Stop::Never, run)
    }

    fn with_record(
        direction: Direction,
        tasks: impl TaskSource,
        requested: u64,
        stats: Option<Arc<StatsCell>>,
        stop: Stop,
        run: impl Fn(Task) -> Result<usize> + Send + Sync + 'static,
    ) -> Operation {
        let count = tasks.count();
        let shared: Arc<Shared> = Arc::new(Progress {
            stop,
            state: Mutex::new(State {
                front: 0,
                back: count,
                running: 0,
                tally: Tally::default(),
                outcome: None,
                run: Some(Arc::new(run)),
                on_settle: None,
                observer: None,
                pool: None,
            }),
            finished: Condvar::new(),
            requested,
            stats,
            direction,
            external: false,
            tasks,
        });
        shared.settle_if_done(&mut shared.lock());
        Operation { shared }
    }

    /// A finished operation of `direction` without tasks that delivered 0 of `requested` bytes.
    pub(crate) fn finished(direction: Direction, requested: u64, stats: Arc<StatsCell>) -> Operation {
        Operation::new(direction, Split::one(0, 0), requested, stats, Stop::Never, |_| Ok(0))
    }

    /// An operation of `direction` without tasks that settles when its `Settler` says (a
    /// stream-ordered call's handle: `io::stream_order`). Until then it is not done; waiting for
    /// it only waits. Dropping it does not wait.
    pub(crate) fn awaiting(direction: Direction, stats: Arc<StatsCell>) -> (Operation, Settler) {
        let shared: Arc<Shared> = Arc::new(Progress {
            stop: Stop::Never,
            state: Mutex::new(State { front: 0, back: 0, running: 1, tally: Tally::default(), outcome: None, run: None, on_settle: None, observer: None, pool: None }),
            finished: Condvar::new(),
            requested: 0,
            stats: Some(stats),
            direction,
            external: true,
            tasks: Split::one(0, 0),
        });
        (Operation { shared: Arc::clone(&shared) }, Settler(shared))
    }

    /// Gives up the handle without waiting and runs `hook` with the outcome once every task has
    /// stopped (at once when that is already so), on the thread that finished the last one, under
    /// the operation's lock: `hook` must be short and must not wait for this operation.
    pub(crate) fn when_settled(self, hook: impl FnOnce(&Result<usize>) + Send + 'static) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; its one field is moved out once.
        let shared = unsafe { std::ptr::read(&this.shared) };
        let mut state = shared.lock();
        match &state.outcome {
            Some(outcome) => hook(outcome),
            None => state.on_settle = Some(Box::new(hook)),
        }
    }

    /// Has `observer` run with the outcome when the operation settles (at once if it has), after
    /// the call was counted: the monitors' view of the call (`io::observe::CallWatch`). It runs
    /// under the operation's lock, on the thread that finished the last task.
    pub(crate) fn observe(&self, observer: impl FnOnce(&Result<usize>) + Send + 'static) {
        let mut state = self.shared.lock();
        match &state.outcome {
            Some(outcome) => observer(outcome),
            None => state.observer = Some(Box::new(observer)),
        }
    }

    /// Runs every task nobody has claimed on the calling thread, in task order: the operation's
    /// runner is the calling thread (`schedule::Runner::CallingThread`).
    pub(crate) fn run_here(&self) {
        self.shared.run_from(End::Front);
    }

    /// Queues the operation's workers on `pool` (`schedule::Runner::Pool`): one per pool thread,
    /// at most one per task and at most `workers` (at least one); the thread that waits still
    /// helps.
    pub(crate) fn start(&self, pool: &ThreadPool, workers: usize) {
        {
            let mut state = self.shared.lock();
            if state.outcome.is_none() {
                state.pool = Some(pool.clone());
            }
        }
        let workers = self.shared.tasks.count().min(pool.num_threads().max(1)).min(workers.max(1));
        for _ in 0..workers {
            let worker = Worker { shared: Some(Arc::clone(&self.shared)), pool: pool.clone() };
            pool.submit(move || worker.run());
        }
    }

    /// Runs unclaimed tasks of this operation on the calling thread, the last one first, until
    /// none is left. False when there was none. An operation that stops at its first short or
    /// failed task is helped from the front: a task from the end cannot stop the tasks before it.
    fn help(&self) -> bool {
        self.shared.run_from(match self.shared.stop {
            Stop::Never => End::Back,
            Stop::AtFirstShortOrFailed => End::Front,
        })
    }

    /// Stops the tasks no thread has claimed from the index `keep(front)` on (clamped to the
    /// unclaimed ones; `front`: the first unclaimed task), for a batch's cancel, which keeps the
    /// rest of an entry that has started. Returns the range of tasks that will not run. Only for
    /// an operation whose tasks are claimed from the front alone (no waiter helps it: a batch's).
    pub(crate) fn cancel_unclaimed(&self, keep: impl FnOnce(usize) -> usize) -> std::ops::Range<usize> {
        let mut state = self.shared.lock();
        let (front, back) = (state.front, state.back);
        let cut = keep(front).clamp(front, back);
        state.back = cut;
        self.shared.settle_if_done(&mut state);
        cut..back
    }

    /// True once every task has stopped.
    pub fn is_done(&self) -> bool {
        self.shared.lock().outcome.is_some()
    }

    /// `wait_in` the pool the operation's jobs were given to (a caller's or a drive's pool, whose
    /// queue a waiter on its only worker must run, or it waits for itself), else the shared pool.
    /// The waiter runs the operation's unstarted tasks where its pool has more than one thread
    /// or the thread-count setting is above one (a caller's pool of one worker, which may be busy
    /// with another call): only `KVIKIO_NTHREADS=1` keeps one thread doing the transfers.
    pub(crate) fn wait_in_its_pool(&self) -> Result<usize> {
        let own = self.shared.lock().pool.clone();
        let setting_above_one = || crate::settings::global().is_ok_and(|s| s.num_threads() > 1);
        match own {
            Some(pool) => self.wait_helping(Some(&pool), pool.num_threads() > 1 || setting_above_one()),
            None => self.wait_in(crate::io::thread_pool::global().ok()),
        }
    }

    /// Blocks until every task has stopped and returns the result. May be called repeatedly.
    /// Meanwhile, with a `pool` of more than one thread, it runs this operation's tasks that no
    /// worker has started; on a pool thread it also runs other queued tasks of `pool` (so nested
    /// calls cannot deadlock).
    pub(crate) fn wait_in(&self, pool: Option<&ThreadPool>) -> Result<usize> {
        self.wait_helping(pool, pool.is_some_and(|p| p.num_threads() > 1))
    }

    /// `wait_in`, running this operation's unstarted tasks first where `help`.
    fn wait_helping(&self, pool: Option<&ThreadPool>, help: bool) -> Result<usize> {
        crate::trace::event("wait.start", 0);
        if help {
            self.help();
        }
        let helper = pool.filter(|_| ThreadPool::on_pool_thread());
        let mut state = self.shared.lock();
        loop {
            if let Some(outcome) = &state.outcome {
                return outcome.clone();
            }
            match helper {
                Some(pool) => {
                    drop(state);
                    if !pool.run_one_queued() {
                        let guard = self.shared.lock();
                        let _ = self.shared.finished.wait_timeout(guard, Duration::from_millis(1));
                    }
                    state = self.shared.lock();
                }
                None => state = self.shared.finished.wait(state).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        // The caller's buffer must not be touched after the handle is gone; a stream-ordered
        // call's buffer is the stream's to order, and its transfer goes on without the handle.
        if !self.shared.external {
            let _ = self.wait_in_its_pool();
        }
    }
}

/// Settles an operation made by `Operation::awaiting`.
pub(crate) struct Settler(Arc<Shared>);

impl Settler {
    /// Settles it with `outcome`; a second call does nothing.
    pub(crate) fn settle(&self, outcome: Result<usize>) {
        self.0.settle_external(outcome);
    }
}

impl Drop for Settler {
    /// A call whose result never came (a panic on the thread that was to give it) fails, rather
    /// than leave whoever waits for it waiting forever.
    fn drop(&mut self) {
        self.0.settle_external(Err(crate::error::Error::Internal("the call ended without a result (a panic inside the library)".into())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::io::task_split::{self, Chunk};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An operation over `split` whose task `i` returns `results(i)`, counting runs per task.
    fn op(split: Split, stop: Stop, results: impl Fn(usize, Chunk) -> Result<usize> + Send + Sync + 'static) -> (Operation, Arc<Vec<AtomicUsize>>, Arc<StatsCell>) {
        let stats = Arc::new(StatsCell::default());
        let runs: Arc<Vec<AtomicUsize>> = Arc::new((0..split.count()).map(|_| AtomicUsize::new(0)).collect());
        let counted = Arc::clone(&runs);
        // Tasks are in file order: binary search for the one that is `c`.
        let index_of = move |c: Chunk| {
            let (mut lo, mut hi) = (0, split.count());
            while split.chunk(lo) != c {
                let mid = (lo + hi) / 2;
                if split.chunk(mid).buf_offset <= c.buf_offset {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let o = Operation::new(Direction::Read, split, split.size() as u64, Arc::clone(&stats), stop, move |t: Task| {
            let c = t.chunk;
            let i = index_of(c);
            counted[i].fetch_add(1, Ordering::SeqCst);
            results(i, c)
        });
        (o, runs, stats)
    }

    fn run_counts(runs: &[AtomicUsize]) -> Vec<usize> {
        runs.iter().map(|r| r.load(Ordering::SeqCst)).collect()
    }

    /// Bytes per task in these tests: a request of at most a page would be one task.
    const T: usize = 4096;

    /// `n` tasks of `T` bytes.
    fn tasks(n: usize) -> Split {
        let split = task_split::split(n * T, 0, T as u64);
        assert_eq!(split.count(), n);
        split
    }

    #[test]
    fn sums_contiguous_bytes_and_stops_at_first_short_task() {
        let (o, runs, stats) = op(tasks(3), Stop::Never, |i, c| Ok(if i == 1 { 4 } else { c.len }));
        assert!(!o.is_done());
        o.run_here();
        assert_eq!(o.wait_in(None).unwrap(), T + 4);
        assert_eq!(o.wait_in(None).unwrap(), T + 4);
        assert_eq!(run_counts(&runs), [1, 1, 1]);
        let c = stats.snapshot();
        assert_eq!((c.calls, c.calls_short, c.bytes_read, c.bytes_requested), (1, 1, T as u64 + 4, 3 * T as u64));
    }

    #[test]
    fn results_in_any_order_settle_as_in_task_order() {
        // Task i of 8 delivers `got[i]` of its T bytes; claimed from both ends.
        for got in [[T, T, T, 2, T, 0, T, T], [T; 8], [0, T, T, T, T, T, T, 1], [T, T, T, T, T, T, T, 3]] {
            let expect = got.iter().position(|&n| n < T).map_or(8 * T, |i| T * i + got[i]);
            let (o, runs, _) = op(tasks(8), Stop::Never, move |i, _| Ok(got[i]));
            let last = o.shared.claim(End::Back).unwrap();
            assert_eq!(last.0, 7);
            o.shared.run_claimed(last);
            let first = o.shared.claim(End::Front).unwrap();
            assert_eq!(first.0, 0);
            o.shared.run_claimed(first);
            o.shared.run_from(End::Back);
            assert_eq!(o.wait_in(None).unwrap(), expect, "{got:?}");
            assert_eq!(run_counts(&runs), [1; 8]);
        }
    }

    #[test]
    fn first_error_in_task_order_wins_after_all_tasks_stop() {
        let (o, runs, stats) = op(tasks(3), Stop::Never, |i, _| match i {
            0 => Err(Error::InvalidArgument("first".into())),
            1 => Ok(0),
            _ => Err(Error::InvalidArgument("third".into())),
        });
        // The later error is seen first; the operation is not done until task 0 stopped.
        let last = o.shared.claim(End::Back).unwrap();
        o.shared.run_claimed(last);
        let first = o.shared.claim(End::Front).unwrap();
        o.shared.run_from(End::Back);
        assert!(!o.is_done(), "must wait for the first task too");
        o.shared.run_claimed(first);
        let err = o.wait_in(None).unwrap_err();
        assert!(err.to_string().contains("first"), "{err}");
        assert_eq!(run_counts(&runs), [1, 1, 1], "every task runs when the size is known");
        assert_eq!(stats.snapshot().calls_failed, 1);
    }

    #[test]
    fn a_task_that_panics_fails_the_operation_and_the_others_still_run() {
        let (o, runs, _) = op(tasks(4), Stop::Never, |i, c| if i == 2 { panic!("boom") } else { Ok(c.len) });
        o.run_here();
        assert!(matches!(o.wait_in(None), Err(Error::Internal(_))));
        assert_eq!(run_counts(&runs), [1, 1, 1, 1]);
    }

    #[test]
    fn with_an_unknown_size_no_task_starts_after_a_short_or_failed_one() {
        // 2^62 one-byte tasks, the third of them short: three run, the operation ends.
        let stats = Arc::new(StatsCell::default());
        let ran = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&ran);
        let o = Operation::new(Direction::Read, task_split::split(1 << 62, 0, 1), 1 << 62, Arc::clone(&stats), Stop::AtFirstShortOrFailed, move |t: Task| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(usize::from(t.chunk.file_offset < 2))
        });
        o.run_here();
        assert_eq!(ran.load(Ordering::SeqCst), 3);
        assert_eq!(o.wait_in(None).unwrap(), 2);
        assert_eq!(stats.snapshot().bytes_requested, 1 << 62);
        // A failure stops it the same way; tasks before the failed one still run.
        let (o, runs, _) = op(tasks(10), Stop::AtFirstShortOrFailed, |i, c| if i == 4 { Err(Error::InvalidArgument("x".into())) } else { Ok(c.len) });
        let back = o.shared.claim(End::Back).unwrap();
        for _ in 0..5 {
            let claimed = o.shared.claim(End::Front).unwrap();
            o.shared.run_claimed(claimed);
        }
        assert!(o.shared.claim(End::Front).is_none() && o.shared.claim(End::Back).is_none());
        o.shared.run_claimed(back);
        assert!(o.wait_in(None).is_err());
        assert_eq!(run_counts(&runs), [1, 1, 1, 1, 1, 0, 0, 0, 0, 1]);
        // A short task at the back stops nothing before it.
        let (o, runs, _) = op(tasks(4), Stop::AtFirstShortOrFailed, |i, c| Ok(if i < 3 { c.len } else { 1 }));
        o.shared.run_from(End::Back);
        assert_eq!(o.wait_in(None).unwrap(), 3 * T + 1);
        assert_eq!(run_counts(&runs), [1, 1, 1, 1]);
    }

    /// Where the file's size is unknown, a task claimed before the first short one ended and
    /// failing past it (a device failing a read past its end) does not decide the result: it is
    /// the short count whichever order the tasks ran in.
    #[test]
    fn past_the_first_short_task_an_error_is_not_the_calls() {
        let op3 = |stop| {
            let (o, _, _) = op(tasks(3), stop, |index, c| match index {
                0 => Ok(100),
                1 => Err(Error::InvalidArgument("past the end".into())),
                _ => Ok(c.len),
            });
            o
        };
        let in_order = op3(Stop::AtFirstShortOrFailed);
        in_order.run_here();
        assert_eq!(in_order.wait_in(None).unwrap(), 100);
        let at_once = op3(Stop::AtFirstShortOrFailed);
        // Two workers claim tasks 0 and 1 before either ends; task 1 ends first.
        let (a, b) = (at_once.shared.claim(End::Front).unwrap(), at_once.shared.claim(End::Front).unwrap());
        at_once.shared.run_claimed(b);
        at_once.shared.run_claimed(a);
        assert_eq!(at_once.wait_in(None).ok(), Some(100));
        // A file of known size (every task runs): the first error in task order, as documented.
        let known = op3(Stop::Never);
        known.run_here();
        assert!(known.wait_in(None).is_err());
    }

    #[test]
    fn a_waiter_runs_unclaimed_tasks_once() {
        let (o, runs, _) = op(tasks(3), Stop::Never, |_, c| Ok(c.len));
        // A "worker" already ran the first task; the waiter must run the other two and not the
        // first again.
        let first = o.shared.claim(End::Front).unwrap();
        o.shared.run_claimed(first);
        // With a pool of one thread the waiter would only sleep: two threads let it help.
        let pool = ThreadPool::new(2).unwrap();
        assert_eq!(o.wait_in(Some(&pool)).unwrap(), 3 * T);
        assert_eq!(run_counts(&runs), [1, 1, 1]);
        assert!(o.shared.claim(End::Front).is_none() && o.shared.claim(End::Back).is_none());
    }

    #[test]
    fn with_one_pool_thread_the_waiter_only_waits() {
        let (o, runs, _) = op(task_split::split(1, 0, 1), Stop::Never, |_, c| Ok(c.len));
        let o = Arc::new(o);
        let pool = ThreadPool::new(1).unwrap();
        let waiter = {
            let o = Arc::clone(&o);
            std::thread::spawn(move || o.wait_in(Some(&pool)))
        };
        // The waiter must leave the task to the pool: it is still unclaimed while it waits.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished());
        assert_eq!(run_counts(&runs), [0], "the waiter ran the task itself");
        o.run_here();
        assert_eq!(waiter.join().unwrap().unwrap(), 1);
    }

    #[test]
    fn workers_on_the_pool_run_every_task_once() {
        let pool = ThreadPool::new(3).unwrap();
        let (o, runs, _) = op(task_split::split(5000, 0, 1), Stop::Never, |_, c| Ok(c.len));
        assert_eq!(runs.len(), 5000);
        o.start(&pool, usize::MAX);
        assert_eq!(o.wait_in(None).unwrap(), 5000);
        assert!(run_counts(&runs).iter().all(|&n| n == 1));
    }

    #[test]
    fn a_worker_dropped_unrun_fails_the_operation_instead_of_hanging_it() {
        let (o, runs, _) = op(tasks(3), Stop::Never, |_, c| Ok(c.len));
        let first = o.shared.claim(End::Front).unwrap();
        drop(Worker { shared: Some(Arc::clone(&o.shared)), pool: ThreadPool::new(1).unwrap() });
        assert!(!o.is_done(), "the running task must stop first");
        o.shared.run_claimed(first);
        let err = o.wait_in(None).unwrap_err();
        assert!(matches!(err, Error::Internal(_)), "{err}");
        assert_eq!(run_counts(&runs), [1, 0, 0]);
    }

    #[test]
    fn cancel_keeps_the_claimed_tasks_and_the_kept_ones_and_stops_the_rest() {
        let (o, runs, _) = op(tasks(10), Stop::Never, |_, c| Ok(c.len));
        for _ in 0..3 {
            let claimed = o.shared.claim(End::Front).unwrap();
            o.shared.run_claimed(claimed);
        }
        // Keep up to task 5 (the rest of a started entry, say): tasks 5..10 never run.
        assert_eq!(o.cancel_unclaimed(|front| { assert_eq!(front, 3); 5 }), 5..10);
        o.run_here();
        assert!(o.is_done());
        assert_eq!(run_counts(&runs), [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]);
        // A boundary outside the unclaimed tasks is clamped to them; nothing left: an empty range.
        assert_eq!(o.cancel_unclaimed(|_| 0), 5..5);
        let (o, runs, _) = op(tasks(4), Stop::Never, |_, c| Ok(c.len));
        assert_eq!(o.cancel_unclaimed(|_| usize::MAX), 4..4, "a boundary past the end cancels nothing");
        o.run_here();
        assert_eq!(run_counts(&runs), [1, 1, 1, 1]);
        // All cancelled before any task ran: the operation settles at once.
        let (o, runs, _) = op(tasks(4), Stop::Never, |_, c| Ok(c.len));
        assert_eq!(o.cancel_unclaimed(|front| front), 0..4);
        assert!(o.is_done());
        assert_eq!(run_counts(&runs), [0, 0, 0, 0]);
    }

    #[test]
    fn no_tasks_is_finished() {
        let stats = Arc::new(StatsCell::default());
        let o = Operation::finished(Direction::Read, 100, Arc::clone(&stats));
        assert!(o.is_done());
        assert_eq!(o.wait_in(None).unwrap(), 0);
        let c = stats.snapshot();
        assert_eq!((c.calls, c.calls_short, c.bytes_requested, c.tasks), (1, 1, 100, 0));
        let (o, _, _) = op(task_split::split(0, 0, 4), Stop::Never, |_, _| Ok(0));
        assert!(o.is_done());
    }
}
