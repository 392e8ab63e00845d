#!/usr/bin/env python3
"""Probe (GPU machine): do host registrations stall copies running on other threads, and does
registering in smaller pieces let the copies through?

T copy threads each loop: cuMemcpyHtoDAsync of a 4 MiB pinned buffer on their own stream, then
cuStreamSynchronize. Meanwhile one thread maps FILE and registers it read-only in pieces of P bytes
(then unregisters). Prints the copy throughput before and during the registration, per P.

    python3 tools/probes/probe-register-interference.py FILE [THREADS]
"""
import ctypes, os, sys, threading, time
from cuda_ctypes import CU_MEMHOSTREGISTER_READ_ONLY, MAP_SHARED, PROT_READ, check, cu, libc, primary_context, warm

path = sys.argv[1]
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 16
size = os.path.getsize(path)
ctx = primary_context()
CHUNK = 4 << 20
fd = os.open(path, os.O_RDONLY)
warm(path)

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
    addr = libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
    b0 = sum(moved); t0 = time.perf_counter()
    for off in range(0, size, piece):
        check(cu.cuMemHostRegister_v2(addr + off, min(piece, size - off), CU_MEMHOSTREGISTER_READ_ONLY), "register")
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
