//! Reads into GPU memory on every route, checked byte for byte (needs a GPU: run with
//! `--ignored` on the device machine; tools/gpu/gpu-proof.sh does). Random sizes and offsets,
//! unaligned device pointers inside a larger allocation with poisoned margins, pinned host and
//! managed memory, and a worker thread with no CUDA context current.

mod common;

use common::gpu::{check_device_read, file_with, ok, on_device0, open};
use common::random_bytes;
use cudarc::driver::sys;
use gdsroute::FallbackReason;
use gdsroute::settings::{CompatMode, CufileFd, Descriptor};
use gdsroute::counters::CufileStatsState;
use gdsroute::{File, settings};
use std::sync::Mutex;

static SETTINGS_LOCK: Mutex<()> = Mutex::new(());

/// Bounce pieces of 2 MiB (the default buffer), of an odd size and of a page, with the task sizes
/// and pool threads they are run with.
const BOUNCE_SETUPS: [(u64, usize, u64); 3] =
    [(4 << 20, 4, settings::DEFAULT_BOUNCE_BUFFER_SIZE), (1 << 20, 2, (1 << 20) + 4097), (65536, 8, 4096)];

/// Runs `body(task, bounce)` under each (task size, pool threads, bounce buffer size) of
/// `setups`, then restores the default task and bounce buffer sizes.
fn with_each_setup(setups: &[(u64, usize, u64)], mut body: impl FnMut(u64, u64)) {
    for &(task, threads, bounce) in setups {
        settings::set_task_size(task).unwrap();
        settings::set_bounce_buffer_size(bounce).unwrap();
        settings::set_num_threads(threads).unwrap();
        body(task, bounce);
    }
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
    settings::set_bounce_buffer_size(settings::DEFAULT_BOUNCE_BUFFER_SIZE).unwrap();
}

#[test]
#[ignore = "needs a GPU"]
fn device_reads_on_every_route_are_byte_exact() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes((9 << 20) + 777, 11);
    let tmp = file_with(&data);
    for mode in [CompatMode::On, CompatMode::Auto] {
        let file = open(&tmp, mode);
        // Bounce buffers of the default size (a 2 MiB piece), of an odd size, and of one page:
        // pieces end anywhere in a task and buffers change hands between threads.
        let setups = [(1u64 << 20, 1usize, settings::DEFAULT_BOUNCE_BUFFER_SIZE), (4 << 20, 4, (1 << 20) + 4097), (65536, 8, 4096)];
        with_each_setup(&setups, |_, _| {
            for &size in &[1usize, 4095, 8192, 16383, 16384, 65537, (4 << 20) + 1, (9 << 20) + 3] {
                for &offset in &[0u64, 1, 4096, 123_457, data.len() as u64 - 5, data.len() as u64 + 1] {
                    check_device_read(&file, &data, size, offset, false);
                }
            }
        });
        let c = file.stats();
        assert_eq!(c.calls_failed, 0);
        assert!(c.posix_tasks_below_threshold > 0);
        if mode == CompatMode::On {
            assert_eq!(c.cufile_tasks, 0);
            assert!(c.posix_tasks_compat_on > 0);
        }
        eprintln!("{mode:?}: {}", c.to_json());
    }
}

#[test]
#[ignore = "needs a GPU"]
fn device_reads_of_pages_not_in_the_page_cache_are_exact_and_counted() {
    // The bounce route's first piece of each task finds the bytes missing and has the kernel
    // read the whole task ahead; pieces of 2 MiB, of an odd size and of one page. The registered
    // page cache is off: pinned windows could not be evicted.
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes((9 << 20) + 777, 13);
    let tmp = file_with(&data);
    let pin_max = settings::page_cache_pin_max().unwrap();
    settings::set_page_cache_pin_max(0);
    let file = open(&tmp, CompatMode::On);
    with_each_setup(&BOUNCE_SETUPS, |task, bounce| {
        for &(size, offset) in &[(data.len(), 0u64), ((5 << 20) + 3, 4097), (20000, data.len() as u64 - 50)] {
            let what = format!("task {task} bounce {bounce} size {size} offset {offset}");
            common::check_read_of_evicted(tmp.path(), &file, offset, size, &what, || check_device_read(&file, &data, size, offset, false));
        }
    });
    settings::set_page_cache_pin_max(pin_max);
}

