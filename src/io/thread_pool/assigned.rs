//! Which pool runs a handle's tasks: the shared pool (the default); under
//! `KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE` a pool per physical drive, chosen when the handle opens
//! (KvikIO's `thread_pool_per_block_device`), so that the tasks of a slow drive do not queue in
//! front of another drive's; or a pool the caller made (`CallerPool`: its size and CPUs), given
//! to the handle later. A file without a block device gets the pool of its kind of file system
//! (`sys::drive::Drive::NoBlockDevice`: `memory` for tmpfs, `network`, `fuse`, `overlay`,
//! `other`). The pools per drive are made on first use with the thread-count setting of that
//! moment, follow its later changes (KvikIO never resizes its own), and live as long as the
//! process; a forked child starts with none.

use super::{ThreadPool, global};
use crate::error::Result;
use crate::sys::drive::Drive;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The pools per drive and the process they belong to.
static PER_DRIVE: Mutex<Option<(u32, BTreeMap<Drive, &'static ThreadPool>)>> = Mutex::new(None);

fn per_drive() -> MutexGuard<'static, Option<(u32, BTreeMap<Drive, &'static ThreadPool>)>> {
    PER_DRIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pool of `drive`, made now if it is the drive's first (with the thread-count setting).
///
/// Errors: the settings could not be read; no worker thread could be started.
pub(crate) fn pool_of_drive(drive: &Drive) -> Result<&'static ThreadPool> {
    let pid = std::process::id();
    let mut slot = per_drive();
    if slot.as_ref().is_none_or(|(owner, _)| *owner != pid) {
        *slot = Some((pid, BTreeMap::new()));
    }
    let (_, pools) = slot.as_mut().expect("set above");
    if let Some(pool) = pools.get(drive) {
        return Ok(pool);
    }
    let pool: &'static ThreadPool = Box::leak(Box::new(ThreadPool::new(crate::settings::global()?.num_threads())?));
    pools.insert(drive.clone(), pool);
    Ok(pool)
}

/// Resizes every pool per drive of this process (the thread-count setting changed).
pub(crate) fn resize_drive_pools(threads: usize) -> Result<()> {
    let slot = per_drive();
    if let Some((owner, pools)) = slot.as_ref()
        && *owner == std::process::id()
    {
        for pool in pools.values() {
            pool.resize(threads)?;
        }
    }
    Ok(())
}

/// The drives that have a pool in this process, with each pool's thread count.
pub(crate) fn drive_pools() -> Vec<(Drive, usize)> {
    let slot = per_drive();
    match slot.as_ref() {
        Some((owner, pools)) if *owner == std::process::id() => pools.iter().map(|(d, p)| (d.clone(), p.num_threads())).collect(),
        _ => Vec::new(),
    }
}

/// A pool a caller made: its workers leave once the last holder (the caller's value, the
/// handles it was given to) let go and what was queued on it has run.
pub(crate) struct CallerPool(ThreadPool);

impl CallerPool {
    /// `threads` workers, on `cpus` only when given.
    ///
    /// Errors: those of `ThreadPool::placed`.
    pub(crate) fn new(threads: usize, cpus: Option<Vec<usize>>) -> Result<CallerPool> {
        ThreadPool::placed(threads, cpus).map(CallerPool)
    }

    pub(crate) fn pool(&self) -> &ThreadPool {
        &self.0
    }
}

impl Drop for CallerPool {
    fn drop(&mut self) {
        self.0.retire();
    }
}

/// The pool a handle's parallel calls run on.
#[derive(Clone)]
pub(crate) enum Assigned {
    /// The process's shared pool.
    Shared,
    /// The pool of the drive that holds the file.
    Drive(Drive, &'static ThreadPool),
    /// A pool the caller made and gave the handle.
    Caller(Arc<CallerPool>),
}

impl Assigned {
    /// The pool for a file on `drive` opened now: its drive's under the per-drive setting, else
    /// the shared pool.
    ///
    /// Errors: the settings could not be read; the drive's pool could not start a thread.
    pub(crate) fn at_open(drive: impl FnOnce() -> Drive) -> Result<Assigned> {
        if !crate::settings::global()?.thread_pool_per_block_device() {
            return Ok(Assigned::Shared);
        }
        let drive = drive();
        let pool = pool_of_drive(&drive)?;
        Ok(Assigned::Drive(drive, pool))
    }

    /// The pool itself; in a child forked since a drive's or a caller's pool was made (none of
    /// its workers came along), the child's shared pool.
    ///
    /// Errors: the shared pool could not be made (settings, threads).
    pub(crate) fn pool(&self) -> Result<ThreadPool> {
        let own = match self {
            Assigned::Shared => None,
            Assigned::Drive(_, pool) => Some((*pool).clone()),
            Assigned::Caller(owned) => Some(owned.pool().clone()),
        };
        match own {
            Some(pool) if pool.made_here() => Ok(pool),
            _ => Ok(global()?.clone()),
        }
    }

    /// Which pool, in words: `shared`, `drive nvme0`, `no block device: memory`, `caller`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Assigned::Shared => "shared".into(),
            Assigned::Drive(drive, _) => drive.describe(),
            Assigned::Caller(_) => "caller".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_drive_has_one_pool_and_the_pools_follow_the_thread_count() {
        // Kinds no real file in the other tests opens under the per-drive setting.
        let a = pool_of_drive(&Drive::Block("test-drive-a".into())).unwrap() as *const ThreadPool;
        let b = pool_of_drive(&Drive::NoBlockDevice("network")).unwrap() as *const ThreadPool;
        assert_ne!(a, b);
        assert_eq!(pool_of_drive(&Drive::Block("test-drive-a".into())).unwrap() as *const ThreadPool, a);
        resize_drive_pools(3).unwrap();
        let pools = drive_pools();
        assert!(pools.iter().any(|(d, n)| *d == Drive::Block("test-drive-a".into()) && *n == 3), "{pools:?}");
    }

    #[test]
    fn a_caller_pool_retires_when_its_last_holder_lets_go() {
        let owned = Arc::new(CallerPool::new(2, None).unwrap());
        let assigned = Assigned::Caller(Arc::clone(&owned));
        let pool = assigned.pool().unwrap();
        assert_eq!((pool.num_threads(), assigned.describe().as_str()), (2, "caller"));
        drop(owned);
        drop(assigned);
        let start = std::time::Instant::now();
        while pool.live_threads() > 0 && start.elapsed() < std::time::Duration::from_secs(120) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(pool.live_threads(), 0);
    }
}
