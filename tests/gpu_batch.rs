//! Batches into and out of GPU memory (needs a GPU: run with `--ignored` on the device machine;
//! tools/gpu/gpu-proof.sh does, without and with the udev record, so AUTO's entries take cuFile's
//! route in the second pass and gdsroute's POSIX route in the first). In each compat mode (ON,
//! AUTO): one submission mixing device, managed, pinned and pageable memory, reads and writes,
//! sizes below and above the GDS threshold and the task size, reads across and past the end of
//! the file; every byte and both poisoned margins of every buffer checked, each entry's tasks
//! counted on the route it must take. Then a batch of 256 files of 64 KiB into one device buffer.

mod common;

use common::gpu::{GUARD, POISON, file_with, ok, on_device0, poisoned_allocation};
use common::random_bytes;
use cudarc::driver::sys;
use gdsroute::settings::CompatMode;
use gdsroute::{Batch, BatchCompletion, BatchOp, Direction, File};
use std::collections::HashMap;
use std::time::Duration;

const MIB: usize = 1 << 20;

fn wait_all(batch: &Batch, n: usize) -> HashMap<u64, BatchCompletion> {
    let mut done = HashMap::new();
    while done.len() < n {
        for c in batch.wait(1, 256, Some(Duration::from_secs(120))) {
            assert!(done.insert(c.cookie, c).is_none(), "a cookie completed twice");
        }
    }
    done
}

/// Copies `len` bytes of device (or managed) memory at `dev` back to the host.
fn back(dev: sys::CUdeviceptr, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), dev, len) });
    out
}

/// Where one entry's buffer lives.
#[derive(Clone, Copy, Debug)]
enum Mem {
    Device,
    Managed,
    Pinned,
    Pageable,
}

/// A buffer of `size` bytes between poisoned margins, in `mem`.
struct Buf {
    mem: Mem,
    size: usize,
    base: u64,
    host: Vec<u8>,
}

