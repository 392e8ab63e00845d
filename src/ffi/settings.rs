//! Process-wide settings (KvikIO's): read from the KVIKIO_* environment variables at the first
//! call that needs them, then changeable here. All functions are thread-safe. If an environment
//! variable is invalid, every getter (and every open and read) returns
//! `GDSROUTE_STATUS_INVALID_SETTING` with a message naming the variable and its value, until a
//! setter replaces that setting's value; setters always work, so a program can repair its
//! settings from code.

use super::{guard, out, write_out};
use crate::settings::{self, CompatMode, CufileFd};
use crate::abi::Status;
use crate::io::thread_pool;

/// Applies a setter that accepts every value of its type to the live settings.
fn set_setting(set: impl FnOnce(&settings::Settings)) -> Status {
    guard(|| {
        set(settings::live());
        Ok(())
    })
}

/// Writes one setting into an out-pointer.
///
/// # Safety
/// `dst` is NULL or writable for a `T`.
unsafe fn read_setting<T>(dst: *mut T, name: &'static str, read: impl FnOnce(&settings::Settings) -> T) -> Status {
    guard(|| {
        let dst = out(dst, name)?;
        let value = read(settings::global()?);
        // SAFETY: checked by `out`.
        unsafe { write_out(dst, value) };
        Ok(())
    })
}

/// Reads the default compat mode (a `gdsroute_compat_mode` value) into `*mode`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_compat_mode(mode: *mut u32) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(mode, "mode", |s| s.compat_mode() as u32) }
}

/// Sets the default compat mode (`GDSROUTE_COMPAT_MODE_OFF`, `_ON` or `_AUTO`) for files opened
/// from now on; open handles keep theirs. Errors: `GDSROUTE_STATUS_INVALID_ENUM`.
/// Works whatever the environment held: an invalid `KVIKIO_COMPAT_MODE` is replaced by this value
/// (other invalid variables keep failing calls until they are set too; README, Settings).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_compat_mode(mode: u32) -> Status {
    guard(|| CompatMode::from_raw(mode).map(|v| settings::live().set_compat_mode(v)))
}

/// Reads the number of worker threads into `*threads`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_num_threads(threads: *mut usize) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(threads, "threads", |s| s.num_threads()) }
}

/// Resizes the shared worker pool (1 to 1024 threads). Running tasks finish first on surplus
/// threads; queued tasks run on the new set. Errors: `GDSROUTE_STATUS_INVALID_SETTING`.
/// Works whatever the environment held: an invalid `KVIKIO_NTHREADS` (or alias) is replaced by this value
/// (other invalid variables keep failing calls until they are set too; README, Settings).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_num_threads(threads: usize) -> Status {
    guard(|| thread_pool::set_global_num_threads(threads))
}

/// Reads the task size in bytes (default 4 MiB) into `*bytes`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_task_size(bytes: *mut usize) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(bytes, "bytes", |s| s.task_size() as usize) }
}

/// Sets the task size in bytes for reads started from now on; must be positive.
/// Works whatever the environment held: an invalid `KVIKIO_TASK_SIZE` is replaced by this value
/// (other invalid variables keep failing calls until they are set too; README, Settings).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_task_size(bytes: usize) -> Status {
    guard(|| settings::live().set_task_size(bytes as u64))
}

/// Reads into `*bytes` the smallest task a small parallel read is spread into
/// (`GDSROUTE_MIN_TASK_SIZE`, default `GDSROUTE_DEFAULT_MIN_TASK_SIZE`, 256 KiB): a
/// `gdsroute_file_pread` of host memory or on the bounce route, of fewer bytes than the pool's
/// threads times the task size, runs as one task per thread of at least this size, so that the
/// whole pool copies it (cuFile's tasks and writes keep the task size). 0: KvikIO's split only.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_min_task_size(bytes: *mut usize) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(bytes, "bytes", |s| s.min_task_size() as usize) }
}

/// Sets the smallest task a small read is spread into, for reads started from now on (0 turns
/// the spreading off; a value at or above the task size does too). Works whatever the
/// environment held (README, Settings).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_min_task_size(bytes: usize) -> Status {
    set_setting(|s| s.set_min_task_size(bytes as u64))
}

symbol_version!(GDSROUTE_0.2: gdsroute_settings_get_min_task_size, gdsroute_settings_set_min_task_size);

/// Reads the GDS threshold in bytes (default 16 KiB) into `*bytes`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_gds_threshold(bytes: *mut usize) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(bytes, "bytes", |s| s.gds_threshold() as usize) }
}

