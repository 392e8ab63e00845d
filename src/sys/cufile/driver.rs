//! The cuFile driver and I/O calls on a loaded [`CufileLibrary`]: open/close, properties, the
//! log-file redirect, file-handle registration, `cuFileRead` with its return decoded, and the
//! stream and batch calls. The caller decides when to open the driver (only after CUDA
//! initialised: cuFile 1.16+ spins forever without libcuda); nothing here opens or closes it
//! implicitly, in a Drop, or at exit.
//!
//! One job in one file, although over 450 lines: the calls of cuFile's driver and their results
//! decoded, each a few lines over its symbol, most of the rest the properties' field docs.

use std::ffi::c_void;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use super::codes::{CU_FILE_INVALID_VALUE, CufileFailure, IoFailure};
use super::library::{
    BATCH_MODE, BATCH_READ, BATCH_WRITE, CufileLibrary, HANDLE_TYPE_OPAQUE_FD, RawBatchEvent, RawBatchIo, RawCufileDescr,
    RawCufileError, RawDescrHandle,
};

/// The environment variable through which a user names cuFile's log file.
const LOGFILE_ENV: &str = "CUFILE_LOGFILE_PATH";
/// The environment variable naming an alternate cufile.json.
const JSON_ENV: &str = "CUFILE_ENV_PATH_JSON";
const DEFAULT_JSON: &str = "/etc/cufile.json";

fn check(context: &'static str, r: RawCufileError) -> Result<(), CufileFailure> {
    if r.err == 0 {
        Ok(())
    } else {
        Err(CufileFailure::code(context, r.err, r.cu_err))
    }
}

/// `CUfileDrvProps_t` (56 bytes, unchanged since cuFile 1.2), read field by field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverProperties {
    /// nvidia-fs major version; 0 when the kernel module is not loaded.
    pub nvfs_major: u32,
    /// nvidia-fs minor version.
    pub nvfs_minor: u32,
    /// Size below which nvidia-fs polls instead of waiting (KiB).
    pub poll_thresh_size: u64,
    /// Largest direct I/O nvidia-fs issues (KiB).
    pub max_direct_io_size: u64,
    /// Bit `1 << n` per supported storage type (LUSTRE 0, WEKAFS 1, NFS 2, ... NVME 4, ...).
    pub dstatusflags: u32,
    /// Bit `1 << n` per control setting (USE_POLL_MODE 0, ALLOW_COMPAT_MODE 1, ...).
    pub dcontrolflags: u32,
    /// Bit `1 << n` per feature (DYN_ROUTING 0, BATCH_IO 1, STREAMS 2, PARALLEL_IO 3, P2P 4).
    pub fflags: u32,
    /// GPU bounce-buffer cache limit (KiB).
    pub max_device_cache_size: u32,
    /// Size of one bounce buffer (KiB).
    pub per_buffer_cache_size: u32,
    /// Limit on pinned GPU memory (KiB).
    pub max_device_pinned_mem_size: u32,
    /// Largest batch.
    pub max_batch_io_size: u32,
    /// Batch timeout (ms).
    pub max_batch_io_timeout_msecs: u32,
}

/// One of the driver settings cuFile's setters change (sizes in KiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverControl {
    /// `cuFileDriverSetPollMode(enabled, threshold_kb)`: poll for completion of I/O up to this size.
    PollMode {
        /// Poll rather than wait.
        enabled: bool,
        /// Largest I/O that polls (KiB).
        threshold_kb: usize,
    },
    /// `cuFileDriverSetMaxDirectIOSize`: the largest direct I/O nvidia-fs issues.
    MaxDirectIoKb(usize),
    /// `cuFileDriverSetMaxCacheSize`: the GPU memory cuFile reserves per device for its buffers.
    MaxCacheKb(usize),
    /// `cuFileDriverSetMaxPinnedMemSize`: the most device memory `cuFileBufRegister` may pin.
    MaxPinnedMemoryKb(usize),
}

impl DriverProperties {
    /// Size of the C struct.
    pub(crate) const C_SIZE: usize = 56;

