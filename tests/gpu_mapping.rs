//! The mapping handle (`MappedFile`) into device memory (run with `--ignored` on the device
//! machine): read and pread of a 64 MiB random file at unaligned offsets and mapped ranges into
//! `cuMemAlloc` (and managed) memory inside poisoned margins, every byte and both margins
//! checked; a file truncated under the mapping fails the read with `MappedFileShrank` and the
//! bytes before the file's new end arrive; and a timing print, not an assertion, of a warm 1 GiB read
//! into device memory through the mapping beside `File::pread_raw`.

mod common;

use common::gpu::{GUARD, POISON, file_with, ok, on_device0, open, poisoned_allocation};
use common::random_bytes;
use cudarc::driver::sys;
use gdsroute::settings::CompatMode;
use gdsroute::{Error, MappedFile, settings};
use std::sync::Mutex;
use std::time::Instant;

static SETTINGS_LOCK: Mutex<()> = Mutex::new(());

/// The whole allocation back on the host, and the allocation freed.
fn copy_back_and_free(dev: sys::CUdeviceptr, total: usize) -> Vec<u8> {
    let mut back = vec![0u8; total];
    ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dev, total) });
    unsafe { sys::cuMemFree_v2(dev) };
    back
}

/// Reads `size` bytes at `offset` through `map` (`pread` with `task_size` where given, else
/// `read`) into device memory `GUARD` bytes into a poisoned allocation; checks every byte and
/// both margins.
fn check_mapped_device_read(map: &MappedFile, data: &[u8], size: usize, offset: u64, task_size: Option<Option<u64>>, managed: bool) {
    let total = size + 2 * GUARD;
    let dev = poisoned_allocation(total, managed);
    let dst = (dev as usize + GUARD) as *mut u8;
    let what = format!("size {size} offset {offset} task size {task_size:?} managed {managed}");
    let n = match task_size {
        None => unsafe { map.read_raw(dst, size, offset) }.expect(&what),
        Some(t) => unsafe { map.pread_raw(dst, size, offset, t) }.expect(&what).wait().expect(&what),
    };
    let back = copy_back_and_free(dev, total);
    assert_eq!(n, size, "{what}");
    let start = offset as usize;
    assert!(back[GUARD..GUARD + size] == data[start..start + size], "bytes differ: {what}");
    assert!(back[..GUARD].iter().all(|&b| b == POISON), "front margin written: {what}");
    assert!(back[GUARD + size..].iter().all(|&b| b == POISON), "back margin written: {what}");
}

#[test]
#[ignore = "needs a GPU"]
fn mapping_reads_into_device_memory_are_byte_exact() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes(64 << 20, 26);
    let tmp = file_with(&data);
    let path = tmp.path().as_os_str().as_encoded_bytes();
    let len = data.len() as u64;
    for (map_offset, map_size) in [(0u64, 0usize), (4097, 0), (12_345, 40 << 20)] {
        let map = MappedFile::open(path, map_offset, map_size).unwrap();
        let end = map_offset + map.map_size() as u64;
        for &(threads, task) in &[(1usize, None), (8, None), (8, Some(1u64 << 20)), (16, Some((4 << 20) + 7)), (3, Some(65536))] {
            settings::set_num_threads(threads).unwrap();
            for &(size, offset) in &[
                (1usize, map_offset),
                (4095, map_offset + 1),
                (65_537, map_offset + 4099),
                ((4 << 20) + 1, map_offset + 777),
                ((5 << 20) + 3, end - (5 << 20) - 3),
                (1, end - 1),
                (map.map_size(), map_offset),
            ] {
                check_mapped_device_read(&map, &data, size, offset, Some(task), false);
                if threads == 1 {
                    check_mapped_device_read(&map, &data, size, offset, None, false);
                }
            }
        }
        check_mapped_device_read(&map, &data, (3 << 20) + 5, map_offset + 3, Some(None), true); // managed memory
        check_mapped_device_read(&map, &data, (3 << 20) + 5, map_offset + 3, None, true);
    }
    assert_eq!(MappedFile::open(path, 0, 0).unwrap().file_size().unwrap(), len);
    settings::set_num_threads(settings::default_num_threads()).unwrap();
}

