//! Counters per device on one GPU (needs a GPU: run with `--ignored` on the device machine;
//! tools/gpu/gpu-proof.sh does): with device 0 the only device used, its counters equal the process
//! totals of device memory, through the Rust API and the C ABI alike; host memory adds to no
//! device; its bounce buffers are placed as the machine says; cuFile's per-GPU counters reach
//! device 0 by UUID. Several GPUs: tests/gpu_multi_device.rs.

mod common;

use common::gpu::{check_device_read, file_with, ok, on_device0, open};
use common::random_bytes;
use cudarc::driver::sys;
use common::capi::gdsroute_stats_get_devices;
use gdsroute::settings::CompatMode;
use gdsroute::counters::{CufileStatsState, NumaPlacement};
use gdsroute::Status;
use gdsroute::counters::{device_counters, process_counters, reset_process_counters};
use gdsroute::testing::device::{cuda, numa};
use gdsroute::{DeviceCounters, File};
use std::sync::Mutex;

static LOCK: Mutex<()> = Mutex::new(());

/// Device memory of the current context holding `data`, written by a device write of `file`.
fn device_write(file: &File, data: &[u8], offset: u64) {
    let mut dev: sys::CUdeviceptr = 0;
    ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dev, data.len()) });
    ok("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD_v2(dev, data.as_ptr().cast(), data.len()) });
    let n = unsafe { file.pwrite_raw(dev as usize as *const u8, data.len(), offset) }.and_then(|op| op.wait());
    unsafe { sys::cuMemFree_v2(dev) };
    assert_eq!(n.unwrap(), data.len());
}

/// Every device's counters through `gdsroute_stats_get_devices`.
fn devices_through_the_c_abi() -> Vec<DeviceCounters> {
    let mut array = vec![DeviceCounters { struct_size: DeviceCounters::SIZE, ..DeviceCounters::default() }; 64];
    let mut count = 0usize;
    // SAFETY: 64 elements of the current size.
    assert_eq!(unsafe { gdsroute_stats_get_devices(array.as_mut_ptr(), array.len(), &mut count) }, Status::Ok);
    array.truncate(count);
    array
}

#[test]
#[ignore = "needs a GPU"]
fn with_one_device_its_counters_are_the_totals() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes((9 << 20) + 4097, 61);
    let tmp = file_with(&data);
    reset_process_counters();
    for mode in [CompatMode::On, CompatMode::Auto] {
        let file = File::open(tmp.path().as_os_str().as_encoded_bytes(), "r+", 0, Some(mode)).unwrap();
        for &(size, offset) in &[(data.len(), 0u64), (8192, 4097), ((5 << 20) + 3, 12345)] {
            check_device_read(&file, &data, size, offset, false);
            check_device_read(&file, &data, size, offset, true);
        }
        // Host memory: counted in the totals only.
        let mut host = vec![0u8; data.len()];
        assert_eq!(file.read_into(&mut host, 0).unwrap(), data.len());
        assert!(host == data);
        // Device writes of the same bytes (the file is unchanged), large and below the threshold.
        device_write(&file, &data[..(4 << 20) + 1], 0);
        device_write(&file, &data[100..200], 100);
        assert!(std::fs::read(tmp.path()).unwrap() == data);
    }
    let totals = process_counters();
    let devices = device_counters();
    let d = *devices.iter().find(|d| d.device_ordinal == 0).expect("device 0 has counters");
    // Only device 0 was read into or written from (on a machine with more GPUs another may be
    // listed: for cuFile's entry of it, or bounce buffers prepared at open for its active context).
    for other in devices.iter().filter(|o| o.device_ordinal != 0) {
        assert_eq!((other.tasks, other.write_tasks, other.cufile_n_total_reads), (0, 0, 0), "{other:?}");
    }
    eprintln!("totals: {}\ndevice 0: {}", totals.to_json(), d.json_within(DeviceCounters::SIZE));
    assert_eq!(d.tasks, totals.tasks - totals.posix_tasks_host_memory);
    assert_eq!(d.tasks_failed, totals.tasks_failed);
    assert_eq!(d.cufile_tasks, totals.cufile_tasks);
    assert_eq!(d.cufile_bytes, totals.cufile_bytes);
    assert_eq!(d.posix_tasks, totals.posix_tasks - totals.posix_tasks_host_memory);
    assert_eq!((d.posix_tasks_below_threshold, d.posix_tasks_compat_on, d.posix_tasks_auto_fallback), (totals.posix_tasks_below_threshold, totals.posix_tasks_compat_on, totals.posix_tasks_auto_fallback));
    assert_eq!(d.posix_mapped_bytes, totals.posix_mapped_bytes);
    assert_eq!(d.task_bytes + 2 * data.len() as u64, totals.task_bytes, "two host reads of the whole file");
    assert_eq!((d.write_tasks, d.posix_write_tasks, d.cufile_write_tasks), (totals.write_tasks, totals.posix_write_tasks, totals.cufile_write_tasks));
    assert_eq!((d.posix_write_bytes, d.cufile_write_bytes), (totals.posix_write_bytes, totals.cufile_write_bytes));
    assert!(d.tasks > 0 && d.write_tasks > 0);
    // The devices' pinned bytes are the process's (with one pool, the peak too). Read again until
    // both readings agree: the preparation at open may still pin in the background between them.
    assert!(d.pinned_bytes > 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (ds, t) = (device_counters(), process_counters());
        let pinned: u64 = ds.iter().map(|d| d.pinned_bytes).sum();
        let pools = ds.iter().filter(|d| d.pinned_bytes_peak > 0).count();
        if pinned == t.pinned_bytes && (pools > 1 || ds[0].pinned_bytes_peak == t.pinned_bytes_peak) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "devices pin {pinned}, the process {} (peak {})", t.pinned_bytes, t.pinned_bytes_peak);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // cuFile's own counters: one GPU, so device 0's are the process's; and where cuFile read for
    // us, device 0 has them (its UUID matched cuFile's entry).
    assert_eq!(d.cufile_stats_state, totals.cufile_stats_state);
    if totals.cufile_stats_state == CufileStatsState::Active as u64 {
        assert_eq!((d.cufile_n_total_reads, d.cufile_n_nvfs_reads, d.cufile_n_posix_reads, d.cufile_read_bytes), (totals.cufile_n_total_reads, totals.cufile_n_nvfs_reads, totals.cufile_n_posix_reads, totals.cufile_read_bytes));
        assert_eq!((d.cufile_n_total_writes, d.cufile_n_posix_writes, d.cufile_write_bytes_gpu), (totals.cufile_n_total_writes, totals.cufile_n_posix_writes, totals.cufile_write_bytes_gpu));
        if totals.cufile_tasks > 0 {
            assert!(d.cufile_n_total_reads > 0, "cuFile read for us but device 0 has none of its counters: its UUID {:02x?} is not cuFile's", cuda::device_uuid(0).unwrap());
        }
    }
    // The C ABI says the same (taken again: the cuFile counters are read anew, the tasks are
    // unchanged).
    let through_c = devices_through_the_c_abi();
    assert_eq!(through_c.iter().map(|d| d.device_ordinal).collect::<Vec<_>>(), devices.iter().map(|d| d.device_ordinal).collect::<Vec<_>>());
    let c = through_c[0];
    assert_eq!((c.device_ordinal, c.tasks, c.task_bytes, c.write_tasks, c.pinned_bytes), (0, d.tasks, d.task_bytes, d.write_tasks, d.pinned_bytes));
}

