//! What a caller holds: a file handle (`file`: open, flags, close, verdicts, reads), a batch of
//! reads and writes over several files (`batch`), a mapping
//! handle (`mapping`: a file range mapped read-only, read into host or device memory), the
//! operations it starts (`operation`), the settings (`settings`) and the process-wide counters
//! (`process`, read through `counters`), the registration of streams (`stream`), the memory the library
//! registers or pins (`memory`), cuFile's driver properties and settings (`driver`),
//! the worker pools (`pool`: a caller's, those per drive), the exit report (`report`), the
//! monitors (`monitor`) and the page-cache tools (`page_cache_tools`).

pub mod batch;
pub mod counters;
pub mod driver;
pub(crate) mod file;
pub(crate) mod mapping;
pub mod memory;
pub mod monitor;
pub mod page_cache_tools;
mod operation;
pub(crate) mod pool;
pub(crate) mod process;
pub mod report;
pub mod settings;
pub mod stream;
#[cfg(test)]
mod stream_order_tests;
