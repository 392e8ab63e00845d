//! Jobs that run once on every worker of a pool: before the queued jobs it takes next, or
//! between the steps of a long job that asks for it (`run_due_broadcasts`: an operation's worker
//! between tasks). Each broadcast has a generation; a worker keeps the first generation it still
//! owes (`WORKER_DUE`), and an entry goes once no live worker owes it a run. Used for per-thread
//! preparation (`io::warm_up`); the queue and the workers are the pool's (`super`).

use super::{State, ThreadPool, WORKER_DUE, lock, run_job};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A job for every worker that was live when it was broadcast.
pub(super) struct Broadcast {
    generation: u64,
    job: Arc<dyn Fn() + Send + Sync + 'static>,
    /// Workers that have neither run it nor left the pool.
    pending: usize,
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
        let mut state = lock(&self.shared);
        let generation = state.next_generation;
        state.next_generation += 1;
        self.shared.generations.store(state.next_generation, Ordering::Release);
        let pending = state.live_threads;
        if pending > 0 {
            state.broadcasts.push(Broadcast { generation, job: Arc::new(job), pending });
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
