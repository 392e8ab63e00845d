//! Route counters: how many logical calls, tasks and bytes went through each route, and why the
//! POSIX backend ran. Counted process-wide and per file handle, and process-wide per device
//! (`device`). Each task's contribution is applied under one lock, so a snapshot taken while
//! reads run is consistent: tasks equal the sum of the routes' tasks, bytes the sum of the
//! routes' bytes, and the tasks of device memory the sum over devices.

mod device;

pub use crate::direction::Direction;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
pub use crate::abi::{Counters, CufileStatsState, NumaPlacement};
pub use device::{DeviceCounters, render_devices_json, render_devices_text};

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


impl CufileStatsState {
    /// The state's meaning in a few words, for a `cufile_stats_state` value.
    pub fn name_of(value: u64) -> &'static str {
        match value {
            v if v == Self::NotLoaded as u64 => "cuFile not loaded",
            v if v == Self::ApiMissing as u64 => "no cuFile statistics API",
            v if v == Self::Active as u64 => "live",
            v if v == Self::ProcessWideOnly as u64 => "process-wide only",
            v if v == Self::Disabled as u64 => "collection disabled",
            _ => "unknown",
        }
    }
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


/// Fields (from the start of the layout) the summary line reads: up to `cufile_stats_state`.
const SUMMARY_FIELDS: usize = 18;
/// Fields up to `cufile_n_reads_err`, which the per-GPU line reads.
const CUFILE_FIELDS: usize = 24;

fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Bytes in binary units: "512 bytes", "4 KiB", "1.5 MiB", "128 MiB".
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return plural(n, "byte");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 || value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

impl Counters {
    /// Size in bytes of the current layout.
    pub const SIZE: u64 = std::mem::size_of::<Counters>() as u64;

