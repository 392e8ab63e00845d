//! Counting: the live cells (`StatsCell`, the process-wide one behind `global`), the rules for a
//! task's and a call's contribution, and the recording entries the engine and the C boundary
//! call (`record_task`, `record_call`, `record_rejected_call`, `PendingCall`). Each task's
//! contribution is applied under one lock, to the totals and its device's counters together.

use super::{Counters, DeviceCounters, Direction, PosixReason, Route, TaskOutcome};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

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
        count_in_route(route, bytes, [&mut $c.cufile_tasks, &mut $c.cufile_bytes], [&mut $c.posix_tasks, &mut $c.posix_bytes]);
        if let Route::Posix(reason) = route {
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
    }};
}

/// One write task's contribution, as `count_read_task`: a failed task adds no bytes.
macro_rules! count_write_task {
    ($c:ident, $route:expr, $outcome:expr, $failed:expr) => {{
        let (route, outcome, failed): (Route, &TaskOutcome, bool) = ($route, $outcome, $failed);
        let bytes = if failed { 0 } else { outcome.bytes as u64 };
        $c.write_tasks += 1;
        $c.write_tasks_failed += failed as u64;
        count_in_route(route, bytes, [&mut $c.cufile_write_tasks, &mut $c.cufile_write_bytes], [&mut $c.posix_write_tasks, &mut $c.posix_write_bytes]);
        if let Route::Posix(_) = route {
            $c.posix_direct_write_bytes += if failed { 0 } else { outcome.direct_bytes as u64 };
        }
    }};
}
pub(super) use {count_read_task, count_write_task};

/// Counts a task of `bytes` in the `[tasks, bytes]` pair of its route (cuFile or POSIX): every
/// task in exactly one route, of either direction.
pub(super) fn count_in_route(route: Route, bytes: u64, cufile: [&mut u64; 2], posix: [&mut u64; 2]) {
    let [tasks, total] = match route {
        Route::Cufile => cufile,
        Route::Posix(_) => posix,
    };
    *tasks += 1;
    *total += bytes;
}

impl Counters {
    /// Counts one finished task of `direction`.
    pub(super) fn add_task(&mut self, direction: Direction, route: Route, outcome: &TaskOutcome, failed: bool) {
        match direction {
            Direction::Read => count_read_task!(self, route, outcome, failed, host_memory: { self.posix_tasks_host_memory += 1 }),
            Direction::Write => count_write_task!(self, route, outcome, failed),
        }
    }

