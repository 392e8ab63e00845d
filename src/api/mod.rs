//! What a caller holds: a file handle (`file`: open, flags, close, verdicts, reads) and the
//! process-wide counters (`process`).

pub mod file;
pub mod process;