/// Sets the GDS threshold: device requests smaller than this use the POSIX backend. 0 is allowed.
/// Works whatever the environment held: an invalid `KVIKIO_GDS_THRESHOLD` is replaced by this value
/// (other invalid variables keep failing calls until they are set too; README, Settings).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_gds_threshold(bytes: usize) -> Status {
    set_setting(|s| s.set_gds_threshold(bytes as u64))
}

/// Reads the bounce buffer size in bytes (default 16 MiB) into `*bytes`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_bounce_buffer_size(bytes: *mut usize) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(bytes, "bytes", |s| s.bounce_buffer_size() as usize) }
}

/// Sets the bounce buffer size; must be positive. The pinned buffers the library allocates are
/// this size or 4 MiB, whichever is smaller (two 2 MiB pieces alternate; see README, Settings).
/// Works whatever the environment held: an invalid `KVIKIO_BOUNCE_BUFFER_SIZE` is replaced by this value
/// (other invalid variables keep failing calls until they are set too; README, Settings).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_bounce_buffer_size(bytes: usize) -> Status {
    guard(|| settings::live().set_bounce_buffer_size(bytes as u64))
}

/// Reads whether cuFile's own statistics are collected (`GDSROUTE_CUFILE_STATS`, default on).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_cufile_stats(enabled: *mut bool) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(enabled, "enabled", |s| s.cufile_stats()) }
}

/// Turns collection of cuFile's own statistics (the `cufile_n_*` counters) on or off. Takes
/// effect only if called before cuFile is first opened (the first device read that considers
/// cuFile, or `gdsroute_file_cufile_verdict` / `gdsroute_diagnose`). Off is the workaround for
/// cuFile 1.15's crash at process exit with statistics on (see README, "Known issues").
/// Works whatever the environment held: an invalid `GDSROUTE_CUFILE_STATS` is replaced by this value
/// (other invalid variables keep failing calls until they are set too; README, Settings).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_cufile_stats(enabled: bool) -> Status {
    set_setting(|s| s.set_cufile_stats(enabled))
}

/// Reads the most page-cache bytes the registered page cache may pin
/// (`GDSROUTE_PAGE_CACHE_PIN_MAX`; default an eighth of physical memory or of the cgroup's
/// memory limit, at most 16 GiB) into `*bytes`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_page_cache_pin_max(bytes: *mut u64) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(bytes, "bytes", |s| s.page_cache_pin_max()) }
}

/// Sets the most page-cache bytes the library may pin so that the GPU copies file ranges read
/// before straight from the page cache (no bounce buffer). 0 turns this off for reads from now
/// on: they use bounce buffers, and windows already registered stay pinned, unused, until their
/// file changes or its handle closes. See docs/routing.md, "Registered page cache".
/// Works whatever the environment held: an invalid `GDSROUTE_PAGE_CACHE_PIN_MAX` is replaced by this value
/// (other invalid variables keep failing calls until they are set too; README, Settings).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_page_cache_pin_max(bytes: u64) -> Status {
    set_setting(|s| s.set_page_cache_pin_max(bytes))
}

/// Reads which descriptor cuFile is given (a `gdsroute_cufile_fd` value; `GDSROUTE_CUFILE_FD`,
/// default auto) into `*fd`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_cufile_fd(fd: *mut u32) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(fd, "fd", |s| s.cufile_fd() as u32) }
}

/// Chooses the descriptor registered with cuFile for files registered from now on (a handle
/// registers at its first device read that considers cuFile): `GDSROUTE_CUFILE_FD_DIRECT` (a
/// second descriptor opened with `O_DIRECT`, as KvikIO), `_BUFFERED` (the handle's own, so
/// cuFile's compat path reads the page cache) or `_AUTO` (buffered when cuFile reports no
/// nvidia-fs, else `O_DIRECT`). Errors: `GDSROUTE_STATUS_INVALID_ENUM`.
/// Works whatever the environment held: an invalid `GDSROUTE_CUFILE_FD` is replaced by this value
/// (other invalid variables keep failing calls until they are set too; README, Settings).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_cufile_fd(fd: u32) -> Status {
    guard(|| CufileFd::from_raw(fd).map(|v| settings::live().set_cufile_fd(v)))
}

/// Reads whether POSIX reads use direct I/O for page-aligned ranges (`KVIKIO_AUTO_DIRECT_IO_READ`,
/// default off, as in KvikIO) into `*enabled`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_auto_direct_io_read(enabled: *mut bool) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(enabled, "enabled", |s| s.auto_direct_io_read()) }
}