    /// Parses the C struct from its bytes (x86-64/aarch64 layout, native endianness).
    pub fn parse(b: &[u8; Self::C_SIZE]) -> Self {
        DriverProperties {
            nvfs_major: read_u32(b, 0),
            nvfs_minor: read_u32(b, 4),
            poll_thresh_size: read_u64(b, 8),
            max_direct_io_size: read_u64(b, 16),
            dstatusflags: read_u32(b, 24),
            dcontrolflags: read_u32(b, 28),
            fflags: read_u32(b, 32),
            max_device_cache_size: read_u32(b, 36),
            per_buffer_cache_size: read_u32(b, 40),
            max_device_pinned_mem_size: read_u32(b, 44),
            max_batch_io_size: read_u32(b, 48),
            max_batch_io_timeout_msecs: read_u32(b, 52),
        }
    }

    /// True when nvidia-fs is loaded (its version is not 0.0), i.e. real GDS may be possible.
    /// Even then, the route a read took is only known from the per-GPU statistics.
    pub fn is_gds_available(&self) -> bool {
        self.nvfs_major != 0 || self.nvfs_minor != 0
    }

    /// True when the ALLOW_COMPAT_MODE control bit is set.
    pub fn compat_mode_allowed(&self) -> bool {
        self.dcontrolflags & (1 << 1) != 0
    }
}

pub(crate) fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub(crate) fn read_u64(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A registered cuFile file handle. Dropping it calls `cuFileHandleDeregister`; the file
/// descriptor itself stays open and owned by the caller, who must keep it open while the handle
/// lives.
///
/// Thread safety: `Send + Sync`; cuFile allows concurrent reads on one handle.
#[derive(Debug)]
pub struct CufileHandle<'lib> {
    lib: &'lib CufileLibrary,
    raw: *mut c_void,
    fd: RawFd,
}

// SAFETY: the handle is an opaque token that libcufile accepts from any thread; cuFileRead and
// cuFileHandleDeregister synchronise internally. `lib` is `Sync`.
unsafe impl Send for CufileHandle<'_> {}
// SAFETY: as above; `&CufileHandle` only allows reads, which cuFile supports concurrently.
unsafe impl Sync for CufileHandle<'_> {}

impl CufileHandle<'_> {
    /// The registered file descriptor.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// True when the handle was registered through `lib` (a batch may only carry those).
    pub(crate) fn belongs_to(&self, lib: &CufileLibrary) -> bool {
        std::ptr::eq(self.lib, lib)
    }

    /// One I/O of a batch on this file: `size` bytes at `file_offset` between the file and
    /// `base + base_offset`, a write when `write`; `cookie` comes back in its event.
    pub(crate) fn batch_io(&self, write: bool, base: *mut c_void, base_offset: i64, size: usize, file_offset: i64, cookie: usize) -> RawBatchIo {
        RawBatchIo {
            mode: BATCH_MODE,
            dev_base: base,
            file_offset,
            dev_offset: base_offset,
            size,
            handle: self.raw,
            opcode: if write { BATCH_WRITE } else { BATCH_READ },
            cookie: cookie as *mut c_void,
        }
    }
}

/// A cuFile batch handle (`cuFileBatchIOSetUp`) taking up to `capacity` I/Os per submission.
/// Its owner drops it only once nothing it submitted is in flight: it then goes back to its
/// library's idle handles for the next batch, unless `retire`d (or [`MAX_IDLE_BATCHES`] wait
/// there already), which `cuFileBatchIODestroy`s it. Set-up took 0.1-0.2 ms on the H200 and a
/// destroy 96-108 ms (cuFile 1.15.1, measured 2026-12-03), hence the reuse.
#[derive(Debug)]
pub(crate) struct CufileBatch<'lib> {
    lib: &'lib CufileLibrary,
    raw: *mut c_void,
    capacity: u32,
    reuse: bool,
}

/// Most idle batch handles a library keeps (one per batch that ran at the same time).
pub(crate) const MAX_IDLE_BATCHES: usize = 16;

