//! The device backend without cuFile: POSIX reads through pinned bounce buffers copied to the GPU,
//! and copies from page-cache ranges registered with CUDA (`bounce`), with one pool of bounce
//! buffers per device (`pools`). The preparation at open that readies every worker for it is
//! `io::warm_up`.

mod bounce;
mod pools;

pub use bounce::*;
pub use pools::*;
