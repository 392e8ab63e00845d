//! Helpers of the GPU test suites: device 0's context, CUresult checks, test files on a file
//! system cuFile can register, and device reads checked byte for byte inside poisoned margins.

use cudarc::driver::sys;
use gdsroute::File;
use gdsroute::testing::device::cuda::{self, ScopedContext};
use gdsroute::settings::CompatMode;

pub const GUARD: usize = 4096 + 3;
pub const POISON: u8 = 0x5A;

pub fn on_device0() -> ScopedContext {
    cuda::cuda().expect("CUDA must be available for GPU tests");
    ScopedContext::push(cuda::primary_context(0).unwrap()).unwrap()
}

pub fn ok(call: &str, r: sys::CUresult) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{call}");
}

/// Where GPU tests put their files: `GDSROUTE_TEST_DIR`, else /var/tmp (on the H200 machine the
/// root file system, ext4 on the VM's disk, where cuFile can register files).
pub fn test_dir() -> String {
    std::env::var("GDSROUTE_TEST_DIR").unwrap_or("/var/tmp".into())
}

pub fn file_with(data: &[u8]) -> tempfile::NamedTempFile {
    super::temp_file_in(Some(&test_dir()), data)
}

pub fn open(tmp: &tempfile::NamedTempFile, mode: CompatMode) -> File {
    super::open(tmp.path(), Some(mode))
}

/// `total` bytes of device (or managed) memory, every byte `POISON`; the caller frees it.
pub fn poisoned_allocation(total: usize, managed: bool) -> sys::CUdeviceptr {
    let mut dev: sys::CUdeviceptr = 0;
    if managed {
        ok("cuMemAllocManaged", unsafe { sys::cuMemAllocManaged(&mut dev, total, 1) });
    } else {
        ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut dev, total) });
    }
    ok("cuMemsetD8", unsafe { sys::cuMemsetD8_v2(dev, POISON, total) });
    ok("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() });
    dev
}

/// Reads into device memory at an unaligned offset inside a poisoned allocation, copies the
/// whole allocation back and checks the bytes and both margins.
pub fn check_device_read(file: &File, data: &[u8], size: usize, offset: u64, managed: bool) {
    let total = size + 2 * GUARD;
    let dev = poisoned_allocation(total, managed);
    let dst = (dev as usize + GUARD) as *mut u8;
    let op = unsafe { file.pread_raw(dst, size, offset) }.unwrap();
    let n = op.wait().unwrap();
    let mut back = vec![0u8; total];
    ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dev, total) });
    unsafe { sys::cuMemFree_v2(dev) };
    let start = (offset as usize).min(data.len());
    let expect = (data.len() - start).min(size);
    assert_eq!(n, expect, "size {size} offset {offset}");
    assert!(back[GUARD..GUARD + n] == data[start..start + n], "bytes differ: size {size} offset {offset}");
    assert!(back[..GUARD].iter().all(|&b| b == POISON), "front margin written: size {size} offset {offset}");
    assert!(back[GUARD + size..].iter().all(|&b| b == POISON), "back margin written: size {size} offset {offset}");
    // Past end of file, inside the requested range: cuFile may write there (its compat path reads
    // whole O_DIRECT blocks); our POSIX routes do not. Reported, not asserted.
    if !back[GUARD + n..GUARD + size].iter().all(|&b| b == POISON) {
        eprintln!("note: bytes beyond EOF inside the requested range were written (size {size} offset {offset} n {n})");
    }
}


/// Opens the test file through the library with `flags` ("r", "r+", ...) under `mode`.
pub fn open_with_flags(tmp: &tempfile::NamedTempFile, flags: &str, mode: CompatMode) -> File {
    File::open(tmp.path().as_os_str().as_encoded_bytes(), flags, 0, Some(mode)).unwrap()
}

/// A device read of `size` bytes at `offset` through `file` into device memory `GUARD` bytes
/// into a poisoned allocation of `size + 2 * GUARD`: the count, and the whole allocation copied
/// back.
pub fn device_read_back(file: &File, size: usize, offset: u64) -> (usize, Vec<u8>) {
    let total = size + 2 * GUARD;
    let dev = poisoned_allocation(total, false);
    let dst = (dev as usize + GUARD) as *mut u8;
    // SAFETY: `dst .. dst + size` lies inside the allocation, freed only after the wait.
    let n = unsafe { file.pread_raw(dst, size, offset) }.unwrap().wait().unwrap();
    let mut back = vec![0u8; total];
    ok("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), dev, total) });
    unsafe { sys::cuMemFree_v2(dev) };
    (n, back)
}

/// `check_device_read` for the POSIX routes (compat mode on), which never write past the end
/// of file: the count is what `data` (the file now) holds at `offset`, the bytes are its, and
/// every other byte of the allocation is still poison, inside the requested range past the end
/// too. Returns the count.
pub fn check_device_read_exact(file: &File, data: &[u8], size: usize, offset: u64) -> usize {
    let (n, back) = device_read_back(file, size, offset);
    let start = (offset as usize).min(data.len());
    assert_eq!(n, (data.len() - start).min(size), "count: size {size} offset {offset} (file {} bytes)", data.len());
    if let Some(at) = (0..n).find(|&i| back[GUARD + i] != data[start + i]) {
        panic!("byte {} of the file differs: size {size} offset {offset}", start + at);
    }
    assert!(back[..GUARD].iter().all(|&b| b == POISON), "front margin written: size {size} offset {offset}");
    assert!(back[GUARD + n..].iter().all(|&b| b == POISON), "bytes after the {n} read written: size {size} offset {offset}");
    n
}

/// Writes `data` at `offset` through `file` from device memory (a parallel write, waited for)
/// and returns the count; the source lies `GUARD` bytes into a poisoned allocation.
pub fn device_write(file: &File, data: &[u8], offset: u64) -> usize {
    let dev = poisoned_allocation(data.len() + 2 * GUARD, false);
    let src = dev + GUARD as u64;
    ok("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD_v2(src, data.as_ptr().cast(), data.len()) });
    // SAFETY: the source range lies inside the allocation, freed only after the wait.
    let n = unsafe { file.pwrite_raw(src as usize as *const u8, data.len(), offset) }.unwrap().wait().unwrap();
    unsafe { sys::cuMemFree_v2(dev) };
    n
}
