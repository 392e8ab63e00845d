//! The CUDA driver layer: loading/initialising libcuda (`driver`), classifying pointers
//! (`pointer`), scoped contexts for worker threads (`context`), devices by ordinal (`device`:
//! UUID, PCI bus id, NUMA node), one pinned host buffer (`pinned`; the pool that reuses them is
//! `backend::device::pinned_pool`), file ranges the copy engine reads straight from the page
//! cache (`registered`), host-to-device copies on per-thread streams (`copy`; `stock` holds those made ahead for stream-ordered tasks) and what a stream-ordered
//! call needs of a caller's stream (`stream`: its context, graph capture, events, flag words) and device memory of the library's own (`scratch`). Nothing here calls cudarc before `driver::cuda()` has confirmed
//! that libcuda and every symbol used are present.

mod context;
mod copy;
mod device;
mod driver;
mod error;
mod event;
mod pinned;
mod pointer;
mod registered;
pub(crate) mod relay;
mod scratch;
mod stock;
mod stream;

#[allow(unreachable_pub)] // re-exported by src/lib.rs's `testing` through this path
pub use context::{ContextHandle, ScopedContext, current_context, primary_context};
pub(crate) use context::active_primary_context;
pub(crate) use copy::{Stream, StreamOrderedTask, on_release_thread, outside_stream_ordered_task, stock_for_stream_ordered_tasks, streams_wait_for_this_thread, copy_device_to_host, copy_host_to_device, synchronize, thread_stream};
#[cfg(test)]
pub(crate) use copy::copy_host_to_device_sync;
#[allow(unreachable_pub)] // re-exported by src/lib.rs's `testing` through this path
pub use device::{device_numa_node, device_pci_bus_id, device_uuid};
pub(crate) use device::{concurrent_managed_access, current_device, device_count};
#[allow(unreachable_pub)] // re-exported by src/lib.rs's `testing` through this path
pub use driver::cuda;
pub(crate) use driver::{describe, in_use_by_the_application, known_unavailable, preload};
pub(crate) use error::CudaFailure;
pub(crate) use event::thread_events;
pub(crate) use pinned::PinnedAllocation;
#[allow(unreachable_pub)] // re-exported by src/lib.rs's `testing` through this path
pub use pointer::{MemoryKind, classify};
pub(crate) use pointer::{allocation_range, enter_context_for};
pub(crate) use registered::{FileMapping, RegisteredMapping};
pub(crate) use scratch::{SCRATCH_BYTES, scratch_of_current_context};
pub(crate) use stream::{CallerStream, FlagWord, StreamEvent, describe_stream_wait, enter_context_of, stream_wait_available};

#[cfg(test)]
mod gpu_tests;
#[cfg(test)]
mod tests;
