//! GPU tests of the CUDA layer (run on the device machine from the library's unit-test binary:
//! `cargo test --lib -- --ignored sys::cuda::gpu_tests::gpu_`): pointer classification of every allocation kind, allocation ranges, the pinned
//! pool's reuse and bound, a 64 MiB host-to-device round trip, contexts on fresh threads, fork.

use std::ffi::c_void;
use std::time::Duration;

use cudarc::driver::sys;
use crate::backend::device::PinnedPool;
use crate::sys::cuda::{self, MemoryKind, ScopedContext};

/// Primary context of device 0 made current on the calling thread.
fn on_device0() -> ScopedContext {
    cuda::cuda().expect("CUDA must be available for GPU tests");
    ScopedContext::push(cuda::primary_context(0).unwrap()).unwrap()
}

fn ok(call: &str, r: sys::CUresult) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{call}");
}

/// Device memory that frees itself.
struct DeviceAlloc(sys::CUdeviceptr);

impl DeviceAlloc {
    fn new(len: usize) -> Self {
        let mut p = 0;
        // SAFETY: a context is current (callers hold on_device0); valid out-pointer.
        ok("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut p, len) });
        Self(p)
    }
    fn ptr(&self) -> *const c_void {
        self.0 as usize as *const c_void
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc/cuMemAllocManaged, freed once.
        unsafe { sys::cuMemFree_v2(self.0) };
    }
}

/// Deterministic pseudo-random bytes (xorshift64*).
fn random_bytes(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        out.extend_from_slice(&seed.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn device_to_host(src: sys::CUdeviceptr, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` has `len` writable bytes; `src` is a live device allocation of ≥ len bytes.
    ok("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src, len)
    });
    out
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_driver_is_available() {
    let line = cuda::describe();
    println!("{line}");
    assert!(line.starts_with("available: "), "{line}");
    assert!(cuda::cuda().unwrap().device_count() >= 1);
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_classify_device_memory() {
    let _ctx = on_device0();
    let d = DeviceAlloc::new(1 << 20);
    let kind = cuda::classify(d.ptr()).unwrap();
    assert_eq!(
        kind,
        MemoryKind::Device {
            ordinal: 0,
            context: Some(cuda::primary_context(0).unwrap())
        }
    );
    assert!(kind.is_device());
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_classify_pinned_host_memory() {
    let _ctx = on_device0();
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: a context is current; valid out-pointer.
    ok("cuMemAllocHost", unsafe {
        sys::cuMemAllocHost_v2(&mut p, 1 << 20)
    });
    assert_eq!(cuda::classify(p).unwrap(), MemoryKind::PinnedHost);
    // SAFETY: interior pointer of the same allocation, only classified.
    let inner = unsafe { p.cast::<u8>().add(4096) };
    assert_eq!(
        cuda::classify(inner.cast()).unwrap(),
        MemoryKind::PinnedHost
    );
    // SAFETY: allocated by cuMemAllocHost above, freed once.
    ok("cuMemFreeHost", unsafe { sys::cuMemFreeHost(p) });
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_classify_pageable_host_memory() {
    let _ctx = on_device0();
    // SAFETY: plain malloc, freed below.
    let m = unsafe { libc::malloc(1 << 20) };
    assert!(!m.is_null());
    assert_eq!(cuda::classify(m).unwrap(), MemoryKind::Host);
    // SAFETY: from malloc above.
    unsafe { libc::free(m) };
    let v = vec![1u8; 4096];
    assert_eq!(cuda::classify(v.as_ptr().cast()).unwrap(), MemoryKind::Host);
    let x = 3u64;
    assert_eq!(
        cuda::classify((&x as *const u64).cast()).unwrap(),
        MemoryKind::Host
    );
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_classify_managed_memory() {
    let _ctx = on_device0();
    let mut p = 0;
    // SAFETY: a context is current; valid out-pointer.
    ok("cuMemAllocManaged", unsafe {
        sys::cuMemAllocManaged(
            &mut p,
            1 << 20,
            sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
        )
    });
    let d = DeviceAlloc(p);
    let kind = cuda::classify(d.ptr()).unwrap();
    assert!(
        matches!(kind, MemoryKind::Managed { ordinal: 0, .. }),
        "{kind:?}"
    );
    assert!(kind.is_device());
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_allocation_range_of_an_interior_pointer() {
    let _ctx = on_device0();
    let len = 3 << 20;
    let d = DeviceAlloc::new(len);
    let (base, size) = cuda::allocation_range((d.0 + 12345) as usize as *const c_void).unwrap();
    assert_eq!(base, d.0);
    assert!(size >= len, "size {size}");
    let host = [0u8; 64];
    assert!(cuda::allocation_range(host.as_ptr().cast()).is_err());
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_pinned_pool_reuses_and_is_bounded() {
    let _ctx = on_device0();
    let mib = 1usize << 20;
    let pool = PinnedPool::new(mib, 2);
    let first_ptr = {
        let mut a = pool.acquire().unwrap();
        assert_eq!(a.len(), mib);
        a.as_mut_slice()[..4].copy_from_slice(b"gds!");
        assert_eq!(
            cuda::classify(a.as_ptr().cast()).unwrap(),
            MemoryKind::PinnedHost
        );
        a.as_ptr()
    };
    let b = pool.acquire().unwrap();
    assert_eq!(b.as_ptr(), first_ptr, "second acquire reuses the buffer");
    assert_eq!(pool.stats().allocations, 1);
    let c = pool.acquire().unwrap();
    let s = pool.stats();
    assert_eq!(
        (s.allocations, s.buffers_live, s.bytes_pinned),
        (2, 2, 2 * mib as u64)
    );
    assert!(pool.try_acquire().unwrap().is_none(), "bounded at 2");

    // A third acquire blocks until a buffer comes back, and allocates nothing.
    let waiter = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.acquire().map(|buf| buf.as_ptr() as usize))
    };
    std::thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished());
    let returned = b.as_ptr() as usize;
    drop(b);
    assert_eq!(waiter.join().unwrap().unwrap(), returned);
    assert_eq!(pool.stats().allocations, 2);
    assert_eq!(pool.stats().peak_bytes_pinned, 2 * mib as u64);

    // A size change frees idle buffers now and lent ones on return.
    pool.set_buffer_size(2 * mib);
    let s = pool.stats();
    assert_eq!((s.buffers_live, s.buffers_idle, s.frees), (1, 0, 1));
    drop(c);
    let s = pool.stats();
    assert_eq!((s.buffers_live, s.bytes_pinned, s.frees), (0, 0, 2));
    assert_eq!(pool.acquire().unwrap().len(), 2 * mib);
    assert_eq!(pool.stats().allocations, 3);
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_pinned_pool_fills_in_parallel_up_to_its_bounds() {
    let _ctx = on_device0();
    let mib = 1usize << 20;
    let pool = PinnedPool::new(mib, 5);
    // Eight threads asking for four buffers: four pinned, each once.
    let filled: usize = (0..8)
        .map(|_| {
            let pool = pool.clone();
            std::thread::spawn(move || pool.fill_to(4).unwrap() as usize)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .sum();
    assert_eq!(filled, 4);
    let s = pool.stats();
    assert_eq!((s.allocations, s.buffers_live, s.buffers_idle, s.bytes_pinned), (4, 4, 4, 4 * mib as u64));
    // Lent buffers count as existing; max_count caps the fill.
    let lent = pool.acquire().unwrap();
    assert!(!pool.fill_to(4).unwrap());
    assert!(pool.fill_to(9).unwrap());
    assert!(!pool.fill_to(9).unwrap(), "bounded by max_count 5");
    drop(lent);
    let s = pool.stats();
    assert_eq!((s.allocations, s.buffers_live, s.buffers_idle), (5, 5, 5));
    // Filled buffers are pinned and reused by acquire.
    let buf = pool.acquire().unwrap();
    assert_eq!(cuda::classify(buf.as_ptr().cast()).unwrap(), MemoryKind::PinnedHost);
    assert_eq!(pool.stats().allocations, 5);
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_copy_64_mib_host_to_device_and_back() {
    let _ctx = on_device0();
    let len = 64 << 20;
    let data = random_bytes(len, 0x9E37_79B9_7F4A_7C15);
    let d = DeviceAlloc::new(len);

    // Straight from pageable memory.
    // SAFETY: `d` is a live device allocation of `len` bytes.
    unsafe { cuda::copy_host_to_device_sync(d.0, &data) }.unwrap();
    assert!(device_to_host(d.0, len) == data, "pageable copy differs");

    // Through pinned bounce buffers, as the POSIX route does it.
    // SAFETY: as above.
    unsafe { cuda::copy_host_to_device_sync(d.0, &vec![0u8; len]) }.unwrap();
    let pool = PinnedPool::new(16 << 20, 1);
    let stream = cuda::thread_stream().unwrap();
    assert_eq!(stream, cuda::thread_stream().unwrap(), "stream is cached");
    for (i, chunk) in data.chunks(16 << 20).enumerate() {
        let mut bounce = pool.acquire().unwrap();
        bounce.as_mut_slice()[..chunk.len()].copy_from_slice(chunk);
        let dst = d.0 + (i * (16 << 20)) as u64;
        // SAFETY: the bounce buffer outlives the synchronisation below; dst is inside `d`.
        unsafe { cuda::copy_host_to_device(dst, bounce.as_ptr(), chunk.len(), stream) }.unwrap();
        cuda::synchronize(stream).unwrap();
    }
    assert_eq!(pool.stats().allocations, 1);
    assert!(device_to_host(d.0, len) == data, "bounce copy differs");
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_scoped_context_on_a_fresh_thread() {
    let d = {
        let _ctx = on_device0();
        DeviceAlloc::new(1 << 20)
    };
    let addr = d.0;
    let main_stream = {
        let _ctx = on_device0();
        cuda::thread_stream().unwrap()
    };
    let worker = std::thread::spawn(move || {
        assert_eq!(cuda::current_context().unwrap(), None);
        let p = addr as usize as *const c_void;
        let kind = cuda::classify(p).unwrap();
        assert!(kind.is_device(), "{kind:?}");
        let worker_stream = {
            let scope = ScopedContext::for_kind(&kind)
                .unwrap()
                .expect("device needs a context");
            assert_eq!(cuda::current_context().unwrap(), Some(scope.context()));
            let payload = random_bytes(1 << 20, 7);
            // SAFETY: `addr` is a live 1 MiB device allocation owned by the main thread, which
            // joins this thread before freeing it.
            unsafe { cuda::copy_host_to_device_sync(addr, &payload) }.unwrap();
            assert!(device_to_host(addr, 1 << 20) == payload);
            cuda::thread_stream().unwrap()
        };
        assert_eq!(cuda::current_context().unwrap(), None, "popped on drop");
        assert!(cuda::thread_stream().is_err(), "no context, no stream");
        worker_stream
    });
    let worker_stream = worker.join().unwrap();
    assert_ne!(worker_stream, main_stream, "one stream per thread");
    let _ctx = on_device0();
    drop(d);
}

#[test]
#[ignore = "needs a GPU"]
fn gpu_forked_child_is_refused() {
    cuda::cuda().unwrap();
    // SAFETY: the child only calls async-signal-safe-enough code that neither locks nor
    // allocates (an initialised OnceCell read, getpid, a pointer classification that stops at
    // the PID check) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let refused = matches!(cuda::cuda(), Err(cuda::CudaFailure::Forked { .. }));
        let x = 1u8;
        let host = matches!(
            cuda::classify((&x as *const u8).cast()),
            Ok(MemoryKind::Host)
        );
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(if refused && host { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status:#x}"
    );
    let text = cuda::CudaFailure::Forked {
        parent: 1,
        child: 2,
    }
    .to_string();
    assert!(
        text.contains("CUDA was initialised in the parent process"),
        "{text}"
    );
    assert!(
        text.contains("re-initialise after fork is not supported"),
        "{text}"
    );
}
