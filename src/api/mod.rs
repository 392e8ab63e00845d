//! What a caller holds: a file handle (`file`: open, flags, close, verdicts, reads), the
//! operations it starts (`operation`), the settings (`settings`) and the process-wide counters
//! (`process`, read through `counters`) and the registration of streams (`stream`).

pub mod counters;
pub(crate) mod file;
mod operation;
pub(crate) mod process;
pub mod settings;
pub mod stream;
#[cfg(test)]
mod stream_order_tests;
