//! `gdsroute-bench --file PATH [options]`: reads a file into device (or host) memory through the
//! C API (`gdsroute_file_pread` + `gdsroute_op_wait`, called from Rust) and prints one
//! `RESULT impl=gdsroute ...` line per measurement, then a table. Method: docs/performance.md.
//! `scripts/bench-kvikio.py` prints the same lines for KvikIO.

use std::ffi::{CString, c_void};
use std::io::Write;
use std::time::Instant;

use cudarc::driver::sys;
use gdsroute::ffi::file::{
    gdsroute_file_free, gdsroute_file_open, gdsroute_file_open_with_compat_mode,
    gdsroute_file_pread, gdsroute_file_size,
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
    };
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
                a.kinds = list(&value()?, |s| match s {
                    "big" => Ok(Kind::Big),
                    "rand4k" => Ok(Kind::Rand(4 << 10)),
                    "rand64k" => Ok(Kind::Rand(64 << 10)),
                    _ => Err(format!("kind {s:?}: big, rand4k or rand64k")),
                })?
            }
            "--cache" => {
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
    /// `mode` None: `gdsroute_file_open` (the process default compat mode).
    fn open(path: &str, mode: Option<&str>) -> Result<Handle, String> {
        let c_path = CString::new(path).map_err(|_| "path has a NUL byte".to_string())?;
        let mut file: *mut File = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings and a writable out-pointer.
        let status = unsafe {
            match mode {
                None => gdsroute_file_open(c_path.as_ptr(), c"r".as_ptr(), 0o644, &mut file),
                Some(m) => {
                    let raw = match m {
                        "off" => 0,
                        "on" => 1,
                        _ => 2,
                    };
                    gdsroute_file_open_with_compat_mode(
                        c_path.as_ptr(),
                        c"r".as_ptr(),
                        0o644,
                        raw,
                        &mut file,
                    )
                }
            }
        };
        check(status, &format!("gdsroute_file_open {path}"))?;
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
    gdsroute::testing::cuda::cuda().map_err(|e| format!("CUDA unavailable: {e}"))?;
    let mut dev: sys::CUdevice = 0;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: cuda() confirmed libcuda is loaded and initialised; out-pointers are writable.
    unsafe {
        cu(sys::cuInit(0), "cuInit")?;
        cu(sys::cuDeviceGet(&mut dev, 0), "cuDeviceGet")?;
        cu(
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            "cuDevicePrimaryCtxRetain",
        )?;
        cu(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
    }
    Ok(ctx)
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

    fn addr(&mut self) -> usize {
        match self {
            Buffer::Device { ptr, .. } => *ptr as usize,
            Buffer::Host(v) => v.as_mut_ptr() as usize,
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
            Kind::Big => {
                let mut chunk = vec![0u8; (64usize << 20).min(reference.len().max(1))];
                let mut off = 0usize;
                while off < reference.len() {
                    let n = chunk.len().min(reference.len() - off);
                    buffer.copy_out(off, &mut chunk[..n])?;
                    if chunk[..n] != reference[off..off + n] {
                        let at = chunk[..n]
                            .iter()
                            .zip(&reference[off..off + n])
                            .position(|(a, b)| a != b)
                            .unwrap_or(0);
                        return Err(format!("verification failed at file offset {}", off + at));
                    }
                    off += n;
                }
            }
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
        let handle = Handle::open(&self.args.file, cfg.mode.as_deref())?;
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
        // Labels from the calling script: BENCH_TAG (a setup both libraries share) and
        // BENCH_VARIANT (a gdsroute setting compared with the same KvikIO lines).
        for (var, field) in [("BENCH_TAG", "tag"), ("BENCH_VARIANT", "variant")] {
            let value = std::env::var(var).map(|v| v.split_whitespace().collect::<Vec<_>>().join("_"));
            if let Some(v) = value.ok().filter(|v| !v.is_empty()) {
                pinned.push_str(&format!(" {field}={v}"));
            }
        }
        pinned.push_str(&format!(" gbps_reps={}", gbps.iter().map(|g| format!("{g:.1}")).collect::<Vec<_>>().join(",")));
        pinned
    }

    fn table(&self) {
        if self.results.is_empty() {
            return;
        }
        println!();
        println!(
            "{:<7} {:<5} {:>7} {:>9} {:<5} {:<8} {:<6} {:>9} {:>10} {:>12} {:<6}",
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
        for o in &self.results {
            let field = |k: &str| {
                o.line
                    .split_whitespace()
                    .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                    .unwrap_or("")
                    .to_string()
            };
            let rps = if field("rps") == "-" {
                "-".to_string()
            } else {
                format!("{:.0}", o.rps)
            };
            println!(
                "{:<7} {:<5} {:>7} {:>9} {:<5} {:<8} {:<6} {:>9.2} {:>10} {:>12} {:<6}",
                field("mem"),
                field("mode"),
                field("threads"),
                field("task"),
                field("cache"),
                field("kind"),
                field("phase"),
                o.gbps,
                rps,
                field("cpu_s_per_gb"),
                field("route")
            );
        }
    }
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
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
    let file_size = Handle::open(&args.file, None)?.size()?;
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
