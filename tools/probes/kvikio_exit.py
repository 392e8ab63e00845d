#!/usr/bin/env python3
"""KvikIO with cuFile statistics on, ended by returning (the configuration of docs/exit.md).

usage: kvikio_exit.py FILE [before|after]
Starts cuFile's statistics through cuda.bindings.cufile (level 3 set after the driver opened, as
a KvikIO user does, or before it), reads 64 MiB of FILE into a cupy array with kvikio.CuFile,
prints cuFile's per-GPU read count and returns. Exit status 0 when the read was whole.
"""
import sys

import cupy
import kvikio
from cuda.bindings import cufile

path = sys.argv[1]
order = sys.argv[2] if len(sys.argv) > 2 else "after"
if order == "before":
    cufile.set_stats_level(3)
cufile.driver_open()
if order == "after":
    cufile.set_stats_level(3)
cufile.stats_start()
buf = cupy.empty(64 << 20, dtype=cupy.uint8)
f = kvikio.CuFile(path, "r")
n = f.pread(buf).get()
f.close()
try:
    stats = cufile.StatsLevel3()
    cufile.get_stats_l3(stats.ptr)
    per_gpu = f"per-GPU n={stats.per_gpu_stats[0].n_total_reads}"
except Exception as e:  # the bindings' spelling differs between versions
    per_gpu = f"per-GPU counters not read ({type(e).__name__}: {e})"
print(f"read {n}; level {cufile.get_stats_level()}; {per_gpu}", flush=True)
sys.exit(0 if n == 64 << 20 else 1)