#[test]
#[ignore = "needs a GPU"]
fn device_reads_with_direct_io_are_exact_counted_and_skip_the_page_cache() {
    // KVIKIO_AUTO_DIRECT_IO_READ: bounce pieces read through the O_DIRECT descriptor into the
    // pinned halves, the unaligned head and tail through the page cache; the registered page
    // cache is not used (it maps the page cache). Pieces of 2 MiB, of an odd size and of a page.
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes((9 << 20) + 777, 15);
    let tmp = file_with(&data);
    let direct = common::has_direct_io(tmp.as_file());
    /// Turns direct I/O off again however the test ends.
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            settings::set_auto_direct_io_read(false);
        }
    }
    let _off = Off;
    settings::set_auto_direct_io_read(true);
    let file = open(&tmp, CompatMode::On);
    with_each_setup(&BOUNCE_SETUPS, |_, _| {
        for &size in &[1usize, 16384, 65537, (4 << 20) + 1, (9 << 20) + 3] {
            for &offset in &[0u64, 1, 4096, 123_457, data.len() as u64 - 5] {
                check_device_read(&file, &data, size, offset, false);
            }
        }
        // Read again and again: with direct I/O no window is ever registered.
        for _ in 0..3 {
            check_device_read(&file, &data, data.len(), 0, false);
        }
    });
    let c = file.stats();
    eprintln!("direct I/O: {}", c.to_json());
    assert_eq!(c.posix_mapped_bytes, 0, "the registered page cache was used");
    assert_eq!(direct, c.posix_direct_bytes > 0, "O_DIRECT available: {direct}");
    assert!(c.posix_direct_bytes <= c.posix_bytes);
}

#[test]
#[ignore = "needs a GPU"]
fn managed_pinned_and_foreign_thread_destinations() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes(6 << 20, 12);
    let tmp = file_with(&data);
    let file = open(&tmp, CompatMode::Auto);
    check_device_read(&file, &data, 5 << 20, 3, true);

    // Pinned host memory is host memory: POSIX tasks, never cuFile.
    let mut pinned: *mut std::ffi::c_void = std::ptr::null_mut();
    ok("cuMemAllocHost", unsafe { sys::cuMemAllocHost_v2(&mut pinned, data.len()) });
    let before = file.stats();
    let n = unsafe { file.pread_raw(pinned.cast(), data.len(), 0) }.unwrap().wait().unwrap();
    assert_eq!(n, data.len());
    assert!(unsafe { std::slice::from_raw_parts(pinned as *const u8, n) } == &data[..]);
    // Every task host memory, none through cuFile; 6 MiB is 2 tasks of the task size, or more
    // where the read is spread over the pool (docs/routing.md, "Small reads spread over the pool").
    let after = file.stats();
    let tasks = after.tasks - before.tasks;
    assert!(tasks >= 2, "{tasks} tasks");
    assert_eq!((after.posix_tasks_host_memory - before.posix_tasks_host_memory, after.cufile_tasks - before.cufile_tasks), (tasks, 0));
    unsafe { sys::cuMemFreeHost(pinned) };

    // A thread with no CUDA context current reads into a device pointer made on this one.
    let mut dev: sys::CUdeviceptr = 0;
    ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dev, data.len()) });
    let path = tmp.path().to_path_buf();
    let n = std::thread::spawn(move || {
        let file = File::open(path.as_os_str().as_encoded_bytes(), "r", 0, Some(CompatMode::On)).unwrap();
        unsafe { file.read_raw(dev as usize as *mut u8, 6 << 20, 0) }.unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(n, data.len());
    let mut back = vec![0u8; data.len()];
    ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dev, back.len()) });
    assert!(back == data);
    unsafe { sys::cuMemFree_v2(dev) };
}

