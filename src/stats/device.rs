//! The counters of one device (`DeviceCounters`, `gdsroute_device_stats`): what its tasks moved,
//! by route and direction, and their rendering as text or JSON, one device or a list of them.
//! The process-wide cell (`stats::global`) keeps them beside its totals, under the same lock.

use super::counters::{cufile_fields, fields_of, in_layout_order};
use super::counting::{count_in_route, count_read_task, count_write_task};
use super::render::{counter_lines, human_bytes, json_object, plural};
use super::{Direction, PosixReason, Route, TaskOutcome};
use crate::abi::{CufileStatsState, NumaPlacement};
use crate::sys::cufile::{PerGpuTotals, for_each_cufile_counter};
pub use crate::abi::DeviceCounters;

for_each_cufile_counter!(cufile_fields [DeviceCounters]);

impl DeviceCounters {
    /// Size in bytes of the current layout.
    pub const SIZE: u64 = std::mem::size_of::<DeviceCounters>() as u64;

    /// Zeroed counters of device `ordinal`, `struct_size` set.
    pub fn of(ordinal: i32) -> DeviceCounters {
        DeviceCounters { struct_size: Self::SIZE, device_ordinal: ordinal as u64, ..DeviceCounters::default() }
    }

    /// Every field with its name, in layout order; the renderers and the tests walk this list.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        let ours = fields_of!(self, DeviceCounters:
            struct_size, device_ordinal, tasks, tasks_failed, task_bytes,
            posix_tasks, posix_bytes, posix_tasks_below_threshold, posix_tasks_compat_on, posix_tasks_auto_fallback,
            posix_mapped_bytes, posix_tasks_not_cached, posix_direct_bytes, cufile_tasks, cufile_bytes,
            write_tasks, write_tasks_failed, posix_write_tasks, posix_write_bytes, posix_direct_write_bytes,
            cufile_write_tasks, cufile_write_bytes,
            pinned_bytes, pinned_bytes_peak, bounce_numa_placement, bounce_numa_node, cufile_stats_state,
        );
        in_layout_order(&[&ours, &self.cufile_fields()])
    }

    /// The fields held by a struct of `struct_size` bytes (whole fields, at most the layout).
    pub fn entries_held(&self, struct_size: u64) -> impl Iterator<Item = (&'static str, u64)> {
        let held = (struct_size.min(Self::SIZE) / 8) as usize;
        self.entries().into_iter().take(held)
    }

    /// Counts one finished task of `direction` into (or from) this device's memory.
    pub(super) fn add_task(&mut self, direction: Direction, route: Route, outcome: &TaskOutcome, failed: bool) {
        match direction {
            // Host memory is never attributed to a device (record_task).
            Direction::Read => count_read_task!(self, route, outcome, failed, host_memory: {}),
            Direction::Write => count_write_task!(self, route, outcome, failed),
        }
    }

    /// Zeroes the counters of tasks, keeping the device (and what describes its buffers, which
    /// the snapshot fills from their owner).
    pub(super) fn reset(&mut self) {
        *self = DeviceCounters { struct_size: self.struct_size, device_ordinal: self.device_ordinal, ..DeviceCounters::default() };
    }

    /// One line in words for a struct of `struct_size` bytes, e.g. "device 1: 12 read tasks,
    /// 48 MiB, 8 through the POSIX backend and 4 through cuFile; 3 write tasks, 12 MiB; bounce
    /// buffers 68 MiB on NUMA node 1; cuFile for this GPU: n=4 nvfs=4 posix=0"; only the parts
    /// whose fields the struct holds.
    pub fn summary_within(&self, struct_size: u64) -> String {
        let held = |field: &str| self.entries_held(struct_size).any(|(name, _)| name == field);
        let mut out = format!("device {}:", self.device_ordinal);
        let mut parts: Vec<String> = Vec::new();
        if held("cufile_bytes") {
            parts.push(if self.tasks == 0 {
                "no read tasks".to_string()
            } else {
                let mut reads = format!("{}, {}", plural(self.tasks, "read task"), human_bytes(self.task_bytes));
                if self.tasks_failed > 0 {
                    reads.push_str(&format!(", {} failed", self.tasks_failed));
                }
                match (self.posix_tasks, self.cufile_tasks) {
                    (_, 0) => reads.push_str(", all through the POSIX backend"),
                    (0, _) => reads.push_str(", all through cuFile"),
                    (p, c) => reads.push_str(&format!(", {p} through the POSIX backend and {c} through cuFile")),
                }
                reads
            });
        }
        if held("cufile_write_bytes") && self.write_tasks > 0 {
            let mut writes = format!("{}, {}", plural(self.write_tasks, "write task"), human_bytes(self.posix_write_bytes + self.cufile_write_bytes));
            if self.write_tasks_failed > 0 {
                writes.push_str(&format!(", {} failed", self.write_tasks_failed));
            }
            parts.push(writes);
        }
        if held("bounce_numa_node") {
            let placement = self.bounce_numa_placement;
            parts.push(match placement {
                p if p == NumaPlacement::NoBuffers as u64 => "no bounce buffers".to_string(),
                p if p == NumaPlacement::Placed as u64 => {
                    format!("bounce buffers {} pinned on NUMA node {}", human_bytes(self.pinned_bytes), self.bounce_numa_node)
                }
                p => format!("bounce buffers {} pinned, {}", human_bytes(self.pinned_bytes), NumaPlacement::name_of(p)),
            });
        }
        if held("cufile_write_bytes_gpu") && self.cufile_stats_state == CufileStatsState::Active as u64 {
            parts.push(format!(
                "cuFile for this GPU: n={} nvfs={} posix={} p2p={}, writes n={} nvfs={} posix={}",
                self.cufile_n_total_reads,
                self.cufile_n_nvfs_reads,
                self.cufile_n_posix_reads,
                self.cufile_n_p2p_reads,
                self.cufile_n_total_writes,
                self.cufile_n_nvfs_writes,
                self.cufile_n_posix_writes
            ));
        }
        if !parts.is_empty() {
            out.push(' ');
            out.push_str(&parts.join("; "));
        }
        out
    }

    /// Text for people for a struct of `struct_size` bytes: the summary line, then `  name
    /// value` for each counter that is not 0 (states with their meaning), then how many are 0.
    pub fn text_within(&self, struct_size: u64) -> String {
        let mut out = self.summary_within(struct_size);
        out.push('\n');
        let counters: Vec<(&str, u64)> = self.entries_held(struct_size).filter(|(name, _)| !matches!(*name, "struct_size" | "device_ordinal")).collect();
        counter_lines(&mut out, &counters, "  ");
        out
    }

    /// One JSON object with every field a struct of `struct_size` bytes holds.
    pub fn json_within(&self, struct_size: u64) -> String {
        json_object(self.entries_held(struct_size))
    }
}

