//! The process's one pool, sized from the settings on first use and resized with the setting.
//! A forked child gets a fresh one (`GlobalPool`).

use super::ThreadPool;
use crate::error::Result;
use std::sync::{Mutex, MutexGuard};

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
pub(crate) fn global() -> Result<&'static ThreadPool> {
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

/// Applies a new thread count to the settings and, if they are running, to the shared pool and
/// the pools per drive.
pub(crate) fn set_global_num_threads(threads: usize) -> Result<()> {
    // Under the pool lock, so that concurrent setters leave setting and pool in agreement.
    let slot = current();
    crate::settings::live().set_num_threads(threads)?;
    if let Some(g) = slot.as_ref().filter(|g| g.pid == std::process::id()) {
        g.pool.resize(threads)?;
    }
    super::assigned::resize_drive_pools(threads)
}
