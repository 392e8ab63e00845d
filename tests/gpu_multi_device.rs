//! Two GPUs in one process (run on the two-GPU machine by tools/gpu/gpu-multi-proof.sh; every test
//! here FAILS, not skips, with fewer than two devices): reads and writes from several threads into
//! both devices at once through one pool, byte for byte with random data inside poisoned
//! margins; device 1's memory read while device 0's context is current; device 1's memory reached
//! through peer access from device 0's context; managed memory touched by both; and the counters
//! of each device, which add up to the process totals of device memory.

mod common;

use common::random_bytes;
use cudarc::driver::sys;
use gdsroute::settings::{self, CompatMode};
use gdsroute::testing::device::cuda::{self, ContextHandle, MemoryKind, ScopedContext};
use gdsroute::counters::{device_counters, process_counters, reset_process_counters};
use gdsroute::testing::device as device_io;
use gdsroute::{Counters, DeviceCounters, File};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static LOCK: Mutex<()> = Mutex::new(());

const GUARD: usize = 4096 + 3;
const POISON: u8 = 0x5A;

fn ok(call: &str, r: sys::CUresult) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{call}");
}

/// The primary contexts of devices 0 and 1; fails the test on a machine with fewer devices.
fn two_devices() -> (ContextHandle, ContextHandle) {
    let driver = cuda::cuda().expect("CUDA must be available for the two-GPU tests");
    assert!(driver.device_count() >= 2, "the two-GPU tests need two devices; this machine has {}", driver.device_count());
    (cuda::primary_context(0).unwrap(), cuda::primary_context(1).unwrap())
}

/// Device (or managed) memory of `len` bytes between two poisoned margins, allocated in `ctx`.
struct Guarded {
    base: sys::CUdeviceptr,
    len: usize,
    ctx: ContextHandle,
}

impl Guarded {
    fn new(ctx: ContextHandle, len: usize, managed: bool) -> Guarded {
        let _scope = ScopedContext::push(ctx).unwrap();
        let mut base: sys::CUdeviceptr = 0;
        let total = len + 2 * GUARD;
        if managed {
            ok("cuMemAllocManaged", unsafe { sys::cuMemAllocManaged(&mut base, total, 1) });
        } else {
            ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut base, total) });
        }
        ok("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(base, POISON, total) });
        ok("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() });
        Guarded { base, len, ctx }
    }

    fn ptr(&self) -> *mut u8 {
        (self.base as usize + GUARD) as *mut u8
    }

    fn upload(&self, data: &[u8]) {
        let _scope = ScopedContext::push(self.ctx).unwrap();
        ok("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD_v2(self.base + GUARD as u64, data.as_ptr().cast(), data.len()) });
    }

    /// The whole allocation, margins included, copied back in its own context.
    fn back(&self) -> Vec<u8> {
        let _scope = ScopedContext::push(self.ctx).unwrap();
        let mut out = vec![0u8; self.len + 2 * GUARD];
        ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.base, out.len()) });
        out
    }

    /// Checks that the first `n` bytes are `want` and that nothing outside `[0, len)` changed.
    fn check(&self, want: &[u8], what: &str) {
        let back = self.back();
        assert!(back[GUARD..GUARD + want.len()] == *want, "{what}: bytes differ");
        assert!(back[..GUARD].iter().all(|&b| b == POISON), "{what}: front margin written");
        assert!(back[GUARD + self.len..].iter().all(|&b| b == POISON), "{what}: back margin written");
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Ok(_scope) = ScopedContext::push(self.ctx) {
            unsafe { sys::cuMemFree_v2(self.base) };
        }
    }
}

/// Reads `size` bytes at `offset` of `file` into fresh memory of `ctx`, with whatever context the
/// calling thread has current, by `pread` (waited) or `read`; checks bytes and margins.
fn checked_read(file: &File, data: &[u8], ctx: ContextHandle, size: usize, offset: u64, managed: bool, sync: bool) {
    let dst = Guarded::new(ctx, size, managed);
    let n = if sync {
        unsafe { file.read_raw(dst.ptr(), size, offset) }.unwrap()
    } else {
        unsafe { file.pread_raw(dst.ptr(), size, offset) }.unwrap().wait().unwrap()
    };
    let start = (offset as usize).min(data.len());
    let expect = (data.len() - start).min(size);
    assert_eq!(n, expect, "size {size} offset {offset}");
    dst.check(&data[start..start + n], &format!("size {size} offset {offset} managed {managed} sync {sync}"));
}

