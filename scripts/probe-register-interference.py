#!/usr/bin/env python3
"""Probe (GPU machine): do host registrations stall copies running on other threads, and does
registering in smaller pieces let the copies through?

T copy threads each loop: cuMemcpyHtoDAsync of a 4 MiB pinned buffer on their own stream, then
cuStreamSynchronize. Meanwhile one thread maps FILE and registers it read-only in pieces of P bytes
(then unregisters). Prints the copy throughput before and during the registration, per P.

    python3 scripts/probe-register-interference.py FILE [THREADS]
"""
import ctypes, ctypes.util, os, sys, threading, time

path = sys.argv[1]
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 16
size = os.path.getsize(path)
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
cu = ctypes.CDLL("libcuda.so.1")
def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} failed: CUresult {rc}")
check(cu.cuInit(0), "cuInit")
dev = ctypes.c_int(); check(cu.cuDeviceGet(ctypes.byref(dev), 0), "dev")
ctx = ctypes.c_void_p(); check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
check(cu.cuCtxSetCurrent(ctx), "set")
cu.cuMemHostRegister_v2.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
cu.cuMemHostUnregister.argtypes = [ctypes.c_void_p]
cu.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
cu.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
cu.cuMemAllocHost_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
CHUNK = 4 << 20
fd = os.open(path, os.O_RDONLY)
with open(path, "rb") as f:
    while f.read(64 << 20):
        pass

stop = threading.Event()
moved = [0] * threads
def copier(i):
    check(cu.cuCtxSetCurrent(ctx), "set")
    host = ctypes.c_void_p(); check(cu.cuMemAllocHost_v2(ctypes.byref(host), CHUNK), "host alloc")
    d = ctypes.c_uint64(); check(cu.cuMemAlloc_v2(ctypes.byref(d), CHUNK), "dev alloc")
    s = ctypes.c_void_p(); check(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
    while not stop.is_set():
        check(cu.cuMemcpyHtoDAsync_v2(d.value, host.value, CHUNK, s), "copy")
        check(cu.cuStreamSynchronize(s), "sync")
        moved[i] += CHUNK

ts = [threading.Thread(target=copier, args=(i,)) for i in range(threads)]
for t in ts: t.start()
time.sleep(0.5)
def rate(seconds):
    b0 = sum(moved); t0 = time.perf_counter()
    time.sleep(seconds)
    return (sum(moved) - b0) / (time.perf_counter() - t0) / 1e9
print(f"PROBE copies alone: {rate(0.3):.1f} GB/s ({threads} threads, 4 MiB pinned copies)", flush=True)
for piece in (1 << 30, 64 << 20, 4 << 20, 1 << 20):
    addr = libc.mmap(None, size, 1, 1, fd, 0)
    b0 = sum(moved); t0 = time.perf_counter()
    for off in range(0, size, piece):
        check(cu.cuMemHostRegister_v2(addr + off, min(piece, size - off), 8), "register")
    t1 = time.perf_counter(); b1 = sum(moved)
    for off in range(0, size, piece):
        check(cu.cuMemHostUnregister(addr + off), "unregister")
    t2 = time.perf_counter(); b2 = sum(moved)
    libc.munmap(addr, size)
    print(f"PROBE piece={piece} register_s={t1 - t0:.3f} copies_during_register={(b1 - b0) / (t1 - t0) / 1e9:.1f} GB/s "
          f"unregister_s={t2 - t1:.3f} copies_during_unregister={(b2 - b1) / max(t2 - t1, 1e-9) / 1e9:.1f} GB/s "
          f"after={rate(0.2):.1f} GB/s", flush=True)
stop.set()
for t in ts: t.join()
