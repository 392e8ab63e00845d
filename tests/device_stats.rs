//! Counters per device through the C ABI, without a GPU: tasks recorded for two device ordinals
//! (as the engine records a device task) come back from `gdsroute_stats_get_devices` in ordinal
//! order, sum to the process totals, survive a reset as zeros, fill at most `capacity` entries of
//! the caller's element size, and render as text and JSON; host reads add to no device.

mod common;

use common::capi::{gdsroute_stats_get, gdsroute_stats_get_devices, gdsroute_stats_render_devices, gdsroute_stats_reset};
use gdsroute::testing::stats::{Direction, PosixReason, Route, StatsCell, TaskOutcome, record_task};
use gdsroute::{Counters, DeviceCounters, Status};
use std::sync::Mutex;

/// Every test here reads or resets the process-wide counters.
static LOCK: Mutex<()> = Mutex::new(());

fn devices() -> Vec<DeviceCounters> {
    let mut count = 0usize;
    // SAFETY: the sizing call.
    assert_eq!(unsafe { gdsroute_stats_get_devices(std::ptr::null_mut(), 0, &mut count) }, Status::Ok);
    let mut out = vec![DeviceCounters { struct_size: DeviceCounters::SIZE, ..DeviceCounters::default() }; count + 1];
    // SAFETY: count + 1 elements of the current size.
    assert_eq!(unsafe { gdsroute_stats_get_devices(out.as_mut_ptr(), out.len(), &mut count) }, Status::Ok);
    assert_eq!(out[count], DeviceCounters { struct_size: DeviceCounters::SIZE, ..DeviceCounters::default() }, "an entry past the devices was written");
    out.truncate(count);
    out
}

fn totals() -> Counters {
    let mut c = Counters { struct_size: Counters::SIZE, ..Counters::default() };
    // SAFETY: a full struct with struct_size set.
    assert_eq!(unsafe { gdsroute_stats_get(&mut c) }, Status::Ok);
    c
}

fn render(devices: &[DeviceCounters], format: u32) -> String {
    let mut len = 0usize;
    // SAFETY: sizing call over the caller's elements.
    assert_eq!(unsafe { gdsroute_stats_render_devices(devices.as_ptr(), devices.len(), format, std::ptr::null_mut(), 0, &mut len) }, Status::Ok);
    let mut buf = vec![0u8; len + 1];
    // SAFETY: buf has len + 1 bytes.
    assert_eq!(unsafe { gdsroute_stats_render_devices(devices.as_ptr(), devices.len(), format, buf.as_mut_ptr().cast(), buf.len(), &mut len) }, Status::Ok);
    buf.truncate(len);
    String::from_utf8(buf).unwrap()
}

/// Records tasks as the engine does for device memory of `ordinal`.
fn device_tasks(handle: &StatsCell, ordinal: i32, reads: usize, writes: usize) {
    let task = TaskOutcome { bytes: 1 << 20, ..TaskOutcome::default() };
    for _ in 0..reads {
        record_task(handle, Direction::Read, Route::Posix(PosixReason::CompatOn), Some(ordinal), &task, false);
    }
    for _ in 0..writes {
        record_task(handle, Direction::Write, Route::Cufile, Some(ordinal), &task, false);
    }
}

#[test]
fn devices_come_back_in_order_and_sum_to_the_totals() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: plain call.
    assert_eq!(gdsroute_stats_reset(), Status::Ok);
    let handle = StatsCell::default();
    device_tasks(&handle, 7, 3, 1);
    device_tasks(&handle, 2, 2, 0);
    let host = TaskOutcome { bytes: 4096, ..TaskOutcome::default() };
    record_task(&handle, Direction::Read, Route::Posix(PosixReason::HostMemory), None, &host, false);
    let d = devices();
    let ordinals: Vec<u64> = d.iter().map(|d| d.device_ordinal).collect();
    assert!(ordinals.windows(2).all(|w| w[0] < w[1]), "{ordinals:?}");
    let of = |o: u64| *d.iter().find(|d| d.device_ordinal == o).expect("device listed");
    assert_eq!((of(7).tasks, of(7).posix_tasks_compat_on, of(7).task_bytes, of(7).write_tasks, of(7).cufile_write_bytes), (3, 3, 3 << 20, 1, 1 << 20));
    assert_eq!((of(2).tasks, of(2).write_tasks), (2, 0));
    assert!(d.iter().all(|d| d.struct_size == DeviceCounters::SIZE));
    let t = totals();
    assert_eq!(d.iter().map(|d| d.tasks).sum::<u64>(), t.tasks - t.posix_tasks_host_memory);
    assert_eq!(d.iter().map(|d| d.write_tasks).sum::<u64>(), t.write_tasks);
    assert_eq!(d.iter().map(|d| d.task_bytes).sum::<u64>() + 4096, t.task_bytes);

    let json = render(&d, 1);
    assert!(json.starts_with("[{\"struct_size\":") && json.matches("\"device_ordinal\":").count() == d.len(), "{json}");
    let text = render(&d, 0);
    assert!(text.contains("device 7: 3 read tasks, 3 MiB, all through the POSIX backend; 1 write task, 1 MiB; no bounce buffers\n"), "{text}");

    // A reset zeroes them and keeps them listed.
    assert_eq!(gdsroute_stats_reset(), Status::Ok);
    let after = devices();
    assert_eq!(after.iter().map(|d| d.device_ordinal).collect::<Vec<_>>(), ordinals);
    assert!(after.iter().all(|d| d.tasks == 0 && d.write_tasks == 0));
}