impl CufileBatch<'_> {
    /// `cuFileBatchIOSubmit(ios, flags 0)`. More I/Os than the capacity (cuFile answers 5040,
    /// an "internal" error, and logs the real cause) or none are refused here with
    /// `CU_FILE_INVALID_VALUE`, without calling cuFile.
    ///
    /// # Safety
    /// Every I/O's handle is registered in this library and stays registered, and its memory
    /// stays valid (writable for a read, unchanged for a write), until its event came back or
    /// `cancel` succeeded; a device buffer's context is current.
    pub(crate) unsafe fn submit(&self, ios: &mut [RawBatchIo]) -> Result<(), CufileFailure> {
        let nr = u32::try_from(ios.len()).unwrap_or(u32::MAX);
        if nr == 0 || nr > self.capacity {
            return Err(CufileFailure::code("cuFileBatchIOSubmit", CU_FILE_INVALID_VALUE, 0));
        }
        let f = self.lib.sym.batch_submit.ok_or(CufileFailure::missing("cuFileBatchIOSubmit"))?;
        // SAFETY: `nr` entries of the header's layout (asserted in library.rs tests); the rest
        // is the caller's contract.
        check("cuFileBatchIOSubmit", unsafe { f(self.raw, nr, ios.as_mut_ptr(), 0) })
    }

    /// `cuFileBatchIOGetStatus`: waits up to `timeout` for at least `min_nr` finished I/Os
    /// and writes up to `events.len()` of them. Returns how many it wrote (never more than
    /// `events.len()`, whatever cuFile says).
    pub(crate) fn status(&self, min_nr: u32, events: &mut [RawBatchEvent], timeout: std::time::Duration) -> Result<usize, CufileFailure> {
        let f = self.lib.sym.batch_get_status.ok_or(CufileFailure::missing("cuFileBatchIOGetStatus"))?;
        let mut nr = u32::try_from(events.len()).unwrap_or(u32::MAX);
        let mut ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
        // SAFETY: `events` has room for `nr` entries of the header's layout; `nr` and `ts` are
        // valid for the call.
        check("cuFileBatchIOGetStatus", unsafe { f(self.raw, min_nr.min(nr), &mut nr, events.as_mut_ptr(), &mut ts) })?;
        Ok((nr as usize).min(events.len()))
    }

    /// `cuFileBatchIOCancel`: asks cuFile to stop what this batch has in flight. cuFile 1.15
    /// reports no event for the I/Os it cancelled.
    pub(crate) fn cancel(&self) -> Result<(), CufileFailure> {
        let f = self.lib.sym.batch_cancel.ok_or(CufileFailure::missing("cuFileBatchIOCancel"))?;
        // SAFETY: a live batch handle of this library.
        check("cuFileBatchIOCancel", unsafe { f(self.raw) })
    }

    /// Destroys the handle when it drops instead of keeping it for reuse: for a handle cuFile
    /// failed on, or that still reports events of I/Os the owner gave up on.
    pub(crate) fn retire(&mut self) {
        self.reuse = false;
    }
}

impl Drop for CufileBatch<'_> {
    fn drop(&mut self) {
        if self.reuse {
            let mut idle = self.lib.idle_batches.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE_BATCHES {
                idle.push((self.raw as usize, self.capacity));
                return;
            }
        }
        if let Some(f) = self.lib.sym.batch_destroy {
            // SAFETY: `raw` came from a successful cuFileBatchIOSetUp of this library, is in no
            // idle list, and is destroyed once, here.
            unsafe { f(self.raw) }
        }
    }
}

impl Drop for CufileHandle<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.lib.sym.handle_deregister {
            // SAFETY: `raw` came from a successful cuFileHandleRegister in the same library and is
            // deregistered exactly once, here.
            unsafe { f(self.raw) }
        }
    }
}

