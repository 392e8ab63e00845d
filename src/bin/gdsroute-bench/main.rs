//! `gdsroute-bench --file PATH [options]`: reads a file into device (or host) memory through the
//! C API (`gdsroute_file_pread` + `gdsroute_op_wait`, called from Rust) and prints one
//! `RESULT impl=gdsroute ...` line per measurement, then a table. `--write` measures writes
//! (`gdsroute_file_pwrite` + `gdsroute_op_wait`) from device (or host) memory instead, and
//! `--ceiling`/`--ceiling-direct` what plain `pwrite` from pinned memory reaches on the same file
//! system (`RESULT impl=ceiling`); `--devices` reads into several GPUs at once. Method:
//! docs/performance.md. `scripts/bench-kvikio.py` prints the same lines for KvikIO.

use std::ffi::{CString, c_void};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Barrier;
use std::time::Instant;

use cudarc::driver::sys;
use gdsroute::ffi::file::{
    gdsroute_file_free, gdsroute_file_open, gdsroute_file_open_with_compat_mode,
    gdsroute_file_pread, gdsroute_file_pwrite, gdsroute_file_size, gdsroute_file_sync,
};
use gdsroute::ffi::operation::{gdsroute_op_free, gdsroute_op_wait};
use gdsroute::ffi::settings::{
    gdsroute_settings_get_compat_mode, gdsroute_settings_get_num_threads,
    gdsroute_settings_get_task_size, gdsroute_settings_set_num_threads,
    gdsroute_settings_set_task_size,
};
use gdsroute::ffi::stats::gdsroute_stats_get;
use gdsroute::ffi::status::{gdsroute_last_error_message, gdsroute_status_str};
use gdsroute::{Counters, File, Operation, Status};

const USAGE: &str = "\
usage: gdsroute-bench --file PATH [options]
  --threads LIST        pool threads, e.g. 1,4,8,16 (default 1,4,8,16)
  --task-sizes LIST     task sizes in bytes (default 4194304)
  --modes LIST          per-handle compat mode: on,auto,off (default on,auto)
  --mem LIST            device,host (default device,host; device needs CUDA)
  --kinds LIST          big,rand4k,rand64k (default big)
  --cache LIST          warm,cold (default warm; cold needs root to drop caches)
  --reps N              timed repetitions per measurement, median reported (default 5)
  --rand-reads N        reads per random-read repetition (default 8192)
  --callers N           caller threads issuing the random reads (default 4)
  --first-only          one timed read in this (fresh) process, then exit; one value per list
  --default-settings    touch no setting (threads, task size, compat mode: the library's defaults)
  --prime-gpu           before the timed reads, copy 256 MiB host->device without the library
                        (separates the GPU's and the link's own warm-up from the library's)
  --no-table            skip the table at the end
writes (--write): --file names the file written; it is created, rewritten and removed at the end,
and must not exist unless --overwrite is given
  --write               measure writes from device (or host) memory instead of reads: one
                        gdsroute_file_pwrite of --size bytes at offset 0 per repetition
  --size BYTES          bytes written (default 1073741824)
  --open LIST           w: a new file per repetition (removed before it); r+: rewrite the file,
                        written once before (default w,r+)
  --sync                after each timed write, gdsroute_file_sync, timed apart (sync_s)
  --fs NAME             file-system label of the lines (default: shm on tmpfs, else disk)
  --ceiling LIST        instead of the library: plain pwrite from pinned memory (cuMemHostAlloc;
                        pageable without CUDA), each of LIST threads writing its contiguous share
                        in 4 MiB pieces (RESULT impl=ceiling)
  --ceiling-direct LIST the same through an O_DIRECT descriptor
  --overwrite           allow --file to exist already (it is truncated, then removed)
  direct-I/O writes are a library setting (KVIKIO_AUTO_DIRECT_IO_WRITE); the lines report the
  variable as direct_write (0, 1, or default when it is unset)
reads into several GPUs:
  --devices LIST        e.g. 0,1: big warm reads into a buffer on each listed GPU at once, one
                        caller thread per GPU and one shared handle, then into each GPU alone;
                        refused if a listed GPU does not exist
environment (first-read experiments, milliseconds or bytes):
  BENCH_OPEN_SLEEP_MS   wait after opening the file, before allocating the destination
  BENCH_ALLOC_SLEEP_MS  wait after allocating the destination
  BENCH_PRIME_BYTES     bytes --prime-gpu copies (default 256 MiB)
  BENCH_PRIME_SLEEP_MS  wait after --prime-gpu's copy";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mem {
    Device,
    Host,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Big,
    Rand(usize),
}

/// How a write measurement opens its file: `w` (a new file for every repetition) or `r+` (the
/// same file, its pages in the page cache, rewritten).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Open {
    New,
    Rewrite,
}

impl Open {
    fn flag(self) -> &'static str {
        match self {
            Open::New => "w",
            Open::Rewrite => "r+",
        }
    }
}

impl Kind {
    fn name(self) -> String {
        match self {
            Kind::Big => "big".into(),
            Kind::Rand(size) => format!("rand{}k", size >> 10),
        }
    }
}

struct Args {
    file: String,
    threads: Vec<usize>,
    task_sizes: Vec<usize>,
    modes: Vec<String>,
    mems: Vec<Mem>,
    kinds: Vec<Kind>,
    caches: Vec<String>,
    reps: usize,
    rand_reads: usize,
    callers: usize,
    first_only: bool,
    default_settings: bool,
    prime_gpu: bool,
    table: bool,
    write: bool,
    size: usize,
    opens: Vec<Open>,
    sync: bool,
    fs: Option<String>,
    ceiling: Option<Vec<usize>>,
    ceiling_direct: Option<Vec<usize>>,
    overwrite: bool,
    devices: Option<Vec<i32>>,
}

fn list<T>(value: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    let items: Result<Vec<T>, String> = value
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| parse(s.trim()))
        .collect();
    let items = items?;
    if items.is_empty() {
        return Err(format!("empty list {value:?}"));
    }
    Ok(items)
}

