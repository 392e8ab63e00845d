//! Route counters: how many logical calls, tasks and bytes went through each route, and why the
//! POSIX backend ran. Counted process-wide and per file handle, and process-wide per device.
//! Each task's contribution is applied under one lock, so a snapshot taken while reads run is
//! consistent: tasks equal the sum of the routes' tasks, bytes the sum of the routes' bytes, and
//! the tasks of device memory the sum over devices.
//!
//! The parts: `activity` (what the exit report adds: time in flight, fallbacks by reason),
//! `monitor` (callbacks that see every call as it ends), `counters` (the types, and the fields of `gdsroute_stats` in layout order),
//! `counting` (the live cells and the recording of tasks and calls), `render` (text and JSON of
//! `gdsroute_stats`) and `device` (the counters of one device: their fields, counting and
//! rendering). The structs themselves are declared in `abi`, with every type of the C ABI.

pub(crate) mod activity;
mod counters;
mod counting;
mod device;
pub(crate) mod monitor;
mod render;

#[allow(unreachable_pub)] // the public surface (src/lib.rs, src/api/) re-exports these through this path
pub use crate::abi::{Counters, CufileStatsState, NumaPlacement};
pub use crate::direction::Direction;
pub use counters::{PosixReason, Route, TaskOutcome};
#[allow(unreachable_pub)] // the public surface (src/lib.rs, src/api/) re-exports these through this path
pub use counting::{StatsCell, record_task};
pub(crate) use counting::{PendingCall, StreamMode, call_started, global, record_batch_call, record_buffer_registration, record_call, record_handle_call, record_refused_call, record_stream_call, record_stream_registration};
pub use device::{DeviceCounters, render_devices_json, render_devices_text};
