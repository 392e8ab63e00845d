#!/usr/bin/env python3
"""KvikIO counterpart of tools/gpu/many_files.c (issue 25, many small files): COUNT files of SIZE
bytes, DIR/f00000.bin ..., read into one buffer (file i at offset i*SIZE) of device memory (cupy)
or, with --host, host memory (numpy), through KvikIO's Python API.

    python3 tools/gpu/many_files_kvikio.py DIR COUNT SIZE serial|inflight [--threads N] [--host] [--warm-up]

  serial    per file: kvikio.CuFile(path, "r"), .read(view) (pread(...).get()), .close()
  inflight  open all, .pread(view, SIZE, 0) for all (futures, all in flight), .get() all, close all

KvikIO's Python API has no batch API (cuFile's cuFileBatchIO* calls are not exposed), so there is
no batch mode here; many_files.c's batch mode has no KvikIO counterpart.

As many_files.c: RLIMIT_NOFILE's soft limit is raised to the hard limit by this program (KvikIO does
not), and exits 3 if COUNT+64 is still above it; files missing or of another size are written
(random bytes) and every file is read once with plain reads, untimed; the destination is set to
0xA5 first. Timed from just before the first open to just after the last close. Threads from
KVIKIO_NTHREADS, or --threads N (kvikio.defaults.set("num_threads", N)); the line reports the
value KvikIO runs with. --warm-up reads file 0 once (open, read, close) before the timed part, as
many_files.c --warm-up does (KvikIO's set-up out of the timed part; its place is set back to 0xA5).
Checks the first and last file's bytes. Prints one line:
    MANY impl=kvikio mode= files= size= threads= mem= compat= warm= seconds= files_per_s= gbps= verified=
Exit status 0, 1 on a failed read, 2 on a byte mismatch, 3 when the run cannot be set up (no cupy,
too few descriptors, batch asked for), 4 on a usage error.
"""
import os
import resource
import sys
import time


def setting(kvikio_defaults, name):
    try:
        return kvikio_defaults.get(name)
    except Exception:  # older KvikIO: one function per setting
        return getattr(kvikio_defaults, name, lambda: "?")()


def parse_size(text):
    t = text.upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(t[:-1] if mult > 1 else t) * mult


def main():
    args = sys.argv[1:]
    host = "--host" in args
    warm_up = "--warm-up" in args
    args = [a for a in args if a not in ("--host", "--warm-up")]
    threads = None
    if "--threads" in args:
        i = args.index("--threads")
        threads = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 4 or args[3] not in ("serial", "inflight"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        if len(args) == 4 and args[3] == "batch":
            print("many_files_kvikio: KvikIO's Python API has no batch API", file=sys.stderr)
            return 3
        return 4
    directory, count, size, mode = args[0], int(args[1]), parse_size(args[2]), args[3]

    # The program raises the soft limit (KvikIO does not).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and count + 64 > soft:
        print(f"many_files_kvikio: RLIMIT_NOFILE is {soft}, below COUNT+64 = {count + 64}", file=sys.stderr)
        return 3

    try:  # libkvikio needs librapids_logger loaded first (as tools/gpu/bench-kvikio.py does)
        import rapids_logger

        rapids_logger.load_library()
    except ImportError:
        pass
    import numpy as np
    import kvikio
    import kvikio.defaults

    if threads is not None:
        kvikio.defaults.set("num_threads", threads)

    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, f"f{i:05d}.bin") for i in range(count)]
    created = 0
    for p in paths:
        if not os.path.isfile(p) or os.path.getsize(p) != size:
            with open(p, "wb") as f:
                f.write(os.urandom(size))
            created += 1
    if created:
        print(f"many_files_kvikio: wrote {created} of {count} files in {directory}", file=sys.stderr)
    for p in paths:  # the page cache, untimed
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 22):
                pass

    if host:
        buf = np.empty(count * size, dtype=np.uint8)
        buf.fill(0xA5)
    else:
        try:
            import cupy
        except ImportError as e:
            print(f"many_files_kvikio: no cupy ({e}): device memory needs it; --host runs without", file=sys.stderr)
            return 3
        cupy.cuda.Device(0).use()
        buf = cupy.empty(count * size, dtype=cupy.uint8)
        buf.fill(0xA5)
        cupy.cuda.runtime.deviceSynchronize()
    views = [buf[i * size:(i + 1) * size] for i in range(count)]  # made outside the timed part
    if warm_up:
        f = kvikio.CuFile(paths[0], "r")
        f.read(views[0])
        f.close()
        views[0].fill(0xA5)
        if not host:
            cupy.cuda.runtime.deviceSynchronize()

    t0 = time.perf_counter()
    if mode == "serial":
        for i, p in enumerate(paths):
            f = kvikio.CuFile(p, "r")
            got = f.read(views[i])
            f.close()
            if got != size:
                print(f"many_files_kvikio: file {i}: read {got} of {size} bytes", file=sys.stderr)
                return 1
    else:
        files = [kvikio.CuFile(p, "r") for p in paths]
        futures = [f.pread(views[i], size, 0) for i, f in enumerate(files)]
        got = [fut.get() for fut in futures]
        for f in files:
            f.close()
        bad = [i for i, g in enumerate(got) if g != size]
        if bad:
            print(f"many_files_kvikio: file {bad[0]}: read {got[bad[0]]} of {size} bytes", file=sys.stderr)
            return 1
    t1 = time.perf_counter()

    ok = True
    for i in sorted({0, count - 1}):
        with open(paths[i], "rb") as f:
            want = f.read()
        have = views[i] if host else views[i].get()
        if bytes(have) != want:
            print(f"many_files_kvikio: file {i} differs", file=sys.stderr)
            ok = False
    secs = t1 - t0
    print(f"MANY impl=kvikio mode={mode} files={count} size={size} threads={setting(kvikio.defaults, 'num_threads')} "
          f"mem={'host' if host else 'device'} compat={setting(kvikio.defaults, 'compat_mode')} warm={int(warm_up)} seconds={secs:.6f} "
          f"files_per_s={count / secs:.1f} gbps={count * size / secs / 1e9:.3f} verified={int(ok)}", flush=True)
    return 0 if ok else 2


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:  # KvikIO's failures (no libcuda, a failed read)
        print(f"many_files_kvikio: {e}", file=sys.stderr)
        sys.exit(1)