    /// Every field with its name, in layout order. The text and JSON renderers and the tests
    /// walk this one list.
    pub fn entries(&self) -> [(&'static str, u64); 50] {
        [
            ("struct_size", self.struct_size),
            ("calls", self.calls),
            ("calls_failed", self.calls_failed),
            ("calls_short", self.calls_short),
            ("bytes_requested", self.bytes_requested),
            ("bytes_read", self.bytes_read),
            ("tasks", self.tasks),
            ("tasks_failed", self.tasks_failed),
            ("task_bytes", self.task_bytes),
            ("posix_tasks", self.posix_tasks),
            ("posix_bytes", self.posix_bytes),
            ("posix_tasks_host_memory", self.posix_tasks_host_memory),
            ("posix_tasks_below_threshold", self.posix_tasks_below_threshold),
            ("posix_tasks_compat_on", self.posix_tasks_compat_on),
            ("posix_tasks_auto_fallback", self.posix_tasks_auto_fallback),
            ("cufile_tasks", self.cufile_tasks),
            ("cufile_bytes", self.cufile_bytes),
            ("cufile_stats_state", self.cufile_stats_state),
            ("cufile_n_total_reads", self.cufile_n_total_reads),
            ("cufile_n_nvfs_reads", self.cufile_n_nvfs_reads),
            ("cufile_n_posix_reads", self.cufile_n_posix_reads),
            ("cufile_n_p2p_reads", self.cufile_n_p2p_reads),
            ("cufile_n_unaligned_reads", self.cufile_n_unaligned_reads),
            ("cufile_n_reads_err", self.cufile_n_reads_err),
            ("cufile_read_bytes", self.cufile_read_bytes),
            ("pinned_bytes", self.pinned_bytes),
            ("pinned_bytes_peak", self.pinned_bytes_peak),
            ("posix_mapped_bytes", self.posix_mapped_bytes),
            ("page_cache_pinned_bytes", self.page_cache_pinned_bytes),
            ("page_cache_pinned_bytes_peak", self.page_cache_pinned_bytes_peak),
            ("page_cache_registrations", self.page_cache_registrations),
            ("page_cache_refusals", self.page_cache_refusals),
            ("posix_tasks_not_cached", self.posix_tasks_not_cached),
            ("posix_direct_bytes", self.posix_direct_bytes),
            ("write_calls", self.write_calls),
            ("write_calls_failed", self.write_calls_failed),
            ("bytes_written", self.bytes_written),
            ("write_tasks", self.write_tasks),
            ("write_tasks_failed", self.write_tasks_failed),
            ("posix_write_tasks", self.posix_write_tasks),
            ("posix_write_bytes", self.posix_write_bytes),
            ("cufile_write_tasks", self.cufile_write_tasks),
            ("cufile_write_bytes", self.cufile_write_bytes),
            ("cufile_n_total_writes", self.cufile_n_total_writes),
            ("cufile_n_nvfs_writes", self.cufile_n_nvfs_writes),
            ("cufile_n_posix_writes", self.cufile_n_posix_writes),
            ("cufile_n_p2p_writes", self.cufile_n_p2p_writes),
            ("cufile_n_writes_err", self.cufile_n_writes_err),
            ("cufile_write_bytes_gpu", self.cufile_write_bytes_gpu),
            ("posix_direct_write_bytes", self.posix_direct_write_bytes),
        ]
    }

    /// The fields held by a struct of `struct_size` bytes (whole fields only, at most the
    /// current layout), in layout order: a caller compiled against an older header has fewer.
    pub fn entries_held(&self, struct_size: u64) -> impl Iterator<Item = (&'static str, u64)> {
        let held = (struct_size.min(Self::SIZE) / 8) as usize;
        self.entries().into_iter().take(held)
    }

    /// Text for people: a summary in words (`summary`), then `name value` for each counter that
    /// is not 0, then how many are 0, and cuFile's per-GPU counters on one line when they are
    /// live. Only the fields a struct of `struct_size` bytes holds are shown; `struct_size` itself
    /// is not (JSON has every field).
    pub fn text_within(&self, struct_size: u64) -> String {
        let held: Vec<(&str, u64)> = self.entries_held(struct_size).collect();
        let mut out = String::new();
        if held.len() >= SUMMARY_FIELDS {
            out.push_str(&self.summary());
            out.push('\n');
        }
        let counters = held.iter().filter(|(name, _)| *name != "struct_size");
        let zeros = counters.clone().filter(|(_, v)| *v == 0).count();
        for (name, value) in counters.filter(|(_, v)| *v != 0) {
            let state = (*name == "cufile_stats_state").then(|| CufileStatsState::name_of(*value));
            match state {
                Some(state) => out.push_str(&format!("{name:<28} {value} ({state})\n")),
                None => out.push_str(&format!("{name:<28} {value}\n")),
            }
        }
        if zeros > 0 {
            out.push_str(&format!("({zeros} other counters are 0; the JSON format lists every field)\n"));
        }
        if held.len() >= CUFILE_FIELDS && self.cufile_stats_state == CufileStatsState::Active as u64 {
            out.push_str(&format!(
                "cufile per-GPU: n={} nvfs={} posix={} p2p={} unaligned={} err={}\n",
                self.cufile_n_total_reads,
                self.cufile_n_nvfs_reads,
                self.cufile_n_posix_reads,
                self.cufile_n_p2p_reads,
                self.cufile_n_unaligned_reads,
                self.cufile_n_reads_err
            ));
        }
        out
    }

    /// One line in words: reads, bytes, tasks, which route(s) the tasks took and why, and whether
    /// cuFile was considered, e.g. "2 reads, 128 MiB, 17 tasks, all through the POSIX backend:
    /// host memory; cuFile not considered".
    pub fn summary(&self) -> String {
        let reads = self.read_summary();
        if self.write_calls == 0 && self.write_tasks == 0 {
            return reads;
        }
        let mut writes = format!("{}, {}, {}", plural(self.write_calls, "write"), human_bytes(self.bytes_written), plural(self.write_tasks, "write task"));
        if self.write_calls_failed > 0 {
            writes.push_str(&format!(", {} failed", self.write_calls_failed));
        }
        match (self.posix_write_tasks, self.cufile_write_tasks) {
            (0, 0) => {}
            (_, 0) => writes.push_str(", all through the POSIX backend"),
            (0, _) => writes.push_str(", all through cuFile"),
            (p, c) => writes.push_str(&format!(", {c} through cuFile and {p} through the POSIX backend")),
        }
        format!("{reads}; {writes}")
    }

    /// The reads' part of `summary`.
    fn read_summary(&self) -> String {
        if self.calls == 0 && self.tasks == 0 {
            return "no reads".to_string();
        }
        let mut out = format!("{}, {}, {}", plural(self.calls, "read"), human_bytes(self.bytes_read), plural(self.tasks, "task"));
        if self.calls_failed > 0 {
            out.push_str(&format!(", {} failed", self.calls_failed));
        }
        if self.calls_short > 0 {
            out.push_str(&format!(", {} short (end of file)", self.calls_short));
        }
        let reasons: Vec<(u64, &str)> = [
            (self.posix_tasks_host_memory, "host memory"),
            (self.posix_tasks_below_threshold, "device requests below the GDS threshold"),
            (self.posix_tasks_compat_on, "compat mode ON"),
            (self.posix_tasks_auto_fallback, "cuFile cannot serve the file (AUTO fallback)"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .collect();
        let why = match reasons.as_slice() {
            [(_, only)] => only.to_string(),
            several => several.iter().map(|(n, what)| format!("{what} {n}")).collect::<Vec<_>>().join(", "),
        };
        let cufile_route = if self.cufile_stats_state == CufileStatsState::Active as u64 && self.cufile_n_total_reads > 0 {
            format!(" (cuFile's own route: nvfs {}, posix {}, of {} reads)", self.cufile_n_nvfs_reads, self.cufile_n_posix_reads, self.cufile_n_total_reads)
        } else {
            String::new()
        };
        match (self.posix_tasks, self.cufile_tasks) {
            (0, 0) => {}
            (_, 0) => out.push_str(&format!(", all through the POSIX backend: {why}")),
            (0, _) => out.push_str(&format!(", all through cuFile{cufile_route}")),
            (p, c) => out.push_str(&format!(", {c} through cuFile{cufile_route} and {p} through the POSIX backend: {why}")),
        }
        if self.cufile_tasks == 0 && self.posix_tasks > 0 {
            out.push_str(if self.posix_tasks_auto_fallback > 0 {
                "; cuFile was tried and cannot serve the file (gdsroute_file_cufile_verdict says why)"
            } else {
                "; cuFile not considered"
            });
        }
        out
    }

    /// `text_within` of the whole struct.
    pub fn to_text(&self) -> String {
        self.text_within(Self::SIZE)
    }

    /// `json_within` of the whole struct: one JSON object with every field.
    pub fn to_json(&self) -> String {
        self.json_within(Self::SIZE)
    }

    /// One JSON object with every field a struct of `struct_size` bytes holds.
    pub fn json_within(&self, struct_size: u64) -> String {
        let body: Vec<String> = self.entries_held(struct_size).map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    }

    fn add_task(&mut self, route: Route, outcome: &TaskOutcome, failed: bool) {
        count_read_task!(self, route, outcome, failed, host_memory: { self.posix_tasks_host_memory += 1 });
    }

    fn add_write_task(&mut self, route: Route, outcome: &TaskOutcome, failed: bool) {
        count_write_task!(self, route, outcome, failed);
    }

    fn add_write_call(&mut self, delivered: u64, failed: bool) {
        self.write_calls += 1;
        self.write_calls_failed += failed as u64;
        if !failed {
            self.bytes_written += delivered;
        }
    }

    fn add_call_of(&mut self, direction: Direction, requested: u64, delivered: u64, failed: bool) {
        match direction {
            Direction::Read => self.add_call(requested, delivered, failed),
            Direction::Write => self.add_write_call(delivered, failed),
        }
    }

    fn add_call(&mut self, requested: u64, delivered: u64, failed: bool) {
        self.calls += 1;
        self.calls_failed += failed as u64;
        self.calls_short += (!failed && delivered < requested) as u64;
        self.bytes_requested = self.bytes_requested.saturating_add(requested); // caller-chosen sizes: up to 2^63 each
        self.bytes_read += delivered;
    }
}

/// The counters one lock guards: the totals, and (process-wide only) each device's.
#[derive(Default)]
struct Cells {
    totals: Counters,
    /// Devices whose memory a task read into or wrote from, by ordinal; kept (zeroed) by a reset,
    /// so that the list only grows.
    devices: BTreeMap<i32, DeviceCounters>,
}

impl Cells {
    fn device(&mut self, ordinal: i32) -> &mut DeviceCounters {
        self.devices.entry(ordinal).or_insert_with(|| DeviceCounters::of(ordinal))
    }
}

/// One read task's contribution to a counters struct: `Counters` (process, handle) and
/// `DeviceCounters` carry these fields under the same names, so one rule serves both (a macro, as
/// the two are distinct `#[repr(C)]` layouts). `host_memory` counts a host-memory task (a device
/// never sees one).
macro_rules! count_read_task {
    ($c:ident, $route:expr, $outcome:expr, $failed:expr, host_memory: $host_memory:block) => {{
        let (route, outcome, failed): (Route, &TaskOutcome, bool) = ($route, $outcome, $failed);
        let bytes = outcome.bytes as u64;
        $c.tasks += 1;
        $c.tasks_failed += failed as u64;
        $c.task_bytes += bytes;
        match route {
            Route::Cufile => {
                $c.cufile_tasks += 1;
                $c.cufile_bytes += bytes;
            }
            Route::Posix(reason) => {
                $c.posix_tasks += 1;
                $c.posix_bytes += bytes;
                $c.posix_mapped_bytes += outcome.mapped_bytes as u64;
                $c.posix_tasks_not_cached += outcome.not_cached as u64;
                $c.posix_direct_bytes += outcome.direct_bytes as u64;
                match reason {
                    PosixReason::HostMemory => $host_memory,
                    PosixReason::BelowThreshold => $c.posix_tasks_below_threshold += 1,
                    PosixReason::CompatOn => $c.posix_tasks_compat_on += 1,
                    PosixReason::AutoFallback => $c.posix_tasks_auto_fallback += 1,
                }
            }
        }
    }};
}

/// One write task's contribution, as `count_read_task`: a failed task adds no bytes.
macro_rules! count_write_task {
    ($c:ident, $route:expr, $outcome:expr, $failed:expr) => {{
        let (route, outcome, failed): (Route, &TaskOutcome, bool) = ($route, $outcome, $failed);
        let bytes = if failed { 0 } else { outcome.bytes as u64 };
        $c.write_tasks += 1;
        $c.write_tasks_failed += failed as u64;
        match route {
            Route::Cufile => {
                $c.cufile_write_tasks += 1;
                $c.cufile_write_bytes += bytes;
            }
            Route::Posix(_) => {
                $c.posix_write_tasks += 1;
                $c.posix_write_bytes += bytes;
                $c.posix_direct_write_bytes += if failed { 0 } else { outcome.direct_bytes as u64 };
            }
        }
    }};
}
pub(crate) use {count_read_task, count_write_task};

/// One set of live counters.
#[derive(Default)]
pub struct StatsCell {
    counters: Mutex<Cells>,
}

impl StatsCell {
    fn lock(&self) -> MutexGuard<'_, Cells> {
        self.counters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A consistent copy, with `struct_size` set.
    pub fn snapshot(&self) -> Counters {
        Counters { struct_size: Counters::SIZE, ..self.lock().totals }
    }

    /// The totals and each device's counters (ascending ordinals), copied at one moment.
    pub fn snapshot_with_devices(&self) -> (Counters, Vec<DeviceCounters>) {
        let cells = self.lock();
        (Counters { struct_size: Counters::SIZE, ..cells.totals }, cells.devices.values().copied().collect())
    }

    /// Zeroes every counter; the devices stay listed, with zeros.
    pub fn reset(&self) {
        let mut cells = self.lock();
        cells.totals = Counters::default();
        cells.devices.values_mut().for_each(DeviceCounters::reset);
    }
}

static GLOBAL: once_cell::sync::Lazy<StatsCell> = once_cell::sync::Lazy::new(StatsCell::default);

/// The process-wide counters.
pub fn global() -> &'static StatsCell {
    &GLOBAL
}

/// Records one finished task in the process-wide counters and in the handle's, and in the
/// process-wide counters of `device` (the ordinal of the task's device or managed memory;
/// `None` for host memory) under the same lock as the process totals.
pub fn record_task(handle: &StatsCell, direction: Direction, route: Route, device: Option<i32>, outcome: &TaskOutcome, failed: bool) {
    {
        let mut cells = global().lock();
        match direction {
            Direction::Read => cells.totals.add_task(route, outcome, failed),
            Direction::Write => cells.totals.add_write_task(route, outcome, failed),
        }
        if let Some(ordinal) = device {
            let device = cells.device(ordinal);
            match direction {
                Direction::Read => device.add_task(route, outcome, failed),
                Direction::Write => device.add_write_task(route, outcome, failed),
            }
        }
    }
    let mut cells = handle.lock();
    match direction {
        Direction::Read => cells.totals.add_task(route, outcome, failed),
        Direction::Write => cells.totals.add_write_task(route, outcome, failed),
    }
}

/// Records one finished logical call in the process-wide counters and in the handle's.
pub fn record_call(handle: &StatsCell, direction: Direction, requested: u64, delivered: u64, failed: bool) {
    for cell in [global(), handle] {
        cell.lock().totals.add_call_of(direction, requested, delivered, failed);
    }
}

/// Records a call that returned an error before moving bytes: one call, failed, no bytes, in
/// the process-wide counters and in the handle's (`None`: a NULL handle, process-wide only).
pub fn record_rejected_call(handle: Option<&StatsCell>, direction: Direction) {
    global().lock().totals.add_call_of(direction, 0, 0, true);
    if let Some(handle) = handle {
        handle.lock().totals.add_call_of(direction, 0, 0, true);
    }
}

/// A call in progress: unless its result was recorded (`finish`) or handed to an operation
/// that records it (`handed_over`), it is counted as rejected when dropped, so that every early
/// error return (and a panic) counts once, as the completed calls do.
pub struct PendingCall<'a> {
    handle: Option<&'a StatsCell>,
    direction: Direction,
}

impl<'a> PendingCall<'a> {
    /// A call on `handle` starts.
    pub fn new(handle: &'a StatsCell, direction: Direction) -> Self {
        PendingCall { handle: Some(handle), direction }
    }

