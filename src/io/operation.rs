//! A parallel read in flight, like KvikIO's future. The operation finishes only after every one
//! of its tasks has stopped, so when a caller sees the result (success or error) nothing will
//! write into its buffer any more. The result is the first error in task order, or the number of
//! bytes delivered contiguously from the requested offset.
//!
//! The tasks are not listed: the operation holds the request's `Split` and the range of tasks not
//! yet claimed, and summarises results as they come (the first short task and the first failed
//! one, by task order), so its memory does not depend on the number of tasks. A bounded number of
//! pool jobs (one per pool thread, at most one per task) each claim tasks from the front until
//! none is left.
//!
//! A thread that waits runs tasks of its own operation that no worker has started yet (from the
//! end, while workers take them from the front; from the front too where the operation stops at
//! its first short task), instead of sleeping: the caller's thread is blocked anyway, and with it
//! a read of N pool threads runs on N + 1 threads (N + W with W waiting threads). KvikIO's waiter only sleeps, and so does ours with a pool of one thread, so
//! that `KVIKIO_NTHREADS=1` still means one thread doing the reads, in order.

use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::stats::{self, StatsCell};
use crate::io::task_split::{Chunk, Split};
use crate::io::thread_pool::ThreadPool;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Runs one task: reads the chunk and returns the bytes it delivered.
type RunTask = dyn Fn(Chunk) -> Result<usize> + Send + Sync + 'static;

/// When the operation stops starting tasks before the last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Every task runs (the range was clipped to the bytes the file has, so all can deliver).
    Never,
    /// No task after the first short or failed one starts: where the file's size is unknown
    /// (pipes, character devices, directories), so that a request far larger than what a read
    /// can return does not run one task per task size of it. Tasks already running finish.
    AtFirstShortOrFailed,
}

struct State {
    /// Tasks not claimed yet: `front .. back`.
    front: usize,
    back: usize,
    /// Tasks claimed and not finished.
    running: usize,
    /// The first task (in task order) that delivered fewer bytes than it asked for, and how many.
    first_short: Option<(usize, usize)>,
    /// The first task (in task order) that failed, and its error.
    first_error: Option<(usize, Error)>,
    outcome: Option<Result<usize>>,
    /// The task body, handed to each claimed task; dropped when the operation settles, so that
    /// what it holds (the file's descriptor) is not kept by a finished operation.
    run: Option<Arc<RunTask>>,
}

struct Inner {
    split: Split,
    stop: Stop,
    state: Mutex<State>,
    finished: Condvar,
    requested: u64,
    stats: Arc<StatsCell>,
    /// Which counters the call is recorded in when it settles.
    direction: Direction,
}

/// A read or write in flight.
pub struct Operation {
    inner: Arc<Inner>,
}

/// Which end of the unclaimed tasks a thread takes from.
#[derive(Clone, Copy)]
enum End {
    /// Pool workers, and the thread running an inline operation: file order.
    Front,
    /// A thread waiting for the operation.
    Back,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a task nobody has claimed, with the body that runs it, or None when none is left.
    fn claim(&self, end: End) -> Option<(usize, Arc<RunTask>)> {
        let mut state = self.lock();
        if state.front >= state.back {
            return None;
        }
        let run = Arc::clone(state.run.as_ref()?);
        let index = match end {
            End::Front => {
                state.front += 1;
                state.front - 1
            }
            End::Back => {
                state.back -= 1;
                state.back
            }
        };
        state.running += 1;
        Some((index, run))
    }

    /// Runs a claimed task and records its result. A panic that escapes the task body (the file
    /// layer catches its own) still completes the task, as a failure.
    fn run_claimed(&self, (index, run): (usize, Arc<RunTask>)) {
        let chunk = self.split.chunk(index);
        let result = catch_unwind(AssertUnwindSafe(|| run(chunk)))
            .unwrap_or_else(|_| Err(Error::Internal("a read task ended without reporting".into())));
        // Before the task counts as complete: the body holds the open file, and once the
        // operation settles (in `complete`), its last reference must go with the operation's own
        // (dropped under the lock, before the waiter wakes), so that a handle closed after
        // `gdsroute_op_wait` returned closes its descriptor at once.
        drop(run);
        self.complete(index, chunk.len, result);
    }

    /// Claims and runs tasks from `end` until none is left; true if it ran any.
    fn run_from(&self, end: End) -> bool {
        let mut ran = false;
        while let Some(claimed) = self.claim(end) {
            self.run_claimed(claimed);
            ran = true;
        }
        ran
    }

