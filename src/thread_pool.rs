//! The shared worker pool that runs read tasks. Threads are named `gdsroute-<n>`, the pool can be
//! resized while in use (extra threads leave after their current task), and a pool thread that
//! waits for an operation runs queued tasks meanwhile, so a task that submits and waits for
//! another read (nested submission) cannot deadlock the pool.

use crate::error::{Error, Result};
use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

type Job = Box<dyn FnOnce() + Send + 'static>;

struct State {
    queue: VecDeque<Job>,
    target_threads: usize,
    live_threads: usize,
    next_thread_id: usize,
}

struct Shared {
    state: Mutex<State>,
    work_ready: Condvar,
}

thread_local! {
    static ON_POOL_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// A FIFO pool of named worker threads.
#[derive(Clone)]
pub struct ThreadPool {
    shared: Arc<Shared>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // Jobs never run under this lock, so poisoning can only come from a bug in this file;
    // the queue is still consistent, so keep going rather than panic in the caller.
    shared.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl ThreadPool {
    /// Starts a pool with `threads` workers.
    pub fn new(threads: usize) -> Result<ThreadPool> {
        let pool = ThreadPool {
            shared: Arc::new(Shared {
                state: Mutex::new(State { queue: VecDeque::new(), target_threads: 0, live_threads: 0, next_thread_id: 0 }),
                work_ready: Condvar::new(),
            }),
        };
        pool.resize(threads)?;
        Ok(pool)
    }

    /// Number of worker threads the pool is converging to.
    pub fn num_threads(&self) -> usize {
        lock(&self.shared).target_threads
    }

    /// Changes the number of workers. New threads start at once; surplus threads finish their
    /// current task and exit. Fails only if no thread at all could be started.
    pub fn resize(&self, threads: usize) -> Result<()> {
        if threads == 0 {
            return Err(Error::InvalidArgument("a thread pool needs at least one thread".into()));
        }
        let mut state = lock(&self.shared);
        state.target_threads = threads;
        while state.live_threads < threads {
            let id = state.next_thread_id;
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new().name(format!("gdsroute-{id}")).spawn(move || worker_loop(shared));
            match spawned {
                Ok(_) => {
                    state.live_threads += 1;
                    state.next_thread_id += 1;
                }
                Err(e) if state.live_threads == 0 => {
                    return Err(Error::Internal(format!("cannot start a worker thread: {e}")));
                }
                // Some workers run; keep them rather than fail the caller.
                Err(_) => break,
            }
        }
        self.shared.work_ready.notify_all();
        Ok(())
    }

    /// Queues a job. Jobs must not panic (a panic is caught and the worker survives, but the
    /// job's own completion signalling is then the job's responsibility).
    pub fn submit(&self, job: impl FnOnce() + Send + 'static) {
        lock(&self.shared).queue.push_back(Box::new(job));
        self.shared.work_ready.notify_one();
    }

    /// Runs one queued job on the calling thread, if there is one. Used by waiters on pool
    /// threads so that nested waits make progress.
    pub fn run_one_queued(&self) -> bool {
        let job = lock(&self.shared).queue.pop_front();
        match job {
            Some(job) => {
                run_job(job);
                true
            }
            None => false,
        }
    }

    /// True on a worker thread of any gdsroute pool.
    pub fn on_pool_thread() -> bool {
        ON_POOL_THREAD.with(|c| c.get())
    }
}

fn run_job(job: Job) {
    let _ = catch_unwind(AssertUnwindSafe(job));
}

fn worker_loop(shared: Arc<Shared>) {
    ON_POOL_THREAD.with(|c| c.set(true));
    let mut state = lock(&shared);
    loop {
        if state.live_threads > state.target_threads {
            state.live_threads -= 1;
            return;
        }
        match state.queue.pop_front() {
            Some(job) => {
                drop(state);
                run_job(job);
                state = lock(&shared);
            }
            None => state = shared.work_ready.wait(state).unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// The shared pool and the process that started it. A child created by `fork()` inherits the
/// record but none of the threads, so it gets a fresh pool instead of queueing tasks that would
/// never run (the parent's pool object is left untouched: its lock may have been held at fork).
struct GlobalPool {
    pid: u32,
    pool: &'static ThreadPool,
}

static GLOBAL: Mutex<Option<GlobalPool>> = Mutex::new(None);

fn current() -> MutexGuard<'static, Option<GlobalPool>> {
    GLOBAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process-wide pool, sized from the settings on first use (and again in a forked child).
pub fn global() -> Result<&'static ThreadPool> {
    let pid = std::process::id();
    let mut slot = current();
    match &*slot {
        Some(g) if g.pid == pid => Ok(g.pool),
        _ => {
            let pool: &'static ThreadPool = Box::leak(Box::new(ThreadPool::new(crate::settings::global()?.num_threads())?));
            *slot = Some(GlobalPool { pid, pool });
            Ok(pool)
        }
    }
}

/// Applies a new thread count to the settings and, if it is running, to the shared pool.
pub fn set_global_num_threads(threads: usize) -> Result<()> {
    // Under the pool lock, so that concurrent setters leave setting and pool in agreement.
    let slot = current();
    crate::settings::global()?.set_num_threads(threads)?;
    if let Some(g) = slot.as_ref().filter(|g| g.pid == std::process::id()) {
        g.pool.resize(threads)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn runs_jobs_on_named_threads() {
        let pool = ThreadPool::new(3).unwrap();
        let (tx, rx) = mpsc::channel();
        for _ in 0..20 {
            let tx = tx.clone();
            pool.submit(move || {
                let name = std::thread::current().name().unwrap_or("").to_string();
                tx.send((name, ThreadPool::on_pool_thread())).unwrap();
            });
        }
        for _ in 0..20 {
            let (name, on_pool) = rx.recv_timeout(Duration::from_secs(120)).unwrap();
            assert!(name.starts_with("gdsroute-"), "{name}");
            assert!(on_pool);
        }
    }

    #[test]
    fn resizes_up_and_down() {
        let pool = ThreadPool::new(1).unwrap();
        pool.resize(6).unwrap();
        assert_eq!(pool.num_threads(), 6);
        // Six jobs that all wait for each other can only finish if six threads run them.
        let arrived = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        for _ in 0..6 {
            let arrived = Arc::clone(&arrived);
            let tx = tx.clone();
            pool.submit(move || {
                arrived.fetch_add(1, Ordering::SeqCst);
                let start = std::time::Instant::now();
                while arrived.load(Ordering::SeqCst) < 6 && start.elapsed() < Duration::from_secs(120) {
                    std::thread::yield_now();
                }
                tx.send(arrived.load(Ordering::SeqCst)).unwrap();
            });
        }
        for _ in 0..6 {
            assert_eq!(rx.recv_timeout(Duration::from_secs(120)).unwrap(), 6);
        }
        pool.resize(2).unwrap();
        assert_eq!(pool.num_threads(), 2);
        let (tx, rx) = mpsc::channel();
        for i in 0..10 {
            let tx = tx.clone();
            pool.submit(move || tx.send(i).unwrap());
        }
        let mut got: Vec<i32> = (0..10).map(|_| rx.recv_timeout(Duration::from_secs(120)).unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert!(pool.resize(0).is_err());
    }

    #[test]
    fn survives_a_panicking_job() {
        let pool = ThreadPool::new(1).unwrap();
        pool.submit(|| panic!("boom"));
        let (tx, rx) = mpsc::channel();
        pool.submit(move || tx.send(1).unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_secs(120)).unwrap(), 1);
    }
}