impl CufileLibrary {
    /// `cuFileDriverOpen`. Call only after `cuInit` succeeded and a context is current (cuFile
    /// 1.16+ never returns without libcuda). cuFile reference-counts opens; each success here
    /// should be matched by [`CufileLibrary::driver_close`] or simply leaked at exit.
    ///
    /// Errors: the cuFile code (5001 when nvidia-fs is missing and compat mode is off, 5033/5011
    /// for CUDA trouble).
    pub fn driver_open(&self) -> Result<(), CufileFailure> {
        let f = self
            .sym
            .driver_open
            .ok_or(CufileFailure::missing("cuFileDriverOpen"))?;
        // SAFETY: no arguments; the library is loaded. The caller has initialised CUDA (documented).
        check("cuFileDriverOpen", unsafe { f() })?;
        self.opens.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// `cuFileDriverClose_v2` (or `cuFileDriverClose`), only if this object opened the driver and
    /// has not closed it as often: other libraries in the process may hold their own opens.
    ///
    /// Errors: `CU_FILE_INVALID_VALUE` with context "driver_close" when there is no open of ours to
    /// close; the cuFile code if the close fails (5006 while I/O is in flight).
    pub fn driver_close(&self) -> Result<(), CufileFailure> {
        let f = self
            .sym
            .driver_close
            .ok_or(CufileFailure::missing("cuFileDriverClose_v2"))?;
        let took = self
            .opens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if !took {
            return Err(CufileFailure::code(
                "driver_close",
                CU_FILE_INVALID_VALUE,
                0,
            ));
        }
        // SAFETY: no arguments; we hold one open that this call releases.
        let r = unsafe { f() };
        if r.err != 0 {
            self.opens.fetch_add(1, Ordering::AcqRel);
        }
        check("cuFileDriverClose_v2", r)
    }

    /// Number of successful [`CufileLibrary::driver_open`] calls not yet closed.
    pub fn driver_opens(&self) -> usize {
        self.opens.load(Ordering::Acquire)
    }

    /// `cuFileDriverGetProperties`. Before the driver opens it reports staged/default values on
    /// 1.20, but 1.15 without libcuda fails with 5011 (CUresult 3): call it after CUDA initialised,
    /// like [`CufileLibrary::driver_open`], since cuFile may try an implicit open.
    pub fn properties(&self) -> Result<DriverProperties, CufileFailure> {
        let f = self
            .sym
            .driver_get_properties
            .ok_or(CufileFailure::missing("cuFileDriverGetProperties"))?;
        // Larger than the struct, so a future library that appends fields cannot overrun it.
        #[repr(C, align(8))]
        struct Buf([u8; 256]);
        let mut buf = Buf([0; 256]);
        // SAFETY: `buf` is writable, 8-aligned and 256 bytes, more than the 56 the call writes.
        check("cuFileDriverGetProperties", unsafe {
            f(buf.0.as_mut_ptr().cast())
        })?;
        let head: &[u8; DriverProperties::C_SIZE] =
            buf.0[..DriverProperties::C_SIZE].try_into().expect("56");
        Ok(DriverProperties::parse(head))
    }

    /// One of cuFile's driver setters (`cuFileDriverSetPollMode` and the `SetMax*Size` family,
    /// sizes in KiB). cuFile reads them as staged values when its driver opens; after the open,
    /// 1.15 returns success and changes nothing (measured on the H200, docs/local-api.md,
    /// "cuFile driver properties"), so the caller applies them just before `driver_open`.
    pub fn set_driver_control(&self, control: DriverControl) -> Result<(), CufileFailure> {
        let s = &self.sym;
        // SAFETY (each call): plain values by value, as cufile.h declares them.
        match control {
            DriverControl::PollMode { enabled, threshold_kb } => {
                let f = s.set_poll_mode.ok_or(CufileFailure::missing("cuFileDriverSetPollMode"))?;
                check("cuFileDriverSetPollMode", unsafe { f(enabled, threshold_kb) })
            }
            DriverControl::MaxDirectIoKb(kb) => {
                let f = s.set_max_direct_io_size.ok_or(CufileFailure::missing("cuFileDriverSetMaxDirectIOSize"))?;
                check("cuFileDriverSetMaxDirectIOSize", unsafe { f(kb) })
            }
            DriverControl::MaxCacheKb(kb) => {
                let f = s.set_max_cache_size.ok_or(CufileFailure::missing("cuFileDriverSetMaxCacheSize"))?;
                check("cuFileDriverSetMaxCacheSize", unsafe { f(kb) })
            }
            DriverControl::MaxPinnedMemoryKb(kb) => {
                let f = s.set_max_pinned_mem_size.ok_or(CufileFailure::missing("cuFileDriverSetMaxPinnedMemSize"))?;
                check("cuFileDriverSetMaxPinnedMemSize", unsafe { f(kb) })
            }
        }
    }

    /// `cuFileHandleRegister` for `fd` (an `CU_FILE_HANDLE_TYPE_OPAQUE_FD` descriptor).
    ///
    /// Errors: the cuFile code; 5027 is common in containers/VMs without `/run/udev` even in compat
    /// mode, and means "read this file through the POSIX path".
    pub fn register_handle(&self, fd: RawFd) -> Result<CufileHandle<'_>, CufileFailure> {
        let f = self
            .sym
            .handle_register
            .ok_or(CufileFailure::missing("cuFileHandleRegister"))?;
        let mut descr = RawCufileDescr {
            handle_type: HANDLE_TYPE_OPAQUE_FD,
            handle: RawDescrHandle {
                handle: std::ptr::null_mut(),
            },
            fs_ops: std::ptr::null(),
        };
        descr.handle.fd = fd;
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` and `descr` are valid for writes/reads for the call; `descr` follows the
        // header's layout (asserted in library.rs tests); cuFile does not keep `descr`.
        check("cuFileHandleRegister", unsafe { f(&mut raw, &mut descr) })?;
        Ok(CufileHandle { lib: self, raw, fd })
    }

    /// `cuFileRead`: reads `size` bytes at `file_offset` into `dev_base + dev_offset`.
    ///
    /// Returns the bytes read (fewer than `size` at end of file). Errors: [`IoFailure::Errno`]
    /// for −1 with a plain errno; [`IoFailure::Cufile`] for a return below −1, or −1 with an
    /// errno above 5000; `Cufile(5022)` if `handle` belongs to another library or `size` exceeds
    /// `isize::MAX`.
    ///
    /// # Safety
    /// `dev_base + dev_offset .. + size` must be device (or host) memory writable for the whole
    /// call, not accessed concurrently, and the CUDA context owning it must be current.
    pub unsafe fn read(
        &self,
        handle: &CufileHandle<'_>,
        dev_base: *mut c_void,
        size: usize,
        file_offset: i64,
        dev_offset: i64,
    ) -> Result<usize, IoFailure> {
        if !std::ptr::eq(handle.lib, self) || isize::try_from(size).is_err() {
            return Err(IoFailure::Cufile(CU_FILE_INVALID_VALUE));
        }
        // Required at load time, so always present.
        let Some(f) = self.sym.read else {
            return Err(IoFailure::Cufile(CU_FILE_INVALID_VALUE));
        };
        // SAFETY: the handle is registered in this library and alive (borrowed); the buffer
        // contract is the caller's (see # Safety).
        let ret = unsafe { f(handle.raw, dev_base, size, file_offset, dev_offset) };
        if ret >= 0 {
            return Ok(ret as usize);
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        Err(IoFailure::decode(ret, errno))
    }

    /// `cuFileWrite`: writes `size` bytes from `dev_base + dev_offset` at `file_offset`.
    ///
    /// Returns the bytes written. Errors as [`CufileLibrary::read`]; `None` when the library
    /// has no `cuFileWrite`. A negative return is always an error, even where cuFile wrote part
    /// of the range first (it returns -1 for a write that hit a file-size limit midway).
    ///
    /// # Safety
    /// `dev_base + dev_offset .. + size` must be device (or host) memory readable for the whole
    /// call and not changed during it, and the CUDA context owning it must be current.
    pub unsafe fn write(
        &self,
        handle: &CufileHandle<'_>,
        dev_base: *const c_void,
        size: usize,
        file_offset: i64,
        dev_offset: i64,
    ) -> Option<Result<usize, IoFailure>> {
        let f = self.sym.write?;
        if !std::ptr::eq(handle.lib, self) || isize::try_from(size).is_err() {
            return Some(Err(IoFailure::Cufile(CU_FILE_INVALID_VALUE)));
        }
        // SAFETY: the handle is registered in this library and alive (borrowed); the buffer
        // contract is the caller's (see # Safety).
        let ret = unsafe { f(handle.raw, dev_base, size, file_offset, dev_offset) };
        if ret >= 0 {
            return Some(Ok(ret as usize));
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        Some(Err(IoFailure::decode(ret, errno)))
    }

    /// `cuFileReadAsync` (`Read`) or `cuFileWriteAsync` on `stream`: queues a transfer whose
    /// size, file offset and buffer offset are read through `size`, `file_offset` and
    /// `buf_offset` when the stream reaches it, and whose result (bytes, or a negative error) is
    /// written to `*bytes` then. `None` when the library lacks the symbol. Errors: the call's own
    /// (a submission problem); the transfer's come through `*bytes`.
    ///
    /// # Safety
    /// `buf` as for `read` / `write`, until the stream passed the call; the four pointers valid
    /// until then; the CUDA context of `stream` current; `stream` live.
    #[allow(clippy::too_many_arguments)] // cuFile's own argument list
    pub(crate) unsafe fn submit_async(
        &self,
        write: bool,
        handle: &CufileHandle<'_>,
        buf: *mut c_void,
        size: *mut usize,
        file_offset: *mut i64,
        buf_offset: *mut i64,
        bytes: *mut isize,
        stream: *mut c_void,
    ) -> Option<Result<(), CufileFailure>> {
        let (f, context) = if write { (self.sym.write_async?, "cuFileWriteAsync") } else { (self.sym.read_async?, "cuFileReadAsync") };
        if !std::ptr::eq(handle.lib, self) {
            return Some(Err(CufileFailure::code(context, CU_FILE_INVALID_VALUE, 0)));
        }
        // SAFETY: the handle is registered in this library and alive; the rest is the caller's.
        Some(check(context, unsafe { f(handle.raw, buf, size, file_offset, buf_offset, bytes, stream) }))
    }

    /// `cuFileStreamRegister(stream, flags)`; `None` when the library lacks it.
    ///
    /// # Safety
    /// `stream` is live and its context current.
    pub(crate) unsafe fn stream_register(&self, stream: *mut c_void, flags: u32) -> Option<Result<(), CufileFailure>> {
        let f = self.sym.stream_register?;
        // SAFETY: forwarded from the caller.
        Some(check("cuFileStreamRegister", unsafe { f(stream, flags) }))
    }

    /// `cuFileStreamDeregister(stream)`; `None` when the library lacks it.
    ///
    /// # Safety
    /// `stream` was registered with `stream_register` and its context is current.
    pub(crate) unsafe fn stream_deregister(&self, stream: *mut c_void) -> Option<Result<(), CufileFailure>> {
        let f = self.sym.stream_deregister?;
        // SAFETY: forwarded from the caller.
        Some(check("cuFileStreamDeregister", unsafe { f(stream) }))
    }

    /// True when the library exports all five batch calls.
    pub(crate) fn batch_available(&self) -> bool {
        let s = &self.sym;
        s.batch_setup.is_some() && s.batch_submit.is_some() && s.batch_get_status.is_some() && s.batch_cancel.is_some() && s.batch_destroy.is_some()
    }

    /// A batch handle for up to `capacity` I/Os per submission (1 up to the driver's
    /// `max_batch_io_size`, 128 on cuFile 1.15; more gives 5022): an idle one of at least that
    /// capacity, else a new one from `cuFileBatchIOSetUp(capacity)`. `None` unless the library
    /// has all five batch calls. Errors: cuFile's (5049 when compat mode is off and GDS cannot
    /// serve).
    pub(crate) fn batch_setup(&self, capacity: u32) -> Option<Result<CufileBatch<'_>, CufileFailure>> {
        let f = self.sym.batch_setup.filter(|_| self.batch_available())?;
        let reused = {
            let mut idle = self.idle_batches.lock().unwrap_or_else(|p| p.into_inner());
            idle.iter().position(|&(_, c)| c >= capacity).map(|at| idle.swap_remove(at))
        };
        if let Some((raw, capacity)) = reused {
            return Some(Ok(CufileBatch { lib: self, raw: raw as *mut c_void, capacity, reuse: true }));
        }
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` is valid for the write; a plain count by value.
        Some(check("cuFileBatchIOSetUp", unsafe { f(&mut raw, capacity) }).map(|()| CufileBatch { lib: self, raw, capacity, reuse: true }))
    }

