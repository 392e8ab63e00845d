//! The settings a Rust caller reads and changes (KvikIO's defaults): one getter and one setter
//! per setting, each doing what its `gdsroute_settings_*` function of the C ABI does (`ffi::settings`).
//! Values come from the `KVIKIO_*`/`GDSROUTE_*` environment variables at the first call that needs
//! them (README, "Settings"); a getter fails with `Error::InvalidSetting` while the variable
//! behind it is invalid, a setter always works. The table, the environment reading and the
//! snapshot live in the crate-private `settings_table` (src/settings/), which the crate reaches as
//! `crate::settings::…` through the glob at the end of this file.

use crate::error::Result;
use crate::io::thread_pool;

pub use crate::abi::{CompatMode, CufileFd, StreamOrdered};
pub use crate::settings_table::{
    DEFAULT_AUTO_DIRECT_IO_WRITE, DEFAULT_BOUNCE_BUFFER_SIZE, DEFAULT_GDS_THRESHOLD, DEFAULT_MIN_TASK_SIZE, DEFAULT_TASK_SIZE, Descriptor, FdChoice,
    MAX_THREADS, default_num_threads,
};
/// Every setting's descriptor (variable, aliases, one-line doc), in the order reports list them.
pub use crate::settings_table::{Setting, TABLE};

/// The compat mode of files opened from now on (`KVIKIO_COMPAT_MODE`).
pub fn compat_mode() -> Result<CompatMode> {
    Ok(crate::settings_table::global()?.compat_mode())
}

/// Sets the compat mode of files opened from now on; open handles keep theirs.
pub fn set_compat_mode(mode: CompatMode) {
    crate::settings_table::live().set_compat_mode(mode);
}

/// The number of worker threads of the shared pool (`KVIKIO_NTHREADS`).
pub fn num_threads() -> Result<usize> {
    Ok(crate::settings_table::global()?.num_threads())
}

/// Resizes the shared worker pool (1 to `MAX_THREADS`); running tasks finish first on surplus threads.
pub fn set_num_threads(threads: usize) -> Result<()> {
    thread_pool::set_global_num_threads(threads)
}

/// The task size in bytes (`KVIKIO_TASK_SIZE`, default `DEFAULT_TASK_SIZE`).
pub fn task_size() -> Result<u64> {
    Ok(crate::settings_table::global()?.task_size())
}

/// Sets the task size in bytes (not 0).
pub fn set_task_size(bytes: u64) -> Result<()> {
    crate::settings_table::live().set_task_size(bytes)
}

/// The smallest task a small parallel read on the POSIX routes is spread into
/// (`GDSROUTE_MIN_TASK_SIZE`, default `DEFAULT_MIN_TASK_SIZE`; 0: KvikIO's split only).
pub fn min_task_size() -> Result<u64> {
    Ok(crate::settings_table::global()?.min_task_size())
}

/// Sets the smallest task a small read is spread into (0 turns the spreading off).
pub fn set_min_task_size(bytes: u64) {
    crate::settings_table::live().set_min_task_size(bytes);
}

/// The size below which device reads skip cuFile (`KVIKIO_GDS_THRESHOLD`).
pub fn gds_threshold() -> Result<u64> {
    Ok(crate::settings_table::global()?.gds_threshold())
}

/// Sets the GDS threshold in bytes.
pub fn set_gds_threshold(bytes: u64) {
    crate::settings_table::live().set_gds_threshold(bytes);
}

/// The bounce-buffer size in bytes (`KVIKIO_BOUNCE_BUFFER_SIZE`).
pub fn bounce_buffer_size() -> Result<u64> {
    Ok(crate::settings_table::global()?.bounce_buffer_size())
}

/// Sets the bounce-buffer size in bytes (not 0), for bounce buffers allocated from now on.
pub fn set_bounce_buffer_size(bytes: u64) -> Result<()> {
    crate::settings_table::live().set_bounce_buffer_size(bytes)
}

/// Whether cuFile's own statistics are read into the counters (`GDSROUTE_CUFILE_STATS`).
pub fn cufile_stats() -> Result<bool> {
    Ok(crate::settings_table::global()?.cufile_stats())
}

/// Turns the reading of cuFile's statistics on or off.
pub fn set_cufile_stats(enabled: bool) {
    crate::settings_table::live().set_cufile_stats(enabled);
}

/// The most page-cache bytes the registered page cache may pin, 0 for off (`GDSROUTE_PAGE_CACHE_PIN_MAX`).
pub fn page_cache_pin_max() -> Result<u64> {
    Ok(crate::settings_table::global()?.page_cache_pin_max())
}

