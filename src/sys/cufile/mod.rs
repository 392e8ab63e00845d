//! Run-time binding to NVIDIA's libcufile (GPUDirect Storage): loading and symbol resolution
//! (`library`), driver, I/O and batch calls (`driver`), statistics (`stats`) and status codes
//! (`codes`). No cudarc here; the CUDA layer opens the driver through this module once CUDA works.
#![deny(missing_docs)]

mod codes;
mod driver;
mod library;
mod stats;

#[allow(unreachable_pub)] // re-exported by src/lib.rs's `testing` through this path
pub use codes::IoFailure;
pub(crate) use codes::{CufileFailure, code_message};
#[allow(unreachable_pub)] // re-exported by src/lib.rs's `testing` through this path
pub use driver::log_configuration;
#[allow(unreachable_pub)] // re-exported by src/lib.rs's `testing` through this path
pub use driver::DriverControl;
pub(crate) use driver::{CufileBatch, DriverProperties};
#[allow(unreachable_pub)] // re-exported by src/lib.rs's `testing` through this path
pub use driver::CufileHandle;
pub(crate) use library::{RawBatchEvent, batch_status};
#[allow(unreachable_pub)] // re-exported by src/lib.rs's `testing` through this path
pub use library::{CufileLibrary, LIBRARY_ENV_VAR, LoadError};
pub(crate) use stats::for_each_cufile_counter;
#[cfg(test)]
pub(crate) use stats::{GpuCounters, l3_offsets};
#[allow(unreachable_pub)] // re-exported by src/lib.rs's `testing` through this path
pub use stats::{PerGpuSnapshot, PerGpuTotals, StatsSupport};
