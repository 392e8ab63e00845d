#!/usr/bin/env python3
"""Summarises the TRACE lines of a gdsroute-bench built with `--features trace` (src/trace.rs):
the bench's milestones, each thread's preparation and pinning, when each thread started its
first task, and the bytes copied per millisecond after the timed read began.

    CARGO_TARGET_DIR=/tmp/target-trace cargo build --release --features trace --bin gdsroute-bench
    cp /tmp/target-trace/release/gdsroute-bench .device/gdsroute-bench-trace   # copy .device to the GPU machine
    .device/gdsroute-bench-trace --first-only ... | python3 tools/probes/trace-summary.py

Times are relative to the first timed read (`bench.timed`); use it with one repetition.
"""
import signal
import sys
from collections import defaultdict

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`

events = []
for line in sys.stdin:
    if line.startswith("TRACE "):
        _, at, thread, name, value = line.split()
        events.append((int(at) / 1000.0, thread, name, int(value)))
if not events:
    sys.exit("no TRACE lines (build the bench with --features trace)")
marks = {}
for at, _, name, _ in events:
    if name.startswith("bench."):
        marks.setdefault(name, at)  # the first of each
t0 = marks.get("bench.timed", 0.0)
print("bench (ms after the timed read began): " + ", ".join(f"{n[6:]} {at - t0:+.2f}" for n, at in sorted(marks.items(), key=lambda x: x[1])))
per = defaultdict(list)
for at, thread, name, value in events:
    per[thread].append((at - t0, name, value))
print(f"{'thread':>6} {'prep start':>10} {'prep end':>9} {'pins (ms each)':>24} {'1st task':>9} {'tasks':>6} {'busy ms':>8} {'last end':>9}")
for thread, evs in sorted(per.items(), key=lambda kv: int(kv[0][1:])):
    def first(n):
        return next((at for at, name, _ in evs if name == n), None)
    pins, start = [], None
    busy, tasks, open_task, last_end = 0.0, 0, None, None
    for at, name, _ in evs:
        if name == "pin.start":
            start = at
        elif name == "pin.end" and start is not None:
            pins.append(at - start)
        elif name == "bounce.start":
            open_task = at
        elif name == "bounce.end" and open_task is not None:
            busy += at - open_task
            tasks += 1
            last_end = at
    fmt = lambda v: "-" if v is None else f"{v:+.2f}"
    print(f"{thread:>6} {fmt(first('prepare.start')):>10} {fmt(first('prepare.end')):>9} {' '.join(f'{p:.2f}' for p in pins)[:24]:>24} "
          f"{fmt(first('bounce.start')):>9} {tasks:>6} {busy:8.2f} {fmt(last_end):>9}")
bins = defaultdict(int)
for at, _, name, value in events:
    if name == "bounce.end" and at >= t0:
        bins[int(at - t0)] += value
if bins:
    print("GB/s per ms after the timed read began: " + " ".join(f"{bins.get(ms, 0) / 1e6:.0f}" for ms in range(max(bins) + 1)))
