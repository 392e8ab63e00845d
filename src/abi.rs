//! Every type that crosses the C ABI, with the validators of values received from C: the status
//! codes, the enumerations (compat mode, cuFile descriptor, fallback reason, statistics state and
//! format, NUMA placement) and the two counters structs. They sit at the bottom of the layers,
//! beside `error`: the core uses these same types (re-exported where it used them before) and
//! `ffi` hands them to C; cbindgen writes them into include/gdsroute.h.
//!
//! One job in one file, although over 450 lines (most of them the field docs the header
//! carries): the declarations of the C ABI, read together and under the one stability rule below.
//!
//! Stability: values are append-only, never renumbered (like zstd_errors.h). A retired value
//! stays here as a comment and is never reused; a struct gains fields only at its end.

use crate::error::{Error, Result};

/// Result of a gdsroute call. 0 is success; other values are grouped: 1xx bad arguments,
/// 2xx file-system and I/O, 3xx CUDA and cuFile, 4xx settings, 9xx internal.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 100,
    /// An argument had a value the function does not accept.
    InvalidArgument = 101,
    /// The open flags were not one of "r", "r+", "w", "w+", "x", "x+".
    InvalidFlags = 102,
    /// An enumeration value passed from C was out of range.
    InvalidEnum = 103,
    /// A size or offset does not fit the arithmetic of the call (off_t, ssize_t or size_t).
    Overflow = 104,
    /// The file handle was closed.
    ClosedHandle = 105,
    /// The path contains an interior NUL byte or is empty.
    InvalidPath = 106,
    /// The file could not be opened; the last error message holds the path and errno.
    OpenFailed = 200,
    /// A read or other system call failed; the last error message holds errno.
    IoError = 201,
    /// A batch entry was cancelled (`gdsroute_batch_cancel`, `gdsroute_batch_free`) before any of
    /// its bytes moved.
    Canceled = 202,
    /// The CUDA driver (libcuda) could not be loaded or initialised.
    CudaUnavailable = 300,
    /// A CUDA driver call failed.
    CudaError = 301,
    /// libcufile could not be loaded or cuFile cannot serve this file, and compat mode is OFF.
    CufileUnavailable = 302,
    /// A cuFile call failed.
    CufileError = 303,
    /// A stream-ordered call was given a stream that is being captured into a CUDA graph: its
    /// transfer would be recorded into the graph, not run, so it is refused.
    StreamCapturing = 304,
    /// A cuFile driver setting was given after cuFile's driver opened in this process (or began
    /// opening): cuFile reads its settings only when it opens, so the setting was not applied.
    CufileDriverOpen = 305,
    /// A setting (environment variable or API value) is invalid.
    InvalidSetting = 400,
    /// A panic was caught inside the library; the library stays usable.
    Panic = 900,
    /// An internal invariant was violated or a resource (thread, memory) could not be obtained.
    Internal = 901,
}

/// Every status, in numeric order; used by `from_code` and the tests. A module constant, not an
/// associated one: cbindgen turned the associated `Status::ALL` into a `gdsroute_status_ALL` macro of Rust
/// variant names that no C program could compile (issue 15).
const ALL: [Status; 20] = [
    Status::Ok,
    Status::NullArgument,
    Status::InvalidArgument,
    Status::InvalidFlags,
    Status::InvalidEnum,
    Status::Overflow,
    Status::ClosedHandle,
    Status::InvalidPath,
    Status::OpenFailed,
    Status::IoError,
    Status::Canceled,
    Status::CudaUnavailable,
    Status::CudaError,
    Status::CufileUnavailable,
    Status::CufileError,
    Status::StreamCapturing,
    Status::CufileDriverOpen,
    Status::InvalidSetting,
    Status::Panic,
    Status::Internal,
];

impl Status {
    /// The status with this numeric code, if there is one.
    pub fn from_code(code: u32) -> Option<Status> {
        ALL.into_iter().find(|s| *s as u32 == code)
    }

    /// A short, static, NUL-terminated description of the code.
    pub fn description(self) -> &'static std::ffi::CStr {
        match self {
            Status::Ok => c"success",
            Status::NullArgument => c"a required pointer argument was NULL",
            Status::InvalidArgument => c"invalid argument",
            Status::InvalidFlags => c"invalid open flags (expected \"r\", \"r+\", \"w\", \"w+\", \"x\" or \"x+\")",
            Status::InvalidEnum => c"enumeration value out of range",
            Status::Overflow => c"size or offset overflows the call's arithmetic",
            Status::ClosedHandle => c"the file handle is closed",
            Status::InvalidPath => c"invalid path",
            Status::OpenFailed => c"the file could not be opened",
            Status::IoError => c"I/O error",
            Status::Canceled => c"the batch entry was cancelled before it started",
            Status::CudaUnavailable => c"the CUDA driver is unavailable",
            Status::CudaError => c"CUDA driver call failed",
            Status::CufileUnavailable => c"cuFile is unavailable and compat mode is OFF",
            Status::CufileError => c"cuFile call failed",
            Status::StreamCapturing => c"the stream is being captured into a CUDA graph",
            Status::CufileDriverOpen => c"cuFile's driver is open already: driver settings apply only before it opens",
            Status::InvalidSetting => c"invalid setting",
            Status::Panic => c"internal panic caught",
            Status::Internal => c"internal error",
        }
    }
}

