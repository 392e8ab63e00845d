"""ctypes bindings shared by the probe scripts (GPU machine): libc's mmap family and the CUDA
driver calls they use, a CUresult check, device 0's primary context, warming a file, and timing
helpers (milliseconds, a copy, the same call on 16 threads at once)."""
import ctypes
import ctypes.util
import threading
import time

PROT_READ, MAP_SHARED, MAP_POPULATE = 1, 1, 0x8000
CU_MEMHOSTREGISTER_READ_ONLY = 0x08

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

cu = ctypes.CDLL("libcuda.so.1")
cu.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
cu.cuMemHostUnregister.argtypes = [ctypes.c_void_p]
cu.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
cu.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
cu.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
cu.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
cu.cuMemAllocHost_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cu.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]


def check(rc, what):
    """Exits with the CUresult when a driver call failed."""
    if rc != 0:
        raise SystemExit(f"{what} failed: CUresult {rc}")


def primary_context():
    """Initialises CUDA, makes device 0's primary context current and returns it."""
    check(cu.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def warm(path):
    """Reads the file once so that it is in the page cache."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def timed_copy_ms(dev, src, n, stream):
    """Milliseconds for one host-to-device copy of `n` bytes from `src` to `dev` on `stream`,
    waited for."""
    t = time.perf_counter()
    check(cu.cuMemcpyHtoDAsync_v2(dev, src, n, stream), "copy")
    check(cu.cuStreamSynchronize(stream), "sync")
    return (time.perf_counter() - t) * 1e3


def ms(t0):
    """Milliseconds since the `time.perf_counter()` value `t0`."""
    return (time.perf_counter() - t0) * 1e3


def on_threads(ctx, fn, n=16):
    """Runs `fn` on `n` threads at once, each with `ctx` current; returns the wall milliseconds
    and each thread's."""
    each = [0.0] * n

    def body(i):
        check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        t = time.perf_counter()
        fn()
        each[i] = ms(t)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ms(t0), each
