#!/usr/bin/env python3
"""Probe (GPU machine; written in session 2, not yet run): does the first copy-engine write into a
freshly allocated device buffer cost a fixed amount, whatever the library does?

Copies 1 GiB from pinned host memory (16 streams x 64 MiB pieces) into: a fresh allocation (first
copy, then a second one), a fresh allocation primed with one 4 MiB copy first, and a fresh
allocation memset on the device first. Prints GB/s for each. If the first copy into a fresh
allocation is ~10 ms slower than the others, issue 4's target 4 (first read >= 0.7 of the steady
state) is bounded by the driver, not by gdsroute.

    python3 scripts/probe-first-copy.py
"""
import ctypes, time
from cuda_ctypes import check, cu, primary_context

SIZE = 1 << 30
PIECE = 64 << 20
STREAMS = 16

primary_context()
cu.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
host = ctypes.c_void_p()
check(cu.cuMemAllocHost_v2(ctypes.byref(host), SIZE), "cuMemAllocHost")
ctypes.memset(host, 0x5A, SIZE)
streams = []
for _ in range(STREAMS):
    s = ctypes.c_void_p()
    check(cu.cuStreamCreate(ctypes.byref(s), 1), "cuStreamCreate")
    streams.append(s)


def fresh():
    d = ctypes.c_uint64()
    check(cu.cuMemAlloc_v2(ctypes.byref(d), SIZE), "cuMemAlloc")
    return d.value


def copy_gbps(dst):
    t0 = time.perf_counter()
    for i, off in enumerate(range(0, SIZE, PIECE)):
        check(cu.cuMemcpyHtoDAsync_v2(dst + off, host.value + off, PIECE, streams[i % STREAMS]), "copy")
    for s in streams:
        check(cu.cuStreamSynchronize(s), "sync")
    return SIZE / (time.perf_counter() - t0) / 1e9


for rep in range(3):
    a = fresh()
    first, second = copy_gbps(a), copy_gbps(a)
    b = fresh()
    check(cu.cuMemcpyHtoD_v2(b, host.value, 4 << 20), "prime")
    primed = copy_gbps(b)
    c = fresh()
    check(cu.cuMemsetD8_v2(c, 0xA5, SIZE), "memset")
    check(cu.cuCtxSynchronize(), "sync")
    memset_first = copy_gbps(c)
    print(f"PROBE rep={rep} fresh_first={first:.1f} fresh_second={second:.1f} primed_4MiB={primed:.1f} "
          f"memset_then_first={memset_first:.1f} GB/s", flush=True)
    for d in (a, b, c):
        check(cu.cuMemFree_v2(ctypes.c_uint64(d)), "cuMemFree")