/// Writes `data` from fresh memory of `ctx` at `offset` by `pwrite` (waited) or `write`.
fn checked_write(file: &File, data: &[u8], ctx: ContextHandle, offset: u64, managed: bool, sync: bool) {
    let src = Guarded::new(ctx, data.len(), managed);
    src.upload(data);
    let n = if sync {
        unsafe { file.write_raw(src.ptr(), data.len(), offset) }
    } else {
        unsafe { file.pwrite_raw(src.ptr(), data.len(), offset) }.and_then(|op| op.wait())
    };
    assert_eq!(n.unwrap_or_else(|e| panic!("write of {} bytes at {offset}: {e}", data.len())), data.len());
    src.check(data, "the source of a write");
}

fn open_rw(tmp: &tempfile::NamedTempFile, mode: CompatMode) -> File {
    File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0, Some(mode)).unwrap()
}

/// Devices' counters by ordinal (zeros for a device not listed).
fn device(devices: &[DeviceCounters], ordinal: u64) -> DeviceCounters {
    devices.iter().find(|d| d.device_ordinal == ordinal).copied().unwrap_or_default()
}

/// The devices' task counters add up to the totals of device memory. Only for a quiet moment
/// (no I/O running); both snapshots are taken together by the caller.
fn assert_devices_sum_to_totals(devices: &[DeviceCounters], totals: &Counters) {
    let sum = |f: fn(&DeviceCounters) -> u64| devices.iter().map(f).sum::<u64>();
    assert_eq!(sum(|d| d.tasks), totals.tasks - totals.posix_tasks_host_memory, "tasks");
    assert_eq!(sum(|d| d.tasks_failed), totals.tasks_failed, "failed tasks");
    assert_eq!(sum(|d| d.cufile_tasks), totals.cufile_tasks, "cuFile tasks");
    assert_eq!(sum(|d| d.cufile_bytes), totals.cufile_bytes, "cuFile bytes");
    assert_eq!(sum(|d| d.posix_tasks), totals.posix_tasks - totals.posix_tasks_host_memory, "POSIX tasks");
    assert_eq!(sum(|d| d.posix_mapped_bytes), totals.posix_mapped_bytes, "page-cache bytes");
    assert_eq!(sum(|d| d.write_tasks), totals.write_tasks, "write tasks (all from device memory here)");
    assert_eq!(sum(|d| d.posix_write_bytes + d.cufile_write_bytes), totals.posix_write_bytes + totals.cufile_write_bytes, "bytes written");
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
#[ignore = "needs two GPUs"]
fn concurrent_reads_and_writes_into_both_devices_through_one_pool() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let (c0, c1) = two_devices();
    settings::set_num_threads(8).unwrap();
    settings::set_task_size(1 << 20).unwrap();
    let data = random_bytes((24 << 20) + 77, 71);
    let src = common::gpu::file_with(&data);
    const THREADS: usize = 4;
    const REGION: usize = 6 << 20;
    let out = common::gpu::file_with(&vec![0u8; THREADS * REGION]);
    reset_process_counters();
    for mode in [CompatMode::On, CompatMode::Auto] {
        let reader = open_rw(&src, mode);
        let writer = open_rw(&out, mode);
        // Each thread reads into and writes from its device (0, 1, 0, 1), its own context
        // current, all through the one pool; each writes only its own region of `out`.
        let regions: Vec<Vec<u8>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (reader, writer, data) = (&reader, &writer, &data);
                    let ctx = if t % 2 == 0 { c0 } else { c1 };
                    s.spawn(move || {
                        let _scope = ScopedContext::push(ctx).unwrap();
                        let mut rng = 0x1234_5678_9ABC_DEF0 ^ ((t as u64 + 1) * 0x9E37_79B9);
                        let mut model = vec![0u8; REGION];
                        let current = std::fs::read(writer.path().unwrap()).unwrap();
                        model.copy_from_slice(&current[t * REGION..(t + 1) * REGION]);
                        for i in 0..16 {
                            let sizes = [1usize, 4095, 16384, 65537, (1 << 20) + 3, (5 << 20) + 1, data.len()];
                            let size = sizes[xorshift(&mut rng) as usize % sizes.len()];
                            let offset = xorshift(&mut rng) % (data.len() as u64 + 10);
                            checked_read(reader, data, ctx, size, offset, i % 5 == 4, i % 3 == 2);
                            let len = 1 + xorshift(&mut rng) as usize % (2 << 20);
                            let at = xorshift(&mut rng) as usize % (REGION - len);
                            let from = xorshift(&mut rng) as usize % (data.len() - len);
                            checked_write(writer, &data[from..from + len], ctx, (t * REGION + at) as u64, i % 7 == 6, i % 2 == 1);
                            model[at..at + len].copy_from_slice(&data[from..from + len]);
                        }
                        model
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let written = std::fs::read(out.path()).unwrap();
        for (t, model) in regions.iter().enumerate() {
            assert!(written[t * REGION..(t + 1) * REGION] == model[..], "{mode:?}: region of thread {t} differs");
        }
        eprintln!("{mode:?}: reader {}\nwriter {}", reader.stats().to_json(), writer.stats().to_json());
    }
    let (devices, totals) = (device_counters(), process_counters());
    eprintln!("{}", gdsroute::counters::render_devices_text(&devices));
    let (d0, d1) = (device(&devices, 0), device(&devices, 1));
    assert!(d0.tasks > 0 && d1.tasks > 0 && d0.write_tasks > 0 && d1.write_tasks > 0, "both devices moved bytes");
    assert_eq!(totals.tasks_failed + totals.write_tasks_failed, 0);
    assert_devices_sum_to_totals(&devices, &totals);
    // A pool per device, both used (compat ON went through bounce buffers); the process's pinned
    // bytes are theirs together. Read until two readings agree (the preparation at open pins in
    // the background).
    let pools = device_io::device_pinned();
    assert!(pools.iter().any(|p| p.ordinal == 0 && p.stats.allocations > 0) && pools.iter().any(|p| p.ordinal == 1 && p.stats.allocations > 0), "{pools:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (devices, totals) = (device_counters(), process_counters());
        let pinned: u64 = devices.iter().map(|d| d.pinned_bytes).sum();
        let peaks: u64 = devices.iter().map(|d| d.pinned_bytes_peak).sum();
        if pinned == totals.pinned_bytes {
            assert!(totals.pinned_bytes_peak <= peaks && totals.pinned_bytes_peak >= devices.iter().map(|d| d.pinned_bytes_peak).max().unwrap());
            break;
        }
        assert!(Instant::now() < deadline, "devices pin {pinned}, the process {}", totals.pinned_bytes);
        std::thread::sleep(Duration::from_millis(10));
    }
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
}

#[test]
#[ignore = "needs two GPUs"]
fn device_1_memory_read_while_device_0_is_current() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let (c0, c1) = two_devices();
    settings::set_num_threads(8).unwrap();
    let data = random_bytes((9 << 20) + 333, 72);
    let tmp = common::gpu::file_with(&data);
    let before = device_counters();
    let _current = ScopedContext::push(c0).unwrap();
    for mode in [CompatMode::On, CompatMode::Auto] {
        let file = open_rw(&tmp, mode);
        // Below the GDS threshold (one task on this thread), a synchronous read (on this thread),
        // a parallel read whose waiting thread runs tasks too; device and managed memory of device 1.
        for &(size, offset) in &[(8192usize, 5u64), ((4 << 20) + 1, 4096), (data.len(), 0)] {
            for sync in [false, true] {
                checked_read(&file, &data, c1, size, offset, false, sync);
                assert_eq!(cuda::current_context().unwrap(), Some(c0), "the caller's context is restored");
            }
        }
        let managed = Guarded::new(c1, data.len(), true);
        let kind = cuda::classify(managed.ptr().cast()).unwrap();
        eprintln!("managed memory allocated in device 1's context: {kind:?}");
        let n = unsafe { file.pread_raw(managed.ptr(), data.len(), 0) }.unwrap().wait().unwrap();
        assert_eq!(n, data.len());
        managed.check(&data, "managed memory of device 1");
        checked_write(&file, &data[..(2 << 20) + 9], c1, 0, false, false);
    }
    assert!(std::fs::read(tmp.path()).unwrap() == data);
    let after = device_counters();
    let gained = |o| device(&after, o).tasks - device(&before, o).tasks;
    assert!(gained(1) > 0, "device 1's reads counted for device 1");
    assert_eq!(gained(0), 0, "nothing read into device 0 although its context was current");
    assert!(device(&after, 1).write_tasks > device(&before, 1).write_tasks);
}

/// Stream-ordered calls on device 0's legacy stream into and out of device 1's memory: a relay
/// (a kernel or copies queued on device 0's stream) could not reach that memory, so they take
/// the blocking fallback, counted so, and move every byte; sized calls and the pointer form.
#[test]
#[ignore = "needs two GPUs"]
fn stream_ordered_calls_on_device_0s_legacy_stream_into_device_1_memory() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let (c0, c1) = two_devices();
    settings::set_stream_ordered(settings::StreamOrdered::Auto);
    settings::set_stream_relay(true);
    let data = random_bytes((3 << 20) + 77, 73);
    let tmp = common::gpu::file_with(&data);
    let _current = ScopedContext::push(c0).unwrap();
    const LEGACY: usize = 0;
    for mode in [CompatMode::On, CompatMode::Auto] {
        let file = open_rw(&tmp, mode);
        let (size, offset) = ((2 << 20) + 5, 4099u64);
        let dst = Guarded::new(c1, size, false);
        let n = unsafe { file.read_async_raw(dst.ptr(), size, offset, LEGACY) }.unwrap().wait().unwrap();
        assert_eq!(n, size);
        dst.check(&data[offset as usize..offset as usize + size], &format!("{mode:?}: read_async"));
        let dst = Guarded::new(c1, size, false);
        let (size_v, offset_v, mut bytes_v) = (size, offset, -1isize);
        let n = unsafe { file.read_async_ptr_raw(dst.ptr(), &size_v, &offset_v, &mut bytes_v, LEGACY) }.unwrap().wait().unwrap();
        assert_eq!((n, bytes_v), (size, size as isize));
        dst.check(&data[offset as usize..offset as usize + size], &format!("{mode:?}: read_async_ptr"));
        let src = Guarded::new(c1, size, false);
        src.upload(&data[..size]);
        let n = unsafe { file.write_async_raw(src.ptr(), size, 0, LEGACY) }.unwrap().wait().unwrap();
        assert_eq!(n, size);
        let c = file.stats();
        assert_eq!((c.stream_calls_relayed, c.stream_calls_blocking_legacy_waits), (0, 3), "{mode:?}: blocking, not relayed");
        assert_eq!(cuda::current_context().unwrap(), Some(c0), "the caller's context is restored");
        // Written back as it was: the file is the same for the next mode.
        assert_eq!(unsafe { file.write_raw(data.as_ptr().cast_mut(), size, 0) }.unwrap(), size);
    }
    assert!(std::fs::read(tmp.path()).unwrap() == data);
}

