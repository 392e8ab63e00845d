#!/usr/bin/env python3
"""Probe (GPU machine): how fast a kernel copies between mapped, pinned host memory and device
memory, by grid size (blocks of 512 threads) and 16-byte loads in flight per thread, beside the
copy engine (cuMemcpyHtoDAsync / DtoHAsync) in the same process. The relay kernels of
stream-ordered calls on blocking streams copy this way (src/sys/cuda/relay/relay.cu: 8 blocks,
4 loads in flight, ld.global.cv); their reads reached 20.6 GB/s against pread's 52 on the H200
(2026-12-07). The kernels are tools/probes/zero_copy.cu, compiled here with clang as
tools/gpu/relay-ptx.sh compiles relay.cu (not yet run):

    python3 tools/probes/probe-zero-copy.py .device/zero_copy.ptx      # .device carried
"""
import ctypes, sys, time
from cuda_ctypes import check, cu, primary_context

MiB = 1 << 20
N = 256 * MiB
ctx = primary_context()
ptx = open(sys.argv[1], "rb").read() + b"\0"
mod = ctypes.c_void_p()
check(cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(ptx)), "cuModuleLoadData")
host = ctypes.c_void_p()
check(cu.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(N), ctypes.c_uint(1 | 2)), "cuMemHostAlloc")  # PORTABLE|DEVICEMAP
ctypes.memset(host, 7, N)
host_dev = ctypes.c_uint64()
check(cu.cuMemHostGetDevicePointer_v2(ctypes.byref(host_dev), host, ctypes.c_uint(0)), "cuMemHostGetDevicePointer")
dev = ctypes.c_uint64()
check(cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(N)), "cuMemAlloc")
stream = ctypes.c_void_p()
check(cu.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")
sms = ctypes.c_int()
check(cu.cuDeviceGetAttribute(ctypes.byref(sms), 16, 0), "SM count")  # MULTIPROCESSOR_COUNT


def best_gbs(run, reps=5):
    run(); check(cu.cuStreamSynchronize(stream), "sync")
    best = 1e9
    for _ in range(reps):
        t = time.perf_counter(); run(); check(cu.cuStreamSynchronize(stream), "sync")
        best = min(best, time.perf_counter() - t)
    return N / best / 1e9


cu.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
cu.cuMemcpyDtoHAsync_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
print(f"ZC copy engine: host->device {best_gbs(lambda: check(cu.cuMemcpyHtoDAsync_v2(dev.value, host, N, stream), 'HtoD')):.1f} GB/s, "
      f"device->host {best_gbs(lambda: check(cu.cuMemcpyDtoHAsync_v2(host, dev.value, N, stream), 'DtoH')):.1f} GB/s; {sms.value} SMs", flush=True)


def launcher(name, dst, src):
    fn = ctypes.c_void_p()
    check(cu.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), name)
    d, s, n = ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_uint64(N // 16)
    args = (ctypes.c_void_p * 3)(ctypes.addressof(d), ctypes.addressof(s), ctypes.addressof(n))

    def launch(blocks):
        check(cu.cuLaunchKernel(fn, blocks, 1, 1, 512, 1, 1, 0, stream, args, None), name)
    return launch


for name in ("copy_cv4", "copy_cv8", "copy_cv16", "copy_plain8"):
    into = launcher(name, dev.value, host_dev.value)
    out = launcher(name, host_dev.value, dev.value)
    row = []
    for blocks in (8, 16, 32, 64, sms.value, 2 * sms.value):
        row.append(f"{blocks}: {best_gbs(lambda: into(blocks)):.1f}/{best_gbs(lambda: out(blocks)):.1f}")
    print(f"ZC {name} GB/s host->device/device->host by blocks: " + ", ".join(row), flush=True)
