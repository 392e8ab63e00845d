#!/usr/bin/env python3
"""Probe (GPU machine; run on 2026-11-30, docs/routing.md): what a first copy into
a freshly allocated device buffer costs, and what removes that cost.

First part: copies 1 GiB from pinned host memory (16 streams x 64 MiB pieces) into a fresh
allocation (first copy, then a second one), a fresh allocation primed with one 4 MiB copy, a fresh
allocation memset first (the memset timed), and a fresh allocation whose pieces are each memset on
their stream before their copy. Second part (PRIME lines): a fresh allocation after a 4 KiB or
4 MiB copy, a 4 KiB or 1-byte memset, a 50 ms sleep, or nothing, then the 1 GiB copy; and
(NEVER_FREED) memory never freed before in the process.

    python3 tools/probes/probe-first-copy.py
"""
import ctypes, time
from cuda_ctypes import check, cu, primary_context, timed_copy_ms

SIZE = 1 << 30
PIECE = 64 << 20
STREAMS = 16

primary_context()
cu.cuMemsetD8_v2.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t]
cu.cuMemsetD8Async.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t, ctypes.c_void_p]
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


def copy_gbps(dst, memset_first=False):
    """GB/s of 1 GiB copied in pieces over the streams; with memset_first each piece is first
    memset on the device in its own stream (the memset is timed with the copy)."""
    t0 = time.perf_counter()
    for i, off in enumerate(range(0, SIZE, PIECE)):
        s = streams[i % STREAMS]
        if memset_first:
            check(cu.cuMemsetD8Async(dst + off, 0xA5, PIECE, s), "memset")
        check(cu.cuMemcpyHtoDAsync_v2(dst + off, host.value + off, PIECE, s), "copy")
    for s in streams:
        check(cu.cuStreamSynchronize(s), "sync")
    return SIZE / (time.perf_counter() - t0) / 1e9


def memset_ms(dst):
    t0 = time.perf_counter()
    check(cu.cuMemsetD8_v2(dst, 0xA5, SIZE), "memset")
    check(cu.cuCtxSynchronize(), "sync")
    return (time.perf_counter() - t0) * 1e3


for rep in range(3):
    a = fresh()
    first, second = copy_gbps(a), copy_gbps(a)
    b = fresh()
    check(cu.cuMemcpyHtoD_v2(b, host.value, 4 << 20), "prime")
    primed = copy_gbps(b)
    c = fresh()
    fresh_memset = memset_ms(c)
    again_memset = memset_ms(c)
    memset_first = copy_gbps(c)
    d = fresh()
    in_stream = copy_gbps(d, memset_first=True)
    print(f"PROBE rep={rep} fresh_first={first:.1f} fresh_second={second:.1f} primed_4MiB={primed:.1f} "
          f"memset_then_first={memset_first:.1f} memset_in_stream_then_copy={in_stream:.1f} GB/s; "
          f"memset fresh={fresh_memset:.2f} ms again={again_memset:.2f} ms", flush=True)
    for x in (a, b, c, d):
        check(cu.cuMemFree_v2(ctypes.c_uint64(x)), "cuMemFree")


def copy_ms(dst, length):
    return timed_copy_ms(dst, host.value, length, streams[0])


def memset_small_ms(dst, length):
    t0 = time.perf_counter()
    check(cu.cuMemsetD8Async(dst, 0xA5, length, streams[0]), "memset")
    check(cu.cuStreamSynchronize(streams[0]), "sync")
    return (time.perf_counter() - t0) * 1e3


# Second part: what primes an allocation, and is the cost fixed (paid by a small first copy)?
for rep in range(3):
    out = []
    for label, prime in (("copy4KiB", lambda d: copy_ms(d, 4096)), ("copy4MiB", lambda d: copy_ms(d, 4 << 20)),
                         ("memset4KiB", lambda d: memset_small_ms(d, 4096)), ("memset1B", lambda d: memset_small_ms(d, 1)),
                         ("sleep50ms", lambda d: (time.sleep(0.05), 0.0)[1]), ("none", lambda d: 0.0)):
        d = fresh()
        prime_ms = prime(d)
        gbps = copy_gbps(d)
        out.append(f"{label}: prime {prime_ms:.2f} ms then {gbps:.1f} GB/s")
        check(cu.cuMemFree_v2(ctypes.c_uint64(d)), "cuMemFree")
    print(f"PRIME rep={rep} " + "; ".join(out), flush=True)
# Freshly allocated but never freed before: a second, larger allocation of new memory.
big = ctypes.c_uint64()
check(cu.cuMemAlloc_v2(ctypes.byref(big), ctypes.c_size_t(4 * SIZE)), "cuMemAlloc big")
print(f"NEVER_FREED first={copy_gbps(big.value + 2 * SIZE):.1f} second={copy_gbps(big.value + 2 * SIZE):.1f} GB/s", flush=True)