fn number(s: &str) -> Result<usize, String> {
    s.parse::<usize>()
        .map_err(|_| format!("not a number: {s:?}"))
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        file: String::new(),
        threads: vec![1, 4, 8, 16],
        task_sizes: vec![4 << 20],
        modes: vec!["on".into(), "auto".into()],
        mems: vec![Mem::Device, Mem::Host],
        kinds: vec![Kind::Big],
        caches: vec!["warm".into()],
        reps: 5,
        rand_reads: 8192,
        callers: 4,
        first_only: false,
        default_settings: false,
        prime_gpu: false,
        table: true,
        write: false,
        size: 1 << 30,
        opens: vec![Open::New, Open::Rewrite],
        sync: false,
        fs: None,
        ceiling: None,
        ceiling_direct: None,
        overwrite: false,
        devices: None,
    };
    let mut read_only_flags = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--file" => a.file = value()?,
            "--threads" => a.threads = list(&value()?, number)?,
            "--task-sizes" => a.task_sizes = list(&value()?, number)?,
            "--modes" => {
                a.modes = list(&value()?, |s| match s {
                    "on" | "auto" | "off" => Ok(s.to_string()),
                    _ => Err(format!("mode {s:?}: on, auto or off")),
                })?
            }
            "--mem" => {
                a.mems = list(&value()?, |s| match s {
                    "device" => Ok(Mem::Device),
                    "host" => Ok(Mem::Host),
                    _ => Err(format!("mem {s:?}: device or host")),
                })?
            }
            "--kinds" => {
                read_only_flags.push("--kinds");
                a.kinds = list(&value()?, |s| match s {
                    "big" => Ok(Kind::Big),
                    "rand4k" => Ok(Kind::Rand(4 << 10)),
                    "rand64k" => Ok(Kind::Rand(64 << 10)),
                    _ => Err(format!("kind {s:?}: big, rand4k or rand64k")),
                })?
            }
            "--cache" => {
                read_only_flags.push("--cache");
                a.caches = list(&value()?, |s| match s {
                    "warm" | "cold" => Ok(s.to_string()),
                    _ => Err(format!("cache {s:?}: warm or cold")),
                })?
            }
            "--reps" => a.reps = number(&value()?)?.max(1),
            "--rand-reads" => a.rand_reads = number(&value()?)?.max(1),
            "--callers" => a.callers = number(&value()?)?.max(1),
            "--first-only" => a.first_only = true,
            "--default-settings" => a.default_settings = true,
            "--prime-gpu" => a.prime_gpu = true,
            "--no-table" => a.table = false,
            "--write" => a.write = true,
            "--size" => a.size = number(&value()?)?,
            "--open" => {
                a.opens = list(&value()?, |s| match s {
                    "w" => Ok(Open::New),
                    "r+" => Ok(Open::Rewrite),
                    _ => Err(format!("open {s:?}: w or r+")),
                })?
            }
            "--sync" => a.sync = true,
            "--fs" => {
                let v = value()?;
                if v.is_empty() || v.contains(char::is_whitespace) {
                    return Err(format!("--fs {v:?}: one word"));
                }
                a.fs = Some(v)
            }
            "--ceiling" => a.ceiling = Some(list(&value()?, number)?),
            "--ceiling-direct" => a.ceiling_direct = Some(list(&value()?, number)?),
            "--overwrite" => a.overwrite = true,
            "--devices" => {
                a.devices = Some(list(&value()?, |s| {
                    s.parse::<i32>()
                        .ok()
                        .filter(|d| *d >= 0)
                        .ok_or_else(|| format!("device {s:?}: a GPU number (0, 1, ...)"))
                })?)
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    if a.file.is_empty() {
        return Err("--file PATH is required".into());
    }
    if a.ceiling.is_some() || a.ceiling_direct.is_some() {
        a.write = true;
    }
    let ceiling_threads = a.ceiling.iter().chain(&a.ceiling_direct).flatten();
    if ceiling_threads.clone().any(|&t| t == 0 || t > 1024) {
        return Err("--ceiling threads: 1 to 1024".into());
    }
    if a.write {
        let refuse = |what: &str| Err(format!("{what} is for reads; --write measures big writes of --size bytes"));
        if let Some(flag) = read_only_flags.first() {
            return refuse(flag);
        }
        if a.first_only {
            return refuse("--first-only");
        }
        if a.prime_gpu {
            return refuse("--prime-gpu");
        }
        if a.devices.is_some() {
            return refuse("--devices");
        }
        if a.size == 0 {
            return Err("--size: at least 1 byte".into());
        }
        if a.ceiling_direct.is_some() && !a.size.is_multiple_of(4096) {
            return Err("--ceiling-direct: --size must be a multiple of 4096 (O_DIRECT)".into());
        }
    } else if a.sync || a.fs.is_some() || a.overwrite {
        return Err("--sync, --fs and --overwrite go with --write".into());
    }
    if let Some(devices) = &a.devices {
        if a.first_only || a.prime_gpu || !read_only_flags.is_empty() {
            return Err("--devices measures big warm reads: no --first-only, --prime-gpu, --kinds or --cache".into());
        }
        let mut seen = devices.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != devices.len() {
            return Err(format!("--devices {devices:?}: a GPU listed twice"));
        }
    }
    if a.first_only {
        let many = |n: usize, what: &str| {
            if n > 1 {
                Err(format!("--first-only takes one value for {what}"))
            } else {
                Ok(())
            }
        };
        if !a.default_settings {
            many(a.threads.len(), "--threads")?;
            many(a.task_sizes.len(), "--task-sizes")?;
            many(a.modes.len(), "--modes")?;
        }
        many(a.mems.len(), "--mem")?;
        many(a.kinds.len(), "--kinds")?;
        many(a.caches.len(), "--cache")?;
        a.reps = 1;
    }
    Ok(a)
}

// ---------------------------------------------------------------------------------------------
// C API helpers

