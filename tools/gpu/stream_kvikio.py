"""KvikIO's stream-ordered read beside gdsroute's (tests/gpu_stream.rs, figures_blocked_time_and_rates_printed).

Runs on the GPU machine with KvikIO's wheels installed (tools/gpu/bench-kvikio.py says how):
    python3 tools/gpu/stream_kvikio.py FILE
FILE: 1 GiB or more, warm. Prints, as FIGURE lines of the same shape as the Rust test's: the time
the calling thread is blocked by a 1 GiB raw_read_async queued behind 0.5 s of GPU work (a spin
kernel, median and max of 10), and the 1 GiB read_async rate from the call to the stream's
synchronisation beside pread's (median of 5). The route follows KVIKIO_COMPAT_MODE and the udev
record, as for KvikIO's other figures.
"""
import os
import statistics
import sys
import time

import cupy
import kvikio

SPIN = cupy.RawKernel(
    r"""
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
""",
    "spin",
)


def main(path):
    size = 1 << 30
    buf = cupy.empty(size, dtype=cupy.uint8)
    f = kvikio.CuFile(path, "r")
    f.pread(buf).get()  # warm: the pool's bounce buffers made
    stream = cupy.cuda.Stream(non_blocking=True)
    mode = os.environ.get("KVIKIO_COMPAT_MODE", "auto")
    blocked = []
    for _ in range(10):
        with stream:
            SPIN((1,), (1,), (cupy.uint64(500_000_000),))
        t = time.perf_counter()
        future = f.raw_read_async(buf, stream.ptr)
        blocked.append((time.perf_counter() - t) * 1e3)
        stream.synchronize()
        assert future.check_bytes_done() == size
    print(f"FIGURE KvikIO {kvikio.__version__} compat_mode={mode}: caller blocked by a 1 GiB raw_read_async behind 0.5 s of GPU work: "
          f"median {statistics.median(blocked):.3f} ms, max {max(blocked):.3f} ms", flush=True)
    async_rate, sync_rate = [], []
    for _ in range(5):
        t = time.perf_counter()
        future = f.raw_read_async(buf, stream.ptr)
        stream.synchronize()
        async_rate.append(size / (time.perf_counter() - t) / 1e9)
        assert future.check_bytes_done() == size
        t = time.perf_counter()
        f.pread(buf).get()
        sync_rate.append(size / (time.perf_counter() - t) / 1e9)
    print(f"FIGURE KvikIO 1 GiB GB/s, median of 5: raw_read_async {statistics.median(async_rate):.2f} vs pread {statistics.median(sync_rate):.2f}", flush=True)
    f.close()


if __name__ == "__main__":
    main(sys.argv[1])
