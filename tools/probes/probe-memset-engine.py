#!/usr/bin/env python3
"""Probe (GPU machine): does a small cuMemsetD8Async wait for SMs that another stream's kernel
holds (a kernel memset), or run beside it (copy engine)? And does a host-to-device copy?

Launches a spin kernel of 4 x SMs blocks of 1024 threads spinning 0.3 s each on one stream (two
waves on the H200: the SMs are busy for about 0.6 s), then times, on another non-blocking stream,
memsets of 4 KiB, 2 MiB and 64 MiB and a 4 MiB pinned copy issued right after it. Run on
2026-11-30 (docs/routing.md): the 4 KiB memset and the copy ran at once, the 2 MiB
and 64 MiB memsets waited about 590 ms for the kernel.

    python3 tools/probes/probe-memset-engine.py
"""
import time
import cupy as cp

SPIN_S = 0.3
spin = cp.RawKernel(r'''
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}''', "spin")
props = cp.cuda.runtime.getDeviceProperties(0)
sms = props["multiProcessorCount"]
clock_khz = cp.cuda.runtime.deviceGetAttribute(13, 0)  # cudaDevAttrClockRate (kHz; not in CUDA 13's props)
busy, side = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
dst = cp.empty(64 << 20, dtype=cp.uint8)
host = cp.cuda.alloc_pinned_memory(4 << 20)
dst[:] = 1
cp.cuda.Device().synchronize()


def timed(what):
    t0 = time.perf_counter()
    what()
    side.synchronize()
    return (time.perf_counter() - t0) * 1e3


memset = lambda: cp.cuda.runtime.memsetAsync(dst.data.ptr, 0xA5, 4096, side.ptr)
memset2m = lambda: cp.cuda.runtime.memsetAsync(dst.data.ptr, 0xA5, 2 << 20, side.ptr)
memset64m = lambda: cp.cuda.runtime.memsetAsync(dst.data.ptr, 0xA5, 64 << 20, side.ptr)
copy = lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, host.ptr, 4 << 20, cp.cuda.runtime.memcpyHostToDevice, side.ptr)
for rep in range(3):
    idle_memset, idle_copy = timed(memset), timed(copy)
    res = []
    for name, op in (("memset4KiB", memset), ("memset2MiB", memset2m), ("memset64MiB", memset64m), ("copy4MiB", copy)):
        spin((sms * 4,), (1024,), (cp.int64(int(SPIN_S * clock_khz * 1e3)),), stream=busy)
        time.sleep(0.01)  # let the kernel occupy the SMs
        res.append(f"{name} {timed(op):.2f} ms")
        busy.synchronize()
    print(f"ENGINE rep={rep} idle: memset4KiB {idle_memset:.3f} ms copy4MiB {idle_copy:.3f} ms; "
          f"beside a {SPIN_S:.1f} s kernel on all {sms} SMs: " + ", ".join(res), flush=True)
