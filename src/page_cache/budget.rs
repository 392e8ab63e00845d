//! The process-wide limit on page-cache bytes pinned by the registered page cache, and its
//! figures for the statistics.

use std::sync::atomic::{AtomicU64, Ordering};

static PINNED_BYTES: AtomicU64 = AtomicU64::new(0);
static PINNED_BYTES_PEAK: AtomicU64 = AtomicU64::new(0);
static REGISTRATIONS: AtomicU64 = AtomicU64::new(0);
static REFUSALS: AtomicU64 = AtomicU64::new(0);

/// Process-wide figures for the statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Page-cache bytes pinned now.
    pub pinned_bytes: u64,
    /// The most pinned at once.
    pub pinned_bytes_peak: u64,
    /// Windows registered so far.
    pub registrations: u64,
    /// Registrations that failed (those windows stay on the bounce route).
    pub refusals: u64,
}

/// The process-wide figures now.
pub fn usage() -> Usage {
    Usage {
        pinned_bytes: PINNED_BYTES.load(Ordering::Relaxed),
        pinned_bytes_peak: PINNED_BYTES_PEAK.load(Ordering::Relaxed),
        registrations: REGISTRATIONS.load(Ordering::Relaxed),
        refusals: REFUSALS.load(Ordering::Relaxed),
    }
}

pub(super) fn count_registration(ok: bool) {
    let counter = if ok { &REGISTRATIONS } else { &REFUSALS };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Default limit: an eighth of the memory this process may use (physical memory, or the cgroup's
/// limit when lower: pinned page cache is charged to the container and cannot be reclaimed), at
/// most 16 GiB.
pub(crate) fn default_pin_max() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    let physical = (pages.max(0) as u64).saturating_mul(page_size());
    let usable = cgroup_memory_limit().map_or(physical, |limit| limit.min(physical));
    (usable / 8).min(16 << 30)
}

/// The lowest memory limit on this process's cgroup and its ancestors (v2 `memory.max`, v1
/// `memory.limit_in_bytes`), when there is one (`sys::cgroup`).
fn cgroup_memory_limit() -> Option<u64> {
    use crate::sys::cgroup::{Hierarchy, group_and_ancestors};
    let v2 = group_and_ancestors(Hierarchy::V2).into_iter().map(|dir| dir.join("memory.max"));
    let v1 = group_and_ancestors(Hierarchy::V1("memory")).into_iter().map(|dir| dir.join("memory.limit_in_bytes"));
    v2.chain(v1)
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .filter_map(|text| text.trim().parse::<u64>().ok())
        .min()
}

/// The system's page size (registration and mappings work on whole pages).
pub(super) fn page_size() -> u64 {
    static PAGE: once_cell::sync::Lazy<u64> = once_cell::sync::Lazy::new(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 { page as u64 } else { 4096 }
    });
    *PAGE
}

/// A share of the limit, given back on drop.
pub(super) struct Reservation(u64);

impl Reservation {
    /// Takes `bytes` if the pinned total stays within `limit`.
    pub(super) fn take(bytes: u64, limit: u64) -> Option<Reservation> {
        PINNED_BYTES
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| now.checked_add(bytes).filter(|&n| n <= limit))
            .ok()
            .map(|before| {
                PINNED_BYTES_PEAK.fetch_max(before + bytes, Ordering::Relaxed);
                Reservation(bytes)
            })
    }

    /// A share of nothing (tests).
    #[cfg(test)]
    pub(super) fn none() -> Reservation {
        Reservation(0)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        PINNED_BYTES.fetch_sub(self.0, Ordering::AcqRel);
    }
}

/// Tests that reason about the process-wide total run one at a time.
#[cfg(test)]
pub(super) static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_exact() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let base = PINNED_BYTES.load(Ordering::Relaxed);
        let a = Reservation::take(100, base + 150).unwrap();
        assert!(Reservation::take(100, base + 150).is_none());
        drop(a);
        assert!(Reservation::take(100, base + 150).is_some());
    }

    #[test]
    fn default_limit_is_bounded() {
        let d = default_pin_max();
        assert!(d > 0 && d <= 16 << 30, "{d}");
        assert!(page_size() >= 4096 && page_size().is_power_of_two());
    }
}
