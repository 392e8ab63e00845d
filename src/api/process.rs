//! Process-wide state a caller asks about: the counters of every handle together with the pinned
//! memory, the registered page cache and cuFile's own statistics, gathered from their owners; and
//! the same per device (`device_counters`).
//!
//! The exit report (`api::report`) is built on `process_counters()`.

use crate::backend::cufile::gds;
use crate::backend::device::{self, Placement};
use crate::page_cache;
use crate::stats::{self, Counters, CufileStatsState, DeviceCounters, NumaPlacement};
use crate::sys::cuda;
use crate::sys::cufile::{PerGpuSnapshot, PerGpuTotals};
use std::collections::BTreeMap;

/// Begins, on a background thread, what the first device read needs process-wide: CUDA's
/// initialisation and, unless the compat mode setting is ON, the cuFile verdict with its driver
/// open; returns at once (`gdsroute_begin_device_setup`, whose doc says more). Loads libcuda and
/// libcufile on the calling thread. Errors only when a setting in the environment is invalid.
pub fn begin_device_setup() -> crate::Result<()> {
    super::report::arm();
    let compat_mode = crate::settings::global()?.compat_mode();
    gds::begin_in_background(compat_mode, gds::Preload::CudaAndCufile);
    Ok(())
}

/// Whether cuFile can serve device reads in this process under the compat mode setting, without
/// opening a file (KvikIO's `is_compat_mode_preferred()`, negated), and why not. Compat mode ON
/// answers at once and loads nothing. Otherwise the process half of the per-handle verdict runs,
/// in the README's order: CUDA, libcufile, AUTO's environment heuristics (under AUTO), and
/// `cuFileDriverOpen`. That opens cuFile's driver (0.4 to 0.5 s on the H200 machine, and cuFile's
/// threads) unless it is open already or opening in the background (`begin_device_setup`, which
/// this joins); the verdict is kept for the process. A file can still fail its own half
/// (`File::cufile_verdict`: the `O_DIRECT` open, `cuFileHandleRegister`).
pub fn cufile_usable() -> crate::Result<std::result::Result<(), gds::Unusable>> {
    let compat_mode = crate::settings::global()?.compat_mode();
    if compat_mode == crate::settings::CompatMode::On {
        return Ok(Err(gds::Unusable::compat_on()));
    }
    Ok(gds::process_for(compat_mode).map(|_| ()))
}

/// The process-wide counters with cuFile's, if cuFile is open.
pub fn process_counters() -> Counters {
    let mut counters = stats::global().snapshot();
    (counters.pinned_bytes, counters.pinned_bytes_peak) = device::pinned_usage();
    let page_cache = page_cache::usage();
    counters.page_cache_pinned_bytes = page_cache.pinned_bytes;
    counters.page_cache_pinned_bytes_peak = page_cache.pinned_bytes_peak;
    counters.page_cache_registrations = page_cache.registrations;
    counters.page_cache_refusals = page_cache.refusals;
    counters.buffer_registered_bytes = super::memory::registered_bytes();
    counters.relay_pinned_bytes = crate::sys::cuda::relay::pinned_bytes();
    if let Some(gds) = gds::opened() {
        let (state, deltas) = gds.per_gpu_deltas();
        counters.cufile_stats_state = state as u64;
        if let Some(deltas) = deltas {
            counters.set_cufile_counters(&deltas.total());
        }
    }
    counters
}

/// The process-wide counters of each device, ascending by ordinal: every device whose memory a
/// task read into or wrote from, that has bounce buffers, or that cuFile reports counters for
/// (its per-GPU entries matched to devices by UUID; an entry matching no device of this process
/// is left out, and counts in `process_counters` only). The task counters are one snapshot
/// (`StatsCell::snapshot_with_devices`); the bounce buffers and cuFile's counters are read next
/// to it.
pub fn device_counters() -> Vec<DeviceCounters> {
    let (_, tasks) = stats::global().snapshot_with_devices();
    let mut devices: BTreeMap<i32, DeviceCounters> = tasks.into_iter().map(|d| (d.device_ordinal as i32, d)).collect();
    for pinned in device::device_pinned() {
        let d = devices.entry(pinned.ordinal).or_insert_with(|| DeviceCounters::of(pinned.ordinal));
        d.pinned_bytes = pinned.stats.bytes_pinned;
        d.pinned_bytes_peak = pinned.stats.peak_bytes_pinned;
        (d.bounce_numa_placement, d.bounce_numa_node) = match pinned.placement {
            Placement::Node(node) => (NumaPlacement::Placed as u64, node as u64),
            Placement::NoNode(_) => (NumaPlacement::NodeUnknown as u64, 0),
            Placement::Refused { node, .. } => (NumaPlacement::Refused as u64, node as u64),
        };
    }
    let (state, per_gpu) = match gds::opened() {
        Some(gds) => gds.per_gpu_deltas(),
        None => (CufileStatsState::NotLoaded, None),
    };
    if let Some(per_gpu) = per_gpu {
        // cuFile is open, so CUDA was initialised before it: asking for the UUIDs starts nothing.
        for (ordinal, totals) in cufile_by_device(&per_gpu, &device_uuids()) {
            devices.entry(ordinal).or_insert_with(|| DeviceCounters::of(ordinal)).set_cufile_counters(&totals);
        }
    }
    for d in devices.values_mut() {
        d.cufile_stats_state = state as u64;
    }
    devices.into_values().collect()
}

/// The UUID of every device of this process, to its ordinal.
fn device_uuids() -> BTreeMap<[u8; 16], i32> {
    let count = cuda::device_count().unwrap_or(0);
    (0..count).filter_map(|ordinal| cuda::device_uuid(ordinal).ok().map(|uuid| (uuid, ordinal))).collect()
}

/// cuFile's per-GPU entries by device ordinal, matched by UUID (`uuids`: each device's UUID to
/// its ordinal). Entries whose UUID names no device of the process are left out; entries of one
/// UUID are added up.
pub fn cufile_by_device(per_gpu: &PerGpuSnapshot, uuids: &BTreeMap<[u8; 16], i32>) -> BTreeMap<i32, PerGpuTotals> {
    let mut by_device: BTreeMap<i32, PerGpuSnapshot> = BTreeMap::new();
    for gpu in &per_gpu.0 {
        if let Some(&ordinal) = uuids.get(&gpu.uuid) {
            by_device.entry(ordinal).or_default().0.push(*gpu);
        }
    }
    by_device.into_iter().map(|(ordinal, entries)| (ordinal, entries.total())).collect()
}

/// Resets our process-wide counters, what the exit report measures beside them (time in flight,
/// files fallen back) and the cuFile baseline.
pub fn reset_process_counters() {
    stats::global().reset();
    stats::activity::reset();
    if let Some(gds) = gds::opened() {
        gds.reset_counters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::cufile::GpuCounters;

    #[test]
    fn two_entries_of_one_uuid_add_up() {
        let gpu = |id: u8, reads| GpuCounters { uuid: [id; 16], totals: PerGpuTotals { n_total_reads: reads, ..Default::default() } };
        let uuids = [([1; 16], 0)].into_iter().collect();
        let by_device = cufile_by_device(&PerGpuSnapshot(vec![gpu(1, 2), gpu(2, 9), gpu(1, 3)]), &uuids);
        assert_eq!(by_device.len(), 1);
        assert_eq!(by_device[&0].n_total_reads, 5);
    }
}