#[test]
#[ignore = "needs a GPU"]
fn bounce_buffers_are_placed_where_the_machine_says() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes(6 << 20, 62);
    let tmp = file_with(&data);
    let file = open(&tmp, CompatMode::On);
    check_device_read(&file, &data, data.len(), 0, false);
    let node = cuda::device_numa_node(0);
    let bus = cuda::device_pci_bus_id(0).unwrap();
    let d = device_counters().into_iter().find(|d| d.device_ordinal == 0).unwrap();
    eprintln!("device 0 at {bus}: {node:?}; {}", d.text_within(DeviceCounters::SIZE).lines().next().unwrap());
    assert!(d.pinned_bytes > 0);
    match node {
        numa::NodeLookup::Node(n) => {
            assert_eq!(d.bounce_numa_node, n as u64);
            assert!(d.bounce_numa_placement == NumaPlacement::Placed as u64 || d.bounce_numa_placement == NumaPlacement::Refused as u64, "{d:?}");
            if d.bounce_numa_placement == NumaPlacement::Placed as u64 {
                let buffer = gdsroute::testing::device::current_bounce_buffer_bytes().unwrap();
                let pinned = gdsroute::testing::device::bounce_pool(0, buffer).acquire().unwrap();
                // Preferred, not bound: a full node may give pages elsewhere; report, do not fail.
                let at = numa::node_of_page(pinned.as_ptr() as usize).unwrap();
                eprintln!("a bounce buffer's first page is on node {at} (asked for {n})");
            }
        }
        numa::NodeLookup::Unknown(why) => {
            assert_eq!(d.bounce_numa_placement, NumaPlacement::NodeUnknown as u64, "{why}");
            assert!(d.text_within(DeviceCounters::SIZE).contains("not placed"), "the text says so");
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn host_memory_belongs_to_no_device() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes(5 << 20, 63);
    let tmp = file_with(&data);
    let file = open(&tmp, CompatMode::Auto);
    check_device_read(&file, &data, 1 << 20, 0, false);
    let before = device_counters();
    // Pageable and pinned host memory.
    let mut pageable = vec![0u8; data.len()];
    assert_eq!(file.read_into(&mut pageable, 0).unwrap(), data.len());
    let mut pinned: *mut std::ffi::c_void = std::ptr::null_mut();
    ok("cuMemAllocHost", unsafe { sys::cuMemAllocHost_v2(&mut pinned, data.len()) });
    let n = unsafe { file.pread_raw(pinned.cast(), data.len(), 0) }.unwrap().wait().unwrap();
    assert_eq!(n, data.len());
    assert!(unsafe { std::slice::from_raw_parts(pinned.cast::<u8>(), n) } == data.as_slice());
    ok("cuMemFreeHost", unsafe { sys::cuMemFreeHost(pinned) });
    let after = device_counters();
    let tasks = |ds: &[DeviceCounters]| ds.iter().map(|d| (d.device_ordinal, d.tasks, d.task_bytes)).collect::<Vec<_>>();
    assert_eq!(tasks(&after), tasks(&before));
}
