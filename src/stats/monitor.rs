//! Monitors: callbacks a caller registers to see every logical call, and optionally every task,
//! as it ends (KvikIO 26.10's `Monitor` / `Observation`, and also for stream-ordered calls, which
//! KvikIO does not observe). The engine builds the observations (`io::observe`); this is the
//! registry and the delivery.
//!
//! Cost: with no monitor registered, a call pays one atomic load. The registry is a list behind an
//! `RwLock`, copied on change (`Arc<Vec<..>>`), so that a callback never runs under its lock: a
//! callback may add or remove monitors, its own included, and make calls, which are not observed
//! (so that a callback that reads does not call itself without end). Removal waits for the callbacks of that
//! monitor running on other threads (each entry counts its callbacks in progress); one running on
//! the removing thread itself (a callback removing its own monitor) is not waited for. A Rust
//! callback's panic is caught and the monitor stays; a C callback must not unwind.

use crate::abi::{Observation, ObservationKind};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

/// A registered callback.
pub(crate) type Callback = Box<dyn Fn(&Observation) + Send + Sync>;

struct Entry {
    id: u64,
    tasks: bool,
    callback: Callback,
    /// Callbacks of this monitor running now, on any thread.
    running: AtomicUsize,
    removed: AtomicBool,
}

static ENTRIES: RwLock<Option<Arc<Vec<Arc<Entry>>>>> = RwLock::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Some monitor is registered / some wants tasks: the engine's one check per call or task.
static ANY: AtomicBool = AtomicBool::new(false);
static ANY_TASKS: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The monitors whose callbacks run on this thread now (innermost last). Reached through
    /// `try_with`: once a thread's thread-local state is destroyed (the main thread's, in an
    /// `atexit` handler) its calls are not observed, so no callback runs there.
    static IN_CALLBACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Whether any monitor watches calls (`ObservationKind::Call`) made on this thread now: calls a
/// callback makes are not observed, so that a callback that reads cannot call itself without end.
#[inline]
pub(crate) fn watching_calls() -> bool {
    ANY.load(Ordering::Relaxed) && !in_callback()
}

/// Whether any monitor watches tasks run on this thread now (not those of a callback's calls).
#[inline]
pub(crate) fn watching_tasks() -> bool {
    ANY_TASKS.load(Ordering::Relaxed) && !in_callback()
}

fn in_callback() -> bool {
    IN_CALLBACK.try_with(|stack| !stack.borrow().is_empty()).unwrap_or(true)
}

/// Whether the calling thread runs a monitor's callback now: a call it makes is not observed, nor
/// are its tasks, which other threads may run (`io::dispatch::Call::observed`).
pub(crate) fn in_a_callback() -> bool {
    ANY.load(Ordering::Relaxed) && in_callback()
}

fn snapshot() -> Option<Arc<Vec<Arc<Entry>>>> {
    ENTRIES.read().unwrap_or_else(|p| p.into_inner()).clone()
}

fn publish(entries: Vec<Arc<Entry>>) {
    ANY.store(!entries.is_empty(), Ordering::SeqCst);
    ANY_TASKS.store(entries.iter().any(|e| e.tasks), Ordering::SeqCst);
    *ENTRIES.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(entries));
}

/// One lock for adding and removing, so that two changes never publish from the same old list.
static CHANGE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Registers `callback` for every call (and, with `tasks`, every task too) from now on; returns
/// its id for `remove`.
pub(crate) fn add(callback: Callback, tasks: bool) -> u64 {
    let _change = CHANGE.lock().unwrap_or_else(|p| p.into_inner());
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut entries: Vec<Arc<Entry>> = snapshot().map(|list| list.to_vec()).unwrap_or_default();
    entries.push(Arc::new(Entry { id, tasks, callback, running: AtomicUsize::new(0), removed: AtomicBool::new(false) }));
    publish(entries);
    id
}

/// Removes monitor `id`: no callback of it starts afterwards, and the ones running on other
/// threads have returned when this returns. False for an id not registered.
pub(crate) fn remove(id: u64) -> bool {
    let entry = {
        let _change = CHANGE.lock().unwrap_or_else(|p| p.into_inner());
        let entries: Vec<Arc<Entry>> = snapshot().map(|list| list.to_vec()).unwrap_or_default();
        let Some(entry) = entries.iter().find(|e| e.id == id).cloned() else { return false };
        entry.removed.store(true, Ordering::SeqCst);
        publish(entries.into_iter().filter(|e| e.id != id).collect());
        entry
    };
    let own = IN_CALLBACK.try_with(|stack| stack.borrow().iter().filter(|&&running| running == id).count()).unwrap_or(0);
    while entry.running.load(Ordering::SeqCst) > own {
        std::thread::yield_now();
    }
    true
}

