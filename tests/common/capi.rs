//! The C ABI functions the integration tests call, declared as a C program sees them in
//! include/gdsroute.h (the library's `extern "C"` exports, linked from the crate); the Rust types
//! are those of the same layout (`File` is the opaque handle, `Counters`, `DeviceCounters`);
//! `safe` where the C function takes no pointer.

use gdsroute::{Counters, DeviceCounters, File, Status};
use std::ffi::c_char;

// `File` and `Operation` cross only as pointers, opaque as in C, never dereferenced here.
#[allow(improper_ctypes)]
unsafe extern "C" {
    pub fn gdsroute_file_open_with_compat_mode(path: *const c_char, flags: *const c_char, mode: u32, compat_mode: u32, file: *mut *mut File) -> Status;
    pub fn gdsroute_file_cufile_verdict(file: *const File, reason: *mut u32, buf: *mut c_char, buf_len: usize, length: *mut usize) -> Status;
    pub fn gdsroute_file_free(file: *mut File);
    pub safe fn gdsroute_shutdown() -> Status;
    pub fn gdsroute_settings_get_auto_direct_io_read(enabled: *mut bool) -> Status;
    pub safe fn gdsroute_settings_set_auto_direct_io_read(enabled: bool) -> Status;
    pub fn gdsroute_settings_get_auto_direct_io_write(enabled: *mut bool) -> Status;
    pub safe fn gdsroute_settings_set_auto_direct_io_write(enabled: bool) -> Status;
    pub fn gdsroute_stats_get(stats: *mut Counters) -> Status;
    pub safe fn gdsroute_stats_reset() -> Status;
    pub fn gdsroute_stats_render(stats: *const Counters, format: u32, buf: *mut c_char, buf_len: usize, length: *mut usize) -> Status;
    pub fn gdsroute_stats_get_devices(array: *mut DeviceCounters, capacity: usize, count: *mut usize) -> Status;
    pub fn gdsroute_stats_render_devices(array: *const DeviceCounters, count: usize, format: u32, buf: *mut c_char, buf_len: usize, length: *mut usize) -> Status;
}