    /// Counts one finished call of `direction`: a read may come back short (end of file), a
    /// write covers its whole request or fails.
    pub(super) fn add_call(&mut self, direction: Direction, requested: u64, delivered: u64, failed: bool) {
        match direction {
            Direction::Read => {
                self.calls += 1;
                self.calls_failed += failed as u64;
                self.calls_short += (!failed && delivered < requested) as u64;
                self.bytes_requested = self.bytes_requested.saturating_add(requested); // caller-chosen sizes: up to 2^63 each
                self.bytes_read += delivered;
            }
            Direction::Write => {
                self.write_calls += 1;
                self.write_calls_failed += failed as u64;
                if !failed {
                    self.bytes_written += delivered;
                }
            }
        }
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
pub(crate) fn global() -> &'static StatsCell {
    &GLOBAL
}

/// Records one finished task in the process-wide counters and in the handle's, and in the
/// process-wide counters of `device` (the ordinal of the task's device or managed memory;
/// `None` for host memory) under the same lock as the process totals.
pub fn record_task(handle: &StatsCell, direction: Direction, route: Route, device: Option<i32>, outcome: &TaskOutcome, failed: bool) {
    {
        let mut cells = global().lock();
        cells.totals.add_task(direction, route, outcome, failed);
        if let Some(ordinal) = device {
            let device = cells.device(ordinal);
            device.add_task(direction, route, outcome, failed);
        }
    }
    let mut cells = handle.lock();
    cells.totals.add_task(direction, route, outcome, failed);
}

/// Records one finished logical call in the process-wide counters and in the handle's.
pub(crate) fn record_call(handle: &StatsCell, direction: Direction, requested: u64, delivered: u64, failed: bool) {
    super::activity::call_ended(direction);
    for cell in [global(), handle] {
        cell.lock().totals.add_call(direction, requested, delivered, failed);
    }
}

/// A batch submission's entries of `direction` on one handle have all settled (`io::batch`): one
/// call on that handle, of their bytes; the process-wide counters count the submission once
/// (`record_batch_call`).
pub(crate) fn record_handle_call(handle: &StatsCell, direction: Direction, requested: u64, delivered: u64, failed: bool) {
    handle.lock().totals.add_call(direction, requested, delivered, failed);
}

/// A batch submission's entries of `direction` have all settled: one call process-wide, of all
/// their bytes, failed if any entry failed (its start was counted by `call_started`).
pub(crate) fn record_batch_call(direction: Direction, requested: u64, delivered: u64, failed: bool) {
    super::activity::call_ended(direction);
    global().lock().totals.add_call(direction, requested, delivered, failed);
}

/// A call starts outside `PendingCall` (a batch submission, once per direction it holds).
pub(crate) fn call_started(direction: Direction) {
    super::activity::call_started(direction);
}

/// Records a call that returned an error before moving bytes: one call, failed, no bytes, in
/// the process-wide counters and in the handle's (`None`: a NULL handle, process-wide only).
pub(crate) fn record_rejected_call(handle: Option<&StatsCell>, direction: Direction) {
    super::activity::call_ended(direction);
    record_refused_call(handle, direction);
}

/// `record_rejected_call` for a call refused before it started (a NULL argument at the C
/// boundary, a stream-ordered call that failed before its stream reached it): counted the same,
/// and never in flight.
pub(crate) fn record_refused_call(handle: Option<&StatsCell>, direction: Direction) {
    global().lock().totals.add_call(direction, 0, 0, true);
    if let Some(handle) = handle {
        handle.lock().totals.add_call(direction, 0, 0, true);
    }
}

/// How a stream-ordered call ran (the `stream_calls_*` counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamMode {
    /// Queued on its stream; the caller did not wait.
    Ordered,
    /// The stream synchronised, then the transfer on the calling thread: no stream wait on a flag.
    BlockingNoStreamWait,
    /// The same because the `stream_ordered` setting is off.
    BlockingSetting,
    /// The same because the setting is `auto` and the legacy default stream waits for the stream,
    /// where no relay kernel could be launched.
    BlockingLegacyWaits,
    /// Queued behind a relay kernel (`auto`, a stream the legacy default stream waits for).
    Relayed,
    /// Queued on its stream by cuFile itself (`cuFileReadAsync` / `cuFileWriteAsync`).
    CufileAsync,
}

/// Counts a stream-ordered call by how it ran, process-wide and on the handle (its bytes and
/// success are counted as any call's, by the call itself).
pub(crate) fn record_stream_call(handle: &StatsCell, how: StreamMode) {
    for cell in [global(), handle] {
        let totals = &mut cell.lock().totals;
        match how {
            StreamMode::Ordered => totals.stream_calls_ordered += 1,
            StreamMode::BlockingNoStreamWait => totals.stream_calls_blocking_no_stream_wait += 1,
            StreamMode::BlockingSetting => totals.stream_calls_blocking_setting += 1,
            StreamMode::BlockingLegacyWaits => totals.stream_calls_blocking_legacy_waits += 1,
            StreamMode::Relayed => totals.stream_calls_relayed += 1,
            StreamMode::CufileAsync => totals.stream_calls_cufile_async += 1,
        }
    }
}

/// Counts a stream registration: with cuFile (`true`), or one that did nothing (`false`).
pub(crate) fn record_stream_registration(with_cufile: bool) {
    let totals = &mut global().lock().totals;
    if with_cufile {
        totals.stream_registrations_cufile += 1;
    } else {
        totals.stream_registrations_skipped += 1;
    }
}

/// Counts a buffer registration: one that registered with cuFile, or one made while cuFile is not
/// used (skipped; a registration that added a reference with cuFile in use counts in neither).
pub(crate) fn record_buffer_registration(with_cufile: bool, skipped: bool) {
    let totals = &mut global().lock().totals;
    totals.buffer_registrations_cufile += u64::from(with_cufile);
    totals.buffer_registrations_skipped += u64::from(skipped);
}

