#!/usr/bin/env python3
"""Probe (GPU machine): can a first device read skip pinning? Pinning the bounce buffers of 16
workers (about 68 MiB) costs about 10 ms of driver-serialised work that stalls every copy
(2026-11-30, docs/routing.md). This times, in a fresh process per mode, 16 threads moving a
warm 1 GiB file into device memory in 4 MiB tasks, each thread on its own stream, twice (pass 1 is
the process's first):

    mmap      cuMemcpyHtoDAsync straight from a read-only mapping of the file (pageable: the
              driver stages it)
    pread     pread into a pageable 4 MiB buffer per thread, then cuMemcpyHtoDAsync from it
    pinned    the same through a 4 MiB huge-page buffer per thread, registered before the timing
              (registration reported separately)

    python3 tools/probes/probe-pageable.py FILE MODE [PIECE_MIB]
"""
import ctypes, os, sys, threading, time
from cuda_ctypes import PROT_READ, MAP_SHARED, check, cu, libc, primary_context

MiB = 1 << 20
path, mode = sys.argv[1], sys.argv[2]
piece = int(sys.argv[3]) * MiB if len(sys.argv) > 3 else 4 * MiB
size = os.path.getsize(path)
THREADS = 16
libc.pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
libc.pread.restype = ctypes.c_ssize_t
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
cu.cuStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]

ctx = primary_context()
dev = ctypes.c_uint64()
check(cu.cuMemAlloc_v2(ctypes.byref(dev), size), "cuMemAlloc")
check(cu.cuMemsetD8_v2(ctypes.c_uint64(dev.value), 0, ctypes.c_size_t(size)), "cuMemsetD8")
fd = os.open(path, os.O_RDONLY)
mapping = libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0) if mode == "mmap" else None

streams, buffers, keep = [], [], []
t = time.perf_counter()
for _ in range(THREADS):
    s = ctypes.c_void_p()
    check(cu.cuStreamCreate(ctypes.byref(s), 1), "cuStreamCreate")
    streams.append(s)
streams_ms = (time.perf_counter() - t) * 1e3
t = time.perf_counter()
for _ in range(THREADS):
    if mode == "pinned":
        raw = libc.mmap(None, piece + 2 * MiB, 3, 0x22, -1, 0)
        p = (raw + 2 * MiB - 1) & ~(2 * MiB - 1)
        libc.madvise(p, piece, 14)
        ctypes.memset(p, 1, piece)
        check(cu.cuMemHostRegister_v2(p, piece, 1), "cuMemHostRegister")
        buffers.append(p)
    elif mode == "pread":
        keep.append(ctypes.create_string_buffer(piece))  # alive as long as `keep`
        buffers.append(ctypes.addressof(keep[-1]))
prepare_ms = (time.perf_counter() - t) * 1e3


def one_pass():
    next_task = iter(range(0, size, piece))
    lock = threading.Lock()

    def body(i):
        check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        while True:
            with lock:
                off = next(next_task, None)
            if off is None:
                return
            n = min(piece, size - off)
            if mode == "mmap":
                src = mapping + off
            else:
                src = buffers[i]
                got = libc.pread(fd, src, n, off)
                assert got == n, got
            check(cu.cuMemcpyHtoDAsync_v2(dev.value + off, src, n, streams[i]), "cuMemcpyHtoDAsync")
            check(cu.cuStreamSynchronize(streams[i]), "cuStreamSynchronize")

    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return size / (time.perf_counter() - t0) / 1e9


first = one_pass()
second = one_pass()
third = one_pass()
print(f"PAGEABLE mode={mode} piece={piece >> 20}MiB streams {streams_ms:.1f} ms, buffers {prepare_ms:.1f} ms; "
      f"pass 1 {first:.1f} GB/s, pass 2 {second:.1f}, pass 3 {third:.1f}", flush=True)
