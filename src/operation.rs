//! A parallel read in flight, like KvikIO's future. The operation finishes only after every one
//! of its tasks has stopped, so when a caller sees the result (success or error) nothing will
//! write into its buffer any more. The result is the first error in task order, or the number of
//! bytes delivered contiguously from the requested offset.
//!
//! A thread that waits runs tasks of its own operation that no worker has started yet (from the
//! end, while workers take them from the front), instead of sleeping: the caller's thread is
//! blocked anyway, and with it a read of N pool threads runs on N + 1 threads (N + W with W
//! waiting threads). KvikIO's waiter only sleeps, and so does ours with a pool of one thread, so
//! that `KVIKIO_NTHREADS=1` still means one thread doing the reads, in order.

use crate::error::{Error, Result};
use crate::stats::{self, StatsCell};
use crate::thread_pool::ThreadPool;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

struct State {
    expected: Vec<usize>,
    results: Vec<Option<Result<usize>>>,
    remaining: usize,
    outcome: Option<Result<usize>>,
}

struct Inner {
    state: Mutex<State>,
    finished: Condvar,
    requested: u64,
    stats: Arc<StatsCell>,
    /// Task bodies queued on the pool, which a waiter may claim and run itself.
    claimable: Mutex<Vec<Arc<Claimable>>>,
}

type TaskBody = Box<dyn FnOnce() + Send + 'static>;

/// A task body that runs exactly once, on whichever thread claims it first: the pool worker that
/// dequeues it or a thread waiting for its operation.
pub struct Claimable(Mutex<Option<TaskBody>>);

impl Claimable {
    /// Wraps a task body.
    pub fn new(body: impl FnOnce() + Send + 'static) -> Arc<Claimable> {
        Arc::new(Claimable(Mutex::new(Some(Box::new(body)))))
    }

    /// Runs the body unless another thread has claimed it; true if it ran here.
    pub fn run(&self) -> bool {
        let body = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        body.map(|f| f()).is_some()
    }
}

/// Completion handle for one task; exactly one of these exists per task and it must be
/// completed, which `TaskSlot::finish` and its Drop guarantee.
pub struct TaskSlot {
    inner: Arc<Inner>,
    index: usize,
    done: bool,
}

impl TaskSlot {
    /// Records the task's result; the last task to finish settles the operation.
    pub fn finish(mut self, result: Result<usize>) {
        self.done = true;
        self.inner.complete(self.index, result);
    }
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        // A task that never reported (its closure panicked or was dropped unrun) must still let
        // the operation finish, or the waiter would hang.
        if !self.done {
            self.inner.complete(self.index, Err(Error::Internal("a read task ended without reporting".into())));
        }
    }
}

/// A read in flight.
pub struct Operation {
    inner: Arc<Inner>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn complete(&self, index: usize, result: Result<usize>) {
        let mut state = self.lock();
        if state.results[index].is_some() {
            return;
        }
        state.results[index] = Some(result);
        state.remaining -= 1;
        if state.remaining == 0 {
            let outcome = settle(&state.expected, &state.results);
            let delivered = *outcome.as_ref().unwrap_or(&0) as u64;
            stats::record_call(&self.stats, self.requested, delivered, outcome.is_err());
            state.outcome = Some(outcome);
            self.finished.notify_all();
        }
    }
}

/// First error in task order, else the bytes read up to the first short task.
fn settle(expected: &[usize], results: &[Option<Result<usize>>]) -> Result<usize> {
    let mut total = 0usize;
    let mut contiguous = true;
    for (want, got) in expected.iter().zip(results) {
        match got {
            Some(Ok(n)) => {
                if contiguous {
                    total += n;
                    contiguous = n == want;
                }
            }
            Some(Err(e)) => return Err(e.clone()),
            None => return Err(Error::Internal("operation settled with a task missing".into())),
        }
    }
    Ok(total)
}

impl Operation {
    /// Creates an operation for tasks of the given sizes, and one slot per task. With no tasks
    /// the operation is already finished with 0 bytes.
    pub fn new(task_sizes: Vec<usize>, requested: u64, stats: Arc<StatsCell>) -> (Operation, Vec<TaskSlot>) {
        let n = task_sizes.len();
        let inner = Arc::new(Inner {
            state: Mutex::new(State { expected: task_sizes, results: (0..n).map(|_| None).collect(), remaining: n, outcome: None }),
            finished: Condvar::new(),
            requested,
            stats,
            claimable: Mutex::new(Vec::new()),
        });
        if n == 0 {
            stats::record_call(&inner.stats, requested, 0, false);
            inner.lock().outcome = Some(Ok(0));
        }
        let slots = (0..n).map(|index| TaskSlot { inner: Arc::clone(&inner), index, done: false }).collect();
        (Operation { inner }, slots)
    }

