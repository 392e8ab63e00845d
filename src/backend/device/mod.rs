//! The device backend without cuFile: one task entry for both directions (`task`), over POSIX
//! transfers through pinned bounce buffers copied to and from the GPU and copies from page-cache
//! ranges registered with CUDA (`bounce`), with one pool of bounce buffers per device (`pools`),
//! each a bounded pool of pinned buffers (`pinned_pool`). The preparation at open that readies
//! every worker for it is `io::warm_up`.

mod bounce;
mod pinned_pool;
mod pools;
mod task;

pub use bounce::*;
#[cfg(test)] // the pool's tests beside the CUDA layer's (src/sys/cuda/tests.rs, gpu_tests.rs)
pub(crate) use pinned_pool::PinnedPool;
pub use pools::*;
pub(crate) use task::task;
