#!/usr/bin/env python3
"""Summarises tools/gpu/first-read.sh's output: per section label and configuration, the median
and worst of open + read and of the end-to-end time from main, with the route's counters, and the
targets of docs/performance.md ("The first read of a fresh process") against the baseline (a warm
process reading a file it has not read) and the probe's raw costs.

    python3 tools/gpu/first-read-summary.py first-read.txt
"""
import statistics
import sys
from collections import defaultdict


def fields(line):
    return dict(f.split("=", 1) for f in line.split() if "=" in f)


def main():
    rows = defaultdict(list)
    probes = defaultdict(list)
    for line in open(sys.argv[1]):
        parts = line.split()
        if len(parts) > 2 and parts[1] == "FIRST":
            f = fields(line)
            who = f["impl"] + (" early" if f.get("early") == "1" else "") + (" baseline" if f.get("warm") == "1" else "")
            who += " fresh-buffer" if f.get("fresh_buffer") == "1" else ""
            if f.get("threads", "0") != "0":  # gdsroute: set by --threads; KvikIO: its thread count
                who += f" {f['threads']} threads"
            for knob in ("work_ms", "gap_ms"):
                if f.get(knob, "0") != "0":
                    who += f" {knob}={f[knob]}"
            rows[(parts[0], who)].append(f)
        elif len(parts) > 2 and parts[1] == "PROBE":
            f = fields(line)
            probes[(parts[0], f["mode"] + (f" {f['threads']} threads tiny={f['tiny']}" if "threads" in f else ""))].append(f)
    print("| section | configuration | runs | open + read s, median / worst | read alone s, median | from main s, median / worst | route |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = {}
    for (label, who), fs in rows.items():
        oread = sorted(float(f["open_read_s"]) for f in fs)
        total = sorted(float(f["total_s"]) for f in fs)
        f0 = fs[0]
        route = f"cufile_tasks={f0.get('cufile_tasks', '-')} posix_tasks={f0.get('posix_tasks', '-')} n={f0.get('n', '-')} " \
                f"posix={f0.get('posix', '-')} reason={f0.get('reason', '-')}" if f0["impl"] != "kvikio" else f"compat={f0.get('compat')}"
        bad = [f for f in fs if f.get("verified") == "0"]
        reads = [float(f["read_s"]) for f in fs if "read_s" in f]
        read = f"{statistics.median(reads):.4f}" if reads else "-"
        print(f"| {label} | {who} | {len(fs)} | {statistics.median(oread):.4f} / {oread[-1]:.4f} | {read} | "
              f"{statistics.median(total):.4f} / {total[-1]:.4f} | {route}{' WRONG BYTES' if bad else ''} |")
        if who == "gdsroute baseline":
            base[label] = statistics.median(oread)
    print()
    print("| probe | runs | figure, median (min-max) |")
    print("| --- | --- | --- |")
    for (label, mode), fs in probes.items():
        for key in ("cuda_setup_s", "init_ctx_s", "driver_open_s", "both_done_s", "main_setup_done_s", "register_s", "wall_s",
                    "tiny_median_s", "first_median_s", "first_max_s", "second_median_s"):
            vals = sorted(float(f[key]) for f in fs if key in f)
            if vals:
                print(f"| {label} {mode} | {len(vals)} | {key} {statistics.median(vals):.4f} ({vals[0]:.4f}-{vals[-1]:.4f}) |")
    for label, b in base.items():
        print(f"\nbaseline open + read ({label}): {b:.4f} s; 1.1x = {1.1 * b:.4f}, 1.25x = {1.25 * b:.4f}")


if __name__ == "__main__":
    main()