    /// `cuFileBufRegister` for a long-lived buffer (flags: 0, or `CU_FILE_RDMA_REGISTER` = 1 etc.).
    ///
    /// # Safety
    /// `base .. base + len` must be one live device (or host) allocation, deregistered with
    /// [`CufileLibrary::buf_deregister`] before it is freed.
    pub unsafe fn buf_register(
        &self,
        base: *const c_void,
        len: usize,
        flags: i32,
    ) -> Result<(), CufileFailure> {
        let f = self
            .sym
            .buf_register
            .ok_or(CufileFailure::missing("cuFileBufRegister"))?;
        // SAFETY: the caller guarantees the allocation (see # Safety).
        check("cuFileBufRegister", unsafe { f(base, len, flags) })
    }

    /// `cuFileBufDeregister`.
    ///
    /// # Safety
    /// `base` must have been registered with [`CufileLibrary::buf_register`] and still be allocated.
    pub unsafe fn buf_deregister(&self, base: *const c_void) -> Result<(), CufileFailure> {
        let f = self
            .sym
            .buf_deregister
            .ok_or(CufileFailure::missing("cuFileBufDeregister"))?;
        // SAFETY: the caller guarantees `base` is a registered, live allocation.
        check("cuFileBufDeregister", unsafe { f(base) })
    }
}