    /// Lets waiters run these task bodies (each also queued on the pool) themselves.
    pub fn set_claimable(&self, bodies: Vec<Arc<Claimable>>) {
        *self.inner.claimable.lock().unwrap_or_else(|p| p.into_inner()) = bodies;
    }

    /// Runs one unclaimed task of this operation on the calling thread, the last one first.
    /// False when none is left.
    fn help(&self) -> bool {
        loop {
            let next = self.inner.claimable.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match next {
                Some(body) if body.run() => return true,
                Some(_) => continue, // a worker had it already
                None => return false,
            }
        }
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
            while !self.is_done() && self.help() {}
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
        let _ = self.wait(crate::thread_pool::global().ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(sizes: Vec<usize>) -> (Operation, Vec<TaskSlot>, Arc<StatsCell>) {
        let stats = Arc::new(StatsCell::default());
        let requested = sizes.iter().sum::<usize>() as u64;
        let (op, slots) = Operation::new(sizes, requested, Arc::clone(&stats));
        (op, slots, stats)
    }

    #[test]
    fn sums_contiguous_bytes_and_stops_at_first_short_task() {
        let (o, slots, stats) = op(vec![10, 10, 10]);
        let mut it = slots.into_iter();
        it.next().unwrap().finish(Ok(10));
        assert!(!o.is_done());
        it.next().unwrap().finish(Ok(4));
        it.next().unwrap().finish(Ok(10));
        assert_eq!(o.wait(None).unwrap(), 14);
        assert_eq!(o.wait(None).unwrap(), 14);
        let c = stats.snapshot();
        assert_eq!((c.calls, c.calls_short, c.bytes_read, c.bytes_requested), (1, 1, 14, 30));
    }

    #[test]
    fn first_error_in_task_order_wins_after_all_tasks_stop() {
        let (o, slots, stats) = op(vec![1, 1, 1]);
        let mut it = slots.into_iter();
        let first = it.next().unwrap();
        it.next().unwrap().finish(Err(Error::InvalidArgument("second".into())));
        it.next().unwrap().finish(Err(Error::InvalidArgument("third".into())));
        assert!(!o.is_done(), "must wait for the first task too");
        drop(first); // a task that never reported
        let err = o.wait(None).unwrap_err();
        assert!(matches!(err, Error::Internal(_)), "{err}");
        assert_eq!(stats.snapshot().calls_failed, 1);
    }

    #[test]
    fn a_waiter_runs_unclaimed_tasks_once() {
        let (o, slots, _) = op(vec![1, 2, 3]);
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let bodies: Vec<Arc<Claimable>> = slots
            .into_iter()
            .map(|slot| {
                let runs = Arc::clone(&runs);
                Claimable::new(move || {
                    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let n = slot.index + 1;
                    slot.finish(Ok(n));
                })
            })
            .collect();
        // A "worker" already ran the first task; the waiter must run the other two and not the
        // first again.
        assert!(bodies[0].run());
        assert!(!bodies[0].run());
        o.set_claimable(bodies.clone());
        // With a pool of one thread the waiter would only sleep: two threads let it help.
        let pool = ThreadPool::new(2).unwrap();
        assert_eq!(o.wait(Some(&pool)).unwrap(), 6);
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert!(bodies.iter().all(|b| !b.run()));
    }

    #[test]
    fn with_one_pool_thread_the_waiter_only_waits() {
        let (o, slots, _) = op(vec![1]);
        let slot = slots.into_iter().next().unwrap();
        let body = Claimable::new(move || slot.finish(Ok(1)));
        o.set_claimable(vec![Arc::clone(&body)]);
        let pool = ThreadPool::new(1).unwrap();
        let waiter = std::thread::spawn(move || o.wait(Some(&pool)));
        // The waiter must leave the task to the pool: it is still unclaimed while it waits.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished());
        assert!(body.run(), "the waiter ran the task itself");
        assert_eq!(waiter.join().unwrap().unwrap(), 1);
    }

    #[test]
    fn no_tasks_is_finished() {
        let (o, slots, _) = op(vec![]);
        assert!(slots.is_empty());
        assert!(o.is_done());
        assert_eq!(o.wait(None).unwrap(), 0);
    }
}