/// Text for people of a list of devices: one block per device (`text_within` of each entry's
/// own `struct_size`), or a line saying there are none.
pub fn render_devices_text(devices: &[DeviceCounters]) -> String {
    if devices.is_empty() {
        return "no device counters (no transfer into or out of device memory, and cuFile reports no GPU)\n".to_string();
    }
    devices.iter().map(|d| d.text_within(d.struct_size)).collect()
}

/// A JSON array with one object per device (`json_within` of each entry's own `struct_size`).
pub fn render_devices_json(devices: &[DeviceCounters]) -> String {
    let objects: Vec<String> = devices.iter().map(|d| d.json_within(d.struct_size)).collect();
    format!("[{}]", objects.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_cover_the_whole_struct_once_each() {
        let names: Vec<&str> = DeviceCounters::default().entries().iter().map(|e| e.0).collect();
        assert_eq!(DeviceCounters::SIZE as usize, names.len() * 8);
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        assert_eq!(&names[..2], ["struct_size", "device_ordinal"]);
    }

    #[test]
    fn each_cufile_counter_lands_in_the_device_field_of_its_name() {
        let t = PerGpuTotals {
            n_total_reads: 1,
            n_nvfs_reads: 2,
            n_posix_reads: 3,
            n_p2p_reads: 4,
            n_unaligned_reads: 5,
            n_reads_err: 6,
            read_bytes: 7,
            n_total_writes: 8,
            n_nvfs_writes: 9,
            n_posix_writes: 10,
            n_p2p_writes: 11,
            n_writes_err: 12,
            write_bytes: 13,
        };
        let mut d = DeviceCounters::of(0);
        d.set_cufile_counters(&t);
        let cufile: Vec<(&str, u64)> = d.entries().into_iter().filter(|(name, _)| name.starts_with("cufile_n_") || name.starts_with("cufile_read") || *name == "cufile_write_bytes_gpu").collect();
        assert_eq!(
            cufile,
            [
                ("cufile_n_total_reads", 1),
                ("cufile_n_nvfs_reads", 2),
                ("cufile_n_posix_reads", 3),
                ("cufile_n_p2p_reads", 4),
                ("cufile_n_unaligned_reads", 5),
                ("cufile_n_reads_err", 6),
                ("cufile_read_bytes", 7),
                ("cufile_n_total_writes", 8),
                ("cufile_n_nvfs_writes", 9),
                ("cufile_n_posix_writes", 10),
                ("cufile_n_p2p_writes", 11),
                ("cufile_n_writes_err", 12),
                ("cufile_write_bytes_gpu", 13),
            ]
        );
    }

    fn busy_device() -> DeviceCounters {
        let mut d = DeviceCounters::of(1);
        let task = |bytes| TaskOutcome { bytes, ..TaskOutcome::default() };
        d.add_task(Direction::Read, Route::Posix(PosixReason::CompatOn), &TaskOutcome { bytes: 4 << 20, mapped_bytes: 1 << 20, not_cached: true, direct_bytes: 0 }, false);
        d.add_task(Direction::Read, Route::Posix(PosixReason::BelowThreshold), &task(1 << 20), false);
        d.add_task(Direction::Read, Route::Cufile, &task(8 << 20), false);
        d.add_task(Direction::Read, Route::Posix(PosixReason::AutoFallback), &task(0), true);
        d.add_task(Direction::Write, Route::Posix(PosixReason::CompatOn), &task(4096), false);
        d.add_task(Direction::Write, Route::Cufile, &task(4096), true);
        d
    }

    #[test]
    fn tasks_are_counted_by_route_reason_and_direction() {
        let d = busy_device();
        assert_eq!((d.tasks, d.tasks_failed, d.task_bytes), (4, 1, 13 << 20));
        assert_eq!((d.posix_tasks, d.posix_bytes, d.cufile_tasks, d.cufile_bytes), (3, 5 << 20, 1, 8 << 20));
        assert_eq!((d.posix_tasks_compat_on, d.posix_tasks_below_threshold, d.posix_tasks_auto_fallback), (1, 1, 1));
        assert_eq!((d.posix_mapped_bytes, d.posix_tasks_not_cached), (1 << 20, 1));
        assert_eq!((d.write_tasks, d.write_tasks_failed, d.posix_write_tasks, d.posix_write_bytes, d.cufile_write_tasks, d.cufile_write_bytes), (2, 1, 1, 4096, 1, 0));
        let mut r = d;
        r.reset();
        assert_eq!(r, DeviceCounters::of(1), "a reset keeps the device and zeroes its counts");
    }

    #[test]
    fn text_says_what_moved_and_where_the_buffers_are() {
        let mut d = busy_device();
        d.pinned_bytes = 8 << 20;
        d.bounce_numa_placement = NumaPlacement::Placed as u64;
        d.bounce_numa_node = 1;
        let text = d.full_text();
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            "device 1: 4 read tasks, 13 MiB, 1 failed, 3 through the POSIX backend and 1 through cuFile; 2 write tasks, 4 KiB, 1 failed; \
             bounce buffers 8 MiB pinned on NUMA node 1"
        );
        assert!(text.contains("\n  bounce_numa_placement        1 (placed)\n"), "{text}");
        assert!(!text.contains("device_ordinal"), "the ordinal is in the summary: {text}");
        let nonzero = d.entries().iter().filter(|(n, v)| *v != 0 && !matches!(*n, "struct_size" | "device_ordinal")).count();
        assert_eq!(text.lines().count(), 1 + nonzero + 1, "{text}");
        d.bounce_numa_placement = NumaPlacement::NodeUnknown as u64;
        assert!(d.full_text().lines().next().unwrap().ends_with("bounce buffers 8 MiB pinned, not placed: the machine does not say the device's NUMA node"));
        d.cufile_stats_state = CufileStatsState::Active as u64;
        d.cufile_n_total_reads = 1;
        d.cufile_n_posix_reads = 1;
        assert!(d.full_text().lines().next().unwrap().ends_with("; cuFile for this GPU: n=1 nvfs=0 posix=1 p2p=0, writes n=0 nvfs=0 posix=0"));
    }

    #[test]
    fn rendering_stops_at_each_entrys_struct_size() {
        let mut d = busy_device();
        d.struct_size = 24;
        assert_eq!(render_devices_json(&[d]), format!("[{{\"struct_size\":24,\"device_ordinal\":1,\"tasks\":4}}]"));
        // 24 bytes hold no route field: the summary names the device only.
        assert_eq!(render_devices_text(&[d]), "device 1:\n  tasks                        4\n");
        let full = busy_device();
        let json = render_devices_json(&[full, DeviceCounters::of(3)]);
        assert_eq!(json.matches("\"struct_size\":").count(), 2);
        assert_eq!(json.matches(':').count(), 2 * full.entries().len(), "{json}");
        assert!(json.starts_with('[') && json.ends_with(']') && json.contains("},{\"struct_size\""), "{json}");
        assert_eq!(render_devices_json(&[]), "[]");
        assert!(render_devices_text(&[]).starts_with("no device counters"));
        assert!(render_devices_text(&[DeviceCounters::of(3)]).starts_with("device 3: no read tasks; no bounce buffers\n"));
    }

    impl DeviceCounters {
        fn full_text(&self) -> String {
            self.text_within(Self::SIZE)
        }
    }
}
