//! gdsroute: KvikIO-equivalent reads and writes between files and host or GPU memory, with counters that show
//! which route every read and write took.
//!
//! Layering, from the top: `ffi` (the C ABI, the only place with `extern "C"`) and `diagnose`
//! call `api`, the handle a caller holds (`api::file`) and the process-wide counters
//! (`api::process`); `api` calls `io`, the engine (request, route, task split, pool, operation,
//! preparation at open); `io` calls `backend`, the ways bytes move (`posix`, `device`, `cufile`);
//! the backends use `page_cache`, `settings` and `stats`; all of these use `sys`, bindings
//! without policy (CUDA, cuFile, file-system calls, the process at load time). At the bottom,
//! used by every layer: `abi` (every type that crosses the C ABI, its values append-only),
//! `error`, `direction` (`Read`/`Write`) and `trace`. A layer imports only layers below it, and
//! the files of one folder do not import each other in a loop. The Rust API is re-exported
//! below; `testing` hands internals to the integration tests.

mod abi;
mod api;
mod backend;
pub mod diagnose;
mod direction;
mod error;
pub mod ffi;
mod io;
mod page_cache;
pub mod settings;
mod stats;
mod sys;
#[doc(hidden)] // an investigation tool (the `trace` feature), not part of the API
pub mod trace;

pub use api::file::File;
pub use error::{Error, Result};
pub use io::operation::Operation;
pub use settings::CompatMode;
pub use stats::{Counters, DeviceCounters};
pub use abi::Status;

/// Internals the integration tests and the benchmark reach, under the names they had before the
/// layers. Not part of the API: anything here may change without notice.
#[doc(hidden)]
pub mod testing {
    pub use crate::api::process::{cufile_by_device, device_counters, process_counters, reset_process_counters};
    pub use crate::backend::cufile::file as cufile_file;
    pub use crate::backend::device as device_io;
    pub use crate::backend::posix::{self, direct_io};
    pub use crate::io::thread_pool;
    pub use crate::sys::{cufile, numa, startup};

    /// The CUDA layer, with the pinned-buffer pool (now in the device backend) where it was.
    pub mod cuda {
        pub use crate::backend::device::{PinnedBuffer, PinnedGroup, PinnedPool, PinnedStats};
        pub use crate::sys::cuda::*;
    }

    /// The registered page cache.
    pub mod page_cache {
        pub use crate::page_cache::*;
    }

    /// The counters' types.
    pub mod stats {
        pub use crate::stats::*;
    }

    /// The status codes.
    pub mod status {
        pub use crate::abi::*;
    }

    /// cuFile's process state, with the process counters beside it as before.
    pub mod gds {
        pub use crate::api::process::{process_counters, reset_process_counters};
        pub use crate::backend::cufile::gds::*;
    }
}