#[test]
fn a_smaller_capacity_and_an_older_element_size_are_honoured() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let handle = StatsCell::default();
    device_tasks(&handle, 4, 1, 0);
    device_tasks(&handle, 5, 2, 0);
    let all = devices();
    assert!(all.len() >= 2);
    // Room for one: the first device only, the count says how many there are.
    let mut one = [DeviceCounters { struct_size: DeviceCounters::SIZE, ..DeviceCounters::default() }];
    let mut count = 0usize;
    // SAFETY: one element.
    assert_eq!(unsafe { gdsroute_stats_get_devices(one.as_mut_ptr(), 1, &mut count) }, Status::Ok);
    assert_eq!((count, one[0].device_ordinal), (all.len(), all[0].device_ordinal));
    // Elements of an older, 3-field struct (24 bytes): each gets 24 bytes, nothing beyond.
    let mut old = vec![0x5A5A_5A5A_5A5A_5A5Au64; 3 * all.len() + 3];
    old[0] = 24;
    // SAFETY: all.len() + 1 elements of 24 bytes.
    assert_eq!(unsafe { gdsroute_stats_get_devices(old.as_mut_ptr().cast(), all.len() + 1, &mut count) }, Status::Ok);
    for (i, d) in all.iter().enumerate() {
        assert_eq!(&old[3 * i..3 * i + 3], [24, d.device_ordinal, d.tasks], "element {i}");
    }
    assert!(old[3 * all.len()..].iter().all(|&w| w == 0x5A5A_5A5A_5A5A_5A5A), "the spare element was written");
    // An element size beyond the layout: the layout is written, the rest left alone.
    let words = DeviceCounters::SIZE as usize / 8 + 2;
    let mut big = vec![0x5A5A_5A5A_5A5A_5A5Au64; words * all.len()];
    big[0] = (words * 8) as u64;
    // SAFETY: all.len() elements of words * 8 bytes.
    assert_eq!(unsafe { gdsroute_stats_get_devices(big.as_mut_ptr().cast(), all.len(), &mut count) }, Status::Ok);
    for i in 0..all.len() {
        assert_eq!(big[words * i], DeviceCounters::SIZE, "element {i} says how much was written");
        assert_eq!(big[words * i + 1], all[i].device_ordinal);
        assert_eq!(&big[words * i + words - 2..words * (i + 1)], [0x5A5A_5A5A_5A5A_5A5A; 2]);
    }
}

#[test]
fn bad_inputs_are_refused_and_leave_outputs_alone() {
    let mut count = 42usize;
    let mut one = [DeviceCounters::default()];
    // SAFETY (all calls): invalid inputs the library must refuse without writing.
    unsafe {
        assert_eq!(gdsroute_stats_get_devices(one.as_mut_ptr(), 1, std::ptr::null_mut()), Status::NullArgument);
        assert_eq!(gdsroute_stats_get_devices(std::ptr::null_mut(), 1, &mut count), Status::NullArgument);
        for size in [0u64, 8, 15, 17] {
            one[0].struct_size = size;
            assert_eq!(gdsroute_stats_get_devices(one.as_mut_ptr(), 1, &mut count), Status::InvalidArgument, "struct_size {size}");
            assert_eq!(one[0].struct_size, size);
        }
        one[0].struct_size = DeviceCounters::SIZE;
        assert_eq!(gdsroute_stats_get_devices(one.as_mut_ptr(), usize::MAX / 16, &mut count), Status::Overflow);
        assert_eq!(count, 42);
        let mut len = 42usize;
        assert_eq!(gdsroute_stats_render_devices(one.as_ptr(), 1, 2, std::ptr::null_mut(), 0, &mut len), Status::InvalidEnum);
        assert_eq!(gdsroute_stats_render_devices(std::ptr::null(), 1, 0, std::ptr::null_mut(), 0, &mut len), Status::NullArgument);
        // A second element never filled (struct_size 0) is refused, not rendered as a device.
        let mut two = [DeviceCounters { struct_size: DeviceCounters::SIZE, ..DeviceCounters::default() }, DeviceCounters::default()];
        two[1].struct_size = 0;
        assert_eq!(gdsroute_stats_render_devices(two.as_ptr(), 2, 0, std::ptr::null_mut(), 0, &mut len), Status::InvalidArgument);
        assert_eq!(len, 42);
    }
}

#[test]
fn host_reads_add_to_no_device() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let data: Vec<u8> = (0..(3 << 20)).map(|i| (i % 251) as u8).collect();
    let mut tmp = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut tmp, &data).unwrap();
    let file = gdsroute::File::open(tmp.path().as_os_str().as_encoded_bytes(), "r", 0, None).unwrap();
    let before = (devices(), totals());
    let mut back = vec![0u8; data.len()];
    assert_eq!(file.read_into(&mut back, 0).unwrap(), data.len());
    assert!(back == data);
    let after = (devices(), totals());
    assert!(after.1.tasks > before.1.tasks);
    assert_eq!(after.0, before.0, "a host read changed the device counters");
}