/// Sets the registered page cache's limit in bytes (0 turns it off).
pub fn set_page_cache_pin_max(bytes: u64) {
    crate::settings_table::live().set_page_cache_pin_max(bytes);
}

/// Which descriptor cuFile is given (`GDSROUTE_CUFILE_FD`).
pub fn cufile_fd() -> Result<CufileFd> {
    Ok(crate::settings_table::global()?.cufile_fd())
}

/// Sets which descriptor cuFile is given, for files opened from now on.
pub fn set_cufile_fd(fd: CufileFd) {
    crate::settings_table::live().set_cufile_fd(fd);
}

/// Whether aligned host reads go through `O_DIRECT` (`KVIKIO_AUTO_DIRECT_IO_READ`).
pub fn auto_direct_io_read() -> Result<bool> {
    Ok(crate::settings_table::global()?.auto_direct_io_read())
}

/// Turns direct-I/O reads on or off.
pub fn set_auto_direct_io_read(enabled: bool) {
    crate::settings_table::live().set_auto_direct_io_read(enabled);
}

/// Whether handles opened from now on get the pool of the drive that holds their file
/// (`KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE`; default off: the shared pool).
pub fn thread_pool_per_block_device() -> Result<bool> {
    Ok(crate::settings_table::global()?.thread_pool_per_block_device())
}

/// Sets `thread_pool_per_block_device` for handles opened from now on.
pub fn set_thread_pool_per_block_device(enabled: bool) {
    crate::settings_table::live().set_thread_pool_per_block_device(enabled);
}

/// Whether aligned host writes go through `O_DIRECT` (`KVIKIO_AUTO_DIRECT_IO_WRITE`).
pub fn auto_direct_io_write() -> Result<bool> {
    Ok(crate::settings_table::global()?.auto_direct_io_write())
}

/// Turns direct-I/O writes on or off.
pub fn set_auto_direct_io_write(enabled: bool) {
    crate::settings_table::live().set_auto_direct_io_write(enabled);
}

/// Whether a handle opened by a program that uses CUDA prepares the device route in the
/// background (`GDSROUTE_PREPARE_AT_OPEN`, default on).
pub fn prepare_at_open() -> Result<bool> {
    Ok(crate::settings_table::global()?.prepare_at_open())
}

/// Turns the preparation at open on or off, for handles opened from now on.
pub fn set_prepare_at_open(enabled: bool) {
    crate::settings_table::live().set_prepare_at_open(enabled);
}

/// Whether `Auto` relays stream-ordered calls on streams the legacy default stream waits for
/// (`GDSROUTE_STREAM_RELAY`, default on: they are relayed, their copies or a relay kernel queued on
/// the stream; off: they block, as KvikIO's fallback does).
pub fn stream_relay() -> Result<bool> {
    Ok(crate::settings_table::global()?.stream_relay())
}

/// Turns relaying on or off, for stream-ordered calls from now on.
pub fn set_stream_relay(enabled: bool) {
    crate::settings_table::live().set_stream_relay(enabled);
}

/// When stream-ordered calls queue on their stream without blocking the caller
/// (`GDSROUTE_STREAM_ORDERED`, default `Auto`: on streams the legacy default stream does not
/// wait for; `Off`: KvikIO's blocking fallback everywhere).
pub fn stream_ordered() -> Result<StreamOrdered> {
    Ok(crate::settings_table::global()?.stream_ordered())
}

/// Chooses when stream-ordered calls from now on queue on their stream (`On`: every stream;
/// `Auto`; `Off`: never).
pub fn set_stream_ordered(mode: StreamOrdered) {
    crate::settings_table::live().set_stream_ordered(mode);
}

/// Whether stream-ordered calls that cuFile serves on streams registered with cuFile go through
/// `cuFileReadAsync` / `cuFileWriteAsync` (`GDSROUTE_CUFILE_ASYNC=native`) rather than the stream
/// mode's parallel cuFile tasks (`tasks`, the default).
pub fn cufile_async_native() -> Result<bool> {
    Ok(crate::settings_table::global()?.cufile_async() == crate::settings_table::CufileAsync::Native)
}

/// Chooses `native` (true) or `tasks` for stream registrations and calls from now on.
pub fn set_cufile_async_native(native: bool) {
    let mode = if native { crate::settings_table::CufileAsync::Native } else { crate::settings_table::CufileAsync::Tasks };
    crate::settings_table::live().set_cufile_async(mode);
}

// The crate's own view: `crate::settings::Settings`, `::global`, `::env`, … keep resolving to
// the table module; these names are not public (the lines above shadow the few that are).
pub(crate) use crate::settings_table::*;
