//! The pinned bounce buffers of each device: one pool per device ordinal, made at the device's
//! first bounce-buffer transfer or preparation at open, its memory placed on the device's NUMA
//! node where the machine says which that is (`sys::cuda::device_numa_node`), so that the copy
//! engine of a GPU reads and writes memory local to it. The pools count their pinned bytes
//! together as well (`pinned_usage`: the process totals of the counters).

use crate::error::{Error, Result};
use super::pinned_pool::{PinnedGroup, PinnedPool, PinnedStats};
use crate::sys::cuda::{self, MemoryKind};
use crate::sys::numa::NodeLookup;
use once_cell::sync::Lazy;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// Most bounce buffers alive at once per device: one per worker thread, plus callers reading
/// inline.
const MAX_BOUNCE_BUFFERS: usize = 2 * crate::settings::MAX_THREADS;

/// One device's pool and what the machine said about the device's node when it was made.
struct DevicePool {
    pool: PinnedPool,
    node: NodeLookup,
}

/// The pools by device ordinal; each is made once and lives as long as the process.
static POOLS: Lazy<RwLock<BTreeMap<i32, &'static DevicePool>>> = Lazy::new(|| RwLock::new(BTreeMap::new()));

/// Every pool's pinned bytes together.
static GROUP: Lazy<Arc<PinnedGroup>> = Lazy::new(|| Arc::new(PinnedGroup::default()));

fn device_pool(ordinal: i32, buffer_size: u64) -> &'static DevicePool {
    if let Some(pool) = POOLS.read().unwrap_or_else(|p| p.into_inner()).get(&ordinal) {
        return pool;
    }
    // Asked before the lock is taken: a driver call and a sysfs read.
    let node = cuda::device_numa_node(ordinal);
    let mut pools = POOLS.write().unwrap_or_else(|p| p.into_inner());
    pools.entry(ordinal).or_insert_with(|| {
        let place_on = match node {
            NodeLookup::Node(n) => Some(n),
            NodeLookup::Unknown(_) => None,
        };
        let pool = PinnedPool::placed(buffer_size as usize, MAX_BOUNCE_BUFFERS, place_on, Some(Arc::clone(&GROUP)));
        Box::leak(Box::new(DevicePool { pool, node }))
    })
}

/// Device `ordinal`'s pinned bounce buffers, resized to the current setting (buffers of an old
/// size are freed as they come back).
pub fn bounce_pool(ordinal: i32, buffer_size: u64) -> &'static PinnedPool {
    debug_assert!(buffer_size > 0);
    let pool = &device_pool(ordinal, buffer_size).pool;
    if pool.stats().buffer_size != buffer_size as usize {
        pool.set_buffer_size(buffer_size as usize);
    }
    pool
}

/// `bounce_pool` of the device that memory of `kind` belongs to.
///
/// Errors: `Internal` for host memory (no transfer of host memory takes a bounce buffer).
pub(crate) fn bounce_pool_for(kind: &MemoryKind, buffer_size: u64) -> Result<&'static PinnedPool> {
    let ordinal = kind.device_ordinal().ok_or_else(|| Error::Internal(format!("a bounce buffer was asked for host memory ({kind:?})")))?;
    Ok(bounce_pool(ordinal, buffer_size))
}

/// Pinned memory the library holds now and at most so far, every device's pool together (0, 0
/// before any device transfer).
pub(crate) fn pinned_usage() -> (u64, u64) {
    GROUP.usage()
}

/// Frees the idle bounce buffers of every device (KvikIO's `bounce_buffer_free`) and returns the
/// pinned bytes released. Buffers lent to a transfer in flight stay, and go back to their pool
/// afterwards; a later transfer pins new ones as it needs them.
pub(crate) fn free_idle_bounce_buffers() -> u64 {
    let pools = POOLS.read().unwrap_or_else(|p| p.into_inner());
    pools.values().map(|device| device.pool.clear()).sum()
}

/// Where a device's bounce buffers are placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On this NUMA node, every buffer so far.
    Node(u32),
    /// Not placed: the machine does not say which node the device is on (why, in words).
    NoNode(String),
    /// Asked for this node, and the kernel refused at least once (the last `errno`): those
    /// buffers are wherever their pages fell.
    Refused { node: u32, errno: i32 },
}

/// One device's bounce buffers: its ordinal, its pool's counters and their placement.
#[derive(Clone, Debug)]
pub struct DevicePinned {
    pub ordinal: i32,
    pub stats: PinnedStats,
    pub placement: Placement,
}

/// The bounce buffers of every device that has a pool, by ordinal.
pub fn device_pinned() -> Vec<DevicePinned> {
    let pools = POOLS.read().unwrap_or_else(|p| p.into_inner());
    pools
        .iter()
        .map(|(&ordinal, device)| {
            let stats = device.pool.stats();
            let placement = match (&device.node, stats.placement_refused) {
                (NodeLookup::Unknown(why), _) => Placement::NoNode(why.clone()),
                (&NodeLookup::Node(node), Some(errno)) => Placement::Refused { node, errno },
                (&NodeLookup::Node(node), None) => Placement::Node(node),
            };
            DevicePinned { ordinal, stats, placement }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_has_no_bounce_pool() {
        assert!(matches!(bounce_pool_for(&MemoryKind::Host, 4096), Err(Error::Internal(_))));
        assert!(matches!(bounce_pool_for(&MemoryKind::PinnedHost, 4096), Err(Error::Internal(_))));
    }

    #[test]
    fn each_device_has_its_own_pool_and_the_totals_start_at_zero() {
        // Ordinals no test machine has, so that no other test's pool is touched.
        let a = bounce_pool(1000, 4096) as *const PinnedPool;
        let b = bounce_pool(1001, 8192) as *const PinnedPool;
        assert_ne!(a, b);
        assert_eq!(bounce_pool(1000, 4096) as *const PinnedPool, a, "one pool per device");
        let kind = MemoryKind::Device { ordinal: 1001, context: None };
        assert_eq!(bounce_pool_for(&kind, 8192).unwrap() as *const PinnedPool, b);
        let pinned = device_pinned();
        let of = |ordinal| pinned.iter().find(|d| d.ordinal == ordinal).unwrap().clone();
        assert_eq!((of(1000).stats.buffer_size, of(1001).stats.buffer_size), (4096, 8192));
        if cuda::cuda().is_err() {
            // Without CUDA no bus id, so no node: said in words, nothing placed, nothing pinned.
            assert!(matches!(of(1000).placement, Placement::NoNode(ref why) if why.contains("no PCI bus id")), "{:?}", of(1000));
            assert_eq!(of(1000).stats.node, None);
            assert!(bounce_pool(1000, 4096).acquire().is_err());
            assert_eq!(pinned_usage(), (0, 0));
            assert_eq!(free_idle_bounce_buffers(), 0, "nothing pinned, nothing freed");
        }
    }
}
