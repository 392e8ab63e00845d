//! The worker pool that runs the tasks of reads and writes. Threads are named `gdsroute-<n>`, the
//! pool can be resized while in use (extra threads leave after their current task), and a pool
//! thread that waits for an operation runs queued tasks meanwhile, so a task that submits and
//! waits for another call (nested submission) cannot deadlock the pool. Beside the queue: jobs
//! run once on every worker (`broadcast`: per-thread preparation, warm_up.rs), the process's
//! shared pool (`global`) and which pool a handle's tasks run on (`assigned`: the shared one, one
//! per drive, or a caller's).
//!
//! One job in one file, although over 450 lines (half of them its tests): the queue and the
//! worker loop, whose resize, retirement and broadcast rules only hold together.

mod assigned;
mod broadcast;
mod global;

pub(crate) use assigned::{Assigned, CallerPool, drive_pools};
pub(crate) use global::{global, set_global_num_threads};

use crate::error::{Error, Result};
use broadcast::Broadcast;
use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

type Job = Box<dyn FnOnce() + Send + 'static>;

struct State {
    queue: VecDeque<Job>,
    /// Oldest first; an entry goes when no worker still owes it a run.
    broadcasts: Vec<Broadcast>,
    next_generation: u64,
    target_threads: usize,
    live_threads: usize,
    next_thread_id: usize,
    /// Its owner let go (a caller's pool freed): workers leave once the queue is empty.
    retired: bool,
}

struct Shared {
    state: Mutex<State>,
    work_ready: Condvar,
    /// `State::next_generation`, readable without the lock (`run_due_broadcasts`).
    generations: AtomicU64,
    /// The CPUs every worker runs on (`sched_setaffinity` at its start); `None`: wherever the
    /// process may run.
    cpus: Option<Vec<usize>>,
    /// Run by every worker at its start (`with_thread_start`).
    thread_start: Option<fn()>,
    /// This pool's number among the pools the process made (`identity`).
    serial: u64,
    /// The process that made it: a child forked since has none of its workers.
    pid: u32,
}

/// The number the next pool gets (`Shared::serial`).
static NEXT_POOL_SERIAL: AtomicU64 = AtomicU64::new(1);

/// How many pools the process has made.
#[cfg(test)]
pub(crate) fn pools_made() -> u64 {
    NEXT_POOL_SERIAL.load(std::sync::atomic::Ordering::Relaxed) - 1
}

thread_local! {
    static ON_POOL_THREAD: Cell<bool> = const { Cell::new(false) };
    /// On a worker thread: its pool (the address of its shared state) and the first broadcast
    /// generation it has still to run.
    static WORKER_DUE: Cell<(usize, u64)> = const { Cell::new((0, 0)) };
}