/// A call in progress: unless its result was recorded (`finish`) or handed to an operation
/// that records it (`handed_over`), it is counted as rejected when dropped, so that every early
/// error return (and a panic) counts once, as the completed calls do.
pub(crate) struct PendingCall<'a> {
    handle: Option<&'a StatsCell>,
    direction: Direction,
    /// Counted among the calls in flight (`activity`) from its start.
    in_flight: bool,
}

impl<'a> PendingCall<'a> {
    /// A call on `handle` starts.
    pub(crate) fn new(handle: &'a StatsCell, direction: Direction) -> Self {
        super::activity::call_started(direction);
        PendingCall { handle: Some(handle), direction, in_flight: true }
    }

    /// A stream-ordered call at its call: not in flight until its transfer starts, once the
    /// stream reached it (as a call of its own, `PendingCall::new`), so that a call queued behind
    /// other GPU work neither makes lone reads look concurrent nor counts as busy time.
    pub(crate) fn queued_on_stream(handle: &'a StatsCell, direction: Direction) -> Self {
        PendingCall { handle: Some(handle), direction, in_flight: false }
    }

    /// Records the call's result.
    pub(crate) fn finish(mut self, requested: u64, delivered: u64, failed: bool) {
        debug_assert!(self.in_flight, "a queued call's result is recorded by its transfer");
        if let Some(handle) = self.handle.take() {
            record_call(handle, self.direction, requested, delivered, failed);
        }
    }