/// Hands `observation` to every monitor that watches its kind.
pub(crate) fn deliver(observation: &Observation) {
    let Some(entries) = snapshot() else { return };
    let is_task = observation.kind == ObservationKind::Task as u32;
    for entry in entries.iter().filter(|e| !is_task || e.tasks) {
        entry.running.fetch_add(1, Ordering::SeqCst);
        // Checked after counting, so that `remove` either sees this callback or it sees removal.
        // A thread whose state is gone runs no callback (`in_callback` says it is in one).
        if !entry.removed.load(Ordering::SeqCst) && IN_CALLBACK.try_with(|stack| stack.borrow_mut().push(entry.id)).is_ok() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (entry.callback)(observation)));
            let _ = IN_CALLBACK.try_with(|stack| stack.borrow_mut().pop());
        }
        entry.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC` now (the clock of `Observation::start_ns`).
pub(crate) fn now_ns() -> u64 {
    // SAFETY: an all-zero timespec is a valid out-buffer.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Observation;
    use std::sync::Mutex;

    /// The registry is process-wide: its tests run one at a time.
    static LOCK: Mutex<()> = Mutex::new(());

    fn observation(kind: ObservationKind) -> Observation {
        Observation {
            struct_size: std::mem::size_of::<Observation>() as u64,
            kind: kind as u32,
            direction: 0,
            path: std::ptr::null(),
            file_offset: 0,
            size: 1,
            bytes: 1,
            buffer_offset: 0,
            start_ns: 0,
            end_ns: 0,
            memory: 1,
            route: 1,
            posix_reason: 1,
            ok: 1,
            stream_ordered: 0,
            reserved: 0,
        }
    }

    #[test]
    fn calls_reach_every_monitor_tasks_only_those_that_asked() {
        let _lock = LOCK.lock().unwrap();
        let (calls, tasks) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (c, t) = (Arc::clone(&calls), Arc::clone(&tasks));
        let a = add(Box::new(move |_| {
            c.fetch_add(1, Ordering::SeqCst);
        }), false);
        let b = add(Box::new(move |o| {
            if o.kind == ObservationKind::Task as u32 {
                t.fetch_add(1, Ordering::SeqCst);
            }
        }), true);
        assert!(watching_calls() && watching_tasks());
        deliver(&observation(ObservationKind::Call));
        deliver(&observation(ObservationKind::Task));
        assert_eq!((calls.load(Ordering::SeqCst), tasks.load(Ordering::SeqCst)), (1, 1));
        assert!(remove(b));
        assert!(!watching_tasks() && watching_calls());
        assert!(remove(a) && !remove(a));
        assert!(!watching_calls());
        deliver(&observation(ObservationKind::Call));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "nothing after removal");
    }

    #[test]
    fn a_callback_may_remove_its_own_monitor_and_a_panic_is_caught() {
        let _lock = LOCK.lock().unwrap();
        let id = Arc::new(AtomicU64::new(0));
        let inner = Arc::clone(&id);
        let seen = Arc::new(AtomicUsize::new(0));
        let s = Arc::clone(&seen);
        let own = add(Box::new(move |_| {
            s.fetch_add(1, Ordering::SeqCst);
            assert!(remove(inner.load(Ordering::SeqCst)), "its own removal returns without waiting for itself");
        }), false);
        id.store(own, Ordering::SeqCst);
        let panicking = add(Box::new(|_| panic!("a monitor's bug")), false);
        deliver(&observation(ObservationKind::Call));
        deliver(&observation(ObservationKind::Call));
        assert_eq!(seen.load(Ordering::SeqCst), 1, "removed by its first callback");
        assert!(remove(panicking));
    }

    #[test]
    fn removal_waits_for_a_callback_running_on_another_thread() {
        let _lock = LOCK.lock().unwrap();
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let finished = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&finished);
        let entered_tx = Mutex::new(entered_tx);
        let id = add(Box::new(move |_| {
            entered_tx.lock().unwrap().send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(100));
            f.store(true, Ordering::SeqCst);
        }), false);
        let t = std::thread::spawn(|| deliver(&observation(ObservationKind::Call)));
        entered_rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
        assert!(remove(id));
        assert!(finished.load(Ordering::SeqCst), "remove returned only after the callback did");
        t.join().unwrap();
    }
}
