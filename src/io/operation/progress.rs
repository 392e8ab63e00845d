//! The state an operation's threads share: the tasks not claimed yet (`front .. back` of the
//! source), how many run, and a summary of the results so far (the first short task and the
//! first failed one, by task order), so that its memory does not depend on the number of tasks.
//! Threads claim tasks from either end (`End`), run them and record their results; the last one
//! to finish settles the operation and records the call. A pool job of an operation (`Worker`)
//! claims from the front until none is left. The handle over it is `Operation` (`super`).

use super::Stop;
use crate::direction::Direction;
use crate::error::{Error, Result};
use crate::io::task_source::{Task, TaskSource};
use crate::io::thread_pool::ThreadPool;
use crate::stats::{self, StatsCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Runs one task: moves its chunk and returns the bytes it delivered.
pub(super) type RunTask = dyn Fn(Task) -> Result<usize> + Send + Sync + 'static;

pub(super) struct State {
    /// Tasks not claimed yet: `front .. back`.
    pub(super) front: usize,
    pub(super) back: usize,
    /// Tasks claimed and not finished.
    pub(super) running: usize,
    /// The results so far: the first short task and the first failed one.
    pub(super) tally: Tally,
    pub(super) outcome: Option<Result<usize>>,
    /// The task body, handed to each claimed task; dropped when the operation settles, so that
    /// what it holds (the file's descriptor) is not kept by a finished operation.
    pub(super) run: Option<Arc<RunTask>>,
    /// Run once with the outcome when the operation settles (`Operation::when_settled`).
    pub(super) on_settle: Option<SettleHook>,
    /// The monitors' view of the call, ended with the outcome when it settles, after the counters
    /// (`Operation::observe`).
    pub(super) observer: Option<SettleHook>,
    /// The pool its jobs were given to (`Operation::start`), which a waiter helps; let go when
    /// it settles.
    pub(super) pool: Option<ThreadPool>,
}

/// The results of a run of tasks that settle as one (an operation's; a batch entry's), kept as a
/// summary so that its memory does not depend on the number of tasks: the first task (in task
/// order) that delivered fewer bytes than it asked for, with how many, and the first that failed.
#[derive(Default)]
pub(crate) struct Tally {
    first_short: Option<(usize, usize)>,
    first_error: Option<(usize, Error)>,
}

impl Tally {
    /// Records task `index`'s result (`want`: the bytes it asked for). True when it was short or
    /// failed, so that no later task can add to the count.
    pub(crate) fn record(&mut self, index: usize, want: usize, result: Result<usize>) -> bool {
        match result {
            Ok(n) if n != want => {
                if self.first_short.is_none_or(|(first, _)| index < first) {
                    self.first_short = Some((index, n));
                }
                true
            }
            Ok(_) => false,
            Err(e) => {
                if self.first_error.as_ref().is_none_or(|(first, _)| index < *first) {
                    self.first_error = Some((index, e));
                }
                true
            }
        }
    }

    /// Once every task stopped: the first error in task order, else the bytes delivered
    /// contiguously, up to and including the first short task (`offset_of(index)`: where task
    /// `index` starts in the buffer), all `size` of them when none was short. `Stop::AtFirstShortOrFailed`
    /// (the file's size unknown): an error of a task after the first short one, which only ran
    /// because it was claimed before that one ended, is not the call's (its bytes lie past the
    /// end the short task found; counting it made the result depend on the schedule).
    pub(crate) fn outcome(&self, offset_of: impl Fn(usize) -> usize, size: usize, stop: Stop) -> Result<usize> {
        let past_the_end = |error: usize| stop == Stop::AtFirstShortOrFailed && self.first_short.is_some_and(|(short, _)| short < error);
        match (&self.first_error, self.first_short) {
            (Some((index, e)), _) if !past_the_end(*index) => Err(e.clone()),
            (_, Some((index, n))) => Ok(offset_of(index) + n),
            (Some((_, e)), None) => Err(e.clone()),
            (None, None) => Ok(size),
        }
    }
}

/// What runs when an operation settles: under its lock, on the thread that finished the last
/// task, so it must be short and must not wait for this operation.
pub(super) type SettleHook = Box<dyn FnOnce(&Result<usize>) + Send>;

/// An operation's shared state over its task source `S` (last, so that `Arc<Progress<Split>>`
/// becomes `Arc<Progress<dyn TaskSource>>` without a second allocation).
pub(super) struct Progress<S: ?Sized> {
    pub(super) stop: Stop,
    pub(super) state: Mutex<State>,
    pub(super) finished: Condvar,
    pub(super) requested: u64,
    /// Where the call is recorded when it settles; `None` for a call outside the counters (the
    /// mapping handle's, `Operation::uncounted`).
    pub(super) stats: Option<Arc<StatsCell>>,
    /// Which counters the call is recorded in when it settles.
    pub(super) direction: Direction,
    /// Settled from outside (`Operation::awaiting`, a stream-ordered call's handle): it has no
    /// tasks, its call is counted by the operation that moves its bytes, and dropping its handle
    /// does not wait (the stream, not the handle, orders the buffer's use).
    pub(super) external: bool,
    pub(super) tasks: S,
}

/// The shared state as the operation holds it, whatever its task source.
pub(super) type Shared = Progress<dyn TaskSource>;

/// Which end of the unclaimed tasks a thread takes from.
#[derive(Clone, Copy)]
pub(super) enum End {
    /// Pool workers, and the calling thread as an operation's runner: task order.
    Front,
    /// A thread waiting for the operation.
    Back,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a task nobody has claimed, with the body that runs it, or None when none is left.
    pub(super) fn claim(&self, end: End) -> Option<(usize, Arc<RunTask>)> {
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

    /// Runs a claimed task and records its result. A panic that escapes the task body (the
    /// engine's dispatch catches its own) still completes the task, as a failure.
    pub(super) fn run_claimed(&self, (index, run): (usize, Arc<RunTask>)) {
        let task = self.tasks.task(index);
        let result = catch_unwind(AssertUnwindSafe(|| run(task)))
            .unwrap_or_else(|_| Err(Error::Internal("a read task ended without reporting".into())));
        // Before the task counts as complete: the body holds the open file, and once the
        // operation settles (in `complete`), its last reference must go with the operation's own
        // (dropped under the lock, before the waiter wakes), so that a handle closed after
        // `gdsroute_op_wait` returned closes its descriptor at once.
        drop(run);
        self.complete(index, task.chunk.len, result);
    }

    /// Claims and runs tasks from `end` until none is left; true if it ran any.
    pub(super) fn run_from(&self, end: End) -> bool {
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
        let stops = state.tally.record(index, want, result);
        if stops && self.stop == Stop::AtFirstShortOrFailed {
            // Tasks after this one can change neither the count nor the first error (`outcome`
            // leaves out the errors of those already claimed).
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
            state.tally.record(index, 1, Err(Error::Internal("a read task was dropped unrun".into())));
            state.back = state.front;
        }
        self.settle_if_done(&mut state);
    }

    /// Once no task is left to claim and none runs: the first error in task order, else the
    /// bytes up to and including the first short task (all of them when none was short).
    pub(super) fn settle_if_done(&self, state: &mut State) {
        if state.outcome.is_some() || state.front < state.back || state.running > 0 {
            return;
        }
        let outcome = state.tally.outcome(|index| self.tasks.task(index).chunk.buf_offset, self.tasks.size(), self.stop);
        let delivered = *outcome.as_ref().unwrap_or(&0) as u64;
        if let Some(stats) = &self.stats {
            stats::record_call(stats, self.direction, self.requested, delivered, outcome.is_err());
        }
        if let Some(observer) = state.observer.take() {
            observer(&outcome);
        }
        if let Some(hook) = state.on_settle.take() {
            hook(&outcome);
        }
        state.outcome = Some(outcome);
        state.run = None;
        state.pool = None;
        self.finished.notify_all();
    }

    /// Settles an operation made by `Operation::awaiting` with `outcome` (once; later calls do
    /// nothing). Not counted here: the operation that moved the bytes counted the call.
    pub(super) fn settle_external(&self, outcome: Result<usize>) {
        let mut state = self.lock();
        if state.outcome.is_none() {
            state.running = 0;
            state.outcome = Some(outcome);
            self.finished.notify_all();
        }
    }
}

/// One pool job of an operation: claims tasks from the front until none is left, running the
/// pool's broadcasts (per-thread preparation) between tasks as a worker does between jobs.
/// Dropped without running, it fails the tasks nobody has claimed, so that the waiter cannot
/// hang.
pub(super) struct Worker {
    pub(super) shared: Option<Arc<Shared>>,
    pub(super) pool: ThreadPool,
}

impl Worker {
    pub(super) fn run(mut self) {
        if let Some(shared) = self.shared.take() {
            while let Some(claimed) = shared.claim(End::Front) {
                shared.run_claimed(claimed);
                self.pool.run_due_broadcasts();
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.abandon();
        }
    }
}
