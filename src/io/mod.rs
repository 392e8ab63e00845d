//! The engine between the handle and the backends: a request (`request`: target, range checks)
//! on an open file (`open_file`) is planned and run by `engine`, which asks where it goes
//! (`route`), cuts it into tasks (`task_split`), runs them on the pool (`thread_pool`) or inline
//! and hands back the handle on tasks in flight (`operation`); `warm_up` is the preparation at
//! open that readies every worker for device reads.

pub mod engine;
pub mod open_file;
pub mod operation;
pub mod request;
pub mod route;
pub mod task_split;
pub mod thread_pool;
pub mod warm_up;
