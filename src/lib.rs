//! gdsroute: KvikIO-equivalent reads of files into host or GPU memory, with counters that show
//! which route every read took. The safe core lives in the modules below; `ffi` is the only place
//! with `extern "C"`.

pub mod cuda;
pub mod cufile;
pub mod cufile_file;
pub mod device_io;
pub mod diagnose;
pub mod direct_io;
pub mod error;
pub mod ffi;
pub mod gds;
pub mod file;
pub mod operation;
pub mod page_cache;
pub mod posix;
pub mod readahead;
pub mod route;
pub mod settings;
pub mod startup;
pub mod stats;
pub mod status;
pub mod task_split;
pub mod thread_pool;
#[doc(hidden)] // an investigation tool (the `trace` feature), not part of the API
pub mod trace;
pub mod warm_up;

pub use error::{Error, Result};
pub use file::File;
pub use operation::Operation;
pub use stats::Counters;
pub use status::Status;
