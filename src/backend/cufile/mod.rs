//! cuFile as a backend: the process's state (`gds`: the AUTO probe's process half, the driver
//! opened once after CUDA, the call gate and shutdown, cuFile's statistics), a file registered
//! with it (`file`) and the call that moves a task's bytes (`transfer`).

pub mod file;
pub mod gds;
pub mod transfer;
