//! cuFile's driver: its properties and settings (the Rust side is `api::driver`).

use super::guard;
use crate::abi::{CufileDriverProperties, Status};
use crate::api::driver;

/// Fills `*props` with cuFile's driver properties (KvikIO's `DriverProperties`: nvidia-fs
/// version, poll mode and threshold, largest direct I/O, cuFile's flags, its device cache, the
/// pinned-memory limit, the batch limits) and how many of the caller's driver settings gdsroute
/// applied before the driver opened. Set `props->struct_size = sizeof(gdsroute_driver_properties)`
/// first: the library writes at most that many bytes and sets `struct_size` to the bytes
/// written. Opens cuFile's driver if it is not open (0.4 to 0.5 s once per process, and cuFile's
/// threads), as `gdsroute_cufile_usable` does; settings given after that are refused. Errors:
/// `NULL_ARGUMENT`, `INVALID_ARGUMENT` (`struct_size` below 8), `CUFILE_UNAVAILABLE` (compat mode
/// ON, or cuFile cannot be used: the message says why), `CUFILE_ERROR`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_driver_properties_get(props: *mut CufileDriverProperties) -> Status {
    guard(|| {
        // SAFETY (both): the caller's struct of `struct_size` bytes, or NULL.
        unsafe { super::versioned_size(props, "props", "gdsroute_driver_properties") }?;
        let value = driver::properties()?;
        unsafe { super::copy_versioned_out(&value, props, "props", "gdsroute_driver_properties") }
    })
}

/// Sets cuFile's poll mode for its driver open (`cuFileDriverSetPollMode(enabled,
/// threshold_kb)`): poll for the completion of I/O of at most `threshold_kb` KiB instead of
/// waiting; KvikIO's `set_nvfs_poll_mode` and `set_nvfs_poll_thresh_size` together. cuFile reads
/// its settings only when its driver opens (a setter called after the open returns success and
/// changes nothing, measured with cuFile 1.15), so gdsroute keeps the value and applies it just
/// before it opens the driver. Call the `gdsroute_driver_set_*` functions first: before the first
/// device read, `gdsroute_begin_device_setup`, `gdsroute_cufile_usable`,
/// `gdsroute_driver_properties_get` or a buffer registration. Errors: `CUFILE_DRIVER_OPEN` once
/// the driver opened or began opening in this process (nothing applied), `CUFILE_UNAVAILABLE`
/// where cuFile is known to be unusable.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_driver_set_poll_mode(enabled: bool, threshold_kb: usize) -> Status {
    guard(|| driver::set_poll_mode(enabled, threshold_kb))
}

/// Sets the largest direct I/O nvidia-fs issues, in KiB, for cuFile's driver open
/// (`cuFileDriverSetMaxDirectIOSize`); when it applies, as `gdsroute_driver_set_poll_mode`.
/// Errors: `INVALID_ARGUMENT` (0), `CUFILE_DRIVER_OPEN`, `CUFILE_UNAVAILABLE`.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_driver_set_max_direct_io_size(kb: usize) -> Status {
    guard(|| driver::set_max_direct_io_size(kb))
}

/// Sets the GPU memory cuFile reserves per device for its bounce buffers, in KiB
/// (`cuFileDriverSetMaxCacheSize`, KvikIO's `set_max_device_cache_size`); when it applies, as
/// `gdsroute_driver_set_poll_mode`. With cuFile 1.15 and older the driver open withholds it
/// (counted in `settings_refused`): given before the open, it made processes crash at exit
/// (measured on the H200, docs/local-api.md, "cuFile driver properties"); set
/// `properties.max_device_cache_size_kb` in cufile.json instead. Errors: `INVALID_ARGUMENT` (0),
/// `CUFILE_DRIVER_OPEN`, `CUFILE_UNAVAILABLE`.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_driver_set_max_cache_size(kb: usize) -> Status {
    guard(|| driver::set_max_cache_size(kb))
}

/// Sets the most device memory `cuFileBufRegister` may pin, in KiB
/// (`cuFileDriverSetMaxPinnedMemSize`, KvikIO's `set_max_pinned_memory_size`); when it applies,
/// as `gdsroute_driver_set_poll_mode`; withheld from cuFile 1.15 and older as
/// `gdsroute_driver_set_max_cache_size` is (set `properties.max_device_pinned_mem_size_kb` in
/// cufile.json instead). Errors: `INVALID_ARGUMENT` (0), `CUFILE_DRIVER_OPEN`,
/// `CUFILE_UNAVAILABLE`.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_driver_set_max_pinned_memory_size(kb: usize) -> Status {
    guard(|| driver::set_max_pinned_memory_size(kb))
}

symbol_version!(GDSROUTE_0.2: gdsroute_driver_properties_get, gdsroute_driver_set_poll_mode, gdsroute_driver_set_max_direct_io_size);
symbol_version!(GDSROUTE_0.2: gdsroute_driver_set_max_cache_size, gdsroute_driver_set_max_pinned_memory_size);