/// A FIFO pool of named worker threads.
#[derive(Clone)]
pub(crate) struct ThreadPool {
    shared: Arc<Shared>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // Jobs never run under this lock, so poisoning can only come from a bug in this file;
    // the queue is still consistent, so keep going rather than panic in the caller.
    shared.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl ThreadPool {
    /// Starts a pool with `threads` workers.
    pub(crate) fn new(threads: usize) -> Result<ThreadPool> {
        Self::placed(threads, None)
    }

    /// Starts a pool with `threads` workers, each of which runs `start` first (to mark itself,
    /// say).
    pub(crate) fn with_thread_start(threads: usize, start: fn()) -> Result<ThreadPool> {
        Self::made(threads, None, Some(start))
    }

    /// Starts a pool with `threads` workers, each running only on `cpus` when given (checked
    /// against the CPUs this process may use).
    ///
    /// Errors: `InvalidArgument` for no threads, an empty CPU list, or a CPU the process may not
    /// run on; `Internal` when no thread could be started.
    pub(crate) fn placed(threads: usize, cpus: Option<Vec<usize>>) -> Result<ThreadPool> {
        Self::made(threads, cpus, None)
    }

    fn made(threads: usize, cpus: Option<Vec<usize>>, thread_start: Option<fn()>) -> Result<ThreadPool> {
        if let Some(cpus) = &cpus {
            crate::sys::cpus::check(cpus)?;
        }
        let pool = ThreadPool {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    broadcasts: Vec::new(),
                    next_generation: 0,
                    target_threads: 0,
                    live_threads: 0,
                    next_thread_id: 0,
                    retired: false,
                }),
                work_ready: Condvar::new(),
                generations: AtomicU64::new(0),
                cpus,
                thread_start,
                serial: NEXT_POOL_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                pid: std::process::id(),
            }),
        };
        pool.resize(threads)?;
        Ok(pool)
    }

    /// Whether `other` is a handle on this same pool.
    pub(crate) fn same_pool(&self, other: &ThreadPool) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// A number that names this pool, never another one of the process (a pool made where a
    /// freed one lived included).
    pub(crate) fn identity(&self) -> u64 {
        self.shared.serial
    }

    /// Whether this process made the pool (not a parent it was forked from, whose workers the
    /// child does not have: nothing queued there would run).
    pub(crate) fn made_here(&self) -> bool {
        self.shared.pid == std::process::id()
    }

    /// How many workers this pool has started so far: a worker started after a look at this
    /// number makes it larger (`io::warm_up` knows so which workers came since it set them up).
    pub(crate) fn threads_started(&self) -> usize {
        lock(&self.shared).next_thread_id
    }

    /// Number of worker threads the pool is converging to.
    pub(crate) fn num_threads(&self) -> usize {
        lock(&self.shared).target_threads
    }

    /// Changes the number of workers. New threads start at once; surplus threads finish their
    /// current task and exit. Fails only if no thread at all could be started.
    pub(crate) fn resize(&self, threads: usize) -> Result<()> {
        if threads == 0 {
            return Err(Error::InvalidArgument("a thread pool needs at least one thread".into()));
        }
        let mut state = lock(&self.shared);
        state.target_threads = threads;
        while state.live_threads < threads {
            let id = state.next_thread_id;
            let shared = Arc::clone(&self.shared);
            // A new worker owes no earlier broadcast: it was not counted in one.
            let due = state.next_generation;
            let spawned = std::thread::Builder::new().name(format!("gdsroute-{id}")).spawn(move || worker_loop(shared, due));
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
    /// job's own completion signalling is then the job's responsibility). On a retired pool
    /// whose workers have all left, the job runs on the calling thread instead: a call that took
    /// a caller's pool just before its last holder let go (`gdsroute_file_set_pool` racing it)
    /// would otherwise wait for a job nobody runs.
    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'static) {
        let mut state = lock(&self.shared);
        if state.retired && state.live_threads == 0 {
            drop(state);
            run_job(job);
            return;
        }
        state.queue.push_back(Box::new(job));
        drop(state);
        self.shared.work_ready.notify_one();
    }

    /// Lets the workers go once every queued job has run (a caller's pool whose last holder let
    /// go: no job is queued on it later).
    pub(crate) fn retire(&self) {
        lock(&self.shared).retired = true;
        self.shared.work_ready.notify_all();
    }

    /// Workers alive now (those leaving after their current job included).
    #[cfg(test)]
    pub(crate) fn live_threads(&self) -> usize {
        lock(&self.shared).live_threads
    }

    /// Runs one queued job on the calling thread, if there is one. Used by waiters on pool
    /// threads so that nested waits make progress.
    pub(crate) fn run_one_queued(&self) -> bool {
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
    pub(crate) fn on_pool_thread() -> bool {
        ON_POOL_THREAD.with(|c| c.get())
    }
}

/// Runs a job or a broadcast; a panic is caught, so the worker survives.
fn run_job(job: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(job));
}