#[test]
#[ignore = "needs two GPUs"]
fn device_1_memory_reached_through_peer_access_from_device_0() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let (c0, c1) = two_devices();
    let data = random_bytes((6 << 20) + 17, 73);
    let tmp = common::gpu::file_with(&data);
    let (mut dev0, mut dev1, mut can) = (0, 0, 0);
    ok("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev0, 0) });
    ok("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev1, 1) });
    ok("cuDeviceCanAccessPeer", unsafe { sys::cuDeviceCanAccessPeer(&mut can, dev0, dev1) });
    let _current = ScopedContext::push(c0).unwrap();
    if can == 1 {
        let r = unsafe { sys::cuCtxEnablePeerAccess(c1.as_raw(), 0) };
        assert!(matches!(r, sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED), "cuCtxEnablePeerAccess: {r:?}");
    } else {
        eprintln!("device 0 cannot access device 1's memory as a peer: the copies below go through cuMemcpyPeer's staging");
    }
    let before = device_counters();
    for mode in [CompatMode::On, CompatMode::Auto] {
        let file = open_rw(&tmp, mode);
        let on1 = Guarded::new(c1, data.len(), false);
        // Device 0's context current, the destination on device 1.
        let n = unsafe { file.pread_raw(on1.ptr(), data.len(), 0) }.unwrap().wait().unwrap();
        assert_eq!(n, data.len());
        // Device 0 takes the bytes from device 1 (over the peer mapping where there is one) and
        // they are checked from device 0's memory.
        let on0 = Guarded::new(c0, data.len(), false);
        ok("cuMemcpyPeer", unsafe { sys::cuMemcpyPeer(on0.base + GUARD as u64, c0.as_raw(), on1.base + GUARD as u64, c1.as_raw(), data.len()) });
        on0.check(&data, &format!("{mode:?}: device 1's bytes seen from device 0"));
        on1.check(&data, &format!("{mode:?}: device 1's bytes"));
        if can == 1 {
            // With peer access, device 0's context copies device 1's memory directly (unified
            // addressing), the way a kernel on device 0 would read it.
            let mut back = vec![0u8; data.len()];
            let on0b = Guarded::new(c0, data.len(), false);
            ok("cuMemcpyDtoD", unsafe { sys::cuMemcpyDtoD_v2(on0b.base + GUARD as u64, on1.base + GUARD as u64, data.len()) });
            ok("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() });
            ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), on0b.base + GUARD as u64, back.len()) });
            assert!(back == data, "{mode:?}: peer copy differs");
        }
    }
    let after = device_counters();
    assert!(device(&after, 1).tasks > device(&before, 1).tasks);
    assert_eq!(device(&after, 0).tasks, device(&before, 0).tasks, "device 1's memory is counted for device 1");
    if can == 1 {
        ok("cuCtxDisablePeerAccess", unsafe { sys::cuCtxDisablePeerAccess(c1.as_raw()) });
    }
}

