//! Process-wide state a caller asks about: the counters of every handle together with the pinned
//! memory, the registered page cache and cuFile's own statistics, gathered from their owners.

use crate::backend::cufile::gds;
use crate::backend::device;
use crate::page_cache;
use crate::stats::{self, Counters};

/// The process-wide counters with cuFile's, if cuFile is open.
pub fn process_counters() -> Counters {
    let mut counters = stats::global().snapshot();
    (counters.pinned_bytes, counters.pinned_bytes_peak) = device::pinned_usage();
    let page_cache = page_cache::usage();
    counters.page_cache_pinned_bytes = page_cache.pinned_bytes;
    counters.page_cache_pinned_bytes_peak = page_cache.pinned_bytes_peak;
    counters.page_cache_registrations = page_cache.registrations;
    counters.page_cache_refusals = page_cache.refusals;
    if let Some(gds) = gds::opened() {
        gds.fill_counters(&mut counters);
    }
    counters
}

/// Resets our process-wide counters and the cuFile baseline.
pub fn reset_process_counters() {
    stats::global().reset();
    if let Some(gds) = gds::opened() {
        gds.reset_counters();
    }
}
