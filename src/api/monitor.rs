//! Monitors: callbacks that see every logical call (and, if asked, every task) as it ends, with
//! its file, range, bytes, times, memory, route and reason (`Observation`), as KvikIO 26.10's
//! monitors do, and for stream-ordered calls too. The registry is `stats::monitor`; the
//! observations are built by the engine (`io::observe`).

pub use crate::abi::{MONITOR_TASKS, Observation, ObservationKind, ObservedMemory, ObservedPosixReason, ObservedRoute};

/// Registers `callback` for every call from now on, and for every task too with `tasks`;
/// returns its id for `remove`. The callback runs on the thread that ended the call (the caller's,
/// or the pool thread that finished a parallel call's last task), after the call was counted and
/// before its result is handed out; it must be short, must not wait for the operation it
/// observes, and may make other calls (not observed: a callback that reads would otherwise call
/// itself), add monitors or remove any, its own included. A panic in
/// it is caught. The observation, and its path, are valid during the callback only.
pub fn add(callback: impl Fn(&Observation) + Send + Sync + 'static, tasks: bool) -> u64 {
    crate::stats::monitor::add(Box::new(callback), tasks)
}

/// Removes monitor `id`: no callback of it starts after this returns, and none is running on
/// another thread (a callback running on this thread, one removing its own monitor, is not
/// waited for). False for an id not registered.
pub fn remove(id: u64) -> bool {
    crate::stats::monitor::remove(id)
}