/// True when a cufile.json text has a `"dir"` key on a line that is not a `//` comment.
/// Whether the user told cuFile where to log: `CUFILE_LOGFILE_PATH` set, or a cufile.json
/// (`$CUFILE_ENV_PATH_JSON`, else /etc/cufile.json) with an uncommented `"dir"` key (a textual
/// check: cuFile's JSON allows comments; it errs toward "configured"). Returns where, if so.
///
/// cuFile has no working API for this: `cuFileSetParameterString` with
/// `CUFILE_PARAM_ENV_LOGFILE_PATH` or `CUFILE_PARAM_LOG_DIR` returns success on 1.15 but the log
/// still goes to the working directory (measured on the H200 on 2026-11-29; README, "Known issues"). Only the
/// environment variable, read when the driver opens, works.
pub fn log_configuration() -> Option<&'static str> {
    if std::env::var_os(LOGFILE_ENV).is_some_and(|v| !v.is_empty()) {
        return Some("CUFILE_LOGFILE_PATH is set");
    }
    let json = std::env::var_os(JSON_ENV).filter(|v| !v.is_empty()).unwrap_or(DEFAULT_JSON.into());
    if std::fs::read_to_string(json).is_ok_and(|text| json_sets_log_dir(&text)) {
        return Some("cufile.json sets logging.dir");
    }
    None
}