/// The C status code of each error.
impl Error {
    /// The C status code for this error.
    pub fn status(&self) -> Status {
        match self {
            Error::NullArgument(_) => Status::NullArgument,
            Error::InvalidArgument(_) => Status::InvalidArgument,
            Error::InvalidFlags(_) => Status::InvalidFlags,
            Error::InvalidEnum { .. } => Status::InvalidEnum,
            Error::Overflow(_) => Status::Overflow,
            Error::ClosedHandle { .. } => Status::ClosedHandle,
            Error::InvalidPath(_) => Status::InvalidPath,
            Error::Canceled(_) => Status::Canceled,
            Error::Open { .. } => Status::OpenFailed,
            Error::Io { .. } | Error::MappedFileShrank { .. } => Status::IoError,
            Error::CudaUnavailable(_) => Status::CudaUnavailable,
            Error::Cuda(_) => Status::CudaError,
            Error::CufileUnavailable(_) => Status::CufileUnavailable,
            Error::Cufile(_) => Status::CufileError,
            Error::StreamCapturing(_) => Status::StreamCapturing,
            Error::DriverOpen(_) => Status::CufileDriverOpen,
            Error::InvalidSetting(_) => Status::InvalidSetting,
            Error::Panic(_) => Status::Panic,
            Error::Internal(_) => Status::Internal,
            Error::BatchEntry { source, .. } => source.status(),
        }
    }
}

/// Why cuFile is not used; stable numbers, reported through the C API.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FallbackReason {
    /// cuFile serves this file.
    None = 0,
    /// Compat mode is ON: cuFile is never called.
    CompatOn = 1,
    /// The CUDA driver is missing or did not initialise.
    CudaUnavailable = 2,
    /// libcufile could not be loaded, or lacks a required symbol.
    LibraryUnavailable = 3,
    /// `/run/udev` is not a directory: cuFile cannot classify volumes (KvikIO's AUTO check).
    NoUdev = 4,
    /// Running under WSL (KvikIO's AUTO check).
    Wsl = 5,
    /// `cuFileDriverOpen` failed.
    DriverOpenFailed = 6,
    /// The `O_DIRECT` open of the file failed (e.g. tmpfs).
    DirectOpenFailed = 7,
    /// `cuFileHandleRegister` failed for the file.
    RegisterFailed = 8,
}

impl FallbackReason {
    /// Every reason, in numeric order.
    pub(crate) const ALL: [FallbackReason; 9] = [
        FallbackReason::None,
        FallbackReason::CompatOn,
        FallbackReason::CudaUnavailable,
        FallbackReason::LibraryUnavailable,
        FallbackReason::NoUdev,
        FallbackReason::Wsl,
        FallbackReason::DriverOpenFailed,
        FallbackReason::DirectOpenFailed,
        FallbackReason::RegisterFailed,
    ];

    /// The C name, as `include/gdsroute.h` spells it.
    pub(crate) fn c_name(self) -> &'static str {
        match self {
            FallbackReason::None => "GDSROUTE_FALLBACK_REASON_NONE",
            FallbackReason::CompatOn => "GDSROUTE_FALLBACK_REASON_COMPAT_ON",
            FallbackReason::CudaUnavailable => "GDSROUTE_FALLBACK_REASON_CUDA_UNAVAILABLE",
            FallbackReason::LibraryUnavailable => "GDSROUTE_FALLBACK_REASON_LIBRARY_UNAVAILABLE",
            FallbackReason::NoUdev => "GDSROUTE_FALLBACK_REASON_NO_UDEV",
            FallbackReason::Wsl => "GDSROUTE_FALLBACK_REASON_WSL",
            FallbackReason::DriverOpenFailed => "GDSROUTE_FALLBACK_REASON_DRIVER_OPEN_FAILED",
            FallbackReason::DirectOpenFailed => "GDSROUTE_FALLBACK_REASON_DIRECT_OPEN_FAILED",
            FallbackReason::RegisterFailed => "GDSROUTE_FALLBACK_REASON_REGISTER_FAILED",
        }
    }
}

/// Whether device reads go through cuFile or our POSIX backend.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompatMode {
    /// Always call cuFile; failures to use it are errors.
    Off = 0,
    /// Never call cuFile.
    On = 1,
    /// Try cuFile, fall back to POSIX (with a recorded reason) when it cannot serve a file.
    Auto = 2,
}

