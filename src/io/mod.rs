//! The engine between the handle and the backends: where a request goes (`route`), how it is cut
//! into tasks (`task_split`), the pool that runs them (`thread_pool`) and the handle on tasks in
//! flight (`operation`); and the preparation at open that readies every worker for device reads
//! (`warm_up`).

pub mod operation;
pub mod route;
pub mod task_split;
pub mod thread_pool;
pub mod warm_up;
