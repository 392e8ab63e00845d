//! gdsroute: KvikIO-equivalent reads and writes between files and host or GPU memory, with counters that show
//! which route every read and write took.
//!
//! The Rust API is what a program that reads and writes files uses, the same as the C ABI
//! offers: the handle (`File`, with its verdicts `Unusable`/`FallbackReason`), the mapping handle
//! (`MappedFile`, KvikIO's `MmapHandle`), the operation a
//! parallel read or write hands back (`Operation`, waited for with `wait`), errors (`Error`,
//! `Result`, and `Status`, the code each error maps to), the streams (`stream`: registration with
//! cuFile), the memory (`memory`: buffers registered with cuFile, the bounce buffers' release), cuFile's
//! driver (`driver`: its properties and settings), the worker pools (`Pool`, a caller's; those per
//! drive), the settings (`settings`: a getter and
//! a setter per setting, the defaults), the counters (`counters`: `Counters`, `DeviceCounters`,
//! process-wide and per device, reset, rendered), the diagnosis (`diagnose`, the report behind
//! `gdsroute-diagnose`) and cuFile's `shutdown`. Everything else is crate-private, so that the
//! engine, the backends and the bindings below can change without breaking a caller; the C ABI
//! (`ffi`) is private too, its `extern "C"` functions are exported from the shared and static
//! libraries whatever the module's visibility. `trace` is public but hidden: an investigation
//! tool behind the `trace` feature, used by gdsroute-bench; so is `testing`, the few hooks the
//! integration tests need and no caller has, each with its reason.
//!
//! Layering, from the top: `ffi` (the C ABI, the only place with `extern "C"`) and `diagnose`
//! call `api`, the handle a caller holds (`api::file`), the settings and the process-wide
//! counters (`api::process`); `api` calls `io`, the engine (request, route, task split, pool,
//! operation, preparation at open); `io` calls `backend`, the ways bytes move (`posix`, `device`,
//! `cufile`); the backends use `page_cache`, `settings` and `stats`; all of these use `sys`,
//! bindings without policy (CUDA, cuFile, file-system calls, the process at load time). At the
//! bottom, used by every layer: `abi` (every type that crosses the C ABI, its values
//! append-only), `error`, `direction` (`Read`/`Write`), `log` (the lines `GDSROUTE_LOG_LEVEL` asks
//! for), `nvtx` (ranges for profilers) and `trace`. A layer imports only layers
//! below it, and the files of one folder do not import each other in a loop.

#![deny(unreachable_pub)]

mod abi;
mod api;
mod backend;
pub mod diagnose;
mod direction;
mod error;
mod ffi;
mod io;
mod log;
mod nvtx;
mod page_cache;
// The settings' table and environment reading. Its public part is `api::settings`, which also
// re-exports all of it crate-wide, so that the crate names both `crate::settings`.
#[path = "settings/mod.rs"]
mod settings_table;
mod stats;
mod sys;
#[cfg(test)]
mod test_support;
#[doc(hidden)] // an investigation tool (the `trace` feature), not part of the API
pub mod trace;

pub use abi::{FallbackReason, Status};
pub use api::file::File;
pub use api::mapping::MappedFile;
pub use api::batch::{Batch, BatchCompletion, BatchOp};
pub use api::{batch, counters, driver, memory, monitor, page_cache_tools, report, settings, stream};
pub use api::pool::{Pool, drive_pools_in_use};
pub use api::process::{begin_device_setup, cufile_usable};
pub use backend::cufile::gds::{Unusable, shutdown};
pub use direction::Direction;
pub use error::{Error, Result};
pub use io::operation::Operation;
pub use settings::CompatMode;
pub use stats::{Counters, DeviceCounters};

/// What the integration tests reach and no caller has; not part of the API, anything here may
/// change without notice. Each item says why its tests cannot use the public API or the C ABI.
#[doc(hidden)]
pub mod testing {
    /// Runs `job` on the shared pool: the tests of a read started from inside a pool task, and of
    /// a read whose pool thread is busy, need a task of their own there, which no public call makes.
    pub fn submit_to_pool(job: impl FnOnce() + Send + 'static) -> crate::Result<()> {
        crate::io::thread_pool::global()?.submit(job);
        Ok(())
    }

    /// Tasks recorded as the engine records them (tests/device_stats.rs): the per-device
    /// counters of the C ABI without a GPU, in a process of their own (they reset the totals).
    pub mod stats {
        pub use crate::stats::{Direction, PosixReason, Route, StatsCell, TaskOutcome, record_task};
    }

    /// cuFile's loader, registration and statistics against the fake libcufile
    /// (tests/cufile_loader.rs) and the load-time log step (tests/cufile_log.rs): they load a
    /// library into the process for good and set the environment, so they run in a process of
    /// their own, not among the unit tests.
    pub mod cufile {
        pub use crate::api::process::cufile_by_device;
        pub use crate::backend::cufile::file::CufileFile;
        pub use crate::sys::cufile::{CufileLibrary, DriverControl, IoFailure, LIBRARY_ENV_VAR, LoadError, PerGpuSnapshot, PerGpuTotals, StatsSupport, log_configuration};
        pub use crate::sys::startup::{DEFAULT_CUFILE_LOG, quiet_cufile_log};
    }

    /// cuFile's batch submission against the fake libcufile (tests/cufile_batch.rs), which no
    /// public call reaches on its own.
    pub mod cufile_batch {
        pub use crate::backend::cufile::batch::{BatchIo, available, run};
        pub use crate::sys::cufile::CufileHandle;
    }

    /// The GPU suites' look inside the device route, which no counter shows: bounce buffers and
    /// their NUMA node, cuFile's driver properties, the page cache's windows, and the library's
    /// CUDA layer (contexts, pointer kinds; tests/common/gpu.rs, tests/gpu_multi_device.rs and
    /// tests/gpu_faults.rs still make their contexts with it, not with cudarc).
    pub mod device {
        pub use crate::backend::cufile::gds::process as cufile_process;
        pub use crate::backend::device::{bounce_pool, current_bounce_buffer_bytes, device_pinned};
        pub use crate::page_cache::{Usage as PageCacheUsage, WINDOW as PAGE_CACHE_WINDOW, usage as page_cache_usage};
        /// The CUDA layer's calls the suites make their contexts and check pointers with.
        pub mod cuda {
            pub use crate::sys::cuda::{
                ContextHandle, MemoryKind, ScopedContext, classify, cuda, current_context, device_numa_node, device_pci_bus_id, device_uuid,
                primary_context,
            };
        }

        /// Where a bounce buffer's pages are (tests/gpu_devices.rs: placed on the GPU's node).
        pub mod numa {
            pub use crate::sys::numa::{NodeLookup, node_of_page};
        }
    }
}