impl CompatMode {
    /// Converts a raw value received from C.
    pub fn from_raw(value: u32) -> Result<CompatMode> {
        let modes = [CompatMode::Off, CompatMode::On, CompatMode::Auto];
        modes.into_iter().find(|m| *m as u32 == value).ok_or(Error::InvalidEnum { what: "compat mode", value })
    }
}

/// Whether stream-ordered calls (`gdsroute_file_read_async` and the rest) queue on their stream
/// without blocking the caller (`GDSROUTE_STREAM_ORDERED`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StreamOrdered {
    /// Never: the stream is synchronised and the bytes moved before the call returns (KvikIO's
    /// fallback).
    Off = 0,
    /// On every stream, the legacy and per-thread default streams and blocking streams included
    /// (a synchronous legacy-stream call of the program behind such a call deadlocks:
    /// docs/routing.md, "Stream-ordered calls").
    On = 1,
    /// On streams the legacy default stream does not wait for, those created with
    /// `CU_STREAM_NON_BLOCKING`; on the others relayed while `GDSROUTE_STREAM_RELAY` is on (the
    /// default), else the blocking fallback. The default.
    #[default]
    Auto = 2,
}

impl StreamOrdered {
    /// Converts a raw value received from C.
    pub fn from_raw(value: u32) -> Result<StreamOrdered> {
        let modes = [StreamOrdered::Off, StreamOrdered::On, StreamOrdered::Auto];
        modes.into_iter().find(|m| *m as u32 == value).ok_or(Error::InvalidEnum { what: "stream-ordered mode", value })
    }
}

/// The descriptor handed to `cuFileHandleRegister`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CufileFd {
    /// The buffered descriptor when cuFile's driver reports no nvidia-fs (version 0.0), else
    /// `O_DIRECT`.
    #[default]
    Auto = 0,
    /// Always a second descriptor opened with `O_DIRECT` (KvikIO's behaviour).
    Direct = 1,
    /// Always the handle's own buffered descriptor.
    Buffered = 2,
}

impl CufileFd {
    /// Converts a raw value received from C.
    pub fn from_raw(value: u32) -> Result<CufileFd> {
        let fds = [CufileFd::Auto, CufileFd::Direct, CufileFd::Buffered];
        fds.into_iter().find(|fd| *fd as u32 == value).ok_or(Error::InvalidEnum { what: "cuFile descriptor", value })
    }
}

/// Whether the `cufile_n_*` counters are live, reported in `cufile_stats_state`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CufileStatsState {
    /// cuFile has not been loaded in this process (no device read needed it yet, or it is absent).
    NotLoaded = 0,
    /// libcufile is loaded but has no statistics API (older than 1.15) or it failed.
    ApiMissing = 1,
    /// cuFile's per-GPU counters are collected; the `cufile_n_*` fields are live.
    Active = 2,
    /// Per-handle statistics: cuFile counts per process, not per file, so the fields read 0.
    ProcessWideOnly = 3,
    /// Collection was turned off (`GDSROUTE_CUFILE_STATS=0` or the settings API).
    Disabled = 4,
}

