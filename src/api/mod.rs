//! What a caller holds: a file handle (`file`: open, flags, close, verdicts, reads), a mapping
//! handle (`mapping`: a file range mapped read-only, read into host or device memory), the
//! operations it starts (`operation`), the settings (`settings`) and the process-wide counters
//! (`process`, read through `counters`), the registration of streams (`stream`) and the page-cache
//! tools (`page_cache_tools`).

pub mod counters;
pub(crate) mod file;
pub(crate) mod mapping;
pub mod page_cache_tools;
mod operation;
pub(crate) mod process;
pub mod settings;
pub mod stream;
#[cfg(test)]
mod stream_order_tests;