impl Buf {
    fn new(mem: Mem, size: usize, fill: Option<&[u8]>) -> Buf {
        let total = size + 2 * GUARD;
        let mut b = Buf { mem, size, base: 0, host: Vec::new() };
        match mem {
            Mem::Device | Mem::Managed => b.base = poisoned_allocation(total, matches!(mem, Mem::Managed)),
            Mem::Pinned => {
                let mut p = std::ptr::null_mut();
                ok("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut p, total, 0) });
                unsafe { std::ptr::write_bytes(p.cast::<u8>(), POISON, total) };
                b.base = p as u64;
            }
            Mem::Pageable => {
                b.host = vec![POISON; total];
                b.base = b.host.as_mut_ptr() as u64;
            }
        }
        if let Some(data) = fill {
            match mem {
                Mem::Device | Mem::Managed => ok("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD_v2(b.base + GUARD as u64, data.as_ptr().cast(), data.len()) }),
                _ => unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (b.base as usize + GUARD) as *mut u8, data.len()) },
            }
        }
        b
    }
    fn ptr(&self) -> *mut u8 {
        (self.base as usize + GUARD) as *mut u8
    }
    fn contents(&self) -> Vec<u8> {
        let total = self.size + 2 * GUARD;
        match self.mem {
            Mem::Device | Mem::Managed => back(self.base, total),
            _ => unsafe { std::slice::from_raw_parts(self.base as *const u8, total) }.to_vec(),
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        match self.mem {
            Mem::Device | Mem::Managed => unsafe { sys::cuMemFree_v2(self.base) },
            Mem::Pinned => unsafe { sys::cuMemFreeHost(self.base as *mut _) },
            Mem::Pageable => sys::CUresult::CUDA_SUCCESS,
        };
    }
}

fn open(path: &std::path::Path, flags: &str, mode: CompatMode) -> File {
    File::open(path.as_os_str().as_encoded_bytes(), flags, 0o644, Some(mode)).unwrap()
}

#[test]
#[ignore = "needs a GPU"]
fn mixed_entries_on_every_route_are_byte_exact_and_counted() {
    let _ctx = on_device0();
    let threshold = gdsroute::settings::gds_threshold().unwrap() as usize;
    for mode in [CompatMode::On, CompatMode::Auto] {
        let data = random_bytes(9 * MIB + 12_345, 31);
        let src = file_with(&data);
        let reader = open(src.path(), "r", mode);
        let cufile = mode != CompatMode::On && matches!(reader.cufile_verdict(), Ok(Ok(())));
        let out = file_with(&[]);
        let writer = open(out.path(), "r+", mode);
        let len = data.len() as u64;
        // (memory, size, file offset) of reads.
        let reads = [
            (Mem::Device, 1, 7u64),
            (Mem::Device, 4095, 1),
            (Mem::Device, threshold - 1, 4096),
            (Mem::Device, 4 * MIB + 1, 3),
            (Mem::Device, 4 * MIB + 1, len - 1000),
            (Mem::Device, 4096, len + 1),
            (Mem::Managed, MIB + 5, 100),
            (Mem::Pinned, 2 * MIB, 0),
            (Mem::Pageable, 4097, 5 * MIB as u64),
        ];
        // Writes: disjoint pieces of `data` at their own offsets.
        let writes = [(Mem::Device, 4095, 0u64), (Mem::Device, 4 * MIB + 1, 4096), (Mem::Managed, 100_000, 5 * MIB as u64), (Mem::Pinned, 3, 6 * MIB as u64)];
        let rbufs: Vec<Buf> = reads.iter().map(|&(mem, size, _)| Buf::new(mem, size, None)).collect();
        let wbufs: Vec<Buf> = writes.iter().map(|&(mem, size, off)| Buf::new(mem, size, Some(&data[off as usize..off as usize + size]))).collect();
        let mut ops = Vec::new();
        for (i, (&(_, size, offset), b)) in reads.iter().zip(&rbufs).enumerate() {
            ops.push(BatchOp { file: &reader, buf: b.ptr(), size, offset, direction: Direction::Read, cookie: i as u64 });
        }
        for (i, (&(_, size, offset), b)) in writes.iter().zip(&wbufs).enumerate() {
            ops.push(BatchOp { file: &writer, buf: b.ptr(), size, offset, direction: Direction::Write, cookie: 100 + i as u64 });
        }
        let batch = Batch::new(ops.len()).unwrap();
        unsafe { batch.submit(&ops) }.unwrap();
        let done = wait_all(&batch, ops.len());
        for (i, &(mem, size, offset)) in reads.iter().enumerate() {
            let start = (offset as usize).min(data.len());
            let expect = (data.len() - start).min(size);
            let got = done[&(i as u64)].result.as_ref().unwrap_or_else(|e| panic!("{mode:?} read {i} ({mem:?}): {e}"));
            assert_eq!(*got, expect, "{mode:?} read {i} ({mem:?}, {size} at {offset})");
            let c = rbufs[i].contents();
            assert!(c[GUARD..GUARD + expect] == data[start..start + expect], "{mode:?} read {i} ({mem:?}): bytes differ");
            assert!(c[..GUARD].iter().all(|&b| b == POISON), "{mode:?} read {i}: front margin written");
            assert!(c[GUARD + size..].iter().all(|&b| b == POISON), "{mode:?} read {i}: back margin written");
        }
        for (i, &(mem, size, _)) in writes.iter().enumerate() {
            assert_eq!(*done[&(100 + i as u64)].result.as_ref().unwrap_or_else(|e| panic!("{mode:?} write {i} ({mem:?}): {e}")), size);
        }
        let written = std::fs::read(out.path()).unwrap();
        for &(_, size, off) in &writes {
            let o = off as usize;
            assert!(written[o..o + size] == data[o..o + size], "{mode:?}: written range at {off} differs");
        }
        let (r, w) = (reader.stats(), writer.stats());
        let device_above = reads.iter().filter(|&&(mem, size, off)| matches!(mem, Mem::Device | Mem::Managed) && size >= threshold && off < len).count() as u64;
        if cufile {
            assert!(r.cufile_tasks >= device_above, "{mode:?}: device entries above the threshold through cuFile: {r:?}");
            assert!(w.cufile_write_tasks > 0, "{mode:?}: device writes through cuFile: {w:?}");
        } else {
            assert_eq!((r.cufile_tasks, w.cufile_write_tasks), (0, 0), "{mode:?}: nothing through cuFile");
        }
        assert_eq!((r.calls, r.calls_failed, w.write_calls, w.write_calls_failed), (1, 0, 1, 0), "one call per direction and handle");
        eprintln!("{mode:?}: cufile={cufile} read tasks posix {} cufile {}, write tasks posix {} cufile {}", r.posix_tasks, r.cufile_tasks, w.posix_write_tasks, w.cufile_write_tasks);
    }
}

#[test]
#[ignore = "needs a GPU"]
fn many_small_files_into_one_device_buffer() {
    let _ctx = on_device0();
    const N: usize = 256;
    const SIZE: usize = 64 << 10;
    let contents: Vec<Vec<u8>> = (0..N).map(|i| random_bytes(SIZE - (i % 3) * 1000, 500 + i as u64)).collect();
    let tmps: Vec<_> = contents.iter().map(|c| file_with(c)).collect();
    for mode in [CompatMode::On, CompatMode::Auto] {
        let files: Vec<File> = tmps.iter().map(|t| open(t.path(), "r", mode)).collect();
        let total = N * SIZE;
        let dev = poisoned_allocation(total, false);
        let ops: Vec<BatchOp> = files.iter().enumerate().map(|(i, f)| BatchOp { file: f, buf: (dev as usize + i * SIZE) as *mut u8, size: SIZE, offset: 0, direction: Direction::Read, cookie: i as u64 }).collect();
        let batch = Batch::new(128).unwrap();
        // Windows of at most 128 in flight, refilled as entries complete.
        let (mut next, mut done) = (0, HashMap::new());
        while done.len() < N {
            let room = (batch.max_entries() - batch.in_flight()).min(N - next);
            if room > 0 {
                unsafe { batch.submit(&ops[next..next + room]) }.unwrap();
                next += room;
            }
            for c in batch.wait(1, 128, None) {
                done.insert(c.cookie, c);
            }
        }
        let all = back(dev, total);
        unsafe { sys::cuMemFree_v2(dev) };
        for (i, c) in contents.iter().enumerate() {
            assert_eq!(*done[&(i as u64)].result.as_ref().unwrap(), c.len(), "{mode:?} file {i}");
            assert!(all[i * SIZE..i * SIZE + c.len()] == c[..], "{mode:?} file {i}: bytes differ");
            assert!(all[i * SIZE + c.len()..(i + 1) * SIZE].iter().all(|&b| b == POISON), "{mode:?} file {i}: written past its end");
        }
    }
}
