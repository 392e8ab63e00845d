//! Buffer registration with cuFile and the bounce buffers' release, on the GPU (run with
//! `--ignored --test-threads=1` on the device machine; tools/gpu/gpu-proof.sh does): reads and
//! writes of registered device memory are byte-exact on the cuFile route, registration is
//! reference-counted, the whole-allocation variant finds the allocation of an interior pointer,
//! and `bounce_buffer_free` unpins what no transfer holds. A process of its own: registration
//! opens cuFile's driver.

mod common;

use common::gpu::{GUARD, POISON, file_with, ok, on_device0, open, poisoned_allocation};
use common::random_bytes;
use cudarc::driver::sys;
use gdsroute::memory::{self, Deregistration, Registration};
use gdsroute::settings::{self, CompatMode};
use gdsroute::{Status, counters};
use std::ffi::c_void;
use std::sync::Mutex;
use std::time::Instant;

static LOCK: Mutex<()> = Mutex::new(());

struct DeviceBuffer(sys::CUdeviceptr, usize);

impl DeviceBuffer {
    fn poisoned(len: usize) -> DeviceBuffer {
        DeviceBuffer(poisoned_allocation(len, false), len)
    }

    fn at(&self, offset: usize) -> *mut u8 {
        (self.0 as usize + offset) as *mut u8
    }

    fn back(&self) -> Vec<u8> {
        let mut back = vec![0u8; self.1];
        ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), self.0, self.1) });
        back
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        unsafe { sys::cuMemFree_v2(self.0) };
    }
}

#[test]
#[ignore = "needs a GPU"]
fn registered_device_memory_reads_and_writes_byte_exact_and_registration_is_counted() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let usable = gdsroute::cufile_usable().unwrap();
    eprintln!("cuFile usable: {usable:?}");
    let data = random_bytes(16 << 20, 61);
    let tmp = file_with(&data);
    let file = open(&tmp, CompatMode::Auto);
    let buffer = DeviceBuffer::poisoned(data.len() + 2 * GUARD);
    let before = counters::process_counters();

    // The whole allocation, named by a pointer inside it; again by its base: two references.
    let first = memory::memory_register(buffer.at(GUARD + 12345).cast::<c_void>(), 0).unwrap();
    let expected = if usable.is_ok() { Registration::Cufile } else { Registration::Skipped };
    assert_eq!(first, expected);
    assert_eq!(memory::buffer_register(buffer.at(0).cast::<c_void>(), buffer.1, 0).unwrap(), Registration::AnotherReference);
    assert_eq!(memory::buffer_references(buffer.at(0).cast::<c_void>()), 2);
    let during = counters::process_counters();
    if usable.is_ok() {
        assert_eq!(during.buffer_registrations_cufile, before.buffer_registrations_cufile + 1);
        assert_eq!(during.buffer_registered_bytes, buffer.1 as u64);
    }

    // Reads into parts of it at unaligned offsets, every byte checked and the margins untouched.
    // The whole file last: the write below goes from it.
    for (size, offset) in [((4 << 20) + 4097, 8191), (65536, 3), (5000, (data.len() - 5000) as u64), (data.len(), 0u64)] {
        let op = unsafe { file.pread_raw(buffer.at(GUARD), size, offset) }.unwrap();
        assert_eq!(op.wait().unwrap(), size);
        let back = buffer.back();
        assert!(back[GUARD..GUARD + size] == data[offset as usize..offset as usize + size], "size {size} offset {offset}");
        assert!(back[..GUARD].iter().all(|&b| b == POISON), "front margin, size {size} offset {offset}");
        assert!(back[GUARD + data.len()..].iter().all(|&b| b == POISON), "back margin, size {size} offset {offset}");
    }
    // And a write from it, read back from the file.
    let out = gdsroute::File::open(format!("{}/gdsroute-registered-{}", common::gpu::test_dir(), std::process::id()).as_bytes(), "w+", 0o644, Some(CompatMode::Auto)).unwrap();
    let written = unsafe { out.pwrite_raw(buffer.at(GUARD + 4097), (8 << 20) + 3, 11) }.unwrap().wait().unwrap();
    assert_eq!(written, (8 << 20) + 3);
    let mut on_disk = vec![0u8; written];
    assert_eq!(out.read_into(&mut on_disk, 11).unwrap(), written);
    assert!(on_disk == data[4097..4097 + written], "the write from a registered buffer");
    std::fs::remove_file(out.path().unwrap()).unwrap();
    let routes = file.stats();
    eprintln!("reads of a registered buffer: cufile_tasks {} posix_tasks {}", routes.cufile_tasks, routes.posix_tasks);

    // Two references, two deregistrations; the first leaves cuFile's registration in place.
    assert_eq!(memory::memory_deregister(buffer.at(data.len()).cast::<c_void>()).unwrap(), Deregistration::StillReferenced(1));
    assert_eq!(counters::process_counters().buffer_registered_bytes, during.buffer_registered_bytes);
    assert_eq!(memory::buffer_deregister(buffer.at(0).cast::<c_void>()).unwrap(), Deregistration::Released);
    assert_eq!(counters::process_counters().buffer_registered_bytes, 0);
    let e = memory::buffer_deregister(buffer.at(0).cast::<c_void>()).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "{e}");
}