/// A snapshot of the counters. `#[repr(C)]` because it crosses the C ABI by value; the field order
/// is append-only and every field is a `u64`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Size of this struct in bytes as the library filled it (set by the library).
    pub struct_size: u64,
    /// Logical read calls (one `gdsroute_file_read` or `gdsroute_file_pread` is one call, however
    /// many tasks), each counted once: when it finished, or when it returned an error before
    /// reading (a bad argument, a closed handle, an invalid setting, ...). A call with a NULL
    /// handle is counted in the process-wide counters only.
    pub calls: u64,
    /// Logical calls that returned an error, whatever the error: at the call itself, or for a
    /// `pread` at `gdsroute_op_wait`.
    pub calls_failed: u64,
    /// Calls that stopped short of the requested size at end of file.
    pub calls_short: u64,
    /// Bytes requested by calls that started reading (a call rejected before reading adds 0).
    pub bytes_requested: u64,
    /// Bytes delivered by completed calls (contiguous from the requested offset).
    pub bytes_read: u64,
    /// Tasks run (one pread loop or one cuFileRead each).
    pub tasks: u64,
    /// Tasks that failed.
    pub tasks_failed: u64,
    /// Bytes delivered by tasks (equals `posix_bytes + cufile_bytes`).
    pub task_bytes: u64,
    /// Tasks on our POSIX backend.
    pub posix_tasks: u64,
    /// Bytes delivered by our POSIX backend.
    pub posix_bytes: u64,
    /// POSIX tasks because the destination was host memory.
    pub posix_tasks_host_memory: u64,
    /// POSIX tasks because a device request was below the GDS threshold.
    pub posix_tasks_below_threshold: u64,
    /// POSIX tasks because compat mode was ON.
    pub posix_tasks_compat_on: u64,
    /// POSIX tasks because AUTO fell back (cuFile unusable for the file).
    pub posix_tasks_auto_fallback: u64,
    /// Tasks served by `cuFileRead`.
    pub cufile_tasks: u64,
    /// Bytes delivered by `cuFileRead`.
    pub cufile_bytes: u64,
    /// A `CufileStatsState` value: whether the `cufile_n_*` fields below are live.
    pub cufile_stats_state: u64,
    /// cuFile's own per-GPU `n_total_reads`, summed over GPUs, since start or reset.
    pub cufile_n_total_reads: u64,
    /// cuFile's `n_nvfs_reads`: reads through nvidia-fs (real GPUDirect Storage).
    pub cufile_n_nvfs_reads: u64,
    /// cuFile's `n_posix_reads`: reads through cuFile's own compatibility (POSIX) path.
    pub cufile_n_posix_reads: u64,
    /// cuFile's `n_p2p_reads`: reads through PCIe P2PDMA.
    pub cufile_n_p2p_reads: u64,
    /// cuFile's `n_unaligned_reads`.
    pub cufile_n_unaligned_reads: u64,
    /// cuFile's `n_reads_err`.
    pub cufile_n_reads_err: u64,
    /// cuFile's per-GPU `read_bytes`.
    pub cufile_read_bytes: u64,
    /// Pinned host memory the library holds now for bounce buffers (process-wide; 0 per handle).
    pub pinned_bytes: u64,
    /// Most pinned host memory the library has held at once (process-wide; 0 per handle).
    pub pinned_bytes_peak: u64,
    /// Of `posix_bytes`: bytes of device reads that the copy engine took straight from the
    /// registered page cache (no bounce buffer); see the `page_cache_pin_max` setting.
    pub posix_mapped_bytes: u64,
    /// Page-cache bytes pinned now by the registered page cache (process-wide; 0 per handle).
    pub page_cache_pinned_bytes: u64,
    /// Most page-cache bytes pinned at once (process-wide; 0 per handle).
    pub page_cache_pinned_bytes_peak: u64,
    /// File windows registered so far (process-wide; 0 per handle; not reset by
    /// `gdsroute_stats_reset`).
    pub page_cache_registrations: u64,
    /// Windows that could not be registered: refused by the driver, no active primary context,
    /// `mmap` failed, or process exit began; those ranges stay on the bounce route (process-wide;
    /// 0 per handle; not reset by `gdsroute_stats_reset`).
    pub page_cache_refusals: u64,
    /// POSIX tasks whose first, non-blocking read (`RWF_NOWAIT`) did not get all it asked for
    /// and whose next read then had to wait for the disk: part of the range was not in the page
    /// cache, and the kernel was asked to read the rest of the task ahead
    /// (`POSIX_FADV_WILLNEED`). The first read is the whole task for host memory and a bounce
    /// piece (at most 2 MiB) for device memory. Stays 0 where the kernel cannot tell.
    pub posix_tasks_not_cached: u64,
    /// Of `posix_bytes`: bytes read through an `O_DIRECT` descriptor, bypassing the page cache
    /// (the `auto_direct_io_read` setting, KvikIO's `KVIKIO_AUTO_DIRECT_IO_READ`).
    pub posix_direct_bytes: u64,
    /// Logical write calls (`gdsroute_file_write` or `gdsroute_file_pwrite`), counted as `calls`
    /// counts reads: once each, an early error return included. Reads' fields above never count
    /// writes.
    pub write_calls: u64,
    /// Write calls that returned an error (at the call, or for a `pwrite` at `gdsroute_op_wait`).
    pub write_calls_failed: u64,
    /// Bytes of write calls that succeeded (each covers its whole request; a failed call adds 0,
    /// whatever part of it reached the file).
    pub bytes_written: u64,
    /// Write tasks run (one pwrite loop, bounce loop or cuFileWrite loop each).
    pub write_tasks: u64,
    /// Write tasks that failed.
    pub write_tasks_failed: u64,
    /// Write tasks on our POSIX backend (host memory, or device memory through bounce buffers).
    pub posix_write_tasks: u64,
    /// Bytes written by POSIX write tasks that succeeded.
    pub posix_write_bytes: u64,
    /// Write tasks served by `cuFileWrite`.
    pub cufile_write_tasks: u64,
    /// Bytes written by `cuFileWrite` tasks that succeeded.
    pub cufile_write_bytes: u64,
    /// cuFile's own per-GPU `n_total_writes`, summed over GPUs (live as `cufile_n_total_reads`).
    pub cufile_n_total_writes: u64,
    /// cuFile's `n_nvfs_writes`: writes through nvidia-fs.
    pub cufile_n_nvfs_writes: u64,
    /// cuFile's `n_posix_writes`: writes through cuFile's own compatibility (POSIX) path.
    pub cufile_n_posix_writes: u64,
    /// cuFile's `n_p2p_writes`: writes through PCIe P2PDMA.
    pub cufile_n_p2p_writes: u64,
    /// cuFile's `n_writes_err`.
    pub cufile_n_writes_err: u64,
    /// cuFile's per-GPU `write_bytes`.
    pub cufile_write_bytes_gpu: u64,
    /// Of `posix_write_bytes`: bytes written through an `O_DIRECT` descriptor, bypassing the page
    /// cache (the `auto_direct_io_write` setting, KvikIO's `KVIKIO_AUTO_DIRECT_IO_WRITE`).
    pub posix_direct_write_bytes: u64,
    /// Stream-ordered calls (`gdsroute_file_read_async`, `_write_async` and their `_ptr` forms, of
    /// either direction) queued on their stream without blocking the caller: the stream waits on
    /// a flag until gdsroute's waiter thread saw it reach the call and the transfer ran on the
    /// usual routes (their tasks are counted as any others).
    pub stream_calls_ordered: u64,
    /// Stream-ordered calls that synchronised the stream and then moved their bytes on the calling
    /// thread (KvikIO's behaviour) because the driver cannot make a stream wait on a flag
    /// (`cuStreamWaitValue32_v2` missing or not supported).
    pub stream_calls_blocking_no_stream_wait: u64,
    /// Stream-ordered calls that blocked the same way because the `GDSROUTE_STREAM_ORDERED`
    /// setting is off.
    pub stream_calls_blocking_setting: u64,
    /// `gdsroute_stream_register` calls that registered nothing with cuFile (`GDSROUTE_CUFILE_ASYNC`
    /// is `tasks`, the default; cuFile unavailable or without the stream API; a default stream):
    /// a counted no-op.
    pub stream_registrations_skipped: u64,
    /// Stream-ordered calls queued on their stream by cuFile itself (`cuFileReadAsync` /
    /// `cuFileWriteAsync`, under `GDSROUTE_CUFILE_ASYNC=native` on a registered stream); their
    /// transfer counts as one cuFile task.
    pub stream_calls_cufile_async: u64,
    /// `gdsroute_stream_register` calls that registered the stream with cuFile
    /// (`cuFileStreamRegister`, under `GDSROUTE_CUFILE_ASYNC=native`).
    pub stream_registrations_cufile: u64,
    /// `gdsroute_buffer_register` / `gdsroute_memory_register` calls that registered the buffer
    /// with cuFile (`cuFileBufRegister`).
    pub buffer_registrations_cufile: u64,
    /// Buffer registrations made while cuFile is not used in this process (compat mode ON, or
    /// cuFile unusable): each a counted no-op, a repeated one included.
    pub buffer_registrations_skipped: u64,
    /// Bytes registered with cuFile through gdsroute now (not a count: it falls as buffers are
    /// deregistered, and a reset leaves it).
    pub buffer_registered_bytes: u64,
    /// Stream-ordered calls that blocked the same way because `GDSROUTE_STREAM_ORDERED` is `auto`
    /// (the default) and their stream is one the legacy default stream waits for: the legacy or
    /// per-thread default stream, or a stream created without `CU_STREAM_NON_BLOCKING`; and the
    /// call was not relayed (`GDSROUTE_STREAM_RELAY` off, or the relay could not start).
    pub stream_calls_blocking_legacy_waits: u64,
    /// Stream-ordered calls queued without blocking on a stream the legacy default stream waits
    /// for, relayed (copies or a relay kernel queued on the stream; `auto`; docs/routing.md, "Relayed
    /// stream-ordered calls"). Their tasks count as POSIX tasks into host memory (the relay's
    /// slots). Not in `stream_calls_ordered`.
    pub stream_calls_relayed: u64,
    /// Bytes of host memory pinned now for relayed calls: each stream's ring (128 MiB for queued
    /// copies, 64 MiB for a relay kernel's) and the calls' control blocks, kept for reuse until
    /// the process exits (not a count: a reset leaves it). Process-wide; 0 in a handle's
    /// counters. Not in `pinned_bytes`, which counts bounce buffers.
    pub relay_pinned_bytes: u64,
}

