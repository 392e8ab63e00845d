//! cuFile as a backend: the buffers registered with it through gdsroute (`buffers`), the driver settings a caller stages for its open (`driver_settings`), the process's state (`gds`: the AUTO probe's process half, the driver
//! opened once after CUDA, the call gate and shutdown, cuFile's statistics), a file registered
//! with it (`file`) and the submission calls that move a task's bytes: `synchronous`,
//! `cuFileRead` / `cuFileWrite` per task on the calling thread, and `stream_ordered`,
//! `cuFileReadAsync` / `cuFileWriteAsync` of a whole call on a registered CUDA stream
//! (`GDSROUTE_CUFILE_ASYNC=native`), and `batch`, many I/Os of one or more files through
//! `cuFileBatchIOSetUp` / `Submit` / `GetStatus` on the calling thread, in windows of at most the
//! driver's `max_batch_io_size`.

pub(crate) mod batch;
pub(crate) mod buffers;
pub(crate) mod driver_settings;
pub(crate) mod file;
pub(crate) mod gds;
pub(crate) mod stream_ordered;
pub(crate) mod synchronous;