#[test]
#[ignore = "needs a GPU"]
fn pointer_of_a_non_current_non_primary_context() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _primary = on_device0();
    let data = random_bytes((5 << 20) + 4097, 13);
    let tmp = file_with(&data);
    // A second, non-primary context owns the destination; it is not current on any thread
    // while the library reads.
    let mut other: sys::CUcontext = std::ptr::null_mut();
    ok("cuCtxCreate", unsafe { sys::cuCtxCreate_v4(&mut other, std::ptr::null_mut(), 0, 0) });
    let mut dev: sys::CUdeviceptr = 0;
    ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dev, data.len()) });
    let mut popped: sys::CUcontext = std::ptr::null_mut();
    ok("cuCtxPopCurrent", unsafe { sys::cuCtxPopCurrent_v2(&mut popped) });
    assert_eq!(popped, other);
    for mode in [CompatMode::On, CompatMode::Auto] {
        let file = open(&tmp, mode);
        let n = unsafe { file.pread_raw(dev as usize as *mut u8, data.len(), 0) }.unwrap().wait().unwrap();
        assert_eq!(n, data.len(), "{mode:?}");
        ok("cuCtxPushCurrent", unsafe { sys::cuCtxPushCurrent_v2(other) });
        let mut back = vec![0u8; data.len()];
        ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dev, back.len()) });
        ok("cuCtxPopCurrent", unsafe { sys::cuCtxPopCurrent_v2(&mut popped) });
        assert!(back == data, "{mode:?}: bytes differ");
    }
    ok("cuCtxPushCurrent", unsafe { sys::cuCtxPushCurrent_v2(other) });
    unsafe { sys::cuMemFree_v2(dev) };
    ok("cuCtxPopCurrent", unsafe { sys::cuCtxPopCurrent_v2(&mut popped) });
    unsafe { sys::cuCtxDestroy_v2(other) };
}

#[test]
#[ignore = "needs a GPU"]
fn pinned_memory_stays_bounded_over_a_thousand_reads() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let threads = 8;
    settings::set_num_threads(threads).unwrap();
    settings::set_task_size(1 << 20).unwrap();
    let data = random_bytes(8 << 20, 17);
    let tmp = file_with(&data);
    let file = open(&tmp, CompatMode::On);
    let mut dev: sys::CUdeviceptr = 0;
    ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dev, data.len()) });
    // One buffer per reading thread (workers and the caller); buffers made earlier in this process
    // (other tests, or the preparation at open with the default thread count) are kept and reused.
    // Pinned first, up to that bound, so that the reads need no new buffer whatever their
    // concurrency, and the preparation at open (in the background) none either.
    let buffer = gdsroute::testing::device::current_bounce_buffer_bytes().unwrap();
    let pool = gdsroute::testing::device::bounce_pool(0, buffer);
    while pool.fill_to(threads + 1).unwrap() {}
    // A buffer the preparation is still pinning counts as live before it counts as pinned.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pool.stats().bytes_pinned != pool.stats().buffers_live as u64 * buffer {
        assert!(std::time::Instant::now() < deadline, "{:?}", pool.stats());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let held_before = gdsroute::counters::process_counters().pinned_bytes;
    let bound = ((threads as u64 + 1) * buffer).max(held_before);
    let mut last = (0, 0);
    for i in 0..1000usize {
        // Alternate whole-file parallel reads and small inline ones (below the GDS threshold).
        let size = if i % 2 == 0 { data.len() } else { 8192 };
        let n = unsafe { file.pread_raw(dev as usize as *mut u8, size, 0) }.unwrap().wait().unwrap();
        assert_eq!(n, size);
        let c = gdsroute::counters::process_counters();
        assert!(c.pinned_bytes <= bound, "read {i}: {} pinned, above {bound}", c.pinned_bytes);
        // Buffers are kept and reused, never freed and allocated again: no growth.
        assert_eq!(c.pinned_bytes, held_before, "read {i}");
        last = (c.pinned_bytes, c.pinned_bytes_peak);
    }
    let (held, peak) = last;
    eprintln!("pinned: held {held} B, peak {peak} B over 1000 reads with {threads} threads");
    let mut back = vec![0u8; data.len()];
    ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dev, back.len()) });
    assert!(back == data);
    unsafe { sys::cuMemFree_v2(dev) };
    settings::set_task_size(settings::DEFAULT_TASK_SIZE).unwrap();
}