/// Output formats of `gdsroute_stats_render`.
#[repr(u32)]
pub(crate) enum StatsFormat {
    /// For people: a summary line in words (reads, bytes, tasks, the route and why, whether
    /// cuFile was considered), then one `name value` line per counter that is not 0, a line
    /// counting those that are 0, and cuFile's `n= nvfs= posix=` line when its counters are live.
    Text = 0,
    /// One JSON object with every field (zeros included).
    Json = 1,
}

/// Where a device's bounce buffers are placed, reported in
/// `gdsroute_device_stats.bounce_numa_placement`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumaPlacement {
    /// The device has no bounce buffers yet (no bounce-buffer transfer or preparation for it), so
    /// nothing was placed.
    NoBuffers = 0,
    /// The buffers' pages are taken from NUMA node `bounce_numa_node`, the device's node as
    /// `/sys/bus/pci/devices/<bus id>/numa_node` gives it (asked with `mbind(MPOL_PREFERRED)`
    /// before the pages exist; the kernel may still use another node when that one is full).
    Placed = 1,
    /// Not placed: the machine does not say which node the device is on (`numa_node` is -1 or
    /// missing, usual in a virtual machine or on a one-node machine); the buffers' pages are
    /// wherever the kernel put them.
    NodeUnknown = 2,
    /// Asked for node `bounce_numa_node` and the kernel refused (`mbind` failed, e.g. under a
    /// seccomp filter): those buffers' pages are wherever the kernel put them.
    Refused = 3,
}

