#!/usr/bin/env python3
"""Summarises tools/gpu/many-files.sh's output as markdown tables:

  per (route, workload, impl, mode, threads, warm): the rounds, the median and worst files/s and
  GB/s over the rounds, the median time per file, the median files/s against KvikIO's at 16
  threads in the matching mode (serial and serial-read against KvikIO serial, inflight and batch
  against KvikIO inflight; same route, workload and warm-up), and whether every read was checked;

  the traced serial runs' phases (PHASE lines): file 0's open, read and free, and the median of the
  other traced files';

  then the ERR lines (failures), if any.

    python3 tools/gpu/many-files-summary.py OUTPUT [OUTPUT...]    (or the output on stdin)
"""
import fileinput
import re
import statistics
import sys
from collections import defaultdict

IMPL_ORDER = {"cat": 0, "gdsroute": 1, "kvikio": 9}
MODE_ORDER = {"page-cache": 0, "serial": 1, "serial-read": 2, "inflight": 3, "batch": 4}
KVIKIO_MODE = {"serial": "serial", "serial-read": "serial", "inflight": "inflight", "batch": "inflight"}


def fields(line):
    out = {}
    for tok in line.split()[1:]:
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


def num(text, default=0.0):
    try:
        return float(text)
    except (TypeError, ValueError):
        return default


def threads_key(t):
    return (0, int(t)) if t.isdigit() else (1, t)


def main():
    runs = defaultdict(list)
    phases = defaultdict(list)
    errors = []
    last_warm = "?"  # a run's PHASE lines follow its MANY line, which says warm=
    for line in fileinput.input(sys.argv[1:]):
        line = line.rstrip("\n")
        if line.startswith("MANY "):
            f = fields(line)
            key = (f.get("route", "?"), f.get("workload", "?"), f.get("files", "?"), f.get("size", "?"),
                   f.get("impl", "?"), f.get("mode", "?"), f.get("threads", "?"), f.get("warm", "0"))
            runs[key].append(f)
            last_warm = f.get("warm", "0")
        elif line.startswith("PHASE "):
            f = fields(line)
            rest = line.split()
            nums = [t for t in rest if "=" not in t][1:]  # PHASE's own: i open_us read_us free_us
            if len(nums) >= 4:
                key = (f.get("route", "?"), f.get("workload", "?"), f.get("impl", "?"), last_warm)
                phases[key].append(tuple(num(x) for x in nums[:4]))
        elif line.startswith("ERR "):
            errors.append(line)

    # The traced runs' MANY lines carry round=trace; they are not rounds.
    for key in list(runs):
        runs[key] = [f for f in runs[key] if f.get("round") != "trace"]
        if not runs[key]:
            del runs[key]

    def median_fps(key):
        return statistics.median(num(f.get("files_per_s")) for f in runs[key]) if key in runs else None

    print("| route | workload | impl | mode | threads | warm | rounds | files/s median | files/s worst "
          "| GB/s median | GB/s worst | µs/file median | vs KvikIO-16 | verified |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    order = sorted(runs, key=lambda k: (k[0], k[1], IMPL_ORDER.get(k[4], 5), k[4], MODE_ORDER.get(k[5], 9),
                                        threads_key(k[6]), k[7]))
    for key in order:
        route, wl, files, size, impl, mode, threads, warm = key
        rs = runs[key]
        fps = [num(f.get("files_per_s")) for f in rs]
        gbps = [num(f.get("gbps")) for f in rs]
        med = statistics.median(fps)
        ref = None
        if impl != "cat" and mode in KVIKIO_MODE:
            ref = median_fps((route, wl, files, size, "kvikio", KVIKIO_MODE[mode], "16", warm))
        vs = f"{med / ref:.2f}×" if ref else ""
        checked = [f.get("verified") for f in rs if "verified" in f]
        verified = "" if not checked else ("all" if all(v == "1" for v in checked) else
                                           f"{sum(v == '1' for v in checked)}/{len(checked)}")
        sz = int(size) if size.isdigit() else 0
        label = f"{wl}: {files} × {sz >> 10} KiB" if sz else wl
        print(f"| {route} | {label} | {impl} | {mode} | {threads} | {warm} | {len(rs)} | {med:,.0f} | {min(fps):,.0f} "
              f"| {statistics.median(gbps):.2f} | {min(gbps):.2f} | {1e6 / med if med else 0:.1f} | {vs} | {verified} |")

    if phases:
        print()
        print("| route | workload | impl | warm | file 0: open / read / free µs | others (median): open / read / free µs | traced |")
        print("|---|---|---|---|---|---|---|")
        for key in sorted(phases):
            ps = sorted(phases[key])
            first = [p for p in ps if p[0] == 0]
            others = [p for p in ps if p[0] != 0]
            f0 = " / ".join(f"{x:.0f}" for x in first[0][1:]) if first else ""
            med = " / ".join(f"{statistics.median(p[j] for p in others):.1f}" for j in (1, 2, 3)) if others else ""
            print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {f0} | {med} | {len(ps)} |")

    if errors:  # the same failure in several rounds once, with its count
        seen = {}
        for e in errors:
            k = re.sub(r" round=\S+", "", e)
            seen[k] = seen.get(k, 0) + 1
        print()
        print(f"{len(errors)} ERR lines:")
        for k, c in list(seen.items())[:40]:
            print(f"    {c} × {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
