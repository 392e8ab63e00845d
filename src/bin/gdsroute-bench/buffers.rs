//! The memory the bench reads into and writes from: device allocations, host mappings laid out as
//! numpy lays out KvikIO's arrays, pinned host memory; filling them (poison, random data, the
//! `--prime-gpu` copy) and verifying what a read or write left (against the file's bytes).

use std::ffi::c_void;
use std::os::unix::fs::FileExt;

use cudarc::driver::sys;

use crate::args::Mem;
use crate::cuda::cu;
use crate::measure::sleep_ms_from_env;

/// Host memory the bench owns: either allocated as numpy allocates KvikIO's host arrays, so that
/// both libraries read into the same kind of pages (an anonymous mapping, advised
/// `MADV_HUGEPAGE` from 4 MiB up, numpy's default on Linux; with 4 KiB pages the kernel's copies
/// into the buffer take more TLB misses: series 4 (2026-11-30) measured host reads at 8 threads
/// 0.95-1.01x KvikIO with a plain `Vec` (run 6)), or pinned with `cuMemHostAlloc` (the
/// ceiling's source when CUDA is there).
pub struct HostMemory {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    pinned: bool,
}

impl HostMemory {
    /// An anonymous mapping of `len` bytes, zero-filled.
    pub fn new(len: usize) -> Result<HostMemory, String> {
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
        Ok(HostMemory { ptr, len, pinned: false })
    }

    /// `len` bytes pinned with `cuMemHostAlloc`. Needs a current context.
    pub fn pinned(len: usize) -> Result<HostMemory, String> {
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: a context is current; raw is writable.
        cu(unsafe { sys::cuMemHostAlloc(&mut raw, len, 0) }, "cuMemHostAlloc")?;
        let ptr = std::ptr::NonNull::new(raw.cast::<u8>()).ok_or("cuMemHostAlloc returned null")?;
        Ok(HostMemory { ptr, len, pinned: true })
    }
}

impl std::ops::Deref for HostMemory {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: len bytes mapped or allocated, readable, for the life of self.
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
        if self.pinned {
            // SAFETY: allocated by cuMemHostAlloc, freed once.
            unsafe {
                let _ = sys::cuMemFreeHost(self.ptr.as_ptr().cast());
            }
        } else {
            // SAFETY: mapped in `new` with this length; no borrow outlives self.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
    }
}

/// A destination of reads or source of writes, on the device or on the host.
pub enum Buffer {
    Device { ptr: sys::CUdeviceptr, len: usize },
    Host(HostMemory),
}

impl Buffer {
    pub fn new(mem: Mem, len: usize) -> Result<Buffer, String> {
        let len = len.max(1);
        match mem {
            Mem::Host => {
                // Every page is touched by `poison` before each timed read, so page faults
                // are never timed (the KvikIO script fills its arrays too).
                Ok(Buffer::Host(HostMemory::new(len)?))
            }
            Mem::Device => {
                let mut ptr: sys::CUdeviceptr = 0;
                // SAFETY: a context is current (cuda::context_of ran); ptr is writable.
                cu(unsafe { sys::cuMemAlloc_v2(&mut ptr, len) }, "cuMemAlloc")?;
                Ok(Buffer::Device { ptr, len })
            }
        }
    }

    /// The address the library reads into or writes from: the device address, or the host
    /// mapping's own pointer (not one derived from a reference, since the library writes through it).
    pub fn addr(&self) -> usize {
        match self {
            Buffer::Device { ptr, .. } => *ptr as usize,
            Buffer::Host(v) => v.ptr.as_ptr() as usize,
        }
    }

    /// Copies 256 MiB (or the buffer's size, or BENCH_PRIME_BYTES) from pageable host memory
    /// into a device buffer with plain CUDA, nothing of the library involved; BENCH_PRIME_SLEEP_MS
    /// then waits before the timed read (to see how long the effect lasts).
    pub fn prime(&mut self) -> Result<(), String> {
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
    pub fn upload(&mut self, data: &[u8]) -> Result<(), String> {
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
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) -> Result<(), String> {
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
    pub fn poison(&mut self) -> Result<(), String> {
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

/// splitmix64: the same sequence as in tools/gpu/bench-kvikio.py (random offsets, random data).
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` with random bytes: splitmix64 per 8 bytes, each 64 MiB block seeded by its
/// index, the blocks shared among the cores (1 GiB in well under a second).
pub fn fill_random(buf: &mut [u8]) {
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

/// The bytes of the file read, to verify reads against.
pub struct Reference {
    path: String,
    data: Option<Vec<u8>>,
}

impl Reference {
    pub fn new(path: &str) -> Reference {
        Reference { path: path.to_string(), data: None }
    }

    /// The file's bytes, read with plain `std::fs::read` on first use (never inside a timed region).
    pub fn get(&mut self) -> Result<&[u8], String> {
        if self.data.is_none() {
            self.data =
                Some(std::fs::read(&self.path).map_err(|e| format!("read {}: {e}", self.path))?);
        }
        Ok(self.data.as_deref().unwrap())
    }
}

/// Compares the buffer's first `reference.len()` bytes with the file's, 64 MiB at a time.
pub fn verify_big(reference: &[u8], buffer: &Buffer) -> Result<(), String> {
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

/// Checks, outside any timed region, that the file holds `data` and that `source` (the buffer
/// the writes came from) holds it too: read back with plain `pread`, 64 MiB at a time.
pub fn verify_written(path: &str, source: impl Fn(usize, &mut [u8]) -> Result<(), String>, data: &[u8]) -> Result<(), String> {
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

/// The first index at which `a` and `b` differ (None when equal).
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len())))
}