#[test]
#[ignore = "needs a GPU"]
fn mapping_of_a_file_truncated_under_it_fails_device_reads_cleanly() {
    let _ctx = on_device0();
    let data = random_bytes(8 << 20, 9);
    let tmp = file_with(&data);
    let map = MappedFile::open(tmp.path().as_os_str().as_encoded_bytes(), 0, 0).unwrap();
    let new_len: usize = (1 << 20) + 5;
    tmp.as_file().set_len(new_len as u64).unwrap();
    let lost = new_len; // the first byte the file no longer has
    for task_size in [None, Some(None), Some(Some(1 << 20))] {
        let total = data.len() + 2 * GUARD;
        let dev = poisoned_allocation(total, false);
        let dst = (dev as usize + GUARD) as *mut u8;
        let err = match task_size {
            None => unsafe { map.read_raw(dst, data.len(), 0) }.unwrap_err(),
            Some(t) => unsafe { map.pread_raw(dst, data.len(), 0, t) }.unwrap().wait().unwrap_err(),
        };
        let back = copy_back_and_free(dev, total);
        assert!(matches!(err, Error::MappedFileShrank { offset, .. } if offset == lost as u64), "{task_size:?}: {err}");
        assert_eq!(err.os_error(), Some(libc::EFAULT));
        assert!(back[GUARD..GUARD + new_len] == data[..new_len], "bytes before the end ({task_size:?})");
        assert!(back[..GUARD].iter().all(|&b| b == POISON) && back[GUARD + data.len()..].iter().all(|&b| b == POISON));
    }
    // What is left still reads.
    let data_left = &data[..new_len];
    check_mapped_device_read(&map, data_left, new_len - 7, 7, None, false);
}

/// Best of `runs` timings of `read`, in GB/s for `bytes`.
fn best_rate(bytes: usize, runs: usize, mut read: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            read();
            bytes as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// A warm 1 GiB file into device memory through the mapping handle (`pread`, the task size
/// setting) and through `File::pread_raw` (the process's compat mode, and compat mode ON: the
/// bounce buffers), best of 3 after a warm-up read each. Printed, not asserted (the figure of the
/// mapping handle beside pread, docs/mapping.md).
#[test]
#[ignore = "needs a GPU"]
fn mapping_vs_pread_timing_of_a_warm_gib_into_device_memory() {
    let _lock = SETTINGS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let size = 1usize << 30;
    let data = random_bytes(size, 77);
    let tmp = file_with(&data);
    drop(data);
    let dev = poisoned_allocation(size, false);
    let dst = dev as usize as *mut u8;
    let map = MappedFile::open(tmp.path().as_os_str().as_encoded_bytes(), 0, 0).unwrap();
    let mapping_read = || assert_eq!(unsafe { map.pread_raw(dst, size, 0, None) }.unwrap().wait().unwrap(), size);
    let mapping_sync = || assert_eq!(unsafe { map.read_raw(dst, size, 0) }.unwrap(), size);
    let compat = settings::compat_mode().unwrap();
    let file = open(&tmp, compat);
    let file_on = open(&tmp, CompatMode::On);
    let pread = |f: &gdsroute::File| assert_eq!(unsafe { f.pread_raw(dst, size, 0) }.unwrap().wait().unwrap(), size);
    mapping_read();
    pread(&file);
    pread(&file_on);
    let mapping = best_rate(size, 3, mapping_read);
    let sync = best_rate(size, 3, mapping_sync);
    let posix = best_rate(size, 3, || pread(&file));
    let bounce = best_rate(size, 3, || pread(&file_on));
    let (threads, task) = (settings::num_threads().unwrap(), settings::task_size().unwrap());
    println!("mapping_vs_pread: mapping {mapping:.2} GB/s pread {posix:.2} GB/s");
    println!(
        "mapping_vs_pread detail ({threads} threads, task size {task}): mapping pread {mapping:.2}, mapping read (one thread) {sync:.2}, File::pread compat {compat:?} {posix:.2}, File::pread compat ON {bounce:.2} GB/s"
    );
    unsafe { sys::cuMemFree_v2(dev) };
}