/// Turns direct I/O for POSIX reads on or off, for reads started from now on (KvikIO's
/// `set_auto_direct_io_read`). On: the page-aligned middle of each POSIX read (host memory, and
/// the bounce buffers of device reads) goes through a second descriptor opened with `O_DIRECT`,
/// bypassing the page cache (counted in `posix_direct_bytes`); files on file systems without
/// direct I/O are read through the page cache as before. See docs/routing.md, "Direct I/O".
/// Works whatever the environment held: an invalid `KVIKIO_AUTO_DIRECT_IO_READ` is replaced by this value
/// (other invalid variables keep failing calls until they are set too; README, Settings).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_auto_direct_io_read(enabled: bool) -> Status {
    set_setting(|s| s.set_auto_direct_io_read(enabled))
}

/// Reads whether POSIX writes use direct I/O for the whole pages of their range
/// (`KVIKIO_AUTO_DIRECT_IO_WRITE`; default off, unlike KvikIO: docs/writes.md, "Direct-I/O writes") into `*enabled`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_auto_direct_io_write(enabled: *mut bool) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(enabled, "enabled", |s| s.auto_direct_io_write()) }
}

/// Turns direct I/O for POSIX writes on or off, for writes started from now on (KvikIO's
/// `set_auto_direct_io_write`). On: the whole pages inside each POSIX write's range (host memory,
/// and the bounce buffers of device writes) go through a second descriptor opened with
/// `O_DIRECT`, bypassing the page cache (counted in `posix_direct_write_bytes`); an unaligned
/// head and a tail shorter than a page go through the page cache, so nothing outside the range
/// is written; files on file systems without direct I/O are written through the page cache as
/// before. cuFile's writes are not affected (cuFile has its own descriptor).
/// Works whatever the environment held: an invalid `KVIKIO_AUTO_DIRECT_IO_WRITE` is replaced by
/// this value (other invalid variables keep failing calls until they are set too).
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_auto_direct_io_write(enabled: bool) -> Status {
    set_setting(|s| s.set_auto_direct_io_write(enabled))
}

/// Reads when stream-ordered calls (`gdsroute_file_read_async`, ...) queue on their stream
/// without blocking the caller (`GDSROUTE_STREAM_ORDERED`; a `gdsroute_stream_ordered` value,
/// default `GDSROUTE_STREAM_ORDERED_AUTO`) into `*mode`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_stream_ordered(mode: *mut u32) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(mode, "mode", |s| s.stream_ordered() as u32) }
}

/// Chooses, for stream-ordered calls from now on (a `gdsroute_stream_ordered` value): queue them
/// on their stream without blocking the caller, behind a flag wait on every stream (`ON`), or
/// (`AUTO`, the default) behind a flag wait on streams the legacy default stream does not wait for
/// (created `CU_STREAM_NON_BLOCKING`) and, on the others, relayed (copies or a relay kernel
/// queued on the stream) where `GDSROUTE_STREAM_RELAY` is on (counted in `stream_calls_relayed`)
/// or else KvikIO's fallback;
/// or KvikIO's fallback everywhere (`OFF`): synchronise the stream, then move the bytes on the
/// calling thread before the call returns (counted in `stream_calls_blocking_setting`). Works whatever the environment held, as the other setters.
/// `INVALID_ENUM` for another value.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_stream_ordered(mode: u32) -> Status {
    guard(|| crate::abi::StreamOrdered::from_raw(mode).map(|v| settings::live().set_stream_ordered(v)))
}

/// Reads whether stream-ordered calls that cuFile serves, on streams registered with
/// `gdsroute_stream_register`, go through `cuFileReadAsync` / `cuFileWriteAsync`
/// (`GDSROUTE_CUFILE_ASYNC=native`) into `*native`; false: `tasks`, the default (gdsroute's stream
/// mode with parallel cuFile tasks).
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_cufile_async_native(native: *mut bool) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(native, "native", |s| s.cufile_async() == crate::settings::CufileAsync::Native) }
}

/// Chooses `native` (true) or `tasks` (false) for `GDSROUTE_CUFILE_ASYNC`, for stream
/// registrations and stream-ordered calls from now on (docs/routing.md, "Stream-ordered calls").
/// Works whatever the environment held, as the other setters.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_cufile_async_native(native: bool) -> Status {
    let mode = if native { crate::settings::CufileAsync::Native } else { crate::settings::CufileAsync::Tasks };
    set_setting(|s| s.set_cufile_async(mode))
}

