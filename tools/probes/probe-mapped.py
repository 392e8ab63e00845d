#!/usr/bin/env python3
"""Probe (GPU machine): what it costs to let the copy engine read a file's page-cache pages directly.

mmap the file read-only, pin the mapping with cuMemHostRegister(READ_ONLY), copy to device memory,
unpin, unmap; each step timed, for several chunk sizes, one thread and many; then the steady state
of a mapping registered once and copied many times; then whether a write() to the file after
registration is seen by the next copy (page-cache pages are updated in place).

    python3 tools/probes/probe-mapped.py FILE [THREADS]

Prints `PROBE key=value ...` lines. Uses only ctypes against libcuda and libc.
"""
import ctypes, os, sys, threading, time
from cuda_ctypes import CU_MEMHOSTREGISTER_READ_ONLY as READ_ONLY, MAP_POPULATE, MAP_SHARED, PROT_READ
from cuda_ctypes import check, cu, libc, primary_context, warm

path = sys.argv[1]
threads_max = int(sys.argv[2]) if len(sys.argv) > 2 else 16
size = os.path.getsize(path)
ctx = primary_context()

dptr = ctypes.c_uint64()
check(cu.cuMemAlloc_v2(ctypes.byref(dptr), size), "cuMemAlloc")
fd = os.open(path, os.O_RDONLY)

def out(**kv):
    print("PROBE " + " ".join(f"{k}={v}" for k, v in kv.items()), flush=True)

def one_chunk(offset, length, populate, times):
    t0 = time.perf_counter()
    addr = libc.mmap(None, length, PROT_READ, MAP_SHARED | (MAP_POPULATE if populate else 0), fd, offset)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise SystemExit(f"mmap failed errno {ctypes.get_errno()}")
    t1 = time.perf_counter()
    check(cu.cuCtxSetCurrent(ctx), "set current")
    check(cu.cuMemHostRegister_v2(addr, length, READ_ONLY), "register")
    t2 = time.perf_counter()
    check(cu.cuMemcpyHtoD_v2(dptr.value + offset, addr, length), "copy")
    t3 = time.perf_counter()
    check(cu.cuMemHostUnregister(addr), "unregister")
    t4 = time.perf_counter()
    libc.munmap(addr, length)
    t5 = time.perf_counter()
    for k, v in zip(("mmap", "register", "copy", "unregister", "munmap"), (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
        times[k] = times.get(k, 0.0) + v

warm(path)

for populate in (False, True):
    for chunk in (4 << 20, 64 << 20, 1 << 30):
        for nthreads in (1, 4, threads_max):
            if chunk * nthreads > size and nthreads > 1:
                continue
            offsets = list(range(0, size, chunk))
            times = {}
            lock = threading.Lock()
            def worker(mine):
                local = {}
                for off in mine:
                    one_chunk(off, min(chunk, size - off), populate, local)
                with lock:
                    for k, v in local.items():
                        times[k] = times.get(k, 0.0) + v
            t0 = time.perf_counter()
            ts = [threading.Thread(target=worker, args=(offsets[i::nthreads],)) for i in range(nthreads)]
            for t in ts: t.start()
            for t in ts: t.join()
            wall = time.perf_counter() - t0
            out(test="oneshot", populate=int(populate), chunk=chunk, threads=nthreads, wall_s=f"{wall:.4f}",
                gbps=f"{size / wall / 1e9:.2f}", **{f"{k}_s_sum": f"{v:.4f}" for k, v in times.items()})

# Registered once, copied many times.
t0 = time.perf_counter()
addr = libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
t1 = time.perf_counter()
check(cu.cuMemHostRegister_v2(addr, size, READ_ONLY), "register whole")
t2 = time.perf_counter()
out(test="register_whole", mmap_s=f"{t1 - t0:.4f}", register_s=f"{t2 - t1:.4f}")
streams = []
for i in range(4):
    s = ctypes.c_void_p()
    check(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
    streams.append(s)
for piece in (1 << 30, 64 << 20, 8 << 20):
    rates = []
    for rep in range(5):
        t0 = time.perf_counter()
        for i, off in enumerate(range(0, size, piece)):
            check(cu.cuMemcpyHtoDAsync_v2(dptr.value + off, addr + off, min(piece, size - off), streams[i % 4]), "async copy")
        for s in streams:
            check(cu.cuStreamSynchronize(s), "sync")
        rates.append(size / (time.perf_counter() - t0) / 1e9)
    out(test="registered_steady", piece=piece, gbps_reps=",".join(f"{r:.1f}" for r in rates))

# Coherence: a write() after registration is seen by the next copy.
probe_off = 12345 * 4096 + 17
new = os.urandom(4096)
old = os.pread(fd, 4096, probe_off)
wfd = os.open(path, os.O_WRONLY)
os.pwrite(wfd, new, probe_off)
check(cu.cuMemcpyHtoD_v2(dptr.value, addr, size), "copy after write")
back = ctypes.create_string_buffer(4096)
check(cu.cuMemcpyDtoH_v2(back, dptr.value + probe_off, 4096), "copy back")
out(test="coherence_after_pwrite", seen=int(back.raw == new))
os.pwrite(wfd, old, probe_off)
os.close(wfd)
t0 = time.perf_counter()
check(cu.cuMemHostUnregister(addr), "unregister whole")
t1 = time.perf_counter()
libc.munmap(addr, size)
out(test="unregister_whole", unregister_s=f"{t1 - t0:.4f}", munmap_s=f"{time.perf_counter() - t1:.4f}")
