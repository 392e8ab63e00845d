//! The engine between the handle and the backends, one for reads and writes: a request
//! (`request`: direction, target, range checks) on an open file (`open_file`) enters `engine`
//! (`run`: one synchronous call; `submit`: a parallel one), which asks where it goes (`route`),
//! cuts it into tasks (`task_split`, yielded by a `task_source`), starts them by the call's start
//! condition on its runner (`schedule`: the calling thread or the pool, `thread_pool`) and hands
//! back the handle on tasks in flight (`operation`); `dispatch` sends each task to its backend and
//! counts it. `stream_order` is the start condition of stream-ordered calls (the waiter thread). `warm_up` is the preparation at open that readies every worker for device transfers;
//! `observe` builds what monitors see of each call and task.

pub(crate) mod batch;
pub(crate) mod dispatch;
pub(crate) mod engine;
pub(crate) mod observe;
pub(crate) mod open_file;
pub(crate) mod operation;
pub(crate) mod relay;
pub(crate) mod request;
pub(crate) mod route;
pub(crate) mod schedule;
pub(crate) mod stream_order;
pub(crate) mod task_source;
pub(crate) mod task_split;
pub(crate) mod thread_pool;
pub(crate) mod warm_up;
