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
pub use pinned_pool::{PinnedBuffer, PinnedGroup, PinnedPool, PinnedStats};
pub use pools::*;
pub use task::task;