/// `due`: the first broadcast generation this worker must run (kept in `WORKER_DUE`, which
/// `run_due_broadcasts` advances too).
fn worker_loop(shared: Arc<Shared>, due: u64) {
    ON_POOL_THREAD.with(|c| c.set(true));
    if let Some(start) = shared.thread_start {
        start();
    }
    // Checked when the pool was made; a refusal now (the process's CPUs changed) leaves the
    // worker where it started. Without a list, on every CPU of the process, not only on those
    // of the thread that started it (a thread an OpenMP runtime bound to one CPU, say).
    let _ = match &shared.cpus {
        Some(cpus) => crate::sys::cpus::pin_to(cpus),
        None => crate::sys::cpus::spread_over_process(),
    };
    let pool = Arc::as_ptr(&shared) as usize;
    WORKER_DUE.with(|c| c.set((pool, due)));
    let due = || WORKER_DUE.with(|c| c.get().1);
    let mut state = lock(&shared);
    loop {
        if state.live_threads > state.target_threads || (state.retired && state.queue.is_empty()) {
            state.forget_worker(due());
            return;
        }
        if let Some((job, next_due)) = state.take_broadcast(due()) {
            WORKER_DUE.with(|c| c.set((pool, next_due)));
            drop(state);
            run_job(|| job());
            state = lock(&shared);
            continue;
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

// Tests of the queue, the workers and the broadcasts together.
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
    fn a_broadcast_runs_once_on_every_worker() {
        let pool = ThreadPool::new(4).unwrap();
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        pool.broadcast(move || {
            let name = std::thread::current().name().unwrap_or("").to_string();
            tx.lock().unwrap().send(name).unwrap();
        });
        let mut names: Vec<String> = (0..4).map(|_| rx.recv_timeout(Duration::from_secs(120)).unwrap()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 4, "one run per worker: {names:?}");
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "no fifth run");
        assert!(lock(&pool.shared).broadcasts.is_empty(), "the entry goes once every worker ran it");
    }

    #[test]
    fn a_busy_worker_runs_a_broadcast_before_its_next_queued_job() {
        let pool = ThreadPool::new(1).unwrap();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (order_tx, order_rx) = mpsc::channel();
        let (started_tx, started_rx) = mpsc::channel();
        let first = order_tx.clone();
        pool.submit(move || {
            started_tx.send(()).unwrap();
            release_rx.recv_timeout(Duration::from_secs(120)).unwrap();
            first.send("queued first").unwrap();
        });
        started_rx.recv_timeout(Duration::from_secs(120)).unwrap(); // the worker is busy
        let second = order_tx.clone();
        pool.submit(move || second.send("queued second").unwrap());
        let broadcast = Mutex::new(order_tx);
        pool.broadcast(move || broadcast.lock().unwrap().send("broadcast").unwrap());
        release_tx.send(()).unwrap();
        let order: Vec<&str> = (0..3).map(|_| order_rx.recv_timeout(Duration::from_secs(120)).unwrap()).collect();
        assert_eq!(order, ["queued first", "broadcast", "queued second"]);
    }

    #[test]
    fn workers_that_leave_or_join_owe_no_broadcast() {
        let pool = ThreadPool::new(2).unwrap();
        // Both workers busy, so neither has run the broadcast when one of them leaves.
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let started = Arc::new(AtomicUsize::new(0));
        for _ in 0..2 {
            let (release_rx, started) = (Arc::clone(&release_rx), Arc::clone(&started));
            pool.submit(move || {
                started.fetch_add(1, Ordering::SeqCst);
                release_rx.lock().unwrap().recv_timeout(Duration::from_secs(120)).unwrap();
            });
        }
        while started.load(Ordering::SeqCst) < 2 {
            std::thread::yield_now();
        }
        let first = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&first);
        pool.broadcast(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        // One worker leaves when its job ends: it checks for leaving before taking the broadcast.
        pool.resize(1).unwrap();
        release_tx.send(()).unwrap();
        release_tx.send(()).unwrap();
        let settled = |live: usize| {
            let start = std::time::Instant::now();
            loop {
                let state = lock(&pool.shared);
                if (state.live_threads == live && state.broadcasts.is_empty()) || start.elapsed() > Duration::from_secs(120) {
                    return (state.live_threads, state.broadcasts.len());
                }
                drop(state);
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        // The last worker to take a broadcast removes its entry before running it: wait for the
        // runs themselves too.
        let ran = |counter: &AtomicUsize, want: usize| {
            let start = std::time::Instant::now();
            while counter.load(Ordering::SeqCst) < want && start.elapsed() < Duration::from_secs(120) {
                std::thread::sleep(Duration::from_millis(1));
            }
            counter.load(Ordering::SeqCst)
        };
        assert_eq!(settled(1), (1, 0), "one worker left and released its share");
        assert_eq!(ran(&first, 1), 1, "only the worker that stayed ran it");
        // Workers started later owe the old broadcast nothing, and run a new one.
        pool.resize(3).unwrap();
        let second = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&second);
        pool.broadcast(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(settled(3), (3, 0));
        assert_eq!((ran(&second, 3), first.load(Ordering::SeqCst)), (3, 1));
    }

    #[test]
    fn a_long_job_runs_broadcasts_between_its_steps() {
        let pool = ThreadPool::new(1).unwrap();
        let (started_tx, started_rx) = mpsc::channel();
        let (broadcast_tx, broadcast_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let inner = pool.clone();
        pool.submit(move || {
            started_tx.send(()).unwrap();
            // Steps of a long job until the broadcast posted meanwhile has run here.
            let start = std::time::Instant::now();
            let mut ran = false;
            while !ran && start.elapsed() < Duration::from_secs(120) {
                inner.run_due_broadcasts();
                ran = broadcast_rx.try_recv().is_ok();
                std::thread::yield_now();
            }
            done_tx.send(ran).unwrap();
        });
        started_rx.recv_timeout(Duration::from_secs(120)).unwrap();
        let tx = Mutex::new(broadcast_tx);
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        pool.broadcast(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            tx.lock().unwrap().send(()).unwrap();
        });
        assert!(done_rx.recv_timeout(Duration::from_secs(120)).unwrap(), "the broadcast waited for the job's end");
        // Once only, and not again when the worker goes back to its loop; a thread outside the
        // pool runs none.
        let (tx, rx) = mpsc::channel();
        pool.submit(move || tx.send(()).unwrap());
        rx.recv_timeout(Duration::from_secs(120)).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(lock(&pool.shared).broadcasts.is_empty());
        pool.run_due_broadcasts(); // not a worker: nothing
    }

    #[test]
    fn workers_run_on_the_cpus_given_and_a_bad_cpu_list_is_refused() {
        let cpus = crate::sys::cpus::allowed().unwrap();
        let first = crate::sys::cpus::members(&cpus)[0];
        let pool = ThreadPool::placed(2, Some(vec![first])).unwrap();
        let (tx, rx) = mpsc::channel();
        for _ in 0..4 {
            let tx = tx.clone();
            pool.submit(move || {
                tx.send(crate::sys::cpus::members(&crate::sys::cpus::thread_cpus().unwrap())).unwrap();
            });
        }
        for _ in 0..4 {
            assert_eq!(rx.recv_timeout(Duration::from_secs(120)).unwrap(), [first]);
        }
        assert!(matches!(ThreadPool::placed(1, Some(vec![])), Err(Error::InvalidArgument(_))));
        assert!(matches!(ThreadPool::placed(1, Some(vec![100_000])), Err(Error::InvalidArgument(ref m)) if m.contains("CPU 100000")));
        assert!(matches!(ThreadPool::placed(0, None), Err(Error::InvalidArgument(_))));
    }

    /// A pool made by a thread pinned to one CPU (as an OpenMP runtime binds its threads) runs
    /// its workers on every CPU of the process, and a list of another CPU of the process is
    /// accepted there.
    #[test]
    fn a_pool_made_by_a_pinned_thread_runs_on_the_process_cpus() {
        use crate::sys::cpus::{allowed, members, pin_to, thread_cpus};
        let process = members(&allowed().unwrap());
        if process.len() < 2 {
            eprintln!("one CPU: not checked");
            return;
        }
        let (first, second) = (process[0], process[1]);
        let seen = std::thread::spawn(move || {
            pin_to(&[first]).unwrap();
            assert_eq!(members(&thread_cpus().unwrap()), [first]);
            let pool = ThreadPool::new(2).unwrap();
            let (tx, rx) = mpsc::channel();
            pool.submit(move || tx.send(members(&thread_cpus().unwrap())).unwrap());
            let placed = ThreadPool::placed(1, Some(vec![second])).map(|_| ()).map_err(|e| e.to_string());
            (rx.recv_timeout(Duration::from_secs(120)).unwrap(), placed)
        })
        .join()
        .unwrap();
        assert_eq!(seen, (process, Ok(())));
    }

    #[test]
    fn every_worker_runs_its_start_first_and_workers_added_later_too() {
        thread_local! {
            static STARTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        let pool = ThreadPool::with_thread_start(2, || STARTED.set(true)).unwrap();
        pool.resize(4).unwrap();
        let (tx, rx) = mpsc::channel();
        for _ in 0..16 {
            let tx = tx.clone();
            pool.submit(move || tx.send(STARTED.get()).unwrap());
        }
        for _ in 0..16 {
            assert!(rx.recv_timeout(Duration::from_secs(120)).unwrap(), "a job ran on a worker that had not run its start");
        }
        assert!(!STARTED.get(), "only the workers");
    }

    #[test]
    fn a_retired_pool_runs_what_was_queued_and_its_workers_leave() {
        let pool = ThreadPool::new(3).unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..20 {
            let tx = tx.clone();
            pool.submit(move || {
                std::thread::sleep(Duration::from_millis(1));
                tx.send(i).unwrap();
            });
        }
        pool.retire();
        let mut got: Vec<i32> = (0..20).map(|_| rx.recv_timeout(Duration::from_secs(120)).unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..20).collect::<Vec<_>>());
        let start = std::time::Instant::now();
        while pool.live_threads() > 0 && start.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(pool.live_threads(), 0);
        // A job submitted after the last worker left runs all the same, on the submitting thread.
        let (tx, rx) = mpsc::channel();
        pool.submit(move || tx.send(std::thread::current().id()).unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_secs(120)).unwrap(), std::thread::current().id());
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
