//! The device backend without cuFile: one task entry for both directions (`task`), over POSIX
//! transfers through pinned bounce buffers copied to and from the GPU and copies from page-cache
//! ranges registered with CUDA (`bounce`), with one pool of bounce buffers per device (`pools`).
//! The preparation at open that readies every worker for it is `io::warm_up`.

mod bounce;
mod pools;
mod task;

pub use bounce::*;
pub use pools::*;
pub use task::task;
