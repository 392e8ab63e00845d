//! The CUDA driver layer: loading/initialising libcuda (`driver`), classifying pointers
//! (`pointer`), scoped contexts for worker threads (`context`), devices by ordinal (`device`:
//! UUID, PCI bus id, NUMA node), one pinned host buffer (`pinned`; the pool that reuses them is
//! `backend::device::pinned_pool`), file ranges the copy engine reads straight from the page
//! cache (`registered`) and host-to-device copies on per-thread streams (`copy`). Nothing here calls cudarc before `driver::cuda()` has confirmed
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

pub use context::{ContextHandle, ScopedContext, active_primary_context, any_context, current_context, primary_context};
pub use copy::{Stream, copy_device_to_host, copy_host_to_device, copy_host_to_device_sync, synchronize, thread_stream};
pub use device::{current_device, device_count, device_numa_node, device_pci_bus_id, device_uuid};
pub use driver::{CudaDriver, cuda, describe, in_use_by_the_application};
pub use error::CudaFailure;
pub use event::{Event, thread_events};
pub use pinned::PinnedAllocation;
pub use pointer::{MemoryKind, allocation_range, classify, context_for};
pub use registered::{FileMapping, RegisteredMapping};

#[cfg(test)]
mod gpu_tests;
#[cfg(test)]
mod tests;
