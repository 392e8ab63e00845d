//! The counters a Rust caller reads: the process-wide totals (`process_counters`, with pinned
//! memory, the registered page cache and cuFile's own statistics), the same per device
//! (`device_counters`), and their reset; the values of their enum-valued fields; and the text
//! and JSON renderings the C ABI's `gdsroute_stats_render*` return. A handle's own counters are
//! `File::stats`. Gathered in `api::process`; the types are the C ABI's (`abi`).

pub use crate::abi::{Counters, CufileStatsState, DeviceCounters, NumaPlacement};
pub use crate::api::process::{device_counters, process_counters, reset_process_counters};
pub use crate::stats::{render_devices_json, render_devices_text};
