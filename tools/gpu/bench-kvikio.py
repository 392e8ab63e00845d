#!/usr/bin/env python3
"""KvikIO counterpart of gdsroute-bench: the same measurements, the same `RESULT impl=kvikio ...`
lines (see docs/performance.md for the method).

Reads go through kvikio.CuFile(path, "r").pread(buf, size, offset).get() into a cupy array
(mem=device) or a numpy array (mem=host). Settings through kvikio.defaults.set (num_threads,
task_size, compat_mode, set before the handle is opened: a KvikIO handle takes the default compat
mode at open); with --default-settings nothing is set (KVIKIO_* variables or KvikIO's defaults).

--write measures writes instead: kvikio.CuFile(path, "w" or "r+").pwrite(buf, size).get() from a
cupy (or numpy) array holding random bytes, the same sequence as gdsroute-bench --write. Direct-I/O
writes are KvikIO's KVIKIO_AUTO_DIRECT_IO_WRITE, left to the environment (the calling script sets
it for both libraries); the lines report the value KvikIO runs with. --devices reads into several
GPUs at once: one Python thread per GPU, each under cupy.cuda.Device(i), one shared handle.
"""

import argparse
import ctypes
import os
import resource
import statistics
import struct
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


def remove_if_there(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def fs_label(path):
    """shm for a file on tmpfs (/dev/shm), else disk (as gdsroute-bench: statfs's f_type)."""
    directory = os.path.dirname(os.path.abspath(path))
    buf = ctypes.create_string_buffer(512)  # struct statfs is 120 bytes on x86_64 Linux
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.statfs(directory.encode(), buf) != 0:
        return "disk"
    return "shm" if struct.unpack_from("l", buf.raw)[0] == 0x01021994 else "disk"


def labels():
    """' tag=...': the calling script's BENCH_TAG (a setup both libraries share)."""
    tag = "_".join(os.environ.get("BENCH_TAG", "").split())
    return f" tag={tag}" if tag else ""


def gbps_reps(gbps):
    return " gbps_reps=" + ",".join(f"{g:.2f}" for g in gbps)


def kind_size(kind):
    return {"big": None, "rand4k": 4 << 10, "rand64k": 64 << 10}[kind]


def apply_settings(kvikio, a, mode, threads, task):
    """Sets compat mode, threads and task size in KvikIO (unless --default-settings) and returns
    the values in effect, the mode as a lower-case name."""
    if not a.default_settings:
        compat = {"on": kvikio.CompatMode.ON, "off": kvikio.CompatMode.OFF, "auto": kvikio.CompatMode.AUTO}[mode]
        kvikio.defaults.set({"num_threads": threads, "task_size": task, "compat_mode": compat})
    mode = kvikio.defaults.get("compat_mode")
    mode = getattr(mode, "name", str(mode)).lower()  # an IntEnum's str() is its number
    return mode, kvikio.defaults.get("num_threads"), kvikio.defaults.get("task_size")


def csv(conv):
    return lambda s: [conv(x) for x in s.split(",") if x]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", required=True)
    p.add_argument("--threads", type=csv(int), default=[1, 4, 8, 16])
    p.add_argument("--task-sizes", type=csv(int), default=[4 << 20])
    p.add_argument("--modes", type=csv(str), default=["on", "auto"])
    p.add_argument("--mem", type=csv(str), default=["device", "host"])
    p.add_argument("--kinds", type=csv(str), default=None)
    p.add_argument("--cache", type=csv(str), default=None)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rand-reads", type=int, default=8192)
    p.add_argument("--callers", type=int, default=4)
    p.add_argument("--first-only", action="store_true")
    p.add_argument("--default-settings", action="store_true")
    p.add_argument("--prime-gpu", action="store_true",
                   help="copy 256 MiB host->device before the timed reads, without KvikIO")
    p.add_argument("--no-table", action="store_true")
    p.add_argument("--write", action="store_true",
                   help="measure writes of --size bytes from device (or host) memory instead of reads")
    p.add_argument("--size", type=int, default=1 << 30)
    p.add_argument("--open", type=csv(str), default=["w", "r+"],
                   help="w: a new file per repetition; r+: rewrite the file written before")
    p.add_argument("--sync", action="store_true", help="os.fsync after each timed write, timed apart")
    p.add_argument("--fs", default=None, help="file-system label (default: shm on tmpfs, else disk)")
    p.add_argument("--overwrite", action="store_true", help="allow --file to exist (--write)")
    p.add_argument("--devices", type=csv(int), default=None,
                   help="e.g. 0,1: big warm reads into each listed GPU at once, then alone")
    a = p.parse_args()
    if a.write:
        for name, given in (("--kinds", a.kinds), ("--cache", a.cache), ("--first-only", a.first_only),
                            ("--prime-gpu", a.prime_gpu), ("--devices", a.devices)):
            if given:
                p.error(f"{name} is for reads; --write measures big writes of --size bytes")
        if a.size <= 0:
            p.error("--size: at least 1 byte")
        for v in a.open:
            if v not in ("w", "r+"):
                p.error(f"open {v!r}: w or r+")
    elif a.sync or a.fs or a.overwrite:
        p.error("--sync, --fs and --overwrite go with --write")
    if a.devices is not None:
        if a.first_only or a.prime_gpu or a.kinds or a.cache:
            p.error("--devices measures big warm reads: no --first-only, --prime-gpu, --kinds or --cache")
        if not a.devices or min(a.devices) < 0 or len(set(a.devices)) != len(a.devices):
            p.error(f"--devices {a.devices}: distinct GPU numbers (0, 1, ...)")
    a.kinds = a.kinds or ["big"]
    a.cache = a.cache or ["warm"]
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
        mode, threads, task = apply_settings(kvikio, a, mode, threads, task)
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
        table(self.results)


class Writes:
    """The write measurements (--write), in the order gdsroute-bench --write makes them."""

    def __init__(self, args, kvikio, cupy, mems):
        self.args = args
        self.kvikio = kvikio
        self.cupy = cupy
        self.fs = args.fs or fs_label(args.file)
        # The bytes every timed write writes: random, made on the host once.
        self.data = np.random.default_rng(0x5EED).integers(0, 256, args.size, dtype=np.uint8)
        self.sources = {}
        for mem in mems:
            if mem == "device":
                self.sources[mem] = cupy.empty(args.size, dtype=np.uint8)
            else:
                self.sources[mem] = np.empty(args.size, dtype=np.uint8)
        self.results = []

    def is_device(self, buf):
        return self.cupy is not None and isinstance(buf, self.cupy.ndarray)

    def poison(self, buf):
        buf.fill(0xA5)
        if self.is_device(buf):
            self.cupy.cuda.runtime.deviceSynchronize()

    def upload(self, buf):
        if self.is_device(buf):
            buf.set(self.data)
            self.cupy.cuda.runtime.deviceSynchronize()
        else:
            np.copyto(buf, self.data)

    def verify(self, buf):
        """The file and the source buffer both hold the data: plain pread, 64 MiB at a time,
        outside the timed region."""
        path, size = self.args.file, self.args.size
        have = os.path.getsize(path)
        if have != size:
            raise RuntimeError(f"verification failed: {path} holds {have} bytes, not {size}")
        chunk = 64 << 20
        fd = os.open(path, os.O_RDONLY)
        try:
            for off in range(0, size, chunk):
                n = min(chunk, size - off)
                want = self.data[off : off + n]
                part = buf[off : off + n]
                part = part.get() if self.is_device(part) else part
                if not np.array_equal(part, want):
                    at = off + int(np.argmax(part != want))
                    raise RuntimeError(f"the source buffer does not hold the data at offset {at}")
                got = np.frombuffer(os.pread(fd, n, off), dtype=np.uint8)
                if got.size != n or not np.array_equal(got, want):
                    at = off + (int(np.argmax(got != want[: got.size])) if got.size == n else got.size)
                    raise RuntimeError(f"verification failed: file offset {at} differs from the source buffer")
        finally:
            os.close(fd)

    def measure(self, mem, mode, threads, task, open_mode):
        """Untimed: KvikIO's first write of the configuration from the poisoned source (for r+
        the file the repetitions rewrite), then the data copied into the source; then --reps
        timed pwrite(...).get() calls (w: the file removed and opened anew before each; r+: the
        same file reopened), each optionally followed by a timed os.fsync; then the file
        verified. KvikIO's pinned bounce buffers are counted and freed after the configuration."""
        kvikio, a = self.kvikio, self.args
        path, size = a.file, a.size
        mode, threads, task = apply_settings(kvikio, a, mode, threads, task)
        direct = 1 if kvikio.defaults.get("auto_direct_io_write") else 0
        buf = self.sources[mem]
        self.poison(buf)
        remove_if_there(path)
        if open_mode == "r+":
            open(path, "wb").close()
        f = kvikio.CuFile(path, open_mode)
        first = f.pwrite(buf, size).get()
        f.close()
        if first != size:
            raise RuntimeError(f"first write: {first} of {size} bytes")
        self.upload(buf)
        gbps, cpu, open_s, sync_s = [], [], [], []
        for _ in range(a.reps):
            if open_mode == "w":
                remove_if_there(path)
            t = time.perf_counter()
            f = kvikio.CuFile(path, open_mode)
            open_s.append(time.perf_counter() - t)
            cpu0 = cpu_seconds()
            t0 = time.perf_counter()
            done = f.pwrite(buf, size).get()
            secs = time.perf_counter() - t0
            cpu_s = cpu_seconds() - cpu0
            if done != size:
                raise RuntimeError(f"short write: {done} of {size} bytes")
            if a.sync:
                t1 = time.perf_counter()
                os.fsync(f.fileno())
                sync_s.append(time.perf_counter() - t1)
            f.close()
            gbps.append(size / secs / 1e9)
            cpu.append(cpu_s / (size / 1e9))
        self.verify(buf)
        # KvikIO's bounce-buffer pools keep every pinned buffer they allocated, so what they hold
        # now is the most its tasks used at once in this configuration (first write included).
        pool = kvikio.buffer.bounce_buffer_free()
        g = statistics.median(gbps)
        line = (
            f"RESULT impl=kvikio dir=write mem={mem} fs={self.fs} open={open_mode} direct_write={direct} "
            f"mode={mode} threads={threads} task={task} kind=big phase=steady "
            f"settings={'default' if a.default_settings else 'set'} callers=1 gbps={g:.3f} rps=- "
            f"cpu_s_per_gb={statistics.median(cpu):.4f} reps={len(gbps)} gbps_min={min(gbps):.3f} "
            f"gbps_max={max(gbps):.3f} writes=1 bytes={size} route=na bounce_pool_bytes={pool} "
            f"open_s={statistics.median(open_s):.6f}"
            + (f" sync_s={statistics.median(sync_s):.4f}" if a.sync else "")
            + labels()
            + gbps_reps(gbps)
        )
        print(line, flush=True)
        self.results.append(line)


def run_writes(a, kvikio, cupy, mems):
    if os.path.exists(a.file) and not a.overwrite:
        sys.exit(f"bench-kvikio: {a.file} exists: --write truncates and removes its file (give --overwrite to allow it)")
    try:
        w = Writes(a, kvikio, cupy, mems)
        print(
            f"# bench-kvikio kvikio={kvikio.__version__} write file={a.file} fs={w.fs} bytes={a.size} "
            f"reps={a.reps} default_settings={str(a.default_settings).lower()} "
            f"direct_write={1 if kvikio.defaults.get('auto_direct_io_write') else 0} sync={str(a.sync).lower()}"
        )
        for mem in mems:
            if a.default_settings:
                configs = [(None, None, None)]
            else:
                configs = [(m, t, s) for m in a.modes for t in a.threads for s in a.task_sizes]
            for mode, threads, task in configs:
                for open_mode in a.open:
                    w.measure(mem, mode, threads, task, open_mode)
    finally:
        remove_if_there(a.file)
    if not a.no_table:
        table(w.results)


def run_devices(a, kvikio, cupy):
    """--devices: one shared handle; big warm reads into each listed GPU alone, then into all at
    once (one Python thread per GPU under cupy.cuda.Device(i), released together)."""
    if cupy is None:
        sys.exit("bench-kvikio: --devices needs a GPU (cupy unusable)")
    count = cupy.cuda.runtime.getDeviceCount()
    missing = [d for d in a.devices if d >= count]
    if missing:
        numbered = f", numbered 0 to {count - 1}" if count else ""
        sys.exit(f"bench-kvikio: --devices: GPU {missing[0]} does not exist: cupy reports {count} GPU(s){numbered}")
    size = os.path.getsize(a.file)
    if size == 0:
        sys.exit(f"bench-kvikio: {a.file} is empty")
    with open(a.file, "rb") as f:
        ref = np.frombuffer(f.read(), dtype=np.uint8)
    bufs = {}
    for d in a.devices:
        with cupy.cuda.Device(d):
            bufs[d] = cupy.empty(size, dtype=np.uint8)
    names = ",".join(str(d) for d in a.devices)
    print(f"# bench-kvikio kvikio={kvikio.__version__} devices={names} file={a.file} bytes={size} "
          f"reps={a.reps} default_settings={str(a.default_settings).lower()} gpus_present={count}")
    configs = [(None, None, None)] if a.default_settings else [
        (m, t, s) for m in a.modes for t in a.threads for s in a.task_sizes]
    results = []
    gb = size / 1e9

    def poison(d):
        with cupy.cuda.Device(d):
            bufs[d].fill(0xA5)
            cupy.cuda.runtime.deviceSynchronize()

    def verify(d):
        with cupy.cuda.Device(d):
            host = bufs[d].get()
        if not np.array_equal(host, ref):
            raise RuntimeError(f"verification failed on GPU {d} at file offset {int(np.argmax(host != ref))}")

    for mode, threads, task in configs:
        mode, threads, task = apply_settings(kvikio, a, mode, threads, task)
        handle = kvikio.CuFile(a.file, "r")

        def read_into(d):
            with cupy.cuda.Device(d):
                got = handle.pread(bufs[d], size, 0).get()
            if got != size:
                raise RuntimeError(f"short read into GPU {d}: {got} of {size} bytes")

        def together():
            start = threading.Barrier(len(a.devices) + 1)
            spans, errors = {}, []

            def worker(d):
                try:
                    start.wait()
                    t0 = time.perf_counter()
                    read_into(d)
                    spans[d] = (t0, time.perf_counter())
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            workers = [threading.Thread(target=worker, args=(d,)) for d in a.devices]
            for t in workers:
                t.start()
            cpu0 = cpu_seconds()
            start.wait()
            for t in workers:
                t.join()
            cpu_s = cpu_seconds() - cpu0
            if errors:
                raise errors[0]
            wall = max(e for _, e in spans.values()) - min(s for s, _ in spans.values())
            return {d: e - s for d, (s, e) in spans.items()}, wall, cpu_s

        def emit(devices, device, callers, gbps, cpu):
            line = (
                f"RESULT impl=kvikio mem=device mode={mode} threads={threads} task={task} cache=warm kind=big "
                f"phase=steady settings={'default' if a.default_settings else 'set'} callers={callers} "
                f"devices={devices} device={device} gbps={statistics.median(gbps):.3f} rps=- "
                f"cpu_s_per_gb={cpu:.4f} reps={len(gbps)} gbps_min={min(gbps):.3f} gbps_max={max(gbps):.3f} "
                f"reads={callers} route=na" + labels() + gbps_reps(gbps)
            )
            print(line, flush=True)
            results.append(line)

        for d in a.devices:  # steady state: one untimed read into each GPU, then all at once
            read_into(d)
        if len(a.devices) > 1:
            together()
        for d in a.devices:
            gbps, cpu = [], []
            for _ in range(a.reps):
                poison(d)
                cpu0 = cpu_seconds()
                t0 = time.perf_counter()
                read_into(d)
                secs = time.perf_counter() - t0
                cpu.append((cpu_seconds() - cpu0) / gb)
                verify(d)
                gbps.append(gb / secs)
            emit(str(d), str(d), 1, gbps, statistics.median(cpu))
        if len(a.devices) > 1:
            each = {d: [] for d in a.devices}
            aggregate, cpu = [], []
            for _ in range(a.reps):
                for d in a.devices:
                    poison(d)
                secs, wall, cpu_s = together()
                for d in a.devices:
                    verify(d)
                    each[d].append(gb / secs[d])
                aggregate.append(gb * len(a.devices) / wall)
                cpu.append(cpu_s / (gb * len(a.devices)))
            for d in a.devices:
                emit(names, str(d), len(a.devices), each[d], statistics.median(cpu))
            emit(names, "all", len(a.devices), aggregate, statistics.median(cpu))
        handle.close()
    if len(a.devices) == 1:
        print("NOTE devices: one GPU listed, so no reads at once (list two or more, e.g. --devices 0,1)")
    if not a.no_table:
        table(results)


def table(results):
    if not results:
        return
    cols = ["mem", "mode", "threads", "task", "cache", "kind", "phase", "gbps", "rps", "cpu_s_per_gb"]
    rows = [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in results]
    for r in rows:
        if r.get("dir") == "write":  # writes show fs/open where reads show the cache
            r["cache"] = f"{r.get('fs')}/{r.get('open')}"
        if "devices" in r:  # reads into several GPUs: the GPUs read at once and this line's GPU
            r["kind"] = f"{r['devices']}:{r['device']}"
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
    import kvikio.buffer  # bounce_buffer_free, after write measurements
    import kvikio.defaults

    mems = ["device"] if a.devices is not None else list(a.mem)
    cupy = None
    if "device" in mems:
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
            cupy.empty(1, dtype=np.uint8)  # create the context outside any timed region
        except Exception as e:  # noqa: BLE001 - no GPU: host only, as gdsroute-bench does
            cupy = None
            if a.devices is not None:
                sys.exit(f"bench-kvikio: --devices needs a GPU: {e}")
            print(f"NOTE no GPU: device memory skipped, host memory only ({e})")
            mems = [m for m in mems if m == "host"] or ["host"]
    if a.devices is not None:
        run_devices(a, kvikio, cupy)
        return
    if a.write:
        run_writes(a, kvikio, cupy, mems)
        return
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
