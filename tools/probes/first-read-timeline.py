#!/usr/bin/env python3
"""The timeline of one fresh process's first read (docs/performance.md, "The first read of a fresh
process"): tools/gpu/first_read.c run against a libgdsroute built with `--features trace` and
GDSROUTE_TRACE_FILE set. Merges the program's MARKS line with the library's events and prints,
in ms after main began, the program's marks and, for every event name, its first and last time,
how many there were and on how many threads; where each thread's time went; and the bytes
handed to the copy engine by window of 2 ms from the open, beside how many workers had prepared.

    GDSROUTE_TRACE_FILE=/tmp/t.txt LD_LIBRARY_PATH=.device/trace .device/first_read F > /tmp/o.txt
    python3 tools/probes/first-read-timeline.py /tmp/o.txt /tmp/t.txt
"""
import sys
from collections import defaultdict


def main():
    out_path, trace_path = sys.argv[1], sys.argv[2]
    marks = {}
    for line in open(out_path):
        if line.startswith("MARKS "):
            marks = {k: float(v) for k, v in (f.split("=") for f in line.split()[1:])}
    if not marks:
        sys.exit("no MARKS line in " + out_path)
    main_us = marks["main_us"]
    start_us = None
    events = defaultdict(list)
    for line in open(trace_path):
        parts = line.split()
        if parts[0] == "TRACE_START_MONOTONIC_US":
            start_us = float(parts[1])
        elif parts[0] == "TRACE":
            at, thread, name = float(parts[1]), parts[2], parts[3]
            events[name].append((at, thread))
    if start_us is None:
        sys.exit("no TRACE_START_MONOTONIC_US line in " + trace_path)
    ms = lambda us: (us - main_us) / 1000.0
    print("| ms after main | what |")
    print("| --- | --- |")
    rows = [(ms(v), f"program: {k[:-3]}") for k, v in marks.items() if k != "main_us"]
    for name, hits in events.items():
        first, last = min(a for a, _ in hits), max(a for a, _ in hits)
        threads = len({t for _, t in hits})
        text = f"{name}: first" + (f", last at {ms(start_us + last):.1f} ms ({len(hits)} on {threads} threads)" if len(hits) > 1 else "")
        rows.append((ms(start_us + first), text))
    for at, text in sorted(rows):
        print(f"| {at:.1f} | {text} |")
    # Where each thread's time went: the time from each event to the thread's next one, summed
    # by the pair of names (e.g. bounce.buffer -> bounce.filled: the preads).
    # Only what happened from the timed open on (a baseline's warm-up read comes before it).
    from_us = marks.get("open_us", main_us) - start_us
    by_thread = defaultdict(list)
    for name, hits in events.items():
        for at, thread in hits:
            if at >= from_us:
                by_thread[thread].append((at, name))
    pairs = defaultdict(lambda: [0.0, 0, 0.0])
    for hits in by_thread.values():
        hits.sort()
        for (a, x), (b, y) in zip(hits, hits[1:]):
            p = pairs[f"{x} -> {y}"]
            p[0] += (b - a) / 1000.0
            p[1] += 1
            p[2] = max(p[2], (b - a) / 1000.0)
    print("| between events from the timed open on, every thread | total ms | count | longest ms |")
    print("| --- | --- | --- | --- |")
    for key, (total, count, longest) in sorted(pairs.items(), key=lambda kv: -kv[1][0]):
        if total >= 0.5:
            print(f"| {key} | {total:.1f} | {count} | {longest:.2f} |")
    # How fast the bytes went, by window from the timed open on: bytes handed to the copy engine
    # (bounce.queued), threads that had ended their preparation, threads that queued a copy.
    window_ms = 2.0
    prepared = sorted(at for at, _ in events.get("prepare.end", []))
    windows = defaultdict(lambda: [0, set()])
    for name in ("bounce.queued", "bounce_out.end"):
        for line in open(trace_path):
            parts = line.split()
            if parts[0] == "TRACE" and parts[3] == name and float(parts[1]) >= from_us:
                w = windows[int((float(parts[1]) - from_us) / 1000.0 / window_ms)]
                w[0] += int(parts[4])
                w[1].add(parts[2])
    if windows:
        print(f"| ms after the open | GB/s in the next {window_ms:g} ms | workers prepared | threads copying |")
        print("| --- | --- | --- | --- |")
        for k in range(max(windows) + 1):
            nbytes, threads = windows.get(k, [0, set()])
            end_us = from_us + (k + 1) * window_ms * 1000.0
            ready = sum(1 for at in prepared if at < end_us)
            print(f"| {k * window_ms:g} | {nbytes / (window_ms * 1e6):.1f} | {ready} | {len(threads)} |")


if __name__ == "__main__":
    main()