fn json_sets_log_dir(text: &str) -> bool {
    text.lines()
        .map(str::trim_start)
        .filter(|l| !l.starts_with("//"))
        .any(|l| l.split("//").next().unwrap_or("").contains("\"dir\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_by_offset() {
        let mut b = [0u8; 56];
        b[0..4].copy_from_slice(&2u32.to_ne_bytes());
        b[4..8].copy_from_slice(&17u32.to_ne_bytes());
        b[16..24].copy_from_slice(&16384u64.to_ne_bytes());
        b[28..32].copy_from_slice(&2u32.to_ne_bytes());
        b[52..56].copy_from_slice(&9u32.to_ne_bytes());
        let p = DriverProperties::parse(&b);
        assert_eq!(
            (p.nvfs_major, p.nvfs_minor, p.max_direct_io_size),
            (2, 17, 16384)
        );
        assert_eq!(p.max_batch_io_timeout_msecs, 9);
        assert!(p.is_gds_available() && p.compat_mode_allowed());
        assert!(!DriverProperties::parse(&[0; 56]).is_gds_available());
    }

    #[test]
    fn json_log_dir_detection_ignores_comments() {
        assert!(!json_sets_log_dir(
            "{ \"logging\": {\n // \"dir\": \"/home/x\",\n \"level\": \"ERROR\" } }"
        ));
        assert!(json_sets_log_dir(
            "{ \"logging\": {\n   \"dir\": \"/var/log\", // here\n } }"
        ));
    }
}