/// The process-wide counters of one device (by its CUDA ordinal in this process), filled by
/// `gdsroute_stats_get_devices`. `#[repr(C)]`, every field a `u64`, append-only like
/// `gdsroute_stats`. It counts reads into and writes from this device's memory, device or managed
/// memory alike; host memory is not attributed to any device. For the tasks of device memory
/// these fields sum, over the devices, to the same fields of `gdsroute_stats` taken at the same
/// moment: both are counted under one lock.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Size of this struct in bytes as the library filled it (set by the library).
    pub struct_size: u64,
    /// The device's CUDA ordinal in this process (as `cuDeviceGet` numbers it, after
    /// `CUDA_VISIBLE_DEVICES`).
    pub device_ordinal: u64,
    /// Read tasks into this device's memory (as `gdsroute_stats.tasks`).
    pub tasks: u64,
    /// Of them, failed.
    pub tasks_failed: u64,
    /// Bytes they delivered (`posix_bytes + cufile_bytes`).
    pub task_bytes: u64,
    /// Read tasks on our POSIX backend (bounce buffers or the registered page cache).
    pub posix_tasks: u64,
    /// Bytes they delivered.
    pub posix_bytes: u64,
    /// POSIX read tasks because the request was below the GDS threshold.
    pub posix_tasks_below_threshold: u64,
    /// POSIX read tasks because compat mode was ON.
    pub posix_tasks_compat_on: u64,
    /// POSIX read tasks because AUTO fell back (cuFile cannot serve the file).
    pub posix_tasks_auto_fallback: u64,
    /// Of `posix_bytes`, copied straight from the registered page cache.
    pub posix_mapped_bytes: u64,
    /// POSIX read tasks whose first, non-blocking read found bytes missing from the page cache.
    pub posix_tasks_not_cached: u64,
    /// Of `posix_bytes`, read with direct I/O.
    pub posix_direct_bytes: u64,
    /// Read tasks served by `cuFileRead`.
    pub cufile_tasks: u64,
    /// Bytes they delivered.
    pub cufile_bytes: u64,
    /// Write tasks from this device's memory (as `gdsroute_stats.write_tasks`).
    pub write_tasks: u64,
    /// Of them, failed.
    pub write_tasks_failed: u64,
    /// Write tasks through bounce buffers (device-to-pinned copy, then `pwrite`).
    pub posix_write_tasks: u64,
    /// Bytes written by those that succeeded.
    pub posix_write_bytes: u64,
    /// Write tasks served by `cuFileWrite`.
    pub cufile_write_tasks: u64,
    /// Bytes written by those that succeeded.
    pub cufile_write_bytes: u64,
    /// Pinned host memory held now for this device's bounce buffers (the process's
    /// `pinned_bytes` is the sum over devices).
    pub pinned_bytes: u64,
    /// Most pinned at once for this device's bounce buffers (the process's `pinned_bytes_peak`
    /// is the peak of the sum, at most the sum of these).
    pub pinned_bytes_peak: u64,
    /// A `gdsroute_numa_placement` value: whether the bounce buffers are placed on the device's
    /// NUMA node.
    pub bounce_numa_placement: u64,
    /// The node asked for (`PLACED`, `REFUSED`); 0 otherwise.
    pub bounce_numa_node: u64,
    /// A `gdsroute_cufile_stats_state` value, as in `gdsroute_stats`: whether the `cufile_n_*`
    /// fields below are live. cuFile's per-GPU entries are matched to devices by UUID.
    pub cufile_stats_state: u64,
    /// cuFile's own `n_total_reads` for this GPU, since cuFile was opened or
    /// `gdsroute_stats_reset`.
    pub cufile_n_total_reads: u64,
    /// cuFile's `n_nvfs_reads` for this GPU (real GPUDirect Storage).
    pub cufile_n_nvfs_reads: u64,
    /// cuFile's `n_posix_reads` for this GPU (cuFile's compatibility path).
    pub cufile_n_posix_reads: u64,
    /// cuFile's `n_p2p_reads` for this GPU (PCIe P2PDMA).
    pub cufile_n_p2p_reads: u64,
    /// cuFile's `n_unaligned_reads` for this GPU.
    pub cufile_n_unaligned_reads: u64,
    /// cuFile's `n_reads_err` for this GPU.
    pub cufile_n_reads_err: u64,
    /// cuFile's `read_bytes` for this GPU.
    pub cufile_read_bytes: u64,
    /// cuFile's `n_total_writes` for this GPU.
    pub cufile_n_total_writes: u64,
    /// cuFile's `n_nvfs_writes` for this GPU.
    pub cufile_n_nvfs_writes: u64,
    /// cuFile's `n_posix_writes` for this GPU.
    pub cufile_n_posix_writes: u64,
    /// cuFile's `n_p2p_writes` for this GPU.
    pub cufile_n_p2p_writes: u64,
    /// cuFile's `n_writes_err` for this GPU.
    pub cufile_n_writes_err: u64,
    /// cuFile's `write_bytes` for this GPU.
    pub cufile_write_bytes_gpu: u64,
    /// Of `posix_write_bytes`: bytes written through an `O_DIRECT` descriptor
    /// (`auto_direct_io_write`).
    pub posix_direct_write_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_sorted() {
        let codes: Vec<u32> = ALL.iter().map(|s| *s as u32).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted);
        for s in ALL {
            assert_eq!(Status::from_code(s as u32), Some(s));
        }
        assert_eq!(Status::from_code(7), None);
    }
}