#[test]
#[ignore = "needs a GPU"]
fn registration_cost_of_a_gib_is_printed() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    if gdsroute::cufile_usable().unwrap().is_err() {
        eprintln!("registration_cost: cuFile not usable, nothing registered");
        return;
    }
    for len in [64usize << 20, 1 << 30] {
        let buffer = DeviceBuffer::poisoned(len);
        let t = Instant::now();
        assert_eq!(memory::buffer_register(buffer.at(0).cast::<c_void>(), len, 0).unwrap(), Registration::Cufile);
        let register_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        assert_eq!(memory::buffer_deregister(buffer.at(0).cast::<c_void>()).unwrap(), Deregistration::Released);
        eprintln!("registration_cost: {} MiB register {register_ms:.1} ms deregister {:.1} ms", len >> 20, t.elapsed().as_secs_f64() * 1e3);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn bounce_buffer_free_unpins_idle_buffers_and_reads_go_on() {
    let _lock = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let _ctx = on_device0();
    let data = random_bytes(24 << 20, 62);
    let tmp = file_with(&data);
    let file = open(&tmp, CompatMode::On);
    settings::set_num_threads(4).unwrap();
    let buffer = DeviceBuffer::poisoned(data.len() + 2 * GUARD);
    let read_and_check = || {
        let op = unsafe { file.pread_raw(buffer.at(GUARD), data.len(), 0) }.unwrap();
        assert_eq!(op.wait().unwrap(), data.len());
        let back = buffer.back();
        assert!(back[GUARD..GUARD + data.len()] == data[..]);
        assert!(back[..GUARD].iter().all(|&b| b == POISON) && back[GUARD + data.len()..].iter().all(|&b| b == POISON));
    };
    read_and_check();
    let pinned = counters::process_counters().pinned_bytes;
    assert!(pinned > 0, "a bounce read pins buffers");
    assert_eq!(memory::bounce_buffer_free(), pinned, "every idle buffer goes");
    assert_eq!(counters::process_counters().pinned_bytes, 0);
    assert_eq!(memory::bounce_buffer_free(), 0);
    read_and_check();
    assert!(counters::process_counters().pinned_bytes > 0, "pinned again as needed");
    // A release while reads run frees only what is idle, and the reads stay exact.
    let reader = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let _ctx = on_device0();
            for _ in 0..5 {
                read_and_check();
            }
        });
        let mut freed = 0;
        while !h.is_finished() {
            freed += memory::bounce_buffer_free();
        }
        h.join().unwrap();
        freed
    });
    eprintln!("bounce_buffer_free during reads: {reader} bytes freed");
    settings::set_num_threads(settings::default_num_threads()).unwrap();
}

#[test]
#[ignore = "needs a GPU"]
fn memory_kind_tells_device_managed_pinned_and_pageable_memory_apart() {
    use gdsroute::memory::ObservedMemory;
    let _ctx = on_device0();
    let device = DeviceBuffer::poisoned(1 << 20);
    assert_eq!(memory::memory_kind(device.at(0).cast()).unwrap(), ObservedMemory::Device);
    assert_eq!(memory::memory_kind(device.at(4097).cast()).unwrap(), ObservedMemory::Device, "inside the allocation");
    let managed = poisoned_allocation(1 << 20, true);
    assert_eq!(memory::memory_kind(managed as usize as *const c_void).unwrap(), ObservedMemory::Managed);
    let mut pinned: *mut c_void = std::ptr::null_mut();
    ok("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut pinned, 1 << 20, 0) });
    assert_eq!(memory::memory_kind(pinned).unwrap(), ObservedMemory::Host, "pinned host memory is host memory");
    let pageable = vec![0u8; 4096];
    assert_eq!(memory::memory_kind(pageable.as_ptr().cast()).unwrap(), ObservedMemory::Host);
    ok("cuMemFreeHost", unsafe { sys::cuMemFreeHost(pinned) });
    ok("cuMemFree", unsafe { sys::cuMemFree_v2(managed) });
}
