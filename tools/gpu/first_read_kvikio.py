#!/usr/bin/env python3
"""KvikIO counterpart of tools/gpu/first_read.c: set up CUDA (cupy: device 0, a buffer of the
file's size), then open FILE with kvikio.CuFile and read it once (pread(...).get()), timed from the
end of the imports to the end of the read. --warm-with OTHER reads OTHER first (the baseline: a
warm process reading a file it has not read). Threads and compat mode from KVIKIO_* variables.
Checks the first and last 4 MiB against the file. Prints one FIRST line like first_read.c.

    python3 tools/gpu/first_read_kvikio.py FILE [--warm-with OTHER]
"""
import os
import sys
import time

import cupy
import kvikio
import kvikio.defaults

t_main = time.perf_counter()


def setting(name):
    try:
        return kvikio.defaults.get(name)
    except Exception:  # older KvikIO: one function per setting
        return getattr(kvikio.defaults, name, lambda: "?")()


def open_and_read(path, buf, size):
    f = kvikio.CuFile(path, "r")
    got = f.pread(buf[:size], size, 0).get()
    return f, got


def main():
    args = sys.argv[1:]
    warm_with = None
    if "--warm-with" in args:
        i = args.index("--warm-with")
        warm_with = args[i + 1]
        del args[i:i + 2]
    path = args[0]
    size = os.path.getsize(path)
    cupy.cuda.Device(0).use()
    buf = cupy.empty(size, dtype=cupy.uint8)
    cupy.cuda.runtime.deviceSynchronize()
    t_cuda = time.perf_counter()
    if warm_with:
        f, _ = open_and_read(warm_with, buf, min(size, os.path.getsize(warm_with)))
        f.close()
    t_open = time.perf_counter()
    f, got = open_and_read(path, buf, size)
    t_end = time.perf_counter()
    if got != size:
        sys.exit(f"read {got} of {size} bytes")
    chunk = 4 << 20
    with open(path, "rb") as plain:
        head = plain.read(chunk)
        plain.seek(max(size - chunk, 0))
        tail = plain.read(chunk)
    ok = bytes(buf[:len(head)].get()) == head and bytes(buf[size - len(tail):].get()) == tail
    print(f"FIRST impl=kvikio early=0 warm={int(bool(warm_with))} threads={setting('num_threads')} "
          f"compat={setting('compat_mode')} cuda_s={t_cuda - t_main:.4f} open_read_s={t_end - t_open:.4f} "
          f"total_s={t_end - t_main:.4f} gbps={size / (t_end - t_open) / 1e9:.2f} verified={int(ok)}", flush=True)
    f.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
