#!/usr/bin/env python3
"""Probe (GPU machine; run on 2026-11-30, docs/routing.md): what a first device read
pays for before its copies run. Times, in one process with the primary context current (rep 0
is the process's first; rep 1 repeats in the same process, with rep 0's buffers still pinned): cuMemAllocHost of 4 MiB one after another and
from 16 threads at once, one 64 MiB cuMemAllocHost, cuStreamCreate/cuEventCreate from 16
threads, and the first versus second 4 MiB copy out of a freshly pinned buffer.

    python3 tools/probes/probe-first-read-costs.py
"""
import ctypes, time
from cuda_ctypes import check, cu, ms, on_threads, primary_context, timed_copy_ms

MiB = 1 << 20
ctx = primary_context()


def alloc_host(n):
    p = ctypes.c_void_p()
    check(cu.cuMemAllocHost_v2(ctypes.byref(p), n), "cuMemAllocHost")
    return p


dev = ctypes.c_uint64()
check(cu.cuMemAlloc_v2(ctypes.byref(dev), 256 * MiB), "cuMemAlloc")
stream = ctypes.c_void_p()
check(cu.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")

for rep in range(2):
    seq = []
    for _ in range(8):
        t = time.perf_counter(); alloc_host(4 * MiB); seq.append(ms(t))
    wall, each = on_threads(ctx, lambda: alloc_host(4 * MiB))
    t = time.perf_counter(); big = alloc_host(64 * MiB); big_ms = ms(t)
    print(f"PINNED rep={rep} sequential 4MiB: {' '.join(f'{x:.2f}' for x in seq)} ms; 16 threads x 4MiB: wall {wall:.2f} ms "
          f"(each {min(each):.2f}-{max(each):.2f}); one 64MiB: {big_ms:.2f} ms", flush=True)
    buf = alloc_host(4 * MiB)
    ctypes.memset(buf, 1, 4 * MiB)
    times = []
    for _ in range(3):
        times.append(timed_copy_ms(dev.value, buf.value, 4 * MiB, stream))
    print(f"COPY rep={rep} 4MiB from a freshly pinned buffer: {' '.join(f'{x:.3f}' for x in times)} ms", flush=True)

def make_stream_and_events():
    s = ctypes.c_void_p(); check(cu.cuStreamCreate(ctypes.byref(s), 0), "cuStreamCreate")
    for _ in range(2):
        e = ctypes.c_void_p(); check(cu.cuEventCreate(ctypes.byref(e), 2), "cuEventCreate")
wall, each = on_threads(ctx, make_stream_and_events)
print(f"STREAMS 16 threads x (stream + 2 events): wall {wall:.2f} ms (each {min(each):.2f}-{max(each):.2f})", flush=True)