#[test]
#[ignore = "needs two GPUs"]
fn managed_memory_touched_by_both_devices() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let (c0, c1) = two_devices();
    settings::set_num_threads(8).unwrap();
    let data = random_bytes((10 << 20) + 4099, 74);
    let tmp = common::gpu::file_with(&data);
    for mode in [CompatMode::On, CompatMode::Auto] {
        let file = open_rw(&tmp, mode);
        let managed = Guarded::new(c0, data.len(), true);
        let ordinal = match cuda::classify(managed.ptr().cast()).unwrap() {
            MemoryKind::Managed { ordinal, .. } => ordinal as u64,
            other => panic!("cuMemAllocManaged gave {other:?}"),
        };
        let before = device_counters();
        // Two threads, one per device's context, fill its two halves at once.
        let half = data.len() / 2;
        let ptr = managed.ptr() as usize;
        std::thread::scope(|s| {
            for (ctx, start, len) in [(c0, 0, half), (c1, half, data.len() - half)] {
                let file = &file;
                s.spawn(move || {
                    let _scope = ScopedContext::push(ctx).unwrap();
                    let n = unsafe { file.pread_raw((ptr + start) as *mut u8, len, start as u64) }.unwrap().wait().unwrap();
                    assert_eq!(n, len);
                });
            }
        });
        managed.check(&data, &format!("{mode:?}: managed memory read by both"));
        // The host sees it, and each device takes a copy into its own memory.
        let host = unsafe { std::slice::from_raw_parts(managed.ptr(), data.len()) };
        assert!(host == data.as_slice(), "{mode:?}: the host's view differs");
        for ctx in [c0, c1] {
            let copy = Guarded::new(ctx, data.len(), false);
            let _scope = ScopedContext::push(ctx).unwrap();
            ok("cuMemcpy", unsafe { sys::cuMemcpy(copy.base + GUARD as u64, managed.base + GUARD as u64, data.len()) });
            ok("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() });
            drop(_scope);
            copy.check(&data, &format!("{mode:?}: managed memory copied by a device"));
        }
        // Device 1 writes it back to the file through the library.
        {
            let _scope = ScopedContext::push(c1).unwrap();
            let n = unsafe { file.pwrite_raw(managed.ptr(), data.len(), 0) }.unwrap().wait().unwrap();
            assert_eq!(n, data.len());
        }
        assert!(std::fs::read(tmp.path()).unwrap() == data);
        // Managed memory counts for the device the driver names for it, whichever thread read.
        let after = device_counters();
        let gained = |o| device(&after, o).tasks - device(&before, o).tasks;
        let others: u64 = after.iter().filter(|d| d.device_ordinal != ordinal).map(|d| gained(d.device_ordinal)).sum();
        assert!(gained(ordinal) > 0 && others == 0, "{mode:?}: managed memory of device {ordinal}: {after:?}");
    }
}

#[test]
#[ignore = "needs two GPUs"]
fn opening_a_file_prepares_every_device_in_use() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let (c0, _c1) = two_devices(); // both primary contexts retained, so active
    // More workers than the other tests of this binary, so the open has work for both devices.
    let workers = 24;
    settings::set_num_threads(workers).unwrap();
    let data = random_bytes(4 << 20, 75);
    let tmp = common::gpu::file_with(&data);
    let _current = ScopedContext::push(c0).unwrap();
    let file = open_rw(&tmp, CompatMode::On);
    let buffer = device_io::current_bounce_buffer_bytes().unwrap();
    let want = (workers as u64 + 1) * buffer;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pinned: Vec<(i32, u64)> = device_io::device_pinned().iter().map(|p| (p.ordinal, p.stats.bytes_pinned)).collect();
        if [0, 1].iter().all(|&o| pinned.iter().any(|&(p, b)| p == o && b >= want)) {
            break;
        }
        assert!(Instant::now() < deadline, "10 s after the open: {pinned:?}, {want} wanted for devices 0 and 1");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(file.stats().calls, 0, "prepared before any read");
    settings::set_num_threads(8).unwrap();
}
