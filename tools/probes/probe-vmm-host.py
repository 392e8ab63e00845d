#!/usr/bin/env python3
"""Probe (GPU machine): is pinned host memory from the virtual memory management API
(`cuMemCreate` with `CU_MEM_LOCATION_TYPE_HOST`, CUDA 12.2+) cheaper to get than a huge-page
mapping registered with `cuMemHostRegister` (0.55-0.77 ms per 4 MiB, serialised:
probe-pinning.py)? The bounce buffers' pinning is the largest part of what a first read pays
(2026-11-30, docs/routing.md). Per buffer: create, reserve, map, grant access (the device,
and the host so that `pread` can write it), then a CPU write, a `pread` from the file into it
and a copy to the device; then 16 threads at once.

    python3 tools/probes/probe-vmm-host.py FILE [host-access: yes|no]
"""
import ctypes, os, sys, time
from cuda_ctypes import check, cu, libc, ms, on_threads, primary_context, timed_copy_ms

MiB = 1 << 20
CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST = 1, 1, 2
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", AllocFlags)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


path = sys.argv[1]
host_access = (sys.argv[2] if len(sys.argv) > 2 else "yes") == "yes"
ctx = primary_context()
cu.cuMemCreate.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.POINTER(AllocationProp), ctypes.c_ulonglong]
cu.cuMemAddressReserve.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_ulonglong]
cu.cuMemMap.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_ulonglong]
cu.cuMemSetAccess.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.POINTER(AccessDesc), ctypes.c_size_t]
cu.cuMemGetAllocationGranularity.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(AllocationProp), ctypes.c_int]
libc.pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
libc.pread.restype = ctypes.c_ssize_t

prop = AllocationProp()
prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
prop.location.type = CU_MEM_LOCATION_TYPE_HOST
gran = ctypes.c_size_t()
check(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
print(f"VMM host granularity {gran.value} bytes; host access requested: {host_access}", flush=True)
descs = (AccessDesc * 2)()
descs[0].location.type, descs[0].location.id, descs[0].flags = CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE
descs[1].location.type, descs[1].location.id, descs[1].flags = CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE


def vmm_host(n):
    """Returns the mapped address and the milliseconds of create, reserve+map, access."""
    h, va = ctypes.c_uint64(), ctypes.c_uint64()
    t = time.perf_counter(); check(cu.cuMemCreate(ctypes.byref(h), n, ctypes.byref(prop), 0), "cuMemCreate"); c = ms(t)
    t = time.perf_counter()
    check(cu.cuMemAddressReserve(ctypes.byref(va), n, 0, 0, 0), "cuMemAddressReserve")
    check(cu.cuMemMap(va.value, n, 0, h.value, 0), "cuMemMap"); m = ms(t)
    t = time.perf_counter()
    check(cu.cuMemSetAccess(va.value, n, descs, 2 if host_access else 1), "cuMemSetAccess"); a = ms(t)
    return va.value, (c, m, a)


dev = ctypes.c_uint64()
check(cu.cuMemAlloc_v2(ctypes.byref(dev), 256 * MiB), "cuMemAlloc")
stream = ctypes.c_void_p()
check(cu.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")
fd = os.open(path, os.O_RDONLY)


def copy_ms(src, n):
    return timed_copy_ms(dev.value, src, n, stream)


for size in (4 * MiB, 64 * MiB):
    for i in range(4):
        t = time.perf_counter(); p, (c, m, a) = vmm_host(size); total = ms(t)
        print(f"VMM {size // MiB}MiB #{i}: total {total:.2f} ms (create {c:.2f}, reserve+map {m:.2f}, access {a:.2f})", end="", flush=True)
        t = time.perf_counter(); ctypes.memset(p, 0xA5, size); w = ms(t)
        t = time.perf_counter(); got = libc.pread(fd, p, size, 0); r = ms(t)
        copy_ms(p, size); cp = min(copy_ms(p, size) for _ in range(3))
        print(f"; cpu write {w:.2f} ms, pread {got} B {r:.2f} ms ({size / r / 1e6:.1f} GB/s), copy {cp:.3f} ms ({size / cp / 1e6:.1f} GB/s)", flush=True)

wall, each = on_threads(ctx, lambda: vmm_host(4 * MiB))
print(f"VMM16 16 threads x 4MiB: wall {wall:.2f} ms (each {min(each):.2f}-{max(each):.2f})", flush=True)