/// The descriptor registered with the real cuFile: under AUTO the handle's buffered one when the
/// driver reports no nvidia-fs (the H200 machine), else `O_DIRECT`; `direct` forces `O_DIRECT`.
/// Needs the udev record (tools/gpu/udev-entry.sh); without it cuFile cannot register the file, and
/// the test says so and returns.
#[test]
#[ignore = "needs a GPU"]
fn cufile_descriptor_follows_the_setting() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes(64 << 20, 19);
    let tmp = file_with(&data);
    let nvfs = gdsroute::testing::device::cufile_process().ok().and_then(|g| g.library.properties().ok()).map(|p| p.is_gds_available());
    let auto = if nvfs == Some(true) { Descriptor::Direct } else { Descriptor::Buffered };
    for (setting, expected) in [(CufileFd::Auto, auto), (CufileFd::Direct, Descriptor::Direct)] {
        settings::set_cufile_fd(setting);
        let file = open(&tmp, CompatMode::Auto);
        if let Err(why) = file.cufile_verdict().unwrap() {
            settings::set_cufile_fd(CufileFd::Auto);
            let no_udev = why.reason == FallbackReason::NoUdev
                || (why.reason == FallbackReason::RegisterFailed && why.message.contains("5027"));
            assert!(no_udev, "cuFile cannot serve the file: {why:?}");
            eprintln!("note: no udev record, cuFile cannot register files ({}); run tools/gpu/udev-entry.sh first", why.message);
            return;
        }
        let before = gdsroute::counters::process_counters();
        check_device_read(&file, &data, 64 << 20, 0, false);
        let after = gdsroute::counters::process_counters();
        let c = file.stats();
        assert!(c.cufile_tasks > 0 && c.posix_tasks == 0, "{setting:?}: {}", c.to_json());
        let choice = file.cufile_descriptor().expect("the file is registered");
        assert_eq!(choice.descriptor, expected, "{setting:?}, nvidia-fs {nvfs:?}: {choice}");
        if after.cufile_stats_state == CufileStatsState::Active as u64 {
            assert!(after.cufile_n_total_reads > before.cufile_n_total_reads, "cuFile's per-GPU counters did not move");
        }
        // The handle's descriptor, possibly shared with cuFile, still reads unaligned ranges
        // (cuFile did not turn O_DIRECT on for it).
        let mut host = vec![0u8; 4097];
        assert_eq!(file.read_into(&mut host, 3).unwrap(), host.len());
        assert!(host == data[3..3 + host.len()], "{setting:?}: host read after cuFile");
        eprintln!(
            "{setting:?}: {choice}; cuFile n={} nvfs={} posix={} ({} cuFile tasks)",
            after.cufile_n_total_reads - before.cufile_n_total_reads,
            after.cufile_n_nvfs_reads - before.cufile_n_nvfs_reads,
            after.cufile_n_posix_reads - before.cufile_n_posix_reads,
            c.cufile_tasks
        );
    }
    settings::set_cufile_fd(CufileFd::Auto);
}

/// Writes `data` from device (or managed) memory at an unaligned address inside a larger
/// allocation, by `write_raw` (`sync`) or `pwrite_raw`; returns the count.
fn device_write(file: &File, data: &[u8], offset: u64, managed: bool, sync: bool) -> usize {
    let total = data.len() + 2 * common::gpu::GUARD;
    let mut dev: sys::CUdeviceptr = 0;
    if managed {
        ok("cuMemAllocManaged", unsafe { sys::cuMemAllocManaged(&mut dev, total, 1) });
    } else {
        ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dev, total) });
    }
    let at = dev + common::gpu::GUARD as u64;
    ok("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD_v2(at, data.as_ptr().cast(), data.len()) });
    let src = at as usize as *const u8;
    let n = if sync {
        unsafe { file.write_raw(src, data.len(), offset) }
    } else {
        unsafe { file.pwrite_raw(src, data.len(), offset) }.and_then(|op| op.wait())
    };
    unsafe { sys::cuMemFree_v2(dev) };
    n.unwrap_or_else(|e| panic!("device write of {} bytes at {offset}: {e}", data.len()))
}

#[test]
#[ignore = "needs a GPU"]
fn device_writes_on_every_route_are_byte_exact() {
    device_writes_on_every_route(false);
}

#[test]
#[ignore = "needs a GPU"]
fn device_writes_with_direct_io_are_byte_exact_and_counted() {
    // KVIKIO_AUTO_DIRECT_IO_WRITE: the bounce pieces' whole pages go from the pinned halves
    // through the O_DIRECT descriptor, heads and tails through the page cache.
    device_writes_on_every_route(true);
}

