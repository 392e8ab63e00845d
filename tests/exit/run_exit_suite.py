#!/usr/bin/env python3
"""Runs the exit paths of tests/exit many times and counts crashes, hangs and slow exits.

usage: run_exit_suite.py BIN_DIR FILE [MODE=COUNT ...]

BIN_DIR holds exit_paths, exit_dlopen and libgdsroute.so.0 (tools/gpu/gpu-build.sh puts them in
.device/). FILE is read into device memory; for the cuFile route it needs the udev record
(tools/gpu/udev-entry.sh). Modes: main-return, exit-in-flight, exit-in-flight-bounce, exit-from-thread, leak,
shutdown-then-calls, dlopen, sigterm (killed with SIGTERM 0.5 s after it started reading),
open-then-return, open-then-exit, begin-then-return, fork-after-open (exit while cuFile's driver
open runs in the background, and a fork right after an open; tests/exit/exit_paths.c), host-only
(a program without CUDA loads neither CUDA nor cuFile); exit-stream-queued and main-return-stream-queued (stream-ordered reads queued behind GPU work), and the same relayed (exit-relay-queued, main-return-relay-queued: under `auto` on the legacy stream).
Default counts: main-return 200, every other mode 50.

A run passes when it ends with its expected status (0; -SIGTERM for sigterm), within 30 s (else it
is a hang and is killed), and, where main returns, within 1 s of the moment main printed (2.5 s
where a driver open may still run in the background: the exit handler waits for it). The
first crash reports (exit_watch lines) are printed whole. Exit status 1 if any run failed.
"""
import os
import signal
import subprocess
import sys
import time

DEFAULTS = {"main-return": 200, "exit-in-flight": 50, "exit-in-flight-bounce": 50, "exit-from-thread": 50, "leak": 50,
            "shutdown-then-calls": 50, "dlopen": 50, "sigterm": 50, "open-then-return": 50, "open-then-exit": 50,
            "begin-then-return": 50, "fork-after-open": 50, "host-only": 10, "exit-stream-queued": 50,
            "main-return-stream-queued": 50, "exit-relay-queued": 50, "main-return-relay-queued": 50}
# Modes that return while cuFile's driver open may still run in the background: the exit handler
# waits for it (0.4-0.7 s on the H200), so their exit may take longer than EXIT_LIMIT_S.
START_EXIT_LIMIT_S = {"open-then-return": 2.5, "begin-then-return": 2.5}
HANG_S = 30.0
EXIT_LIMIT_S = 1.0
SIZE = os.environ.get("EXIT_SUITE_SIZE", str(64 << 20))


def command(bin_dir, mode, path):
    if mode == "dlopen":
        return [os.path.join(bin_dir, "exit_dlopen"), os.path.join(bin_dir, "libgdsroute.so.0"), path, SIZE]
    return [os.path.join(bin_dir, "exit_paths"), mode, path, SIZE]


def run_once(bin_dir, mode, path):
    """Returns (verdict, detail, exit_latency_s or None, output)."""
    env = dict(os.environ, LD_LIBRARY_PATH=bin_dir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    if "relay" in mode:
        env["GDSROUTE_STREAM_RELAY"] = "1"  # the relayed modes, whatever the default
    p = subprocess.Popen(command(bin_dir, mode, path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    if mode == "sigterm":
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
    try:
        out, _ = p.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        return "hang", f"no exit within {HANG_S:.0f} s", None, out.decode(errors="replace")
    ended = time.monotonic()
    text = out.decode(errors="replace")
    latency = None
    for line in text.splitlines():
        if line.startswith("main-return-at "):
            latency = ended - float(line.split()[1])
    want = -signal.SIGTERM if mode == "sigterm" else 0
    rc = p.returncode
    if rc < 0 and rc != want:
        return "crash", f"killed by signal {-rc}", latency, text
    if rc != want:
        return "wrong-status", f"exit status {rc}", latency, text
    if latency is not None and latency > START_EXIT_LIMIT_S.get(mode, EXIT_LIMIT_S):
        return "slow-exit", f"exit took {latency:.3f} s after main returned", latency, text
    if mode == "fork-after-open" and "child read: status" not in text:
        return "child-silent", "the forked child printed no result", latency, text
    if mode == "main-return" and "cufile_stats_state=2" not in text:
        return "stats-not-live", "cuFile's counters were not live", latency, text
    return "ok", "", latency, text


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    bin_dir, path = sys.argv[1], sys.argv[2]
    plan = dict(DEFAULTS)
    if len(sys.argv) > 3:
        plan = {}
        for arg in sys.argv[3:]:
            mode, _, count = arg.partition("=")
            plan[mode] = int(count or DEFAULTS.get(mode, 50))
    failures = 0
    shown = 0
    rows = []
    for mode, count in plan.items():
        tally = {}
        latencies = []
        sample = ""
        t0 = time.monotonic()
        for _ in range(count):
            verdict, detail, latency, text = run_once(bin_dir, mode, path)
            tally[verdict] = tally.get(verdict, 0) + 1
            if latency is not None:
                latencies.append(latency)
            if verdict != "ok":
                failures += 1
                if shown < 3:
                    shown += 1
                    print(f"--- {mode}: {verdict}: {detail}\n{text}---", flush=True)
            elif not sample:
                sample = next((l for l in text.splitlines() if l.startswith(("counters:", "OFF after", "verdict after", "child read", "host-only"))), "")
        worst = f"{max(latencies) * 1e3:.0f} ms" if latencies else "-"
        median = f"{sorted(latencies)[len(latencies) // 2] * 1e3:.0f} ms" if latencies else "-"
        others = ", ".join(f"{k} {v}" for k, v in sorted(tally.items()) if k != "ok") or "none"
        rows.append((mode, count, tally.get("ok", 0), others, median, worst, time.monotonic() - t0))
        print(f"{mode}: {tally.get('ok', 0)}/{count} ok; failures: {others}; exit after main returned: median {median}, "
              f"max {worst}; {sample}", flush=True)
    print("\n| mode | runs | ok | failures | exit latency median | max | wall s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for mode, count, ok, others, median, worst, wall in rows:
        print(f"| {mode} | {count} | {ok} | {others} | {median} | {worst} | {wall:.0f} |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