    /// Records the call's result.
    pub fn finish(mut self, requested: u64, delivered: u64, failed: bool) {
        if let Some(handle) = self.handle.take() {
            record_call(handle, self.direction, requested, delivered, failed);
        }
    }

    /// An operation records the call when it settles.
    pub fn handed_over(mut self) {
        self.handle = None;
    }
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            record_rejected_call(Some(handle), self.direction);
        }
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
    fn task_and_call_accounting() {
        let cell = StatsCell::default();
        let mut c = cell.snapshot();
        assert_eq!(c.struct_size, Counters::SIZE);
        let task = |bytes, mapped_bytes, not_cached| TaskOutcome { bytes, mapped_bytes, not_cached, direct_bytes: 0 };
        c.add_task(Route::Posix(PosixReason::HostMemory), &task(10, 0, true), false);
        c.add_task(Route::Posix(PosixReason::CompatOn), &TaskOutcome { bytes: 8, direct_bytes: 8, ..TaskOutcome::default() }, false);
        c.add_task(Route::Posix(PosixReason::AutoFallback), &task(5, 3, false), false);
        c.add_task(Route::Cufile, &task(7, 0, true), false); // never counted as not cached
        c.add_task(Route::Posix(PosixReason::BelowThreshold), &task(0, 0, false), true);
        c.add_call(30, 22, false);
        assert_eq!((c.tasks, c.task_bytes, c.tasks_failed), (5, 30, 1));
        assert_eq!((c.posix_tasks, c.posix_bytes, c.cufile_tasks, c.cufile_bytes), (4, 23, 1, 7));
        assert_eq!(c.posix_tasks_host_memory + c.posix_tasks_auto_fallback + c.posix_tasks_below_threshold + c.posix_tasks_compat_on, 4);
        assert_eq!(c.posix_direct_bytes, 8);
        assert_eq!(c.posix_mapped_bytes, 3);
        assert_eq!(c.posix_tasks_not_cached, 1);
        assert_eq!((c.calls, c.calls_short, c.bytes_read), (1, 1, 22));
        let json = c.to_json();
        assert!(json.starts_with("{\"struct_size\":") && json.contains("\"posix_tasks\":4"), "{json}");
        assert!(c.to_text().contains("cufile_tasks"));
    }