/// Device writes of many sizes and offsets on every compat mode and bounce setup, with direct-I/O
/// writes on or off, each checked against a model of the file with a plain read of all of it.
fn device_writes_on_every_route(direct_writes: bool) {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    /// Puts the default back however the test ends.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            settings::set_auto_direct_io_write(settings::DEFAULT_AUTO_DIRECT_IO_WRITE);
        }
    }
    let _restore = Restore;
    settings::set_auto_direct_io_write(direct_writes);
    let source = random_bytes(12 << 20, 21);
    for mode in [CompatMode::On, CompatMode::Auto, CompatMode::Off] {
        let pattern: Vec<u8> = (0..(5 << 20) + 99).map(|i| (i % 253) as u8).collect();
        let tmp = file_with(&pattern);
        let has_direct = common::has_direct_io(tmp.as_file());
        let file = File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0, Some(mode)).unwrap();
        let cufile = file.cufile_verdict().unwrap().is_ok();
        if mode == CompatMode::Off && !cufile {
            eprintln!("OFF skipped: cuFile cannot serve the file");
            continue;
        }
        let mut model = pattern.clone();
        let mut step = 0usize;
        with_each_setup(&BOUNCE_SETUPS, |_, _| {
            for &size in &[1usize, 4095, 16383, 16384, 65537, (4 << 20) + 1, (9 << 20) + 3] {
                let len = model.len() as u64;
                for &offset in &[0u64, 1, 4096, 123_457, len - 5, len, len + 8191] {
                    step += 1;
                    let start = (step * 4099) % (source.len() - size);
                    let data = &source[start..start + size];
                    assert_eq!(device_write(&file, data, offset, step.is_multiple_of(5), step.is_multiple_of(2)), size);
                    let end = offset as usize + size;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[offset as usize..end].copy_from_slice(data);
                }
                let back = std::fs::read(tmp.path()).unwrap();
                assert!(back == model, "{mode:?}: file differs after device writes of {size} bytes");
            }
        });
        let c = file.stats();
        assert_eq!(c.write_calls_failed, 0);
        assert_eq!(c.write_tasks, c.posix_write_tasks + c.cufile_write_tasks);
        match mode {
            CompatMode::On => assert_eq!(c.cufile_write_tasks, 0),
            _ if cufile => assert!(c.cufile_write_tasks > 0 && c.cufile_write_bytes > 0, "{}", c.to_json()),
            _ => assert_eq!(c.cufile_write_tasks, 0),
        }
        // Writes below the GDS threshold are one POSIX task each, whatever the mode.
        assert!(c.posix_write_tasks > 0);
        assert_eq!(c.posix_direct_write_bytes > 0, direct_writes && has_direct, "direct writes {direct_writes}, O_DIRECT {has_direct}");
        assert!(c.posix_direct_write_bytes <= c.posix_write_bytes);
        eprintln!("{mode:?}, direct writes {direct_writes}: {}", c.to_json());
    }
    let process = gdsroute::counters::process_counters();
    if process.cufile_stats_state == CufileStatsState::Active as u64 && process.cufile_write_tasks > 0 {
        assert!(process.cufile_n_total_writes > 0, "cuFile's own write counters: {}", process.to_json());
    }
    eprintln!("process: {}", process.to_text());
}

#[test]
#[ignore = "needs a GPU"]
fn a_device_write_is_seen_by_device_reads_of_every_handle() {
    // Windows registered by device reads of one handle are dropped by a write through another.
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes(64 << 20, 22);
    let tmp = file_with(&data);
    let reader = open(&tmp, CompatMode::On);
    for _ in 0..4 {
        check_device_read(&reader, &data, data.len(), 0, false);
    }
    std::thread::sleep(std::time::Duration::from_millis(1500)); // registrations finish
    check_device_read(&reader, &data, data.len(), 0, false);
    let writer = File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0, Some(CompatMode::On)).unwrap();
    let new = random_bytes(1 << 20, 23);
    assert_eq!(device_write(&writer, &new, 5 << 20, false, false), new.len());
    let mut model = data.clone();
    model[5 << 20..6 << 20].copy_from_slice(&new);
    check_device_read(&reader, &model, model.len(), 0, false);
    eprintln!("reader: {}", reader.stats().to_json());
}
