//! Worker pools: one a caller makes for its handles (its size and the CPUs its workers run on),
//! given to a handle with `File::set_pool`, and the pools per drive of
//! `KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE` (`io::thread_pool::Assigned` says which a handle uses).

use crate::error::{Error, Result};
use crate::io::thread_pool::{CallerPool, drive_pools};
use std::sync::Arc;

/// A pool of worker threads a caller made. Cloning shares it. Its workers leave once the pool
/// and every handle it was given to have let go, after what was queued on it ran.
#[derive(Clone)]
pub struct Pool {
    pub(crate) inner: Arc<CallerPool>,
}

impl Pool {
    /// `threads` workers (1 to `settings::MAX_THREADS`), each running only on `cpus` when given
    /// (CPU numbers as `sched_setaffinity` takes them, for example the CPUs of a NUMA node).
    ///
    /// Errors: `InvalidArgument` for a thread count out of range, an empty CPU list or a CPU this
    /// process may not run on; `Internal` when no thread could be started.
    pub fn new(threads: usize, cpus: Option<&[usize]>) -> Result<Pool> {
        if !(1..=crate::settings::MAX_THREADS).contains(&threads) {
            return Err(Error::InvalidArgument(format!("a pool of {threads} threads (1 to {})", crate::settings::MAX_THREADS)));
        }
        Ok(Pool { inner: Arc::new(CallerPool::new(threads, cpus.map(<[usize]>::to_vec))?) })
    }

    /// Its number of workers.
    pub fn num_threads(&self) -> usize {
        self.inner.pool().num_threads()
    }
}

/// The pools per drive this process has made (`KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE`), each as the
/// name a handle reports (`File::pool_name`) with its thread count.
pub fn drive_pools_in_use() -> Vec<(String, usize)> {
    drive_pools().into_iter().map(|(drive, threads)| (drive.describe(), threads)).collect()
}
