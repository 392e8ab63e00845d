#!/usr/bin/env python3
"""Probe (GPU machine, root): why cold reads through the page cache trail `dd iflag=direct`
(2026-11-30: dd 2.1 GB/s, both libraries 1.3-1.7 in the same passes). No GPU
involved: 16 threads read the file in 4 MiB tasks into host memory after the caches are dropped,
in several ways, each timed once per pass:

    buffered     pread, as the POSIX route does
    willneed     posix_fadvise(WILLNEED) over the task first, then pread
    sequential   the descriptor advised POSIX_FADV_SEQUENTIAL (double readahead window)
    direct       O_DIRECT preads of 4 MiB into aligned buffers (the page cache stays cold)
    willneed-all one posix_fadvise(WILLNEED) over the whole file first, then pread
    ahead        each thread advises WILLNEED 16 tasks ahead of the one it reads
    nowait       preadv2(RWF_NOWAIT) of the first 2 MiB; when short, WILLNEED over the rest of
                 the task, then pread (what the POSIX route could do without slowing warm reads)
    one-thread   one thread, 64 MiB preads in file order (the kernel's sequential readahead)
    one-thread-4m  one thread, 4 MiB preads in file order
    limit2, limit4 16 threads, at most 2 or 4 of them in a pread at once (fewer requests in flight)
    dd-buffered  dd bs=4M (one thread, through the page cache)
    dd-direct    dd bs=4M iflag=direct

    python3 tools/probes/probe-cold.py FILE [PASSES]      # PROBE_COLD_MODES="a b ..." picks modes
"""
import ctypes, mmap, os, subprocess, sys, threading, time

path = sys.argv[1]
passes = int(sys.argv[2]) if len(sys.argv) > 2 else 2
size = os.path.getsize(path)
TASK, THREADS = 4 << 20, 16
POSIX_FADV_SEQUENTIAL, POSIX_FADV_WILLNEED = 2, 3


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def threaded(mode):
    flags = os.O_RDONLY | (os.O_DIRECT if mode == "direct" else 0)
    fd = os.open(path, flags)
    if mode == "sequential":
        os.posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL)
    if mode == "willneed-all":
        os.posix_fadvise(fd, 0, size, POSIX_FADV_WILLNEED)
    if mode.startswith("one-thread"):
        step = 4 << 20 if mode == "one-thread-4m" else 64 << 20
        buf = mmap.mmap(-1, step)
        t0 = time.perf_counter()
        for off in range(0, size, step):
            os.preadv(fd, [buf], off)
        secs = time.perf_counter() - t0
        os.close(fd)
        return size / secs / 1e9
    tasks = iter(range(0, size, TASK))
    lock = threading.Lock()
    in_pread = threading.Semaphore(int(mode[5:]) if mode.startswith("limit") else THREADS)

    def body():
        buf = mmap.mmap(-1, TASK)  # page-aligned, as O_DIRECT needs
        while True:
            with lock:
                off = next(tasks, None)
            if off is None:
                return
            if mode == "willneed":
                os.posix_fadvise(fd, off, TASK, POSIX_FADV_WILLNEED)
            if mode == "ahead" and off + THREADS * TASK < size:
                os.posix_fadvise(fd, off + THREADS * TASK, TASK, POSIX_FADV_WILLNEED)
            if mode == "nowait":
                try:
                    first = os.preadv(fd, [memoryview(buf)[:TASK // 2]], off, os.RWF_NOWAIT)
                except BlockingIOError:
                    first = 0
                if first < TASK // 2:
                    os.posix_fadvise(fd, off + first, TASK - first, POSIX_FADV_WILLNEED)
            with in_pread:
                got = os.preadv(fd, [buf], off)
            assert got == min(TASK, size - off), (got, off)

    threads = [threading.Thread(target=body) for _ in range(THREADS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    os.close(fd)
    return size / secs / 1e9


def dd(direct):
    cmd = ["dd", f"if={path}", "of=/dev/null", "bs=4M"] + (["iflag=direct"] if direct else [])
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    return size / (time.perf_counter() - t0) / 1e9


dev = subprocess.run(["df", "--output=source,fstype", path], capture_output=True, text=True).stdout.split("\n")[1]
print("file system:", dev, flush=True)
name = os.path.basename(os.path.realpath(dev.split()[0])) if dev.startswith("/dev/") else ""
for q in ("read_ahead_kb", "max_sectors_kb", "nr_requests", "rotational", "scheduler"):
    p = f"/sys/class/block/{name}/queue/{q}"
    if not os.path.exists(p) and name:
        parent = os.path.basename(os.path.dirname(os.path.realpath(f"/sys/class/block/{name}")))
        p = f"/sys/class/block/{parent}/queue/{q}"
    print(f"  {q}: {open(p).read().strip() if os.path.exists(p) else '?'}")
results = {}
MODES = tuple(os.environ.get("PROBE_COLD_MODES", "").split()) or (
    "dd-direct", "buffered", "willneed", "sequential", "direct", "dd-buffered", "willneed-all", "ahead", "nowait",
    "one-thread", "one-thread-4m", "limit2", "limit4")
for rep in range(passes):
    row = []
    for i in range(len(MODES)):  # the order rotates from pass to pass
        mode = MODES[(i + rep) % len(MODES)]
        drop_caches()
        gbps = dd(mode == "dd-direct") if mode.startswith("dd") else threaded(mode)
        row.append(f"{mode} {gbps:.2f}")
        results.setdefault(mode, []).append(gbps)
    print(f"COLD pass {rep + 1}: " + ", ".join(row) + " GB/s", flush=True)
import statistics
dd_median = statistics.median(results["dd-direct"])
for mode, vals in sorted(results.items(), key=lambda kv: -statistics.median(kv[1])):
    print(f"COLD median {mode}: {statistics.median(vals):.2f} GB/s ({statistics.median(vals) / dd_median:.2f} of dd-direct)")
