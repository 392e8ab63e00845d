//! Jobs that run once on every worker of a pool: before the queued jobs it takes next, or
//! between the steps of a long job that asks for it (`run_due_broadcasts`: an operation's worker
//! between tasks). Each broadcast has a generation; a worker keeps the first generation it still
//! owes (`WORKER_DUE`), and an entry goes once no live worker owes it a run. Used for per-thread
//! preparation (`io::warm_up`); the queue and the workers are the pool's (`super`).

use super::{State, ThreadPool, WORKER_DUE, lock, run_job};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A job for every worker that was live when it was broadcast.
pub(super) struct Broadcast {
    generation: u64,
    job: Arc<dyn Fn() + Send + Sync + 'static>,
    /// Workers that have neither run it nor left the pool.
    pending: usize,
    /// Told of each worker that left the pool without running it (`broadcast_and_wait`).
    settled: Option<Arc<Settled>>,
}

/// How many workers of a broadcast have run it, or left the pool without (a shrink, a retired
/// pool): those it no longer waits for.
#[derive(Default)]
pub(super) struct Settled {
    count: Mutex<usize>,
    changed: Condvar,
}

impl Settled {
    fn one(&self) {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.changed.notify_all();
    }
}

/// Counts a run of a waited-for broadcast when dropped: after the job, or in its unwinding.
struct RanOnDrop<'a>(&'a Settled);

impl Drop for RanOnDrop<'_> {
    fn drop(&mut self) {
        self.0.one();
    }
}

impl State {
    /// The oldest broadcast a worker whose next due generation is `due` has not run, marked as
    /// run by it: (job, the worker's next due generation).
    pub(super) fn take_broadcast(&mut self, due: u64) -> Option<(Arc<dyn Fn() + Send + Sync + 'static>, u64)> {
        let index = self.broadcasts.iter().position(|b| b.generation >= due)?;
        let entry = &mut self.broadcasts[index];
        let taken = (Arc::clone(&entry.job), entry.generation + 1);
        entry.pending -= 1;
        if entry.pending == 0 {
            self.broadcasts.remove(index);
        }
        Some(taken)
    }

    /// A worker leaves: it owes no run any more.
    pub(super) fn forget_worker(&mut self, due: u64) {
        for entry in self.broadcasts.iter_mut().filter(|b| b.generation >= due) {
            entry.pending -= 1;
            if let Some(settled) = &entry.settled {
                settled.one();
            }
        }
        self.broadcasts.retain(|b| b.pending > 0);
        self.live_threads -= 1;
    }
}

impl ThreadPool {
    /// Runs `job` once on every worker live now, each before the next job it takes from the queue
    /// in its own loop (a busy worker runs it when its job ends; a worker waiting inside a job for
    /// a nested read runs queued jobs first, through `run_one_queued`). Workers started later do
    /// not run it.
    /// Returns the number of workers it was given to.
    pub(crate) fn broadcast(&self, job: impl Fn() + Send + Sync + 'static) -> usize {
        self.post(Arc::new(job), None)
    }

    /// `broadcast`, then waits up to `limit` until each worker it was given to has run it or left
    /// the pool. Returns whether all did in time.
    pub(crate) fn broadcast_and_wait(&self, job: impl Fn() + Send + Sync + 'static, limit: Duration) -> bool {
        let settled = Arc::new(Settled::default());
        let ran = Arc::clone(&settled);
        let given = self.post(
            Arc::new(move || {
                let _ran = RanOnDrop(&ran);
                job();
            }),
            Some(Arc::clone(&settled)),
        );
        let count = settled.count.lock().unwrap_or_else(|p| p.into_inner());
        let (count, waited) = settled.changed.wait_timeout_while(count, limit, |n| *n < given).unwrap_or_else(|p| p.into_inner());
        drop(count);
        !waited.timed_out()
    }

    /// Posts `job` for every worker live now; returns their number.
    fn post(&self, job: Arc<dyn Fn() + Send + Sync + 'static>, settled: Option<Arc<Settled>>) -> usize {
        let mut state = lock(&self.shared);
        let generation = state.next_generation;
        state.next_generation += 1;
        self.shared.generations.store(state.next_generation, Ordering::Release);
        let pending = state.live_threads;
        if pending > 0 {
            state.broadcasts.push(Broadcast { generation, job, pending, settled });
        }
        drop(state);
        self.shared.work_ready.notify_all();
        pending
    }

    /// Runs the broadcasts the calling thread owes, if it is a worker of this pool: for a job that
    /// runs long (an operation's worker claims task after task), so that a broadcast waits for
    /// one task at most, as it would between queued jobs. Costs one atomic load when there is
    /// none.
    pub(crate) fn run_due_broadcasts(&self) {
        let pool = Arc::as_ptr(&self.shared) as usize;
        let (owner, due) = WORKER_DUE.with(|c| c.get());
        if owner != pool || self.shared.generations.load(Ordering::Acquire) <= due {
            return;
        }
        loop {
            let due = WORKER_DUE.with(|c| c.get().1);
            let Some((job, next_due)) = lock(&self.shared).take_broadcast(due) else { return };
            WORKER_DUE.with(|c| c.set((pool, next_due)));
            run_job(|| job());
        }
    }
}