    fn host_reads() -> Counters {
        let mut c = Counters { struct_size: Counters::SIZE, ..Counters::default() };
        for _ in 0..17 {
            c.add_task(Route::Posix(PosixReason::HostMemory), &TaskOutcome { bytes: 8 << 20, ..TaskOutcome::default() }, false);
        }
        c.add_call(64 << 20, 64 << 20, false);
        c.add_call(72 << 20, 72 << 20, false);
        c
    }

    #[test]
    fn summary_says_route_and_why_in_words() {
        assert_eq!(
            host_reads().summary(),
            "2 reads, 136 MiB, 17 tasks, all through the POSIX backend: host memory; cuFile not considered"
        );
        assert_eq!(Counters::default().summary(), "no reads");
        let mut c = Counters::default();
        c.add_task(Route::Posix(PosixReason::AutoFallback), &TaskOutcome { bytes: 4096, ..TaskOutcome::default() }, false);
        c.add_task(Route::Posix(PosixReason::BelowThreshold), &TaskOutcome { bytes: 100, ..TaskOutcome::default() }, false);
        c.add_call(8192, 4196, false);
        assert_eq!(
            c.summary(),
            "1 read, 4.1 KiB, 2 tasks, 1 short (end of file), all through the POSIX backend: device requests below the \
             GDS threshold 1, cuFile cannot serve the file (AUTO fallback) 1; cuFile was tried and cannot serve the file \
             (gdsroute_file_cufile_verdict says why)"
        );
        let mut c = Counters { cufile_stats_state: CufileStatsState::Active as u64, cufile_n_total_reads: 3, cufile_n_nvfs_reads: 3, ..Counters::default() };
        for _ in 0..3 {
            c.add_task(Route::Cufile, &TaskOutcome { bytes: 1 << 30, ..TaskOutcome::default() }, false);
        }
        c.add_task(Route::Posix(PosixReason::BelowThreshold), &TaskOutcome::default(), true);
        c.add_call(3 << 30, 3 << 30, false);
        c.add_call(10, 0, true);
        assert_eq!(
            c.summary(),
            "2 reads, 3 GiB, 4 tasks, 1 failed, 3 through cuFile (cuFile's own route: nvfs 3, posix 0, of 3 reads) and 1 \
             through the POSIX backend: device requests below the GDS threshold"
        );
    }