symbol_version!(gdsroute_settings_get_compat_mode, gdsroute_settings_set_compat_mode, gdsroute_settings_get_num_threads, gdsroute_settings_set_num_threads, gdsroute_settings_get_task_size, gdsroute_settings_set_task_size, gdsroute_settings_get_gds_threshold, gdsroute_settings_set_gds_threshold, gdsroute_settings_get_bounce_buffer_size, gdsroute_settings_set_bounce_buffer_size, gdsroute_settings_get_cufile_stats, gdsroute_settings_set_cufile_stats, gdsroute_settings_get_page_cache_pin_max, gdsroute_settings_set_page_cache_pin_max, gdsroute_settings_get_cufile_fd, gdsroute_settings_set_cufile_fd, gdsroute_settings_get_auto_direct_io_read, gdsroute_settings_set_auto_direct_io_read);
/// Reads whether a handle opened by a program that uses CUDA prepares the device route in the
/// background (`GDSROUTE_PREPARE_AT_OPEN`, default on) into `*enabled`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_prepare_at_open(enabled: *mut bool) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(enabled, "enabled", |s| s.prepare_at_open()) }
}

/// Chooses whether handles opened from now on prepare the device route in the background when the
/// program already uses CUDA (libcuda loaded and a context current on the opening thread): the
/// pool's streams and bounce buffers, and, for handles whose compat mode is not ON, cuFile's
/// process-level verdict with its driver open (0.4-0.7 s), which the first device read then joins
/// instead of paying for it (docs/performance.md, "The first read of a fresh process"). Off: all of
/// it happens in the first device read. A program that never uses CUDA starts nothing either way.
/// Works whatever the environment held: an invalid `GDSROUTE_PREPARE_AT_OPEN` is replaced by this value.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_prepare_at_open(enabled: bool) -> Status {
    set_setting(|s| s.set_prepare_at_open(enabled))
}

symbol_version!(GDSROUTE_0.2: gdsroute_settings_get_auto_direct_io_write, gdsroute_settings_set_auto_direct_io_write, gdsroute_settings_get_stream_ordered, gdsroute_settings_set_stream_ordered, gdsroute_settings_get_cufile_async_native, gdsroute_settings_set_cufile_async_native);
symbol_version!(GDSROUTE_0.2: gdsroute_settings_get_prepare_at_open, gdsroute_settings_set_prepare_at_open);

/// Reads whether handles opened from now on get the worker pool of the drive that holds their
/// file (`KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE`, default off: the shared pool) into `*enabled`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_thread_pool_per_block_device(enabled: *mut bool) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(enabled, "enabled", |s| s.thread_pool_per_block_device()) }
}

/// Chooses, for handles opened from now on, between the shared pool (off) and a pool per
/// physical drive (on; KvikIO's `set_thread_pool_per_block_device`): a partition counts as its
/// disk and an NVMe namespace as its controller, so that a slow drive's tasks do not queue in
/// front of another drive's; files without a block device share a pool per kind of file system
/// (`memory` for tmpfs, `network`, `fuse`, `overlay`, `other`). Each pool has the thread-count
/// setting's threads and follows its changes. `gdsroute_file_pool_name` says which pool a handle
/// got. Handles opened before keep theirs.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_thread_pool_per_block_device(enabled: bool) -> Status {
    set_setting(|s| s.set_thread_pool_per_block_device(enabled))
}

symbol_version!(GDSROUTE_0.2: gdsroute_settings_get_thread_pool_per_block_device, gdsroute_settings_set_thread_pool_per_block_device);

/// Reads whether `GDSROUTE_STREAM_ORDERED=auto` relays stream-ordered calls on the streams the
/// legacy default stream waits for (`GDSROUTE_STREAM_RELAY`, default on) into `*enabled`.
#[must_use]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gdsroute_settings_get_stream_relay(enabled: *mut bool) -> Status {
    // SAFETY: the caller passes NULL or a writable pointer.
    unsafe { read_setting(enabled, "enabled", |s| s.stream_relay()) }
}

/// Chooses, for stream-ordered calls from now on under `GDSROUTE_STREAM_ORDERED=auto`, between
/// relaying those on the legacy and per-thread default streams and on blocking streams (on:
/// copies, or a relay kernel, queued on the stream move the bytes and the caller does not
/// block; the default) and KvikIO's blocking fallback there (off). docs/routing.md,
/// "Relayed stream-ordered calls". Works whatever the environment held: an invalid
/// `GDSROUTE_STREAM_RELAY` is replaced by this value.
#[must_use]
#[unsafe(no_mangle)]
pub extern "C" fn gdsroute_settings_set_stream_relay(enabled: bool) -> Status {
    set_setting(|s| s.set_stream_relay(enabled))
}

symbol_version!(GDSROUTE_0.2: gdsroute_settings_get_stream_relay, gdsroute_settings_set_stream_relay);
