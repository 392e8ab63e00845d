#!/usr/bin/env python3
"""Probe (GPU machine): does registering the device route's bounce buffers as one arena cost less
than registering them one by one? A 4 MiB huge-page buffer registers in 0.8-0.9 ms
(probe-pinning.py), which looks like a cost per call rather than per page. Compares, in this
fresh process, 17 buffers of 4 MiB (each touched, then registered) against one 68 MiB arena
touched on one thread or on 16, then registered in one call; touch and registration are timed
apart, and a copy from the arena's last 4 MiB checks it copies at full speed. Run it in several
fresh processes with the order alternated (ARENA_FIRST=1 runs the arena first). Run on the H200
machine on 2026-12-07: docs/performance.md, "The POSIX route's first read again".

    python3 tools/probes/probe-arena.py
"""
import ctypes, os, threading, time
from cuda_ctypes import check, cu, libc, ms, primary_context, timed_copy_ms

MiB = 1 << 20
PROT_RW, MAP_PRIVATE, MAP_ANON, MADV_HUGEPAGE = 3, 2, 0x20, 14
PORTABLE = 1
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
ctx = primary_context()


def huge_range(n):
    raw = libc.mmap(None, n + 2 * MiB, PROT_RW, MAP_PRIVATE | MAP_ANON, -1, 0)
    if raw in (None, ctypes.c_void_p(-1).value):
        raise SystemExit(f"mmap failed: errno {ctypes.get_errno()}")
    base = (raw + 2 * MiB - 1) & ~(2 * MiB - 1)
    libc.madvise(base, n, MADV_HUGEPAGE)
    return base


def touch(base, n, threads=1):
    if threads == 1:
        ctypes.memset(base, 0, n)
        return
    piece = n // threads
    ts = [threading.Thread(target=ctypes.memset, args=(base + i * piece, 0, piece)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def register(base, n):
    check(cu.cuMemHostRegister_v2(base, n, PORTABLE), "cuMemHostRegister")


def buffers():
    t_touch = t_reg = 0.0
    for _ in range(17):
        b = huge_range(4 * MiB)
        t = time.perf_counter(); touch(b, 4 * MiB); t_touch += ms(t)
        t = time.perf_counter(); register(b, 4 * MiB); t_reg += ms(t)
    print(f"ARENA 17x4MiB: touch {t_touch:.2f} ms register {t_reg:.2f} ms total {t_touch + t_reg:.2f}", flush=True)


def arena(threads):
    n = 68 * MiB
    b = huge_range(n)
    t = time.perf_counter(); touch(b, n, threads); t_touch = ms(t)
    t = time.perf_counter(); register(b, n); t_reg = ms(t)
    print(f"ARENA 68MiB touched on {threads}: touch {t_touch:.2f} ms register {t_reg:.2f} ms total {t_touch + t_reg:.2f}", flush=True)
    return b + n - 4 * MiB


def untouched_arena():
    n = 68 * MiB
    b = huge_range(n)
    t = time.perf_counter(); register(b, n); t_reg = ms(t)
    print(f"ARENA 68MiB untouched: register {t_reg:.2f} ms", flush=True)


order = [lambda: arena(16), buffers] if os.environ.get("ARENA_FIRST") == "1" else [buffers, lambda: arena(16)]
last = None
for step in order:
    last = step() or last
arena(1)
untouched_arena()
dev = ctypes.c_uint64()
check(cu.cuMemAlloc_v2(ctypes.byref(dev), 4 * MiB), "cuMemAlloc")
stream = ctypes.c_void_p()
check(cu.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")
timed_copy_ms(dev.value, last, 4 * MiB, stream)
c = min(timed_copy_ms(dev.value, last, 4 * MiB, stream) for _ in range(5))
print(f"ARENA copy 4MiB from the arena: {c:.3f} ms ({4 * MiB / c / 1e6:.1f} GB/s)", flush=True)