/// cuFile's driver properties (`cuFileDriverGetProperties`, KvikIO's `DriverProperties`) and
/// what gdsroute did with the caller's driver settings. `#[repr(C)]`, every field a `u64`,
/// append-only; the caller sets `struct_size = sizeof(gdsroute_driver_properties)` and the
/// library writes at most that many bytes (and sets `struct_size` to how many it wrote).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CufileDriverProperties {
    /// Size of this struct in bytes as the library filled it.
    pub struct_size: u64,
    /// nvidia-fs major version; 0 (with `nvfs_minor` 0) when the kernel module is not loaded and
    /// cuFile serves every read and write through its POSIX compatibility path.
    pub nvfs_major: u64,
    /// nvidia-fs minor version.
    pub nvfs_minor: u64,
    /// 1 when cuFile polls for the completion of I/O up to `poll_threshold_kb` (control flag
    /// `CU_FILE_USE_POLL_MODE`), else 0.
    pub poll_mode: u64,
    /// 1 when cuFile may fall back to its compatibility mode (control flag
    /// `CU_FILE_ALLOW_COMPAT_MODE`), else 0.
    pub allow_compat_mode: u64,
    /// Largest I/O that polls (KiB).
    pub poll_threshold_kb: u64,
    /// Largest direct I/O nvidia-fs issues (KiB).
    pub max_direct_io_size_kb: u64,
    /// cuFile's `dstatusflags`: bit `1 << n` per supported storage type (LUSTRE 0, WEKAFS 1,
    /// NFS 2, GPFS 3, NVME 4, NVMEOF 5, SCSI 6, SCALEFLUX_CSD 7, NVMESH 8, BEEGFS 9, ...).
    pub status_flags: u64,
    /// cuFile's `dcontrolflags`: bit `1 << n` per control (USE_POLL_MODE 0, ALLOW_COMPAT_MODE 1).
    pub control_flags: u64,
    /// cuFile's `fflags`: bit `1 << n` per feature (DYN_ROUTING 0, BATCH_IO 1, STREAMS 2,
    /// PARALLEL_IO 3).
    pub feature_flags: u64,
    /// GPU memory cuFile reserves per device for its bounce buffers (KiB).
    pub max_device_cache_size_kb: u64,
    /// Size of one of those buffers (KiB).
    pub per_buffer_cache_size_kb: u64,
    /// Most device memory `cuFileBufRegister` may pin (KiB).
    pub max_device_pinned_mem_size_kb: u64,
    /// Largest batch (`cuFileBatchIOSetUp`).
    pub max_batch_io_size: u64,
    /// Batch timeout (ms).
    pub max_batch_io_timeout_ms: u64,
    /// Driver settings (`gdsroute_driver_set_*`) that gdsroute applied just before it opened
    /// cuFile's driver and cuFile accepted. Whether cuFile then honoured them shows in the fields
    /// above.
    pub settings_applied: u64,
    /// Driver settings cuFile refused when gdsroute applied them before the open (the exit
    /// report and `gdsroute-diagnose` say which and why).
    pub settings_refused: u64,
}

/// What a monitor's observation describes (`gdsroute_observation.kind`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObservationKind {
    /// One logical call: a read, pread, write, pwrite or stream-ordered call, from the moment it
    /// was made to the moment its result was known (for a pread: when its operation settled).
    Call = 0,
    /// One task of a call (a monitor added with `GDSROUTE_MONITOR_TASKS`).
    Task = 1,
}