fn last_error() -> String {
    let mut buf = vec![0u8; 1024];
    // SAFETY: buf is writable for its length.
    let n = unsafe { gdsroute_last_error_message(buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(n.min(buf.len().saturating_sub(1)));
    String::from_utf8_lossy(&buf).into_owned()
}

fn check(status: Status, what: &str) -> Result<(), String> {
    if status == Status::Ok {
        return Ok(());
    }
    let code = status as u32;
    // SAFETY: gdsroute_status_str returns a static NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(gdsroute_status_str(code)) }.to_string_lossy();
    Err(format!("{what}: status {code} ({text}): {}", last_error()))
}

struct Handle(*mut File);

impl Handle {
    /// `flags` as `gdsroute_file_open`'s ("r", "w", "r+"); `mode` None: `gdsroute_file_open`
    /// (the process default compat mode).
    fn open(path: &str, flags: &str, mode: Option<&str>) -> Result<Handle, String> {
        let c_flags = CString::new(flags).map_err(|_| "flags have a NUL byte".to_string())?;
        let c_path = CString::new(path).map_err(|_| "path has a NUL byte".to_string())?;
        let mut file: *mut File = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings and a writable out-pointer.
        let status = unsafe {
            match mode {
                None => gdsroute_file_open(c_path.as_ptr(), c_flags.as_ptr(), 0o644, &mut file),
                Some(m) => {
                    let raw = match m {
                        "off" => 0,
                        "on" => 1,
                        _ => 2,
                    };
                    gdsroute_file_open_with_compat_mode(
                        c_path.as_ptr(),
                        c_flags.as_ptr(),
                        0o644,
                        raw,
                        &mut file,
                    )
                }
            }
        };
        check(status, &format!("gdsroute_file_open {path} {flags:?}"))?;
        Ok(Handle(file))
    }

    fn size(&self) -> Result<u64, String> {
        let mut size = 0u64;
        // SAFETY: live handle, writable out-pointer.
        check(
            unsafe { gdsroute_file_size(self.0, &mut size) },
            "gdsroute_file_size",
        )?;
        Ok(size)
    }

    /// One `gdsroute_file_pread` + `gdsroute_op_wait`; returns the bytes read.
    fn pread(&self, dst: usize, size: usize, offset: u64) -> Result<usize, String> {
        let mut op: *mut Operation = std::ptr::null_mut();
        // SAFETY: dst is valid for size bytes (device or host) until the wait below returns.
        check(
            unsafe { gdsroute_file_pread(self.0, dst as *mut c_void, size, offset, &mut op) },
            "gdsroute_file_pread",
        )?;
        let mut got = 0usize;
        // SAFETY: op is the live operation returned above.
        let status = unsafe { gdsroute_op_wait(op, &mut got) };
        // SAFETY: freed once, after the wait.
        unsafe { gdsroute_op_free(op) };
        check(status, "gdsroute_op_wait")?;
        Ok(got)
    }

    /// One `gdsroute_file_pwrite` + `gdsroute_op_wait`; returns the bytes written.
    fn pwrite(&self, src: usize, size: usize, offset: u64) -> Result<usize, String> {
        let mut op: *mut Operation = std::ptr::null_mut();
        // SAFETY: src is valid for size bytes (device or host) and unchanged until the wait returns.
        check(
            unsafe { gdsroute_file_pwrite(self.0, src as *const c_void, size, offset, &mut op) },
            "gdsroute_file_pwrite",
        )?;
        let mut done = 0usize;
        // SAFETY: op is the live operation returned above.
        let status = unsafe { gdsroute_op_wait(op, &mut done) };
        // SAFETY: freed once, after the wait.
        unsafe { gdsroute_op_free(op) };
        check(status, "gdsroute_op_wait")?;
        Ok(done)
    }

    /// `gdsroute_file_sync` (fsync).
    fn sync(&self) -> Result<(), String> {
        // SAFETY: live handle.
        check(unsafe { gdsroute_file_sync(self.0) }, "gdsroute_file_sync")
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from gdsroute_file_open and is freed once.
        unsafe { gdsroute_file_free(self.0) };
    }
}

// SAFETY: every C API function is thread-safe; the handle is only freed by Drop.
unsafe impl Sync for Handle {}

fn stats() -> Counters {
    let mut s = Counters {
        struct_size: Counters::SIZE,
        ..Counters::default()
    };
    // SAFETY: s is a full-size struct with struct_size set.
    let _ = unsafe { gdsroute_stats_get(&mut s) };
    s
}

fn current_settings() -> (String, usize, usize) {
    let (mut mode, mut threads, mut task) = (u32::MAX, 0usize, 0usize);
    // SAFETY: writable out-pointers.
    unsafe {
        let _ = gdsroute_settings_get_compat_mode(&mut mode);
        let _ = gdsroute_settings_get_num_threads(&mut threads);
        let _ = gdsroute_settings_get_task_size(&mut task);
    }
    let mode = match mode {
        0 => "off",
        1 => "on",
        2 => "auto",
        _ => "unknown",
    };
    (mode.to_string(), threads, task)
}

// ---------------------------------------------------------------------------------------------
// Memory

fn cu(result: sys::CUresult, what: &str) -> Result<(), String> {
    if result == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {result:?}"))
    }
}

/// Makes device 0's primary context current on the calling thread.
fn cuda_context() -> Result<sys::CUcontext, String> {
    cuda_context_of(0)
}

/// Makes the primary context of GPU `ordinal` current on the calling thread.
fn cuda_context_of(ordinal: i32) -> Result<sys::CUcontext, String> {
    gdsroute::testing::cuda::cuda().map_err(|e| format!("CUDA unavailable: {e}"))?;
    let mut dev: sys::CUdevice = 0;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: cuda() confirmed libcuda is loaded and initialised; out-pointers are writable.
    unsafe {
        cu(sys::cuInit(0), "cuInit")?;
        cu(sys::cuDeviceGet(&mut dev, ordinal), "cuDeviceGet")?;
        cu(
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            "cuDevicePrimaryCtxRetain",
        )?;
        cu(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
    }
    Ok(ctx)
}

/// How many GPUs the CUDA driver sees.
fn device_count() -> Result<i32, String> {
    gdsroute::testing::cuda::cuda().map_err(|e| format!("CUDA unavailable: {e}"))?;
    let mut n: std::ffi::c_int = 0;
    // SAFETY: cuda() confirmed libcuda is loaded; the out-pointer is writable.
    unsafe {
        cu(sys::cuInit(0), "cuInit")?;
        cu(sys::cuDeviceGetCount(&mut n), "cuDeviceGetCount")?;
    }
    Ok(n)
}

/// Makes `ctx` (a retained primary context) current on the calling thread.
fn set_current(ctx: sys::CUcontext) -> Result<(), String> {
    // SAFETY: the context was retained by cuda_context_of and is never released.
    cu(unsafe { sys::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent")
}

/// Sleeps for the milliseconds the variable names, if set (first-read experiments: which wait
/// before the timed read makes it faster).
fn sleep_ms_from_env(var: &str) {
    if let Some(ms) = std::env::var(var).ok().and_then(|v| v.parse().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

enum Buffer {
    Device { ptr: sys::CUdeviceptr, len: usize },
    Host(HostMemory),
}

/// Host memory allocated as numpy allocates KvikIO's host arrays, so that both libraries read
/// into the same kind of pages: an anonymous mapping, advised `MADV_HUGEPAGE` from 4 MiB up
/// (numpy's default on Linux). With 4 KiB pages the kernel's copies into the buffer take more TLB
/// misses: series 4 (2026-11-30) measured host reads at 8 threads 0.95-1.01x KvikIO with a plain `Vec` (run 6).
struct HostMemory {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl HostMemory {
    fn new(len: usize) -> Result<HostMemory, String> {
        // SAFETY: a new private anonymous mapping; no existing memory is affected.
        let raw = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if raw == libc::MAP_FAILED {
            return Err(format!("mmap of {len} bytes: {}", std::io::Error::last_os_error()));
        }
        if len >= 4 << 20 {
            // SAFETY: the range is the mapping just made; advice only.
            unsafe { libc::madvise(raw, len, libc::MADV_HUGEPAGE) };
        }
        let ptr = std::ptr::NonNull::new(raw.cast::<u8>()).ok_or("mmap returned null")?;
        Ok(HostMemory { ptr, len })
    }
}

impl std::ops::Deref for HostMemory {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: len bytes mapped readable (zero-filled) for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for HostMemory {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed mutably through self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length; no borrow outlives self.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl Buffer {
    fn new(mem: Mem, len: usize) -> Result<Buffer, String> {
        let len = len.max(1);
        match mem {
            Mem::Host => {
                // Every page is touched by `poison` before each timed read, so page faults
                // are never timed (the KvikIO script fills its arrays too).
                Ok(Buffer::Host(HostMemory::new(len)?))
            }
            Mem::Device => {
                let mut ptr: sys::CUdeviceptr = 0;
                // SAFETY: a context is current (cuda_context ran); ptr is writable.
                cu(unsafe { sys::cuMemAlloc_v2(&mut ptr, len) }, "cuMemAlloc")?;
                Ok(Buffer::Device { ptr, len })
            }
        }
    }

    /// The address the library reads into or writes from: the device address, or the host
    /// mapping's own pointer (not one derived from a reference, since the library writes through it).
    fn addr(&self) -> usize {
        match self {
            Buffer::Device { ptr, .. } => *ptr as usize,
            Buffer::Host(v) => v.ptr.as_ptr() as usize,
        }
    }

    /// Copies 256 MiB (or the buffer's size, or BENCH_PRIME_BYTES) from pageable host memory
    /// into a device buffer with plain CUDA, nothing of the library involved; BENCH_PRIME_SLEEP_MS
    /// then waits before the timed read (to see how long the effect lasts).
    fn prime(&mut self) -> Result<(), String> {
        if let Buffer::Device { ptr, len } = self {
            let want = std::env::var("BENCH_PRIME_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(256usize << 20);
            let n = (*len).min(want).max(1);
            let src = vec![0x3Cu8; n];
            // SAFETY: n bytes fit the allocation and the source vector.
            cu(unsafe { sys::cuMemcpyHtoD_v2(*ptr, src.as_ptr().cast(), n) }, "cuMemcpyHtoD")?;
            sleep_ms_from_env("BENCH_PRIME_SLEEP_MS");
        }
        Ok(())
    }

    /// Copies `data` into the start of the buffer (host to device for device memory).
    fn upload(&mut self, data: &[u8]) -> Result<(), String> {
        match self {
            Buffer::Host(v) => v[..data.len()].copy_from_slice(data),
            Buffer::Device { ptr, len } => {
                assert!(data.len() <= *len);
                // SAFETY: data.len() bytes fit the allocation; the source is readable.
                cu(
                    unsafe { sys::cuMemcpyHtoD_v2(*ptr, data.as_ptr().cast(), data.len()) },
                    "cuMemcpyHtoD",
                )?;
            }
        }
        Ok(())
    }

    /// Bytes [off, off + dst.len()) of the buffer into `dst`.
    fn copy_out(&self, off: usize, dst: &mut [u8]) -> Result<(), String> {
        match self {
            Buffer::Host(v) => dst.copy_from_slice(&v[off..off + dst.len()]),
            Buffer::Device { ptr, len } => {
                assert!(off + dst.len() <= *len);
                // SAFETY: the range lies inside the allocation; dst is writable.
                cu(
                    unsafe {
                        sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), *ptr + off as u64, dst.len())
                    },
                    "cuMemcpyDtoH",
                )?;
            }
        }
        Ok(())
    }

    /// Fills the buffer with a byte that the file is unlikely to hold everywhere, so that a read
    /// that wrote nothing fails verification.
    fn poison(&mut self) -> Result<(), String> {
        match self {
            Buffer::Host(v) => v.fill(0xA5),
            Buffer::Device { ptr, len } => {
                // SAFETY: the allocation is len bytes.
                cu(
                    unsafe { sys::cuMemsetD8_v2(*ptr, 0xA5, *len) },
                    "cuMemsetD8",
                )?;
                // The memset may run asynchronously; finish it before the timed read starts.
                // SAFETY: a context is current.
                cu(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")?;
            }
        }
        Ok(())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Buffer::Device { ptr, .. } = self {
            // SAFETY: allocated by cuMemAlloc, freed once.
            unsafe {
                let _ = sys::cuMemFree_v2(*ptr);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Measurement helpers

fn cpu_seconds() -> f64 {
    // SAFETY: a zeroed rusage is a valid out-buffer.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`. Err with the reason when not possible.
fn drop_caches() -> Result<(), String> {
    // SAFETY: plain system calls.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("/proc/sys/vm/drop_caches: {e}"))
}

/// splitmix64: the same offsets in scripts/bench-kvikio.py.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `n` read offsets, multiples of `size`, each read fully inside the file.
fn random_offsets(seed: u64, n: usize, size: usize, file_size: u64) -> Vec<u64> {
    let blocks = (file_size / size as u64).max(1);
    let mut state = seed;
    (0..n)
        .map(|_| (splitmix64(&mut state) % blocks) * size as u64)
        .collect()
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Compares the buffer's first `reference.len()` bytes with the file's, 64 MiB at a time.
fn verify_big(reference: &[u8], buffer: &Buffer) -> Result<(), String> {
    let mut chunk = vec![0u8; (64usize << 20).min(reference.len().max(1))];
    let mut off = 0usize;
    while off < reference.len() {
        let n = chunk.len().min(reference.len() - off);
        buffer.copy_out(off, &mut chunk[..n])?;
        if let Some(at) = first_difference(&chunk[..n], &reference[off..off + n]) {
            return Err(format!("verification failed at file offset {}", off + at));
        }
        off += n;
    }
    Ok(())
}

/// The first index at which `a` and `b` differ (None when equal).
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len())))
}

struct Reference {
    path: String,
    data: Option<Vec<u8>>,
}

impl Reference {
    /// The file's bytes, read with plain `std::fs::read` on first use (never inside a timed region).
    fn get(&mut self) -> Result<&[u8], String> {
        if self.data.is_none() {
            self.data =
                Some(std::fs::read(&self.path).map_err(|e| format!("read {}: {e}", self.path))?);
        }
        Ok(self.data.as_deref().unwrap())
    }
}

struct Config {
    mem: Mem,
    mode: Option<String>,
    threads: Option<usize>,
    task: Option<usize>,
    cache: String,
    kind: Kind,
}

struct Outcome {
    line: String,
    gbps: f64,
    rps: f64,
}

struct Bench {
    args: Args,
    file_size: u64,
    reference: Reference,
    ctx: Option<sys::CUcontext>,
    results: Vec<Outcome>,
}

impl Bench {
    /// One workload pass: the whole file, or `rand_reads` random reads split over `callers`
    /// threads (each pread + wait in turn, into its own slot of the buffer). Returns bytes read.
    fn pass(
        &self,
        handle: &Handle,
        buf: usize,
        kind: Kind,
        offsets: &[u64],
    ) -> Result<u64, String> {
        match kind {
            Kind::Big => {
                let got = handle.pread(buf, self.file_size as usize, 0)?;
                gdsroute::trace::event("bench.read_done", got as u64);
                if got as u64 != self.file_size {
                    return Err(format!("short read: {got} of {} bytes", self.file_size));
                }
                Ok(got as u64)
            }
            Kind::Rand(size) => {
                let callers = self.args.callers.min(offsets.len());
                let per = offsets.len().div_ceil(callers);
                let ctx = self.ctx.map(|c| c as usize);
                let total: Result<u64, String> = std::thread::scope(|s| {
                    let workers: Vec<_> = offsets
                        .chunks(per)
                        .enumerate()
                        .map(|(c, chunk)| {
                            s.spawn(move || -> Result<u64, String> {
                                if let Some(ctx) = ctx {
                                    // SAFETY: the primary context retained in cuda_context.
                                    cu(
                                        unsafe { sys::cuCtxSetCurrent(ctx as sys::CUcontext) },
                                        "cuCtxSetCurrent",
                                    )?;
                                }
                                let mut bytes = 0u64;
                                for (i, &off) in chunk.iter().enumerate() {
                                    let slot = c * per + i;
                                    let got = handle.pread(buf + slot * size, size, off)?;
                                    if got != size {
                                        return Err(format!(
                                            "short read at {off}: {got} of {size}"
                                        ));
                                    }
                                    bytes += got as u64;
                                }
                                Ok(bytes)
                            })
                        })
                        .collect();
                    workers
                        .into_iter()
                        .map(|w| w.join().map_err(|_| "caller thread panicked".to_string())?)
                        .sum()
                });
                total
            }
        }
    }

    fn verify(&mut self, buffer: &Buffer, kind: Kind, offsets: &[u64]) -> Result<(), String> {
        let reference = self.reference.get()?;
        match kind {
            Kind::Big => verify_big(reference, buffer)?,
            Kind::Rand(size) => {
                let mut all = vec![0u8; offsets.len() * size];
                buffer.copy_out(0, &mut all)?;
                for (slot, &off) in offsets.iter().enumerate() {
                    let off = off as usize;
                    if all[slot * size..(slot + 1) * size] != reference[off..off + size] {
                        return Err(format!(
                            "verification failed: read {slot} at file offset {off}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn measure(&mut self, cfg: &Config) -> Result<(), String> {
        if cfg.cache == "cold"
            && let Err(why) = drop_caches()
        {
            println!(
                "NOTE cache=cold skipped (mem={} kind={}): cannot drop caches: {why}",
                if cfg.mem == Mem::Device {
                    "device"
                } else {
                    "host"
                },
                cfg.kind.name()
            );
            return Ok(());
        }
        apply_settings(cfg)?;
        let opened = Instant::now();
        gdsroute::trace::event("bench.open", 0);
        let handle = Handle::open(&self.args.file, "r", cfg.mode.as_deref())?;
        let open_s = opened.elapsed().as_secs_f64();
        let (def_mode, threads, task) = current_settings();
        let mode = cfg.mode.clone().unwrap_or(def_mode);
        let first = self.args.first_only;
        let reads = match cfg.kind {
            Kind::Big => 1,
            Kind::Rand(_) => self.args.rand_reads,
        };
        let len = match cfg.kind {
            Kind::Big => self.file_size as usize,
            Kind::Rand(size) => reads * size,
        };
        sleep_ms_from_env("BENCH_OPEN_SLEEP_MS");
        let mut buffer = Buffer::new(cfg.mem, len)?;
        gdsroute::trace::event("bench.allocated", len as u64);
        sleep_ms_from_env("BENCH_ALLOC_SLEEP_MS");
        if self.args.prime_gpu {
            buffer.prime()?;
        }
        let addr = buffer.addr();

        // Steady state: one untimed pass first (pool threads, pinned buffers, cuFile verdict).
        if !first {
            let offsets = match cfg.kind {
                Kind::Big => vec![],
                Kind::Rand(size) => random_offsets(0, reads, size, self.file_size),
            };
            self.pass(&handle, addr, cfg.kind, &offsets)?;
        }

        let before = stats();
        let Reps { gbps, rps, cpu } = self.timed_reps(&handle, &mut buffer, cfg, reads)?;
        let after = stats();
        let route = route_of(&before, &after);
        let pinned = self.extra_fields(&before, &after, open_s, &gbps);
        let (g, r, c) = (median(&gbps), median(&rps), median(&cpu));
        let gmin = gbps.iter().cloned().fold(f64::INFINITY, f64::min);
        let gmax = gbps.iter().cloned().fold(0.0, f64::max);
        let rps_field = match cfg.kind {
            Kind::Big => "-".to_string(),
            Kind::Rand(_) => format!("{r:.0}"),
        };
        let line = format!(
            "RESULT impl=gdsroute mem={} mode={mode} threads={threads} task={task} cache={} kind={} phase={} settings={} callers={} gbps={g:.3} rps={rps_field} cpu_s_per_gb={c:.4} reps={} gbps_min={gmin:.3} gbps_max={gmax:.3} reads={reads} route={route} cufile_posix={} cufile_nvfs={}{pinned}",
            match cfg.mem {
                Mem::Device => "device",
                Mem::Host => "host",
            },
            cfg.cache,
            cfg.kind.name(),
            if first { "first" } else { "steady" },
            if self.args.default_settings {
                "default"
            } else {
                "set"
            },
            match cfg.kind {
                Kind::Big => 1,
                Kind::Rand(_) => self.args.callers.min(reads),
            },
            gbps.len(),
            after
                .cufile_n_posix_reads
                .saturating_sub(before.cufile_n_posix_reads),
            after
                .cufile_n_nvfs_reads
                .saturating_sub(before.cufile_n_nvfs_reads),
        );
        println!("{line}");
        let _ = std::io::stdout().flush();
        self.results.push(Outcome {
            line,
            gbps: g,
            rps: r,
        });
        Ok(())
    }

    /// The timed repetitions of one configuration: per repetition the rate in GB/s, reads per
    /// second and CPU seconds per GB, each pass on a poisoned buffer (and dropped caches when
    /// cold) and verified after.
    fn timed_reps(&mut self, handle: &Handle, buffer: &mut Buffer, cfg: &Config, reads: usize) -> Result<Reps, String> {
        let addr = buffer.addr();
        let mut gbps = Vec::new();
        let mut rps = Vec::new();
        let mut cpu = Vec::new();
        for rep in 0..self.args.reps {
            let offsets = match cfg.kind {
                Kind::Big => vec![],
                Kind::Rand(size) => random_offsets(rep as u64 + 1, reads, size, self.file_size),
            };
            buffer.poison()?;
            if cfg.cache == "cold" {
                drop_caches()?;
            }
            gdsroute::trace::event("bench.timed", 0);
            let cpu0 = cpu_seconds();
            let t0 = Instant::now();
            let bytes = self.pass(handle, addr, cfg.kind, &offsets)?;
            let secs = t0.elapsed().as_secs_f64();
            let cpu_s = cpu_seconds() - cpu0;
            self.verify(buffer, cfg.kind, &offsets)?;
            gbps.push(bytes as f64 / secs / 1e9);
            rps.push(reads as f64 / secs);
            cpu.push(cpu_s / (bytes as f64 / 1e9));
        }
        Ok(Reps { gbps, rps, cpu })
    }

    /// The fields after the figures: pinned memory and the registered page cache, the timed
    /// repetitions' direct and uncached reads, the open call, labels from the calling script and
    /// each repetition's rate.
    fn extra_fields(&self, before: &Counters, after: &Counters, open_s: f64, gbps: &[f64]) -> String {
        // Pinned memory and the registered page cache: every counter named *pinned* or *page_cache*
        // (process-wide, after the measurement), and the bytes copied from the registered page
        // cache during the timed repetitions.
        let mut pinned: String = after
            .entries()
            .iter()
            .filter(|(name, _)| name.contains("pinned") || name.contains("page_cache"))
            .map(|(name, v)| format!(" {name}={v}"))
            .collect();
        pinned.push_str(&format!(" mapped_bytes={}", after.posix_mapped_bytes - before.posix_mapped_bytes));
        // Tasks of the timed repetitions whose data had to come from the disk (src/backend/posix/pread.rs).
        pinned.push_str(&format!(" not_cached_tasks={}", after.posix_tasks_not_cached - before.posix_tasks_not_cached));
        // Bytes of the timed repetitions read with direct I/O (KVIKIO_AUTO_DIRECT_IO_READ).
        pinned.push_str(&format!(" direct_bytes={}", after.posix_direct_bytes - before.posix_direct_bytes));
        let mut pin_max = 0u64;
        // SAFETY: valid out-pointer.
        let _ = unsafe { gdsroute::ffi::settings::gdsroute_settings_get_page_cache_pin_max(&mut pin_max) };
        pinned.push_str(&format!(" page_cache_pin_max={pin_max}"));
        // The open call itself (it starts the background preparation of the device route).
        pinned.push_str(&format!(" open_s={open_s:.6}"));
        if self.args.prime_gpu {
            pinned.push_str(" primed=1");
        }
        pinned.push_str(&labels());
        pinned.push_str(&format!(" gbps_reps={}", gbps.iter().map(|g| format!("{g:.1}")).collect::<Vec<_>>().join(",")));
        pinned
    }

    fn table(&self) {
        print_table(&self.results);
    }
}

/// The table at the end: the main columns of every RESULT line (writes show fs/open where reads
/// show the cache).
fn print_table(results: &[Outcome]) {
    if results.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<7} {:<5} {:>7} {:>9} {:<8} {:<8} {:<6} {:>9} {:>10} {:>12} {:<6}",
        "mem",
        "mode",
        "threads",
        "task",
        "cache",
        "kind",
        "phase",
        "GB/s",
        "reads/s",
        "cpu s/GB",
        "route"
    );
    for o in results {
        let field = |k: &str| {
            o.line
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                .unwrap_or("")
                .to_string()
        };
        // Writes have no cache field: their file system and open mode take its column; reads
        // into several GPUs show the GPUs read at once and the GPU of the line in the kind's.
        let cache = match field("dir").as_str() {
            "write" => format!("{}/{}", field("fs"), field("open")),
            _ => field("cache"),
        };
        let kind = match field("devices").as_str() {
            "" => field("kind"),
            devices => format!("{devices}:{}", field("device")),
        };
        let rps = if field("rps") == "-" {
            "-".to_string()
        } else {
            format!("{:.0}", o.rps)
        };
        println!(
            "{:<7} {:<5} {:>7} {:>9} {:<8} {:<8} {:<6} {:>9.2} {:>10} {:>12} {:<6}",
            field("mem"),
            field("mode"),
            field("threads"),
            field("task"),
            cache,
            kind,
            field("phase"),
            o.gbps,
            rps,
            field("cpu_s_per_gb"),
            field("route")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Writes

/// Bytes per piece of the ceiling's writers (the library's default task size).
const PIECE: usize = 4 << 20;

/// Fills `buf` with random bytes: splitmix64 per 8 bytes, each 64 MiB block seeded by its
/// index, the blocks shared among the cores (1 GiB in well under a second).
fn fill_random(buf: &mut [u8]) {
    const BLOCK: usize = 64 << 20;
    let mut blocks: Vec<(usize, &mut [u8])> = buf.chunks_mut(BLOCK).enumerate().collect();
    let workers = std::thread::available_parallelism().map_or(4, |n| n.get()).min(16);
    let per = blocks.len().div_ceil(workers).max(1);
    std::thread::scope(|s| {
        for group in blocks.chunks_mut(per) {
            s.spawn(move || {
                for (index, block) in group.iter_mut() {
                    let mut state = 0x5EED_0000_0000 + *index as u64;
                    for word in block.chunks_mut(8) {
                        let v = splitmix64(&mut state).to_le_bytes();
                        word.copy_from_slice(&v[..word.len()]);
                    }
                }
            });
        }
    });
}

/// `shm` for a file on tmpfs (`/dev/shm`), else `disk`: the file system a write line is about.
fn fs_label(path: &str) -> String {
    let dir = Path::new(path).parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(c_dir) = CString::new(dir.as_os_str().as_bytes()) else {
        return "disk".into();
    };
    // SAFETY: a zeroed statfs is a valid out-buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a writable buffer.
    let ok = unsafe { libc::statfs(c_dir.as_ptr(), &mut st) } == 0;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    if ok && st.f_type as i64 == TMPFS_MAGIC { "shm" } else { "disk" }.into()
}

/// The direct-I/O write setting the library was given, as the lines report it: the variable
/// `KVIKIO_AUTO_DIRECT_IO_WRITE` read as the library reads booleans (1/true/on/yes or
/// 0/false/off/no, any case), `default` when it is unset, else its value as given. The scripts set
/// it per process for both libraries; the bench never calls the setting's setter.
fn direct_write_setting() -> String {
    match std::env::var("KVIKIO_AUTO_DIRECT_IO_WRITE") {
        Err(_) => "default".into(),
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => "1".into(),
            "0" | "false" | "off" | "no" => "0".into(),
            other => format!("invalid:{}", other.split_whitespace().collect::<Vec<_>>().join("_")),
        },
    }
}

/// ` tag=... variant=...`: the labels from the calling script (BENCH_TAG, a setup both libraries
/// share; BENCH_VARIANT, a gdsroute setting compared with the same KvikIO lines).
fn labels() -> String {
    let mut out = String::new();
    for (var, field) in [("BENCH_TAG", "tag"), ("BENCH_VARIANT", "variant")] {
        let value = std::env::var(var).map(|v| v.split_whitespace().collect::<Vec<_>>().join("_"));
        if let Some(v) = value.ok().filter(|v| !v.is_empty()) {
            out.push_str(&format!(" {field}={v}"));
        }
    }
    out
}

/// ` gbps_reps=a,b,c`: each repetition's rate.
fn gbps_reps(gbps: &[f64]) -> String {
    format!(" gbps_reps={}", gbps.iter().map(|g| format!("{g:.2}")).collect::<Vec<_>>().join(","))
}

fn spread(gbps: &[f64]) -> (f64, f64) {
    (gbps.iter().cloned().fold(f64::INFINITY, f64::min), gbps.iter().cloned().fold(0.0, f64::max))
}

fn remove_if_there(path: &str) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(format!("remove {path}: {e}")),
        _ => Ok(()),
    }
}

/// Removes the written file when the run ends, however it ends.
struct RemoveAtEnd(String);

impl Drop for RemoveAtEnd {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Checks, outside any timed region, that the file holds `data` and that `source` (the buffer
/// the writes came from) holds it too: read back with plain `pread`, 64 MiB at a time.
fn verify_written(path: &str, source: impl Fn(usize, &mut [u8]) -> Result<(), String>, data: &[u8]) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("open {path} to verify: {e}"))?;
    let len = file.metadata().map_err(|e| format!("stat {path}: {e}"))?.len();
    if len != data.len() as u64 {
        return Err(format!("verification failed: {path} holds {len} bytes, not {}", data.len()));
    }
    let chunk = (64usize << 20).min(data.len().max(1));
    let (mut from_file, mut from_source) = (vec![0u8; chunk], vec![0u8; chunk]);
    let mut off = 0usize;
    while off < data.len() {
        let n = chunk.min(data.len() - off);
        file.read_exact_at(&mut from_file[..n], off as u64).map_err(|e| format!("pread {path} at {off}: {e}"))?;
        source(off, &mut from_source[..n])?;
        let want = &data[off..off + n];
        if let Some(at) = first_difference(&from_source[..n], want) {
            return Err(format!("the source buffer does not hold the data at offset {}", off + at));
        }
        if let Some(at) = first_difference(&from_file[..n], want) {
            return Err(format!("verification failed: file offset {} differs from the source buffer", off + at));
        }
        off += n;
    }
    Ok(())
}

/// Which route the write tasks between two snapshots of the counters took.
fn write_route_of(before: &Counters, after: &Counters) -> &'static str {
    let posix = after.posix_write_tasks - before.posix_write_tasks;
    let cufile = after.cufile_write_tasks - before.cufile_write_tasks;
    match (posix > 0, cufile > 0) {
        (true, false) => "posix",
        (false, true) => "cufile",
        (true, true) => "mixed",
        _ => "none",
    }
}

/// The write measurements through the library.
struct Writes {
    args: Args,
    fs: String,
    /// The bytes every timed write writes, random, made on the host once.
    data: HostMemory,
    /// One source buffer per memory kind, allocated once.
    sources: Vec<(Mem, Buffer)>,
    results: Vec<Outcome>,
}

impl Writes {
    /// One configuration: untimed, the library's first write (from the poisoned source: it
    /// starts the pool threads and pinned buffers, makes the cuFile verdict, and for `r+`
    /// writes the file that the repetitions rewrite, its pages cached unless direct writes
    /// bypassed the cache), then the data copied into the source; then `--reps` timed writes
    /// (`pwrite` + wait only; `w` removes the file and opens a new one before each, `r+` reopens
    /// the same), each optionally followed by a timed `fsync`; then the file verified.
    fn measure(&mut self, cfg: &Config, open: Open) -> Result<(), String> {
        apply_settings(cfg)?;
        let path = self.args.file.clone();
        let size = self.args.size;
        let mode = cfg.mode.as_deref();
        let buffer = &mut self.sources.iter_mut().find(|(m, _)| *m == cfg.mem).ok_or("no source buffer")?.1;
        let src = buffer.addr();
        buffer.poison()?;
        remove_if_there(&path)?;
        if open == Open::Rewrite {
            std::fs::File::create(&path).map_err(|e| format!("create {path}: {e}"))?;
        }
        let first = Handle::open(&path, open.flag(), mode)?.pwrite(src, size, 0)?;
        if first != size {
            return Err(format!("first write: {first} of {size} bytes"));
        }
        buffer.upload(&self.data)?;
        let (def_mode, threads, task) = current_settings();

        let before = stats();
        let (mut gbps, mut cpu, mut open_s, mut sync_s) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..self.args.reps {
            if open == Open::New {
                remove_if_there(&path)?;
            }
            let opened = Instant::now();
            let handle = Handle::open(&path, open.flag(), mode)?;
            open_s.push(opened.elapsed().as_secs_f64());
            let cpu0 = cpu_seconds();
            let t0 = Instant::now();
            let done = handle.pwrite(src, size, 0)?;
            let secs = t0.elapsed().as_secs_f64();
            let cpu_s = cpu_seconds() - cpu0;
            if done != size {
                return Err(format!("short write: {done} of {size} bytes"));
            }
            if self.args.sync {
                let t1 = Instant::now();
                handle.sync()?;
                sync_s.push(t1.elapsed().as_secs_f64());
            }
            drop(handle);
            gbps.push(size as f64 / secs / 1e9);
            cpu.push(cpu_s / (size as f64 / 1e9));
        }
        let after = stats();
        let source = &*buffer;
        verify_written(&path, |off, dst| source.copy_out(off, dst), &self.data)?;

        let mode = cfg.mode.clone().unwrap_or(def_mode);
        let (gmin, gmax) = spread(&gbps);
        // The write counters of the timed repetitions: tasks, bytes per route, and any counter
        // of direct-I/O writes the library has (none before KVIKIO_AUTO_DIRECT_IO_WRITE).
        let delta = |name: &str| {
            let pick = |c: &Counters| c.entries().iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
            pick(&after).saturating_sub(pick(&before))
        };
        let mut counters = String::new();
        let direct_names = after.entries().into_iter().map(|(n, _)| n).filter(|n| n.contains("direct") && n.contains("write"));
        for name in ["write_tasks", "posix_write_bytes", "cufile_write_bytes"].into_iter().chain(direct_names) {
            counters.push_str(&format!(" {name}={}", delta(name)));
        }
        let pinned: String = after
            .entries()
            .iter()
            .filter(|(name, _)| name.starts_with("pinned"))
            .map(|(name, v)| format!(" {name}={v}"))
            .collect();
        let sync = if self.args.sync { format!(" sync_s={:.4}", median(&sync_s)) } else { String::new() };
        let line = format!(
            "RESULT impl=gdsroute dir=write mem={} fs={} open={} direct_write={} mode={mode} threads={threads} task={task} kind=big phase=steady settings={} callers=1 gbps={:.3} rps=- cpu_s_per_gb={:.4} reps={} gbps_min={gmin:.3} gbps_max={gmax:.3} writes=1 bytes={size} route={}{counters}{pinned} open_s={:.6}{sync}{}{}",
            mem_name(cfg.mem),
            self.fs,
            open.flag(),
            direct_write_setting(),
            if self.args.default_settings { "default" } else { "set" },
            median(&gbps),
            median(&cpu),
            gbps.len(),
            write_route_of(&before, &after),
            median(&open_s),
            labels(),
            gbps_reps(&gbps),
        );
        println!("{line}");
        let _ = std::io::stdout().flush();
        self.results.push(Outcome { line, gbps: median(&gbps), rps: f64::NAN });
        Ok(())
    }
}

fn mem_name(mem: Mem) -> &'static str {
    match mem {
        Mem::Device => "device",
        Mem::Host => "host",
    }
}

/// Host memory pinned with `cuMemHostAlloc`: the ceiling's source when CUDA is there.
struct PinnedHost {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl PinnedHost {
    /// Needs a current context.
    fn new(len: usize) -> Result<PinnedHost, String> {
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: a context is current; raw is writable.
        cu(unsafe { sys::cuMemHostAlloc(&mut raw, len, 0) }, "cuMemHostAlloc")?;
        let ptr = std::ptr::NonNull::new(raw.cast::<u8>()).ok_or("cuMemHostAlloc returned null")?;
        Ok(PinnedHost { ptr, len })
    }
}

impl std::ops::Deref for PinnedHost {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: len bytes allocated for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for PinnedHost {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed mutably through self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        unsafe {
            let _ = sys::cuMemFreeHost(self.ptr.as_ptr().cast());
        }
    }
}

/// `pwrite` of all of `buf` at `offset`, continuing short writes and retrying `EINTR`.
fn pwrite_all(fd: std::os::fd::RawFd, buf: &[u8], offset: u64) -> Result<(), String> {
    let mut done = 0usize;
    while done < buf.len() {
        let at = offset + done as u64;
        // SAFETY: the range lies inside buf.
        let n = unsafe { libc::pwrite(fd, buf[done..].as_ptr().cast(), buf.len() - done, at as libc::off_t) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("pwrite at {at}: {e}"));
        }
        if n == 0 {
            return Err(format!("pwrite at {at} wrote 0 bytes"));
        }
        done += n as usize;
    }
    Ok(())
}

/// `threads` threads each write their contiguous share of `[0, size)` (a whole number of 4 MiB
/// pieces, the last share shorter) with plain `pwrite`, piece by piece; the piece at file
/// offset `o` comes from `src[o..]`, or, when `src` is shorter than `size` (one piece of poison
/// for the untimed first write), from the start of `src` each time. The threads are started
/// first and released together: returns the wall and CPU seconds from the release to the last
/// thread's end.
fn parallel_pwrite(fd: std::os::fd::RawFd, src: &[u8], size: usize, threads: usize) -> Result<(f64, f64), String> {
    let share = size.div_ceil(threads).div_ceil(PIECE) * PIECE;
    let start = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let start = &start;
                s.spawn(move || -> Result<(), String> {
                    start.wait();
                    let (begin, end) = ((i * share).min(size), ((i + 1) * share).min(size));
                    let mut off = begin;
                    while off < end {
                        let n = PIECE.min(end - off);
                        let from = if src.len() >= size { off } else { 0 };
                        pwrite_all(fd, &src[from..from + n], off as u64)?;
                        off += n;
                    }
                    Ok(())
                })
            })
            .collect();
        start.wait();
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        let results: Vec<_> = workers.into_iter().map(|w| w.join().map_err(|_| "writer thread panicked".to_string())).collect();
        let secs = t0.elapsed().as_secs_f64();
        let cpu_s = cpu_seconds() - cpu0;
        for r in results {
            r??;
        }
        Ok((secs, cpu_s))
    })
}

/// Opens the ceiling's file as the library's `w` or `r+` would, with `O_DIRECT` if asked.
fn open_plain(path: &str, open: Open, direct: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    match open {
        Open::New => options.write(true).create(true).truncate(true),
        Open::Rewrite => options.read(true).write(true),
    };
    options.mode(0o644).custom_flags(if direct { libc::O_DIRECT } else { 0 }).open(path)
}

/// The ceilings: plain `pwrite` from pinned memory into the same file system (the same
/// repetitions, removal and first write as the library's measurements), per thread count, open
/// mode and with or without `O_DIRECT`.
fn run_ceilings(args: &Args, fs: &str, pinned: bool, results: &mut Vec<Outcome>) -> Result<(), String> {
    let size = args.size;
    let mut pinned_source;
    let mut pageable_source;
    let src: &mut [u8] = if pinned {
        pinned_source = PinnedHost::new(size)?;
        &mut pinned_source
    } else {
        println!("NOTE no GPU: the ceiling writes from pageable memory (mem=pageable), not pinned");
        pageable_source = HostMemory::new(size)?;
        &mut pageable_source
    };
    fill_random(src);
    let src: &[u8] = src;
    let poison = HostMemory::new(PIECE.min(size.next_multiple_of(4096)))?;
    let mut poison = poison;
    poison.fill(0xA5);
    let path = args.file.as_str();
    let plans = [(false, args.ceiling.clone()), (true, args.ceiling_direct.clone())];
    for (direct, threads_list) in plans {
        for threads in threads_list.into_iter().flatten() {
            for &open in &args.opens {
                remove_if_there(path)?;
                if open == Open::Rewrite {
                    std::fs::File::create(path).map_err(|e| format!("create {path}: {e}"))?;
                }
                let file = match open_plain(path, open, direct) {
                    Ok(f) => f,
                    Err(e) if direct => {
                        println!("NOTE ceiling O_DIRECT skipped (fs={fs} open={}): {path}: {e}", open.flag());
                        continue;
                    }
                    Err(e) => return Err(format!("open {path}: {e}")),
                };
                use std::os::fd::AsRawFd;
                parallel_pwrite(file.as_raw_fd(), &poison, size, threads)?;
                drop(file);
                let (mut gbps, mut cpu) = (Vec::new(), Vec::new());
                for _ in 0..args.reps {
                    if open == Open::New {
                        remove_if_there(path)?;
                    }
                    let file = open_plain(path, open, direct).map_err(|e| format!("open {path}: {e}"))?;
                    let (secs, cpu_s) = parallel_pwrite(file.as_raw_fd(), src, size, threads)?;
                    drop(file);
                    gbps.push(size as f64 / secs / 1e9);
                    cpu.push(cpu_s / (size as f64 / 1e9));
                }
                verify_written(path, |off, dst| {
                    dst.copy_from_slice(&src[off..off + dst.len()]);
                    Ok(())
                }, src)?;
                let (gmin, gmax) = spread(&gbps);
                let line = format!(
                    "RESULT impl=ceiling dir=write mem={} fs={fs} open={} direct_write={} mode=na threads={threads} task={PIECE} kind=big phase=steady settings=set callers={threads} gbps={:.3} rps=- cpu_s_per_gb={:.4} reps={} gbps_min={gmin:.3} gbps_max={gmax:.3} writes={} bytes={size} route=pwrite{}{}",
                    if pinned { "pinned" } else { "pageable" },
                    open.flag(),
                    u8::from(direct),
                    median(&gbps),
                    median(&cpu),
                    gbps.len(),
                    size.div_ceil(PIECE),
                    labels(),
                    gbps_reps(&gbps),
                );
                println!("{line}");
                let _ = std::io::stdout().flush();
                results.push(Outcome { line, gbps: median(&gbps), rps: f64::NAN });
            }
        }
    }
    Ok(())
}

/// `--write`: the library's writes over the configuration matrix, or (`--ceiling`,
/// `--ceiling-direct`) the plain-`pwrite` ceilings.
fn run_writes(args: Args) -> Result<(), String> {
    let gpu = gdsroute::testing::cuda::cuda().map(|_| ()).map_err(|e| e.to_string());
    let ceiling = args.ceiling.is_some() || args.ceiling_direct.is_some();
    let needs_cuda = ceiling || args.mems.contains(&Mem::Device);
    let _ctx = match (&gpu, needs_cuda) {
        (Ok(()), true) => Some(cuda_context()?),
        _ => None,
    };
    let mut mems = args.mems.clone();
    if let Err(why) = &gpu
        && mems.contains(&Mem::Device)
        && !ceiling
    {
        println!("NOTE no GPU: device memory skipped, host memory only ({why})");
        mems.retain(|m| *m == Mem::Host);
        if mems.is_empty() {
            mems.push(Mem::Host);
        }
    }
    if Path::new(&args.file).exists() && !args.overwrite {
        return Err(format!("{} exists: --write truncates and removes its file (give --overwrite to allow it)", args.file));
    }
    let _remove = RemoveAtEnd(args.file.clone());
    let fs = args.fs.clone().unwrap_or_else(|| fs_label(&args.file));
    println!(
        "# gdsroute-bench {} write file={} fs={fs} bytes={} reps={} default_settings={} direct_write={} sync={}",
        env!("CARGO_PKG_VERSION"),
        args.file,
        args.size,
        args.reps,
        args.default_settings,
        direct_write_setting(),
        args.sync,
    );
    let mut results = Vec::new();
    if ceiling {
        run_ceilings(&args, &fs, gpu.is_ok(), &mut results)?;
    } else {
        let mut data = HostMemory::new(args.size)?;
        fill_random(&mut data);
        let mut sources = Vec::new();
        for &mem in &mems {
            sources.push((mem, Buffer::new(mem, args.size)?));
        }
        let mut configs = Vec::new();
        for &mem in &mems {
            if args.default_settings {
                configs.push(Config { mem, mode: None, threads: None, task: None, cache: String::new(), kind: Kind::Big });
                continue;
            }
            for mode in &args.modes {
                for &threads in &args.threads {
                    for &task in &args.task_sizes {
                        configs.push(Config { mem, mode: Some(mode.clone()), threads: Some(threads), task: Some(task), cache: String::new(), kind: Kind::Big });
                    }
                }
            }
        }
        let table = args.table;
        let opens = args.opens.clone();
        let mut writes = Writes { args, fs, data, sources, results: Vec::new() };
        for cfg in &configs {
            for &open in &opens {
                writes.measure(cfg, open)?;
            }
        }
        if table {
            print_table(&writes.results);
        }
        return Ok(());
    }
    if args.table {
        print_table(&results);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reads into several GPUs

/// A destination on one GPU: its primary context and a buffer of the file's size.
struct Target {
    device: i32,
    ctx: sys::CUcontext,
    buffer: Buffer,
}

// SAFETY: the context is a retained primary context (usable from any thread once made current
// there) and the buffer a device allocation that only the reading thread touches during a read.
unsafe impl Send for Target {}
// SAFETY: as above; shared references only read the address and the context.
unsafe impl Sync for Target {}

/// `--devices`: one shared handle; big warm reads into each listed GPU alone, then into all of
/// them at once (one caller thread per GPU, released together); every byte verified after each
/// repetition.
fn run_devices(args: Args) -> Result<(), String> {
    let devices = args.devices.clone().unwrap_or_default();
    gdsroute::testing::cuda::cuda().map_err(|e| format!("--devices needs CUDA: {e}"))?;
    let count = device_count()?;
    if let Some(missing) = devices.iter().find(|d| **d >= count) {
        return Err(format!(
            "--devices: GPU {missing} does not exist: cuDeviceGetCount reports {count} GPU(s){}",
            if count > 0 { format!(", numbered 0 to {}", count - 1) } else { String::new() }
        ));
    }
    let file_size = Handle::open(&args.file, "r", None)?.size()?;
    if file_size == 0 {
        return Err(format!("{} is empty", args.file));
    }
    let mut targets = Vec::new();
    for &device in &devices {
        let ctx = cuda_context_of(device)?;
        targets.push(Target { device, ctx, buffer: Buffer::new(Mem::Device, file_size as usize)? });
    }
    let mut reference = Reference { path: args.file.clone(), data: None };
    reference.get()?;
    let names = devices.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",");
    println!(
        "# gdsroute-bench {} devices={names} file={} bytes={file_size} reps={} default_settings={} gpus_present={count}",
        env!("CARGO_PKG_VERSION"),
        args.file,
        args.reps,
        args.default_settings,
    );
    let mut configs: Vec<(Option<String>, Option<usize>, Option<usize>)> = Vec::new();
    if args.default_settings {
        configs.push((None, None, None));
    } else {
        for mode in &args.modes {
            for &threads in &args.threads {
                for &task in &args.task_sizes {
                    configs.push((Some(mode.clone()), Some(threads), Some(task)));
                }
            }
        }
    }
    let mut results = Vec::new();
    for (mode, threads, task) in configs {
        let cfg = Config { mem: Mem::Device, mode, threads, task, cache: "warm".into(), kind: Kind::Big };
        measure_devices(&args, &cfg, &mut targets, reference.get()?, &mut results)?;
    }
    if targets.len() == 1 {
        println!("NOTE devices: one GPU listed, so no reads at once (list two or more, e.g. --devices 0,1)");
    }
    if args.table {
        print_table(&results);
    }
    Ok(())
}

/// One read of the whole file into a target, from the calling thread (its context made current).
fn read_into(handle: &Handle, target: &Target, size: usize) -> Result<(), String> {
    set_current(target.ctx)?;
    let got = handle.pread(target.buffer.addr(), size, 0)?;
    if got != size {
        return Err(format!("short read into GPU {}: {got} of {size} bytes", target.device));
    }
    Ok(())
}

/// All targets read the whole file at once, one thread each, released together: per target the
/// seconds from its own start to its end, and the wall seconds from the first start to the last
/// end, with the process's CPU seconds over the same span.
fn read_together(handle: &Handle, targets: &[Target], size: usize) -> Result<(Vec<f64>, f64, f64), String> {
    let start = Barrier::new(targets.len() + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = targets
            .iter()
            .map(|target| {
                let start = &start;
                s.spawn(move || -> Result<(Instant, Instant), String> {
                    set_current(target.ctx)?;
                    start.wait();
                    let t0 = Instant::now();
                    read_into(handle, target, size)?;
                    Ok((t0, Instant::now()))
                })
            })
            .collect();
        let cpu0 = cpu_seconds();
        start.wait();
        let spans: Vec<Result<(Instant, Instant), String>> = workers
            .into_iter()
            .map(|w| w.join().map_err(|_| "reader thread panicked".to_string())?)
            .collect();
        let cpu_s = cpu_seconds() - cpu0;
        let spans = spans.into_iter().collect::<Result<Vec<_>, String>>()?;
        let first = spans.iter().map(|s| s.0).min().ok_or("no reader")?;
        let last = spans.iter().map(|s| s.1).max().ok_or("no reader")?;
        let each = spans.iter().map(|(a, b)| b.duration_since(*a).as_secs_f64()).collect();
        Ok((each, last.duration_since(first).as_secs_f64(), cpu_s))
    })
}

fn measure_devices(args: &Args, cfg: &Config, targets: &mut [Target], reference: &[u8], results: &mut Vec<Outcome>) -> Result<(), String> {
    apply_settings(cfg)?;
    let size = reference.len();
    set_current(targets[0].ctx)?;
    let handle = Handle::open(&args.file, "r", cfg.mode.as_deref())?;
    let (def_mode, threads, task) = current_settings();
    let mode = cfg.mode.clone().unwrap_or(def_mode);
    let settings = if args.default_settings { "default" } else { "set" };
    let all = targets.iter().map(|t| t.device.to_string()).collect::<Vec<_>>().join(",");
    // Steady state: one untimed read into each GPU, then (with several) one at once.
    for target in targets.iter() {
        read_into(&handle, target, size)?;
    }
    if targets.len() > 1 {
        read_together(&handle, targets, size)?;
    }
    let gb = size as f64 / 1e9;
    let mut emit = |devices: &str, device: &str, callers: usize, gbps: &[f64], cpu: f64, route: &str, after: &Counters| {
        let pinned: String = after
            .entries()
            .iter()
            .filter(|(name, _)| name.contains("pinned"))
            .map(|(name, v)| format!(" {name}={v}"))
            .collect();
        let (gmin, gmax) = spread(gbps);
        let line = format!(
            "RESULT impl=gdsroute mem=device mode={mode} threads={threads} task={task} cache=warm kind=big phase=steady settings={settings} callers={callers} devices={devices} device={device} gbps={:.3} rps=- cpu_s_per_gb={cpu:.4} reps={} gbps_min={gmin:.3} gbps_max={gmax:.3} reads={callers} route={route}{pinned}{}{}",
            median(gbps),
            gbps.len(),
            labels(),
            gbps_reps(gbps),
        );
        println!("{line}");
        let _ = std::io::stdout().flush();
        results.push(Outcome { line, gbps: median(gbps), rps: f64::NAN });
    };
    for target in targets.iter_mut() {
        let before = stats();
        let (mut gbps, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..args.reps {
            set_current(target.ctx)?;
            target.buffer.poison()?;
            let cpu0 = cpu_seconds();
            let t0 = Instant::now();
            read_into(&handle, target, size)?;
            let secs = t0.elapsed().as_secs_f64();
            cpu.push((cpu_seconds() - cpu0) / gb);
            set_current(target.ctx)?;
            verify_big(reference, &target.buffer)?;
            gbps.push(gb / secs);
        }
        let after = stats();
        let d = target.device.to_string();
        emit(&d, &d, 1, &gbps, median(&cpu), route_of(&before, &after), &after);
    }
    if targets.len() > 1 {
        let before = stats();
        let mut each: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
        let (mut aggregate, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..args.reps {
            for target in targets.iter_mut() {
                set_current(target.ctx)?;
                target.buffer.poison()?;
            }
            let (secs, wall, cpu_s) = read_together(&handle, targets, size)?;
            for (i, target) in targets.iter().enumerate() {
                set_current(target.ctx)?;
                verify_big(reference, &target.buffer)?;
                each[i].push(gb / secs[i]);
            }
            aggregate.push(gb * targets.len() as f64 / wall);
            cpu.push(cpu_s / (gb * targets.len() as f64));
        }
        let after = stats();
        let route = route_of(&before, &after);
        for (i, target) in targets.iter().enumerate() {
            emit(&all, &target.device.to_string(), targets.len(), &each[i], median(&cpu), route, &after);
        }
        emit(&all, "all", targets.len(), &aggregate, median(&cpu), route, &after);
    }
    set_current(targets[0].ctx)?;
    Ok(())
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    if args.devices.is_some() {
        return run_devices(args);
    }
    if args.write {
        return run_writes(args);
    }
    let gpu = match gdsroute::testing::cuda::cuda() {
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    let ctx = match (&gpu, args.mems.contains(&Mem::Device)) {
        (Ok(()), true) => Some(cuda_context()?),
        _ => None,
    };
    let mut mems = args.mems.clone();
    if let Err(why) = &gpu
        && mems.contains(&Mem::Device)
    {
        println!("NOTE no GPU: device memory skipped, host memory only ({why})");
        mems.retain(|m| *m == Mem::Host);
        if mems.is_empty() {
            mems.push(Mem::Host);
        }
    }
    let file_size = Handle::open(&args.file, "r", None)?.size()?;
    if file_size == 0 {
        return Err(format!("{} is empty", args.file));
    }
    let reference = Reference {
        path: args.file.clone(),
        data: None,
    };
    let mut bench = Bench {
        args,
        file_size,
        reference,
        ctx,
        results: Vec::new(),
    };
    println!(
        "# gdsroute-bench {} file={} bytes={file_size} reps={} first_only={} default_settings={}",
        env!("CARGO_PKG_VERSION"),
        bench.args.file,
        bench.args.reps,
        bench.args.first_only,
        bench.args.default_settings
    );

    let a = &bench.args;
    let mut configs = Vec::new();
    for &mem in &mems {
        for &kind in &a.kinds {
            for cache in &a.caches {
                if a.default_settings {
                    configs.push(Config {
                        mem,
                        mode: None,
                        threads: None,
                        task: None,
                        cache: cache.clone(),
                        kind,
                    });
                    continue;
                }
                for mode in &a.modes {
                    for &threads in &a.threads {
                        for &task in &a.task_sizes {
                            configs.push(Config {
                                mem,
                                mode: Some(mode.clone()),
                                threads: Some(threads),
                                task: Some(task),
                                cache: cache.clone(),
                                kind,
                            });
                        }
                    }
                }
            }
        }
    }
    let table = a.table && !a.first_only;
    for cfg in &configs {
        bench.measure(cfg)?;
    }
    if table {
        bench.table();
    }
    print!("{}", gdsroute::trace::dump()); // empty unless built with the `trace` feature
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("gdsroute-bench: {e}");
        if e.contains("required") || e.contains("argument") || e.contains("takes one value") {
            eprintln!("{USAGE}");
        }
        std::process::exit(1);
    }
}

/// The thread count and task size a configuration sets, if any.
fn apply_settings(cfg: &Config) -> Result<(), String> {
    if let Some(t) = cfg.threads {
        check(
            gdsroute_settings_set_num_threads(t),
            "gdsroute_settings_set_num_threads",
        )?;
    }
    if let Some(t) = cfg.task {
        check(
            gdsroute_settings_set_task_size(t),
            "gdsroute_settings_set_task_size",
        )?;
    }
    Ok(())
}

/// Which route the tasks between two snapshots of the counters took.
fn route_of(before: &Counters, after: &Counters) -> &'static str {
    let posix = after.posix_tasks - before.posix_tasks;
    let cufile = after.cufile_tasks - before.cufile_tasks;
    match (posix > 0, cufile > 0) {
        (true, false) => "posix",
        (false, true) => "cufile",
        (true, true) => "mixed",
        _ => "none",
    }
}

/// Per timed repetition: GB/s, reads per second, CPU seconds per GB.
struct Reps {
    gbps: Vec<f64>,
    rps: Vec<f64>,
    cpu: Vec<f64>,
}
