//! Run-time binding to NVIDIA's libcufile (GPUDirect Storage): loading and symbol resolution
//! (`library`), driver and read calls (`driver`), statistics (`stats`) and status codes
//! (`codes`). No cudarc here; the CUDA layer opens the driver through this module once CUDA works.
#![deny(missing_docs)]

mod codes;
mod driver;
mod library;
mod stats;

pub use codes::{
    CU_FILE_CUDA_DRIVER_ERROR, CU_FILE_DRIVER_ALREADY_OPEN, CU_FILE_DRIVER_NOT_INITIALIZED,
    CU_FILE_HANDLE_NOT_REGISTERED, CU_FILE_INVALID_VALUE, CU_FILE_SUCCESS, CufileFailure,
    IoFailure, SYMBOL_MISSING, code_message,
};
pub use driver::{CufileHandle, DriverProperties, log_configuration};
pub use library::{
    CufileLibrary, DEFAULT_CANDIDATES, LIBRARY_ENV_VAR, LoadAttempt, LoadError, RawCufileError,
};
pub(crate) use stats::for_each_cufile_counter;
pub use stats::{
    CufileStats, GpuCounters, MAX_GPUS, PerGpuSnapshot, PerGpuTotals, STATS_MIN_VERSION, StatsSupport, l3_offsets, parse_l3,
    parse_l3_per_gpu,
};
