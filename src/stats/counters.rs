//! The counters' types: which route served a task (`Route`, `PosixReason`), what it delivered
//! (`TaskOutcome`), and the fields of `gdsroute_stats` (`Counters`, declared in `abi`) with their
//! names in layout order, which the renderers (`render`) and the tests walk. cuFile's thirteen
//! per-GPU counters come from the one list in `sys::cufile` (`for_each_cufile_counter`).

use crate::abi::Counters;
use crate::sys::cufile::{PerGpuTotals, for_each_cufile_counter};

/// Which backend served a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Our POSIX backend (pread, plus a bounce-buffer copy for device memory).
    Posix(PosixReason),
    /// cuFile (`cuFileRead`).
    Cufile,
}

/// Why a task took the POSIX route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PosixReason {
    /// The destination is host memory (pageable or pinned); KvikIO never uses cuFile for it.
    HostMemory,
    /// A device request smaller than the GDS threshold.
    BelowThreshold,
    /// Compat mode ON.
    CompatOn,
    /// Compat mode AUTO and cuFile cannot serve this file (the handle records why).
    AutoFallback,
}

/// What one task delivered, as the counters take it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskOutcome {
    pub bytes: usize,
    /// Of `bytes`, copied straight from the registered page cache.
    pub mapped_bytes: usize,
    /// The task's first POSIX read had to wait for the disk (`posix::Delivered::not_cached`).
    pub not_cached: bool,
    /// Of `bytes`, read with direct I/O (`posix::Delivered::direct_bytes`).
    pub direct_bytes: usize,
}

/// `(offset, name, value)` of each named field of `$s`, a `$T`: the name and the value come from
/// one identifier, and the offset puts the field in its place in the layout (`in_layout_order`).
macro_rules! fields_of {
    ($s:expr, $T:ty: $($field:ident),* $(,)?) => {
        [$((std::mem::offset_of!($T, $field), stringify!($field), $s.$field)),*]
    };
}
pub(super) use fields_of;

/// For a counters struct `$T` that reports cuFile's per-GPU counters (`gdsroute_stats`,
/// `gdsroute_device_stats`): the copy of `PerGpuTotals` into its `cufile_*` fields and those
/// fields for `entries`, from the rows of `for_each_cufile_counter`.
macro_rules! cufile_fields {
    ([$T:ty] $(#[$doc:meta] $field:ident @ $offset:literal => $reported_as:ident,)*) => {
        impl $T {
            /// Writes cuFile's per-GPU counters (deltas since start or reset) into the
            /// `cufile_n_*`, `cufile_read_bytes` and `cufile_write_bytes_gpu` fields.
            pub fn set_cufile_counters(&mut self, totals: &PerGpuTotals) {
                $(self.$reported_as = totals.$field;)*
            }

            /// `(offset, name, value)` of those fields.
            fn cufile_fields(&self) -> [(usize, &'static str, u64); 13] {
                fields_of!(self, $T: $($reported_as),*)
            }
        }
    };
}
pub(super) use cufile_fields;

for_each_cufile_counter!(cufile_fields [Counters]);

/// `(name, value)` of every field given, sorted by offset: the layout order, whatever order the
/// parts list them in.
pub(super) fn in_layout_order(parts: &[&[(usize, &'static str, u64)]]) -> Vec<(&'static str, u64)> {
    let mut fields = parts.concat();
    fields.sort_by_key(|&(offset, _, _)| offset);
    fields.into_iter().map(|(_, name, value)| (name, value)).collect()
}

impl Counters {
    /// Size in bytes of the current layout.
    pub const SIZE: u64 = std::mem::size_of::<Counters>() as u64;

    /// Every field with its name, in layout order. The text and JSON renderers and the tests
    /// walk this one list.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        let ours = fields_of!(self, Counters:
            struct_size, calls, calls_failed, calls_short, bytes_requested, bytes_read,
            tasks, tasks_failed, task_bytes, cufile_tasks, cufile_bytes, cufile_stats_state,
            posix_tasks, posix_bytes, posix_tasks_host_memory, posix_tasks_below_threshold, posix_tasks_compat_on,
            posix_tasks_auto_fallback, posix_mapped_bytes, posix_tasks_not_cached, posix_direct_bytes,
            pinned_bytes, pinned_bytes_peak,
            page_cache_pinned_bytes, page_cache_pinned_bytes_peak, page_cache_registrations, page_cache_refusals,
            write_calls, write_calls_failed, bytes_written, write_tasks, write_tasks_failed,
            posix_write_tasks, posix_write_bytes, posix_direct_write_bytes, cufile_write_tasks, cufile_write_bytes,
            stream_calls_ordered, stream_calls_blocking_no_stream_wait, stream_calls_blocking_setting, stream_registrations_skipped,
            stream_calls_cufile_async, stream_registrations_cufile,
            buffer_registrations_cufile, buffer_registrations_skipped, buffer_registered_bytes,
            stream_calls_blocking_legacy_waits, stream_calls_relayed, relay_pinned_bytes,
        );
        in_layout_order(&[&ours, &self.cufile_fields()])
    }

    /// The fields held by a struct of `struct_size` bytes (whole fields only, at most the
    /// current layout), in layout order: a caller compiled against an older header has fewer.
    pub fn entries_held(&self, struct_size: u64) -> impl Iterator<Item = (&'static str, u64)> {
        let held = (struct_size.min(Self::SIZE) / 8) as usize;
        self.entries().into_iter().take(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_cover_the_whole_struct() {
        assert_eq!(Counters::SIZE as usize, Counters::default().entries().len() * 8);
        let names: Vec<&str> = Counters::default().entries().iter().map(|e| e.0).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
    }

    #[test]
    fn each_cufile_counter_lands_in_the_field_of_its_name() {
        let mut c = Counters::default();
        let totals = PerGpuTotals { n_total_reads: 1, n_nvfs_reads: 2, read_bytes: 3, n_p2p_writes: 4, write_bytes: 5, ..PerGpuTotals::default() };
        c.set_cufile_counters(&totals);
        let value = |name: &str| c.entries().into_iter().find(|(n, _)| *n == name).unwrap().1;
        let got = ["cufile_n_total_reads", "cufile_n_nvfs_reads", "cufile_read_bytes", "cufile_n_p2p_writes", "cufile_write_bytes_gpu"].map(value);
        assert_eq!(got, [1, 2, 3, 4, 5]);
        assert_eq!(c.entries().iter().map(|(_, v)| v).sum::<u64>(), 15, "nothing else written");
    }
}