    /// An operation records the call when it settles.
    pub(crate) fn handed_over(mut self) {
        self.handle = None;
    }
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            if self.in_flight {
                record_rejected_call(Some(handle), self.direction);
            } else {
                record_refused_call(Some(handle), self.direction);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_and_call_accounting() {
        let cell = StatsCell::default();
        let mut c = cell.snapshot();
        assert_eq!(c.struct_size, Counters::SIZE);
        let task = |bytes, mapped_bytes, not_cached| TaskOutcome { bytes, mapped_bytes, not_cached, direct_bytes: 0 };
        c.add_task(Direction::Read, Route::Posix(PosixReason::HostMemory), &task(10, 0, true), false);
        c.add_task(Direction::Read, Route::Posix(PosixReason::CompatOn), &TaskOutcome { bytes: 8, direct_bytes: 8, ..TaskOutcome::default() }, false);
        c.add_task(Direction::Read, Route::Posix(PosixReason::AutoFallback), &task(5, 3, false), false);
        c.add_task(Direction::Read, Route::Cufile, &task(7, 0, true), false); // never counted as not cached
        c.add_task(Direction::Read, Route::Posix(PosixReason::BelowThreshold), &task(0, 0, false), true);
        c.add_call(Direction::Read, 30, 22, false);
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

    #[test]
    fn stream_calls_are_counted_by_how_they_ran_on_the_handle_and_process_wide() {
        let handle = StatsCell::default();
        let before = global().snapshot();
        record_stream_call(&handle, StreamMode::Ordered);
        record_stream_call(&handle, StreamMode::Ordered);
        record_stream_call(&handle, StreamMode::BlockingNoStreamWait);
        record_stream_call(&handle, StreamMode::BlockingSetting);
        record_stream_call(&handle, StreamMode::BlockingLegacyWaits);
        let c = handle.snapshot();
        assert_eq!((c.stream_calls_ordered, c.stream_calls_blocking_no_stream_wait, c.stream_calls_blocking_setting, c.stream_calls_blocking_legacy_waits), (2, 1, 1, 1));
        assert_eq!((c.calls, c.write_calls), (0, 0), "the calls themselves are counted by the transfer");
        let after = global().snapshot();
        assert!(after.stream_calls_ordered >= before.stream_calls_ordered + 2);
        let names: Vec<&str> = c.entries().iter().map(|e| e.0).collect();
        let at = names.iter().position(|n| *n == "stream_calls_ordered").unwrap();
        assert_eq!(
            &names[at..at + 6],
            ["stream_calls_ordered", "stream_calls_blocking_no_stream_wait", "stream_calls_blocking_setting", "stream_registrations_skipped", "stream_calls_cufile_async", "stream_registrations_cufile"]
        );
        record_stream_call(&handle, StreamMode::CufileAsync);
        assert_eq!(handle.snapshot().stream_calls_cufile_async, 1);
        assert_eq!(
            &names[names.len() - 6..],
            ["buffer_registrations_cufile", "buffer_registrations_skipped", "buffer_registered_bytes", "stream_calls_blocking_legacy_waits", "stream_calls_relayed", "relay_pinned_bytes"]
        );
        assert!(
            c.summary().ends_with("; 5 stream-ordered calls: 2 queued on their streams, 3 blocking (1 no stream wait, 1 setting off, 1 a stream the legacy stream waits for)"),
            "{}",
            c.summary()
        );
        let c = Counters { stream_calls_cufile_async: 3, stream_calls_ordered: 1, ..Counters::default() };
        assert!(c.summary().ends_with("; 4 stream-ordered calls: 1 queued on their streams, 3 through cuFileReadAsync/WriteAsync"), "{}", c.summary());
        record_stream_call(&handle, StreamMode::Relayed);
        let c = handle.snapshot();
        assert_eq!((c.stream_calls_relayed, c.stream_calls_ordered), (1, 2), "relayed calls have their own counter");
        assert!(c.summary().contains("; 7 stream-ordered calls: 3 queued on their streams (1 relayed: their bytes moved by the stream itself), 1 through"), "{}", c.summary());
    }

    #[test]
    fn writes_have_their_own_counters_and_summary() {
        let mut c = Counters::default();
        c.add_task(Direction::Write, Route::Posix(PosixReason::HostMemory), &TaskOutcome { bytes: 4096, ..TaskOutcome::default() }, false);
        c.add_task(Direction::Write, Route::Cufile, &TaskOutcome { bytes: 4096, ..TaskOutcome::default() }, false);
        c.add_task(Direction::Write, Route::Posix(PosixReason::HostMemory), &TaskOutcome { bytes: 100, ..TaskOutcome::default() }, true);
        c.add_call(Direction::Write, 8192, 8192, false);
        c.add_call(Direction::Write, 4096, 0, true);
        assert_eq!((c.calls, c.tasks, c.bytes_read), (0, 0, 0), "reads' counters never count writes");
        assert_eq!((c.write_calls, c.write_calls_failed, c.bytes_written), (2, 1, 8192));
        assert_eq!((c.write_tasks, c.write_tasks_failed, c.posix_write_tasks, c.posix_write_bytes, c.cufile_write_tasks, c.cufile_write_bytes), (3, 1, 2, 4096, 1, 4096));
        assert_eq!(c.summary(), "no reads; 2 writes, 8 KiB, 3 write tasks, 1 failed, 1 through cuFile and 2 through the POSIX backend");
        let names: Vec<&str> = c.entries().iter().map(|e| e.0).collect();
        let at = names.iter().position(|n| *n == "write_calls").unwrap();
        let last = names.iter().position(|n| *n == "posix_direct_write_bytes").unwrap();
        assert_eq!(&names[at - 1..=last], ["posix_direct_bytes", "write_calls", "write_calls_failed", "bytes_written", "write_tasks", "write_tasks_failed", "posix_write_tasks", "posix_write_bytes", "cufile_write_tasks", "cufile_write_bytes", "cufile_n_total_writes", "cufile_n_nvfs_writes", "cufile_n_posix_writes", "cufile_n_p2p_writes", "cufile_n_writes_err", "cufile_write_bytes_gpu", "posix_direct_write_bytes"]);
        let mut d = Counters::default();
        d.add_task(Direction::Write, Route::Posix(PosixReason::HostMemory), &TaskOutcome { bytes: 8192, direct_bytes: 4096, ..TaskOutcome::default() }, false);
        d.add_task(Direction::Write, Route::Posix(PosixReason::HostMemory), &TaskOutcome { bytes: 8192, direct_bytes: 4096, ..TaskOutcome::default() }, true);
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
            cells.device(3).add_task(Direction::Read, Route::Cufile, &TaskOutcome { bytes: 1, ..TaskOutcome::default() }, false);
            cells.totals.add_task(Direction::Read, Route::Cufile, &TaskOutcome { bytes: 1, ..TaskOutcome::default() }, false);
        }
        cell.reset();
        let (totals, devices) = cell.snapshot_with_devices();
        assert_eq!(totals, Counters { struct_size: Counters::SIZE, ..Counters::default() });
        assert_eq!(devices, vec![DeviceCounters::of(3)]);
    }
}