    #[test]
    fn text_leads_with_the_summary_and_lists_only_counters_not_zero() {
        let text = host_reads().to_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], host_reads().summary());
        let nonzero = host_reads().entries().iter().filter(|(n, v)| *v != 0 && *n != "struct_size").count();
        assert_eq!(lines.len(), 1 + nonzero + 1, "{text}");
        assert!(lines[1..=nonzero].iter().all(|l| !l.ends_with(" 0")), "{text}");
        assert!(lines[1].starts_with("calls ") && text.contains("posix_tasks_host_memory      17\n"), "{text}");
        let zeros = Counters::default().entries().len() - 1 - nonzero;
        assert_eq!(lines[nonzero + 1], format!("({zeros} other counters are 0; the JSON format lists every field)"));
        // JSON keeps every field, zeros too.
        assert_eq!(host_reads().to_json().matches(':').count(), Counters::default().entries().len());
        let live = Counters { cufile_stats_state: CufileStatsState::Active as u64, ..host_reads() };
        assert!(live.to_text().contains("\ncufile_stats_state           2 (live)\n"), "{}", live.to_text());
        assert!(live.to_text().ends_with("cufile per-GPU: n=0 nvfs=0 posix=0 p2p=0 unaligned=0 err=0\n"));
    }

    #[test]
    fn rendering_stops_at_the_callers_struct_size() {
        let c = host_reads();
        assert_eq!(c.json_within(24), format!("{{\"struct_size\":{},\"calls\":2,\"calls_failed\":0}}", Counters::SIZE));
        // A field cut by struct_size is not rendered; a size beyond the layout renders the layout.
        assert_eq!(c.entries_held(31).count(), 3);
        assert_eq!(c.entries_held(Counters::SIZE + 64).count(), c.entries().len());
        // Too small for the summary: only the counters held, not the zeros the caller lacks.
        assert_eq!(c.text_within(24), "calls                        2\n(1 other counters are 0; the JSON format lists every field)\n");
        assert!(!c.text_within(40).contains("tasks"), "{}", c.text_within(40));
    }

    #[test]
    fn writes_have_their_own_counters_and_summary() {
        let mut c = Counters::default();
        c.add_write_task(Route::Posix(PosixReason::HostMemory), &TaskOutcome { bytes: 4096, ..TaskOutcome::default() }, false);
        c.add_write_task(Route::Cufile, &TaskOutcome { bytes: 4096, ..TaskOutcome::default() }, false);
        c.add_write_task(Route::Posix(PosixReason::HostMemory), &TaskOutcome { bytes: 100, ..TaskOutcome::default() }, true);
        c.add_call_of(Direction::Write, 8192, 8192, false);
        c.add_call_of(Direction::Write, 4096, 0, true);
        assert_eq!((c.calls, c.tasks, c.bytes_read), (0, 0, 0), "reads' counters never count writes");
        assert_eq!((c.write_calls, c.write_calls_failed, c.bytes_written), (2, 1, 8192));
        assert_eq!((c.write_tasks, c.write_tasks_failed, c.posix_write_tasks, c.posix_write_bytes, c.cufile_write_tasks, c.cufile_write_bytes), (3, 1, 2, 4096, 1, 4096));
        assert_eq!(c.summary(), "no reads; 2 writes, 8 KiB, 3 write tasks, 1 failed, 1 through cuFile and 2 through the POSIX backend");
        let names: Vec<&str> = c.entries().iter().map(|e| e.0).collect();
        let at = names.iter().position(|n| *n == "write_calls").unwrap();
        assert_eq!(&names[at - 1..], ["posix_direct_bytes", "write_calls", "write_calls_failed", "bytes_written", "write_tasks", "write_tasks_failed", "posix_write_tasks", "posix_write_bytes", "cufile_write_tasks", "cufile_write_bytes", "cufile_n_total_writes", "cufile_n_nvfs_writes", "cufile_n_posix_writes", "cufile_n_p2p_writes", "cufile_n_writes_err", "cufile_write_bytes_gpu", "posix_direct_write_bytes"]);
        let mut d = Counters::default();
        d.add_write_task(Route::Posix(PosixReason::HostMemory), &TaskOutcome { bytes: 8192, direct_bytes: 4096, ..TaskOutcome::default() }, false);
        d.add_write_task(Route::Posix(PosixReason::HostMemory), &TaskOutcome { bytes: 8192, direct_bytes: 4096, ..TaskOutcome::default() }, true);
        assert_eq!((d.posix_write_bytes, d.posix_direct_write_bytes, d.posix_direct_bytes), (8192, 4096, 0), "a failed task adds no bytes");
    }

    #[test]
    fn device_tasks_sum_to_the_totals_and_host_tasks_belong_to_no_device() {
        // The process-wide cell is shared by every test of this binary: count deltas.
        let handle = StatsCell::default();
        let (before, devices_before) = global().snapshot_with_devices();
        let of = |devices: &[DeviceCounters], ordinal: u64| devices.iter().find(|d| d.device_ordinal == ordinal).copied().unwrap_or_default();
        let task = TaskOutcome { bytes: 4096, ..TaskOutcome::default() };
        record_task(&handle, Direction::Read, Route::Posix(PosixReason::HostMemory), None, &task, false);
        record_task(&handle, Direction::Read, Route::Posix(PosixReason::CompatOn), Some(9001), &task, false);
        record_task(&handle, Direction::Read, Route::Cufile, Some(9002), &task, false);
        record_task(&handle, Direction::Read, Route::Cufile, Some(9002), &task, true);
        record_task(&handle, Direction::Write, Route::Posix(PosixReason::CompatOn), Some(9002), &task, false);
        let (after, devices) = global().snapshot_with_devices();
        assert_eq!(after.tasks - before.tasks, 4);
        let (d1, d2) = (of(&devices, 9001), of(&devices, 9002));
        assert_eq!((d1.tasks, d1.posix_tasks_compat_on, d2.tasks, d2.tasks_failed, d2.cufile_bytes), (1, 1, 2, 1, 8192));
        assert_eq!((d2.write_tasks, d2.posix_write_bytes, d1.write_tasks), (1, 4096, 0));
        assert_eq!(after.write_tasks - before.write_tasks, 1);
        let device_tasks = |ds: &[DeviceCounters]| ds.iter().map(|d| d.tasks).sum::<u64>();
        assert_eq!(device_tasks(&devices) - device_tasks(&devices_before), (after.tasks - before.tasks) - (after.posix_tasks_host_memory - before.posix_tasks_host_memory));
        // The handle has totals only.
        assert_eq!((handle.snapshot().tasks, handle.snapshot_with_devices().1.len()), (4, 0));
        // Devices are ascending by ordinal.
        assert!(devices.windows(2).all(|w| w[0].device_ordinal < w[1].device_ordinal));
    }

    #[test]
    fn a_reset_zeroes_the_devices_and_keeps_them_listed() {
        let cell = StatsCell::default();
        {
            let mut cells = cell.lock();
            cells.device(3).add_task(Route::Cufile, &TaskOutcome { bytes: 1, ..TaskOutcome::default() }, false);
            cells.totals.add_task(Route::Cufile, &TaskOutcome { bytes: 1, ..TaskOutcome::default() }, false);
        }
        cell.reset();
        let (totals, devices) = cell.snapshot_with_devices();
        assert_eq!(totals, Counters { struct_size: Counters::SIZE, ..Counters::default() });
        assert_eq!(devices, vec![DeviceCounters::of(3)]);
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(0), "0 bytes");
        assert_eq!(human_bytes(1), "1 byte");
        assert_eq!(human_bytes(1023), "1023 bytes");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(256 << 20), "256 MiB");
        assert_eq!(human_bytes((1 << 30) + (1 << 29)), "1.5 GiB");
        assert_eq!(human_bytes(u64::MAX), "16 EiB");
    }
}