    fn complete(&self, index: usize, want: usize, result: Result<usize>) {
        let mut state = self.lock();
        state.running -= 1;
        let stops = match result {
            Ok(n) if n != want => {
                if state.first_short.is_none_or(|(first, _)| index < first) {
                    state.first_short = Some((index, n));
                }
                true
            }
            Ok(_) => false,
            Err(e) => {
                if state.first_error.as_ref().is_none_or(|(first, _)| index < *first) {
                    state.first_error = Some((index, e));
                }
                true
            }
        };
        if stops && self.stop == Stop::AtFirstShortOrFailed {
            // Tasks after this one can change neither the count nor the first error.
            state.back = state.back.min(index + 1).max(state.front);
        }
        self.settle_if_done(&mut state);
    }

    /// Stops handing out tasks because the pool dropped a job unrun (it never does while the
    /// process lives): the first task that can no longer run fails the operation, which then
    /// finishes once the tasks already running have stopped.
    fn abandon(&self) {
        let mut state = self.lock();
        if state.front < state.back {
            let index = state.front;
            if state.first_error.as_ref().is_none_or(|(first, _)| index < *first) {
                state.first_error = Some((index, Error::Internal("a read task was dropped unrun".into())));
            }
            state.back = state.front;
        }
        self.settle_if_done(&mut state);
    }

    /// Once no task is left to claim and none runs: the first error in task order, else the
    /// bytes up to and including the first short task (all of them when none was short).
    fn settle_if_done(&self, state: &mut State) {
        if state.outcome.is_some() || state.front < state.back || state.running > 0 {
            return;
        }
        let outcome = match (&state.first_error, state.first_short) {
            (Some((_, e)), _) => Err(e.clone()),
            (None, Some((index, n))) => Ok(self.split.chunk(index).buf_offset + n),
            (None, None) => Ok(self.split.size()),
        };
        let delivered = *outcome.as_ref().unwrap_or(&0) as u64;
        stats::record_call(&self.stats, self.direction, self.requested, delivered, outcome.is_err());
        state.outcome = Some(outcome);
        state.run = None;
        self.finished.notify_all();
    }
}

/// One pool job of an operation: claims tasks from the front until none is left, running the
/// pool's broadcasts (per-thread preparation) between tasks as a worker does between jobs.
/// Dropped without running, it fails the tasks nobody has claimed, so that the waiter cannot
/// hang.
struct Worker {
    inner: Option<Arc<Inner>>,
    pool: ThreadPool,
}

impl Worker {
    fn run(mut self) {
        if let Some(inner) = self.inner.take() {
            while let Some(claimed) = inner.claim(End::Front) {
                inner.run_claimed(claimed);
                self.pool.run_due_broadcasts();
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            inner.abandon();
        }
    }
}

impl Operation {
    /// An operation over the tasks of `split`, each run by `run`, none started yet (see `start`,
    /// `run_here`). `requested` is the size the caller asked for (counted in `bytes_requested`;
    /// the split may be shorter). With no tasks the operation is already finished with 0 bytes.
    pub fn new(split: Split, requested: u64, stats: Arc<StatsCell>, stop: Stop, run: impl Fn(Chunk) -> Result<usize> + Send + Sync + 'static) -> Operation {
        Operation::new_in(Direction::Read, split, requested, stats, stop, run)
    }

    /// `new` for a call of `direction` (counted in that direction's counters when it settles).
    pub fn new_in(direction: Direction, split: Split, requested: u64, stats: Arc<StatsCell>, stop: Stop, run: impl Fn(Chunk) -> Result<usize> + Send + Sync + 'static) -> Operation {
        let count = split.count();
        let inner = Arc::new(Inner {
            split,
            stop,
            state: Mutex::new(State { front: 0, back: count, running: 0, first_short: None, first_error: None, outcome: None, run: Some(Arc::new(run)) }),
            finished: Condvar::new(),
            requested,
            stats,
            direction,
        });
        inner.settle_if_done(&mut inner.lock());
        Operation { inner }
    }

    /// A finished operation without tasks that delivered 0 of `requested` bytes.
    pub fn finished(requested: u64, stats: Arc<StatsCell>) -> Operation {
        Operation::finished_in(Direction::Read, requested, stats)
    }

