//! The device backend without cuFile: POSIX reads through pinned bounce buffers copied to the GPU,
//! and copies from page-cache ranges registered with CUDA (`bounce`), with one pool of bounce
//! buffers per device (`pools`), each a bounded pool of pinned buffers (`pinned_pool`). The
//! preparation at open that readies every worker for it is `io::warm_up`.

mod bounce;
mod pinned_pool;
mod pools;

pub use bounce::*;
pub use pinned_pool::{PinnedBuffer, PinnedGroup, PinnedPool, PinnedStats};
pub use pools::*;
