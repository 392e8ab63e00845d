//! What a caller holds: a file handle (`file`: open, flags, close, verdicts, reads), the
//! operations it starts (`operation`), the settings (`settings`) and the process-wide counters
//! (`process`, read through `counters`).

pub mod counters;
pub(crate) mod file;
mod operation;
pub(crate) mod process;
pub mod settings;
#[cfg(test)]
mod stream_order_tests;