    /// `finished` for a call of `direction`.
    pub fn finished_in(direction: Direction, requested: u64, stats: Arc<StatsCell>) -> Operation {
        Operation::new_in(direction, Split::one(0, 0), requested, stats, Stop::Never, |_| Ok(0))
    }

    /// Queues the operation's workers on `pool`: one per pool thread, at most one per task.
    pub fn start(&self, pool: &ThreadPool) {
        self.start_at_most(pool, usize::MAX);
    }

    /// `start`, with at most `jobs` workers (at least one); the thread that waits still helps.
    pub fn start_at_most(&self, pool: &ThreadPool, jobs: usize) {
        let workers = self.inner.split.count().min(pool.num_threads().max(1)).min(jobs.max(1));
        for _ in 0..workers {
            let worker = Worker { inner: Some(Arc::clone(&self.inner)), pool: pool.clone() };
            pool.submit(move || worker.run());
        }
    }

    /// Runs every task nobody has claimed on the calling thread, in file order.
    pub fn run_here(&self) {
        self.inner.run_from(End::Front);
    }

    /// Runs unclaimed tasks of this operation on the calling thread, the last one first, until
    /// none is left. False when there was none. An operation that stops at its first short or
    /// failed task is helped from the front: a task from the end cannot stop the tasks before it.
    fn help(&self) -> bool {
        self.inner.run_from(match self.inner.stop {
            Stop::Never => End::Back,
            Stop::AtFirstShortOrFailed => End::Front,
        })
    }

    /// True once every task has stopped.
    pub fn is_done(&self) -> bool {
        self.inner.lock().outcome.is_some()
    }

