#!/usr/bin/env python3
"""Probe (GPU machine): the cheapest way to get pinned bounce buffers. cuMemAllocHost of 4 MiB
costs 1.5-2 ms and serialises across threads (probe-first-read-costs.py). Compares, per buffer
size: cuMemAllocHost; an anonymous mmap populated up front then cuMemHostRegister; the same on a
2 MiB-aligned range advised MADV_HUGEPAGE; and 16 threads doing the huge-page variant at once.
Also checks that a copy from each kind runs at full speed. Registration uses the library's flag
(PORTABLE). The comparison of 4 KiB and huge pages holds under THP `madvise` (as on the H200):
the 4 KiB variant asks for nothing (MADV_NOHUGEPAGE). Buffers are never freed, so later rows run
with the earlier ones still pinned (about 0.8 GiB). Run on 2026-11-30: docs/routing.md.

    python3 tools/probes/probe-pinning.py
"""
import ctypes, time
from cuda_ctypes import check, cu, libc, ms, on_threads, primary_context, timed_copy_ms

MiB = 1 << 20
PROT_RW, MAP_PRIVATE, MAP_ANON, MADV_HUGEPAGE, MADV_NOHUGEPAGE = 3, 2, 0x20, 14, 15
CU_MEMHOSTREGISTER_PORTABLE = 1
MAP_FAILED = ctypes.c_void_p(-1).value
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
ctx = primary_context()
print("THP:", open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip(),
      "defrag:", open("/sys/kernel/mm/transparent_hugepage/defrag").read().strip(), flush=True)


def alloc_host(n):
    p = ctypes.c_void_p()
    check(cu.cuMemAllocHost_v2(ctypes.byref(p), n), "cuMemAllocHost")
    return p.value


def mmap_register(n, huge):
    # Over-allocate by 2 MiB so that the used range can start on a 2 MiB boundary.
    raw = libc.mmap(None, n + 2 * MiB, PROT_RW, MAP_PRIVATE | MAP_ANON, -1, 0)
    if raw in (None, MAP_FAILED):
        raise SystemExit(f"mmap failed: errno {ctypes.get_errno()}")
    base = (raw + 2 * MiB - 1) & ~(2 * MiB - 1)
    libc.madvise(base, n, MADV_HUGEPAGE if huge else MADV_NOHUGEPAGE)
    ctypes.memset(base, 0, n)  # populate (first touch)
    check(cu.cuMemHostRegister_v2(base, n, CU_MEMHOSTREGISTER_PORTABLE), "cuMemHostRegister")
    return base


dev = ctypes.c_uint64()
check(cu.cuMemAlloc_v2(ctypes.byref(dev), 256 * MiB), "cuMemAlloc")
stream = ctypes.c_void_p()
check(cu.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")


def copy_ms(src, n):
    return timed_copy_ms(dev.value, src, n, stream)


for size in (4 * MiB, 64 * MiB):
    for name, make in (("cuMemAllocHost", alloc_host), ("mmap+register", lambda n: mmap_register(n, False)),
                       ("mmap+hugepage+register", lambda n: mmap_register(n, True))):
        costs, copies = [], []
        for _ in range(4):
            t = time.perf_counter(); p = make(size); costs.append(ms(t))
            copy_ms(p, size); copies.append(copy_ms(p, size))
        print(f"PIN {size // MiB}MiB {name}: {' '.join(f'{c:.2f}' for c in costs)} ms; copy {min(copies):.3f} ms "
              f"({size / min(copies) / 1e6:.1f} GB/s)", flush=True)

# Registration flags (not yet run): does READ_ONLY (the GPU only reads bounce buffers) or
# DEVICEMAP change what registering costs? Huge pages, 4 MiB, one after another.
CU_MEMHOSTREGISTER_DEVICEMAP, CU_MEMHOSTREGISTER_READ_ONLY = 2, 8
for flags_name, flags in (("PORTABLE", 1), ("PORTABLE|READ_ONLY", 1 | CU_MEMHOSTREGISTER_READ_ONLY),
                          ("PORTABLE|DEVICEMAP", 1 | CU_MEMHOSTREGISTER_DEVICEMAP)):
    costs = []
    for _ in range(8):
        raw = libc.mmap(None, 6 * MiB, PROT_RW, MAP_PRIVATE | MAP_ANON, -1, 0)
        if raw in (None, MAP_FAILED):
            raise SystemExit(f"mmap failed: errno {ctypes.get_errno()}")
        base = (raw + 2 * MiB - 1) & ~(2 * MiB - 1)
        libc.madvise(base, 4 * MiB, MADV_HUGEPAGE)
        ctypes.memset(base, 0, 4 * MiB)
        t = time.perf_counter()
        check(cu.cuMemHostRegister_v2(base, 4 * MiB, flags), f"cuMemHostRegister({flags_name})")
        costs.append(ms(t))
    print(f"FLAGS {flags_name}: register only {' '.join(f'{c:.2f}' for c in costs)} ms", flush=True)

for name, huge in (("mmap+register", False), ("mmap+hugepage+register", True)):
    wall, each = on_threads(ctx, lambda: mmap_register(4 * MiB, huge))
    print(f"PIN16 16 threads x 4MiB {name}: wall {wall:.2f} ms (each {min(each):.2f}-{max(each):.2f})", flush=True)