/// The route an observation's bytes took (`gdsroute_observation.route`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObservedRoute {
    /// No task ran: the call failed before it was routed, or had nothing to move (0 bytes, at
    /// or past the end of the file).
    None = 0,
    /// gdsroute's POSIX backend (`posix_reason` says why).
    Posix = 1,
    /// cuFile.
    Cufile = 2,
}

/// The memory an observation's bytes went to or came from (`gdsroute_observation.memory`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObservedMemory {
    /// Not known: the call failed before its buffer was classified.
    Unknown = 0,
    /// Host memory (pageable or pinned).
    Host = 1,
    /// CUDA device memory.
    Device = 2,
    /// CUDA managed memory.
    Managed = 3,
}

/// Why the POSIX backend ran (`gdsroute_observation.posix_reason`; the `posix_tasks_*` counters).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObservedPosixReason {
    /// Not the POSIX route.
    None = 0,
    /// Host memory: cuFile is never used for it.
    HostMemory = 1,
    /// A device request below the GDS threshold.
    BelowThreshold = 2,
    /// Compat mode ON.
    CompatOn = 3,
    /// Compat mode AUTO and cuFile cannot serve the file.
    AutoFallback = 4,
}

/// One observation handed to a monitor's callback (`gdsroute_monitor_add`): valid only during the
/// callback (copy what you keep; `path` too). `#[repr(C)]`, append-only: read `struct_size`
/// before fields added after your header's.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Observation {
    /// Size of this struct in bytes as the library filled it.
    pub struct_size: u64,
    /// A `gdsroute_observation_kind`: a call or a task.
    pub kind: u32,
    /// 0: a read (file to memory); 1: a write (memory to file).
    pub direction: u32,
    /// The file's path as opened, NUL-terminated; NULL when the call failed before a file was
    /// known (a closed handle).
    pub path: *const std::ffi::c_char,
    /// The file offset asked for.
    pub file_offset: u64,
    /// The bytes asked for.
    pub size: u64,
    /// The bytes moved (fewer than `size` at the end of the file; 0 when `ok` is 0).
    pub bytes: u64,
    /// For a task: where its bytes are in the call's buffer (an offset from the buffer the call
    /// was given); 0 for a call.
    pub buffer_offset: u64,
    /// When it started and ended, in nanoseconds of `CLOCK_MONOTONIC`.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// A `gdsroute_observed_memory`.
    pub memory: u32,
    /// A `gdsroute_observed_route`.
    pub route: u32,
    /// A `gdsroute_observed_posix_reason`.
    pub posix_reason: u32,
    /// 1 when it succeeded, 0 when it failed (the call returned, or its operation gave, an error).
    pub ok: u32,
    /// Stream-ordered calls: 1 (`gdsroute_file_read_async` and the rest), else 0.
    pub stream_ordered: u32,
    /// 0 (keeps the struct free of padding).
    pub reserved: u32,
}

/// `gdsroute_monitor_add` flag: the monitor sees every task too, not only every call.
pub const MONITOR_TASKS: u32 = 1;

/// `gdsroute_batch_entry.opcode`: read `size` bytes of the file at `file_offset` into `buf`.
pub const BATCH_READ: u32 = 0;
/// `gdsroute_batch_entry.opcode`: write `size` bytes from `buf` to the file at `file_offset`.
pub const BATCH_WRITE: u32 = 1;
/// The most entries a batch may have in flight (`gdsroute_batch_create`).
pub const BATCH_MAX_ENTRIES: usize = 1 << 16;

/// One read or write of a batch submission (`gdsroute_batch_submit`). `#[repr(C)]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BatchEntry {
    /// An open handle (a closed one fails the entry with `CLOSED_HANDLE`).
    pub file: *const crate::api::file::File,
    /// Host (pageable or pinned), device or managed memory of `size` bytes: written by a read,
    /// only read by a write. NULL only with `size` 0.
    pub buf: *mut std::ffi::c_void,
    /// Bytes to move.
    pub size: usize,
    /// Where in the file.
    pub file_offset: u64,
    /// `GDSROUTE_BATCH_READ` or `GDSROUTE_BATCH_WRITE`.
    pub opcode: u32,
    /// 0.
    pub reserved: u32,
    /// Any value; returned with the entry's completion.
    pub cookie: u64,
}

/// A finished batch entry (`gdsroute_batch_wait`). `#[repr(C)]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BatchResult {
    /// The entry's `cookie`.
    pub cookie: u64,
    /// `GDSROUTE_STATUS_OK`, or why the entry failed (`IO_ERROR`, `CLOSED_HANDLE`, `CANCELED`,
    /// ...), as the synchronous call would have.
    pub status: Status,
    /// The errno behind an `IO_ERROR` or `OPEN_FAILED` status, else 0.
    pub errno_value: i32,
    /// Bytes moved: all of a write's, a read's up to the end of the file; 0 on error.
    pub bytes: usize,
}
