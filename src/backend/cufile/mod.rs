//! cuFile as a backend: the process's state (`gds`: the AUTO probe's process half, the driver
//! opened once after CUDA, the call gate and shutdown, cuFile's statistics), a file registered
//! with it (`file`) and the submission calls that move a task's bytes. Today that is one:
//! `synchronous`, `cuFileRead` / `cuFileWrite` per task on the calling thread. The others go
//! beside it, each in its own file: stream-ordered submissions (`cuFileReadAsync` /
//! `cuFileWriteAsync`, ordered on a CUDA stream) in `stream_ordered.rs`, and batches
//! (`cuFileBatchIOSetUp` / `cuFileBatchIOSubmit`, many ranges of one or more files in one
//! submission) in `batch.rs`.

pub(crate) mod file;
pub(crate) mod gds;
pub(crate) mod synchronous;