    /// Blocks until every task has stopped and returns the result. May be called repeatedly.
    /// Meanwhile, with a `pool` of more than one thread, it runs this operation's tasks that no
    /// worker has started; on a pool thread it also runs other queued tasks (so nested reads
    /// cannot deadlock).
    pub fn wait(&self, pool: Option<&ThreadPool>) -> Result<usize> {
        crate::trace::event("wait.start", 0);
        if pool.is_some_and(|p| p.num_threads() > 1) {
            self.help();
        }
        let helper = pool.filter(|_| ThreadPool::on_pool_thread());
        let mut state = self.inner.lock();
        loop {
            if let Some(outcome) = &state.outcome {
                return outcome.clone();
            }
            match helper {
                Some(pool) => {
                    drop(state);
                    if !pool.run_one_queued() {
                        let guard = self.inner.lock();
                        let _ = self.inner.finished.wait_timeout(guard, Duration::from_millis(1));
                    }
                    state = self.inner.lock();
                }
                None => state = self.inner.finished.wait(state).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        // The caller's buffer must not be written after the handle is gone.
        let _ = self.wait(crate::io::thread_pool::global().ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::task_split;
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
        let o = Operation::new(split, split.size() as u64, Arc::clone(&stats), stop, move |c| {
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
        assert_eq!(o.wait(None).unwrap(), T + 4);
        assert_eq!(o.wait(None).unwrap(), T + 4);
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
            let last = o.inner.claim(End::Back).unwrap();
            assert_eq!(last.0, 7);
            o.inner.run_claimed(last);
            let first = o.inner.claim(End::Front).unwrap();
            assert_eq!(first.0, 0);
            o.inner.run_claimed(first);
            o.inner.run_from(End::Back);
            assert_eq!(o.wait(None).unwrap(), expect, "{got:?}");
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
        let last = o.inner.claim(End::Back).unwrap();
        o.inner.run_claimed(last);
        let first = o.inner.claim(End::Front).unwrap();
        o.inner.run_from(End::Back);
        assert!(!o.is_done(), "must wait for the first task too");
        o.inner.run_claimed(first);
        let err = o.wait(None).unwrap_err();
        assert!(err.to_string().contains("first"), "{err}");
        assert_eq!(run_counts(&runs), [1, 1, 1], "every task runs when the size is known");
        assert_eq!(stats.snapshot().calls_failed, 1);
    }

    #[test]
    fn a_task_that_panics_fails_the_operation_and_the_others_still_run() {
        let (o, runs, _) = op(tasks(4), Stop::Never, |i, c| if i == 2 { panic!("boom") } else { Ok(c.len) });
        o.run_here();
        assert!(matches!(o.wait(None), Err(Error::Internal(_))));
        assert_eq!(run_counts(&runs), [1, 1, 1, 1]);
    }

    #[test]
    fn with_an_unknown_size_no_task_starts_after_a_short_or_failed_one() {
        // 2^62 one-byte tasks, the third of them short: three run, the operation ends.
        let stats = Arc::new(StatsCell::default());
        let ran = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&ran);
        let o = Operation::new(task_split::split(1 << 62, 0, 1), 1 << 62, Arc::clone(&stats), Stop::AtFirstShortOrFailed, move |c| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(usize::from(c.file_offset < 2))
        });
        o.run_here();
        assert_eq!(ran.load(Ordering::SeqCst), 3);
        assert_eq!(o.wait(None).unwrap(), 2);
        assert_eq!(stats.snapshot().bytes_requested, 1 << 62);
        // A failure stops it the same way; tasks before the failed one still run.
        let (o, runs, _) = op(tasks(10), Stop::AtFirstShortOrFailed, |i, c| if i == 4 { Err(Error::InvalidArgument("x".into())) } else { Ok(c.len) });
        let back = o.inner.claim(End::Back).unwrap();
        for _ in 0..5 {
            let claimed = o.inner.claim(End::Front).unwrap();
            o.inner.run_claimed(claimed);
        }
        assert!(o.inner.claim(End::Front).is_none() && o.inner.claim(End::Back).is_none());
        o.inner.run_claimed(back);
        assert!(o.wait(None).is_err());
        assert_eq!(run_counts(&runs), [1, 1, 1, 1, 1, 0, 0, 0, 0, 1]);
        // A short task at the back stops nothing before it.
        let (o, runs, _) = op(tasks(4), Stop::AtFirstShortOrFailed, |i, c| Ok(if i < 3 { c.len } else { 1 }));
        o.inner.run_from(End::Back);
        assert_eq!(o.wait(None).unwrap(), 3 * T + 1);
        assert_eq!(run_counts(&runs), [1, 1, 1, 1]);
    }

    #[test]
    fn a_waiter_runs_unclaimed_tasks_once() {
        let (o, runs, _) = op(tasks(3), Stop::Never, |_, c| Ok(c.len));
        // A "worker" already ran the first task; the waiter must run the other two and not the
        // first again.
        let first = o.inner.claim(End::Front).unwrap();
        o.inner.run_claimed(first);
        // With a pool of one thread the waiter would only sleep: two threads let it help.
        let pool = ThreadPool::new(2).unwrap();
        assert_eq!(o.wait(Some(&pool)).unwrap(), 3 * T);
        assert_eq!(run_counts(&runs), [1, 1, 1]);
        assert!(o.inner.claim(End::Front).is_none() && o.inner.claim(End::Back).is_none());
    }

    #[test]
    fn with_one_pool_thread_the_waiter_only_waits() {
        let (o, runs, _) = op(task_split::split(1, 0, 1), Stop::Never, |_, c| Ok(c.len));
        let o = Arc::new(o);
        let pool = ThreadPool::new(1).unwrap();
        let waiter = {
            let o = Arc::clone(&o);
            std::thread::spawn(move || o.wait(Some(&pool)))
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
        o.start(&pool);
        assert_eq!(o.wait(None).unwrap(), 5000);
        assert!(run_counts(&runs).iter().all(|&n| n == 1));
    }

    #[test]
    fn a_worker_dropped_unrun_fails_the_operation_instead_of_hanging_it() {
        let (o, runs, _) = op(tasks(3), Stop::Never, |_, c| Ok(c.len));
        let first = o.inner.claim(End::Front).unwrap();
        drop(Worker { inner: Some(Arc::clone(&o.inner)), pool: ThreadPool::new(1).unwrap() });
        assert!(!o.is_done(), "the running task must stop first");
        o.inner.run_claimed(first);
        let err = o.wait(None).unwrap_err();
        assert!(matches!(err, Error::Internal(_)), "{err}");
        assert_eq!(run_counts(&runs), [1, 0, 0]);
    }

    #[test]
    fn no_tasks_is_finished() {
        let stats = Arc::new(StatsCell::default());
        let o = Operation::finished(100, Arc::clone(&stats));
        assert!(o.is_done());
        assert_eq!(o.wait(None).unwrap(), 0);
        let c = stats.snapshot();
        assert_eq!((c.calls, c.calls_short, c.bytes_requested, c.tasks), (1, 1, 100, 0));
        let (o, _, _) = op(task_split::split(0, 0, 4), Stop::Never, |_, _| Ok(0));
        assert!(o.is_done());
    }
}
