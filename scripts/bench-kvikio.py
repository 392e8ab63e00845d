#!/usr/bin/env python3
"""KvikIO counterpart of gdsroute-bench: the same measurements, the same `RESULT impl=kvikio ...`
lines (see docs/performance.md for the method).

Reads go through kvikio.CuFile(path, "r").pread(buf, size, offset).get() into a cupy array
(mem=device) or a numpy array (mem=host). Settings through kvikio.defaults.set (num_threads,
task_size, compat_mode, set before the handle is opened: a KvikIO handle takes the default compat
mode at open); with --default-settings nothing is set (KVIKIO_* variables or KvikIO's defaults).
"""

import argparse
import os
import resource
import statistics
import sys
import threading
import time

import numpy as np

MASK = (1 << 64) - 1


def splitmix64(state):
    """Returns (new_state, value); the same generator as gdsroute-bench."""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def random_offsets(seed, n, size, file_size):
    blocks = max(file_size // size, 1)
    out = []
    state = seed
    for _ in range(n):
        state, v = splitmix64(state)
        out.append((v % blocks) * size)
    return out


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def drop_caches():
    """sync; echo 3 > /proc/sys/vm/drop_caches. Returns None, or the reason it cannot."""
    if os.geteuid() != 0:
        return "not root"
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    except OSError as e:
        return f"/proc/sys/vm/drop_caches: {e}"
    return None


def kind_size(kind):
    return {"big": None, "rand4k": 4 << 10, "rand64k": 64 << 10}[kind]


def csv(conv):
    return lambda s: [conv(x) for x in s.split(",") if x]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", required=True)
    p.add_argument("--threads", type=csv(int), default=[1, 4, 8, 16])
    p.add_argument("--task-sizes", type=csv(int), default=[4 << 20])
    p.add_argument("--modes", type=csv(str), default=["on", "auto"])
    p.add_argument("--mem", type=csv(str), default=["device", "host"])
    p.add_argument("--kinds", type=csv(str), default=["big"])
    p.add_argument("--cache", type=csv(str), default=["warm"])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rand-reads", type=int, default=8192)
    p.add_argument("--callers", type=int, default=4)
    p.add_argument("--first-only", action="store_true")
    p.add_argument("--default-settings", action="store_true")
    p.add_argument("--prime-gpu", action="store_true",
                   help="copy 256 MiB host->device before the timed reads, without KvikIO")
    p.add_argument("--no-table", action="store_true")
    a = p.parse_args()
    for v in a.modes:
        if v not in ("on", "auto", "off"):
            p.error(f"mode {v!r}: on, auto or off")
    for v in a.mem:
        if v not in ("device", "host"):
            p.error(f"mem {v!r}: device or host")
    for v in a.kinds:
        if v not in ("big", "rand4k", "rand64k"):
            p.error(f"kind {v!r}: big, rand4k or rand64k")
    for v in a.cache:
        if v not in ("warm", "cold"):
            p.error(f"cache {v!r}: warm or cold")
    a.reps = max(a.reps, 1)
    a.rand_reads = max(a.rand_reads, 1)
    a.callers = max(a.callers, 1)
    if a.first_only:
        lists = [("--mem", a.mem), ("--kinds", a.kinds), ("--cache", a.cache)]
        if not a.default_settings:
            lists += [("--threads", a.threads), ("--task-sizes", a.task_sizes), ("--modes", a.modes)]
        for name, values in lists:
            if len(values) > 1:
                p.error(f"--first-only takes one value for {name}")
        a.reps = 1
    return a


class Bench:
    def __init__(self, args, kvikio, cupy):
        self.args = args
        self.kvikio = kvikio
        self.cupy = cupy
        self.file_size = os.path.getsize(args.file)
        self._reference = None
        self.results = []

    def reference(self):
        """The file's bytes, read with a plain read on first use (never inside a timed region)."""
        if self._reference is None:
            with open(self.args.file, "rb") as f:
                self._reference = np.frombuffer(f.read(), dtype=np.uint8)
        return self._reference

    def alloc(self, mem, n):
        if mem == "device":
            buf = self.cupy.empty(max(n, 1), dtype=np.uint8)
        else:
            buf = np.empty(max(n, 1), dtype=np.uint8)
        return buf

    def poison(self, buf):
        buf.fill(0xA5)
        if self.cupy is not None and isinstance(buf, self.cupy.ndarray):
            self.cupy.cuda.runtime.deviceSynchronize()

    def to_host(self, buf):
        if self.cupy is not None and isinstance(buf, self.cupy.ndarray):
            return buf.get()
        return buf

    def run_pass(self, handle, buf, kind, offsets, views):
        """One workload pass; returns bytes read. `views` are the per-read slices (made outside
        the timed region)."""
        if kind == "big":
            got = handle.pread(buf, self.file_size, 0).get()
            if got != self.file_size:
                raise RuntimeError(f"short read: {got} of {self.file_size} bytes")
            return got
        size = kind_size(kind)
        callers = min(self.args.callers, len(offsets))
        per = -(-len(offsets) // callers)
        errors = []
        totals = [0] * callers

        def worker(c):
            try:
                total = 0
                for i in range(c * per, min((c + 1) * per, len(offsets))):
                    got = handle.pread(views[i], size, offsets[i]).get()
                    if got != size:
                        raise RuntimeError(f"short read at {offsets[i]}: {got} of {size}")
                    total += got
                totals[c] = total
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(c,)) for c in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return sum(totals)

    def verify(self, buf, kind, offsets):
        ref = self.reference()
        host = self.to_host(buf)
        if kind == "big":
            if not np.array_equal(host[: self.file_size], ref):
                at = int(np.argmax(host[: self.file_size] != ref))
                raise RuntimeError(f"verification failed at file offset {at}")
            return
        size = kind_size(kind)
        for slot, off in enumerate(offsets):
            if not np.array_equal(host[slot * size : (slot + 1) * size], ref[off : off + size]):
                raise RuntimeError(f"verification failed: read {slot} at file offset {off}")

    def measure(self, mem, mode, threads, task, cache, kind):
        kvikio = self.kvikio
        a = self.args
        if cache == "cold":
            why = drop_caches()
            if why is not None:
                print(f"NOTE cache=cold skipped (mem={mem} kind={kind}): cannot drop caches: {why}")
                return
        if not a.default_settings:
            compat = {"on": kvikio.CompatMode.ON, "off": kvikio.CompatMode.OFF, "auto": kvikio.CompatMode.AUTO}[mode]
            kvikio.defaults.set({"num_threads": threads, "task_size": task, "compat_mode": compat})
        threads = kvikio.defaults.get("num_threads")
        task = kvikio.defaults.get("task_size")
        mode = kvikio.defaults.get("compat_mode")
        mode = getattr(mode, "name", str(mode)).lower()  # an IntEnum's str() is its number
        handle = kvikio.CuFile(a.file, "r")
        size = kind_size(kind)
        reads = 1 if kind == "big" else a.rand_reads
        buf = self.alloc(mem, self.file_size if kind == "big" else reads * size)
        views = [] if kind == "big" else [buf[i * size : (i + 1) * size] for i in range(reads)]
        if a.prime_gpu and mem == "device":
            n = min(buf.size, 256 << 20)
            buf[:n].set(np.full(n, 0x3C, dtype=np.uint8))
            self.cupy.cuda.runtime.deviceSynchronize()

        if not a.first_only:  # steady state: one untimed pass first
            offsets = [] if kind == "big" else random_offsets(0, reads, size, self.file_size)
            self.run_pass(handle, buf, kind, offsets, views)

        gbps, rps, cpu = [], [], []
        for rep in range(a.reps):
            offsets = [] if kind == "big" else random_offsets(rep + 1, reads, size, self.file_size)
            self.poison(buf)
            if cache == "cold":
                why = drop_caches()
                if why is not None:
                    raise RuntimeError(f"cannot drop caches: {why}")
            cpu0 = cpu_seconds()
            t0 = time.perf_counter()
            nbytes = self.run_pass(handle, buf, kind, offsets, views)
            secs = time.perf_counter() - t0
            cpu_s = cpu_seconds() - cpu0
            self.verify(buf, kind, offsets)
            gbps.append(nbytes / secs / 1e9)
            rps.append(reads / secs)
            cpu.append(cpu_s / (nbytes / 1e9))
        handle.close()
        g, r, c = statistics.median(gbps), statistics.median(rps), statistics.median(cpu)
        rps_field = "-" if kind == "big" else f"{r:.0f}"
        callers = 1 if kind == "big" else min(a.callers, reads)
        line = (
            f"RESULT impl=kvikio mem={mem} mode={mode} threads={threads} task={task} cache={cache} "
            f"kind={kind} phase={'first' if a.first_only else 'steady'} "
            f"settings={'default' if a.default_settings else 'set'} callers={callers} "
            f"gbps={g:.3f} rps={rps_field} cpu_s_per_gb={c:.4f} reps={len(gbps)} "
            f"gbps_min={min(gbps):.3f} gbps_max={max(gbps):.3f} reads={reads} route=na"
            + (" primed=1" if a.prime_gpu else "")
            + (f" tag={'_'.join(os.environ['BENCH_TAG'].split())}" if os.environ.get("BENCH_TAG", "").strip() else "")
        )
        print(line, flush=True)
        self.results.append(line)

    def table(self):
        if not self.results:
            return
        cols = ["mem", "mode", "threads", "task", "cache", "kind", "phase", "gbps", "rps", "cpu_s_per_gb"]
        rows = [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in self.results]
        print()
        print(" ".join(f"{c:>12}" for c in cols))
        for r in rows:
            print(" ".join(f"{r.get(c, ''):>12}" for c in cols))


def main():
    a = parse_args()
    try:  # libkvikio needs librapids_logger loaded first; kvikio does it only when
        import rapids_logger  # cuda.pathfinder is importable, so do it here in any case

        rapids_logger.load_library()
    except ImportError:
        pass
    import kvikio
    import kvikio.defaults

    mems = list(a.mem)
    cupy = None
    if "device" in mems:
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
            cupy.empty(1, dtype=np.uint8)  # create the context outside any timed region
        except Exception as e:  # noqa: BLE001 - no GPU: host only, as gdsroute-bench does
            cupy = None
            print(f"NOTE no GPU: device memory skipped, host memory only ({e})")
            mems = [m for m in mems if m == "host"] or ["host"]
    bench = Bench(a, kvikio, cupy)
    if bench.file_size == 0:
        sys.exit(f"bench-kvikio: {a.file} is empty")
    print(
        f"# bench-kvikio kvikio={kvikio.__version__} file={a.file} bytes={bench.file_size} "
        f"reps={a.reps} first_only={str(a.first_only).lower()} default_settings={str(a.default_settings).lower()}"
    )
    for mem in mems:
        for kind in a.kinds:
            for cache in a.cache:
                if a.default_settings:
                    bench.measure(mem, None, None, None, cache, kind)
                    continue
                for mode in a.modes:
                    for threads in a.threads:
                        for task in a.task_sizes:
                            bench.measure(mem, mode, threads, task, cache, kind)
    if not a.no_table and not a.first_only:
        bench.table()


if __name__ == "__main__":
    main()
