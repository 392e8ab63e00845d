#!/usr/bin/env bash
# Runs gdsroute-bench and tools/gpu/bench-kvikio.py side by side on the GPU machine, in one call
# (each section about 4-6 minutes on the H200; every step has a time limit). Needs .device/ and
# .whl/ from tools/gpu/bench-build.sh (carried). Method: docs/performance.md.
#
#   tools/gpu/bench-gpu.sh                   # the read matrix on one 1 GiB file; RESULT lines to $OUT/bench.txt if $OUT is set
#   tools/gpu/bench-gpu.sh --writes          # the write matrix and its ceilings (or BENCH_WRITES=1); --quick: threads 1,16 and defaults, disk only
#   tools/gpu/bench-gpu.sh --devices         # reads into several GPUs at once and alone (one GPU: reports it alone)
#   tools/gpu/bench-gpu.sh --reads --writes  # sections combine; without any, the reads
#   tools/gpu/bench-gpu.sh --ratios FILE     # only the gdsroute/KvikIO ratio tables (and the write targets) of a file of RESULT lines
#
# Environment: BENCH_FILE (default /var/tmp/gdsroute-bench-1g.bin), BENCH_SIZE (1073741824: the read
# file and each write), BENCH_REPS (3), PYTHON (python3),
# BENCH_FIRST_PROCS (3: fresh processes per first-read configuration), BENCH_COLD_PASSES (5: dd iflag=direct,
# both libraries cold, then a buffered dd, then both with direct I/O unless BENCH_COLD_DIRECT=0), BENCH_HOST_PASSES (3: alternating host-read invocations),
# BENCH_UDEV=1 to write the udev record first (tools/gpu/udev-entry.sh: AUTO then uses cuFile),
# BENCH_CUFILE_ROUTE=0 to skip the closing cuFile-route steps (udev record written, then removed);
# writes: BENCH_WRITE_THREADS (1,4,8,16), BENCH_WRITE_DIR (/var/tmp: the disk's file; the other is
# /dev/shm; both removed after each step); devices: BENCH_DEVICES (0,1 with two GPUs or more, else 0).
set -uo pipefail
cd "$(dirname "$0")/../.."

ratios() {
    python3 - "$1" <<'PY'
import statistics, sys
from collections import defaultdict

# Keys absent from a line (reads have no dir/fs/open/direct_write; older logs no devices) are left
# out of its key, so the lines of old logs pair as they always did; a line without dir is a read.
KEY = ["dir", "mem", "fs", "open", "direct_write", "mode", "threads", "task", "cache", "kind", "phase",
       "settings", "callers", "devices", "device", "primed", "tag"]
# settings differ by design (threads, task, mode, and the direct-write default)
DEFAULT_KEY = ["dir", "mem", "fs", "open", "cache", "kind", "phase", "settings", "callers", "devices", "device",
               "primed", "tag"]
rows = defaultdict(lambda: defaultdict(list))
order = []
bases = {}
ceilings = defaultdict(list)  # (fs, open, direct_write, threads) -> gbps of impl=ceiling lines
dd_writes = defaultdict(list)  # fs -> gbps of impl=dd-write lines
for line in open(sys.argv[1]):
    if not line.startswith("RESULT "):
        continue
    f = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    if f.get("impl") == "ceiling":
        ceilings[(f.get("fs"), f.get("open"), f.get("direct_write"), int(f.get("threads", 0)))].append(float(f["gbps"]))
        continue
    if f.get("impl") == "dd-write":
        dd_writes[(f.get("fs"), f.get("open"))].append(float(f["gbps"]))
        continue
    base = tuple((k, f[k]) for k in (DEFAULT_KEY if f.get("settings") == "default" else KEY) if k in f)
    # gdsroute variants (page cache off, BENCH_VARIANT) are compared with the same KvikIO lines.
    variant = ()
    if f.get("impl") == "gdsroute" and f.get("page_cache_pin_max") == "0":
        variant += (("page_cache", "off"),)
    if f.get("variant"):
        variant += (("variant", f["variant"]),)
    key = base + variant
    if key not in rows:
        order.append(key)
        bases[key] = base
    rows[key][f.get("impl", "?")].append(f)
for key in order:
    if bases[key] != key and "kvikio" not in rows[key]:
        rows[key]["kvikio"] = rows.get(bases[key], {}).get("kvikio", [])

def med(fs, name):
    vals = []
    for f in fs:
        try:
            vals.append(float(f[name]))
        except (KeyError, ValueError):
            pass
    return statistics.median(vals) if vals else None

def fmt(v, spec):
    return "-".rjust(int(spec.split(".")[0].rstrip("df"))) if v is None else format(v, spec)

def is_write(key):
    return dict(key).get("dir") == "write"

print(f"{'gdsroute':>9} {'kvikio':>9} {'ratio':>6} {'cpu g/k':>8} {'n g/k':>6}  configuration")
borrowed = {bases[key] for key in order if bases[key] != key}
for key in order:
    g, k = rows[key].get("gdsroute", []), rows[key].get("kvikio", [])
    if is_write(key) or (not g and key in borrowed):
        continue  # writes have their own table below; KvikIO's lines are shown beside the gdsroute variant that uses them
    name = " ".join(f"{a}={b}" for a, b in key)
    if dict(key).get("settings") == "default":
        name += " (g:{}t k:{}t)".format(g[0]["threads"] if g else "?", k[0]["threads"] if k else "?")
    gg, kg = med(g, "gbps"), med(k, "gbps")
    gc, kc = med(g, "cpu_s_per_gb"), med(k, "cpu_s_per_gb")
    ratio = gg / kg if gg is not None and kg else None
    cpu = gc / kc if gc is not None and kc else None
    print(f"{fmt(gg, '9.2f')} {fmt(kg, '9.2f')} {fmt(ratio, '6.2f')} {fmt(cpu, '8.2f')} {len(g):>3}/{len(k):<2}  {name}")
dd = [float(f["gbps"]) for k in order for f in rows[k].get("dd", [])]
cold = [float(f["gbps"]) for k in order if dict(k).get("cache") == "cold" and "tag" not in dict(k) for f in rows[k].get("gdsroute", [])]
cold_direct = [float(f["gbps"]) for k in order if dict(k).get("cache") == "cold" and dict(k).get("tag") == "direct-io" for f in rows[k].get("gdsroute", [])]
if dd and cold:
    print(f"cold: gdsroute median {statistics.median(cold):.2f} GB/s, dd iflag=direct median {statistics.median(dd):.2f} GB/s"
          f" ({len(dd)} passes): ratio {statistics.median(cold) / statistics.median(dd):.2f}")
    # The disk's speed drifts within seconds (2026-11-30: 0.35-2.1 GB/s), so each pass's gdsroute
    # line is also compared with the dd run just before it (paired in file order: only when no
    # pass lost a line).
    if len(dd) == len(cold):
        per_pass = [c / d for c, d in zip(cold, dd)]
        print("cold, per pass (gdsroute / dd just before): " + " ".join(f"{r:.2f}" for r in per_pass)
              + f"; median {statistics.median(per_pass):.2f}")
dd_buffered = [float(f["gbps"]) for k in order for f in rows[k].get("dd-buffered", [])]
if dd_buffered and cold:
    print(f"cold: dd buffered (page cache, one stream) median {statistics.median(dd_buffered):.2f} GB/s ({len(dd_buffered)} passes);"
          f" gdsroute / dd buffered {statistics.median(cold) / statistics.median(dd_buffered):.2f}")
if dd and cold_direct:
    print(f"cold, direct I/O on (KVIKIO_AUTO_DIRECT_IO_READ=1): gdsroute median {statistics.median(cold_direct):.2f} GB/s"
          f" / dd iflag=direct {statistics.median(dd):.2f}: ratio {statistics.median(cold_direct) / statistics.median(dd):.2f}")

# Reads into several GPUs at once (--devices): the aggregate beside each GPU alone.
together = defaultdict(dict)
for key in order:
    d = dict(key)
    if "devices" not in d or is_write(key):
        continue
    setup = tuple((a, b) for a, b in key if a not in ("devices", "device", "callers"))
    for impl in ("gdsroute", "kvikio"):
        v = med(rows[key].get(impl, []), "gbps")
        if v is not None:
            together[(impl,) + setup][(d["devices"], d["device"])] = v
for (impl, *setup), got in together.items():
    alone = {dev: v for (devs, dev), v in got.items() if devs == dev}
    for devs in sorted({devs for devs, dev in got if dev == "all"}):
        each = ", ".join(f"GPU {dev} {v:.2f}" for (ds, dev), v in sorted(got.items()) if ds == devs and dev != "all")
        alone_sum = sum(alone.get(dev, 0.0) for dev in devs.split(","))
        scaling = f"; aggregate / sum of alone {got[(devs, 'all')] / alone_sum:.2f}" if alone_sum else ""
        print(f"devices {devs} at once, {impl} {' '.join(f'{a}={b}' for a, b in setup)}: aggregate "
              f"{got[(devs, 'all')]:.2f} GB/s ({each}); alone: "
              + ", ".join(f"GPU {dev} {v:.2f}" for dev, v in sorted(alone.items())) + scaling)
print("GB/s: median over the lines of each side (fresh-process first reads: one line per process);")
print("ratio = gdsroute/KvikIO GB/s (reads/s for rand kinds is the same ratio); cpu g/k = CPU s/GB ratio, lower is better for gdsroute")

# Writes: gdsroute beside KvikIO at equal settings and beside the ceiling of its file system
# measured in the same call (plain pwrite from pinned memory; the best thread count).
write_keys = [key for key in order if is_write(key) and (rows[key].get("gdsroute") or rows[key].get("kvikio"))]
if not write_keys and not ceilings:
    sys.exit()
best = {}
print()
print("=== writes: ceilings (plain pwrite from pinned memory, 4 MiB pieces; median GB/s per thread count)")
for cfs, copen, cdw in sorted({c[:3] for c in ceilings}):
    per = {t: statistics.median(v) for (a, b, c, t), v in ceilings.items() if (a, b, c) == (cfs, copen, cdw)}
    top = max(per, key=per.get)
    best[(cfs, copen, cdw)] = per[top]
    print(f"fs={cfs} open={copen} direct_write={cdw}: best {per[top]:.2f} GB/s at {top} threads ("
          + ", ".join(f"{t}t {v:.2f}" for t, v in sorted(per.items())) + ")")
for (dfs, dopen), v in sorted(dd_writes.items()):
    print(f"fs={dfs} open={dopen}: dd if=/dev/zero oflag=direct bs=4M median {statistics.median(v):.2f} GB/s ({len(v)} runs)")

def ceiling_of(key):
    d = dict(key)
    if d.get("settings") == "default" or d.get("direct_write") not in ("0", "1"):
        # The library's own direct-write default: held to the better of both ceilings.
        found = [best[c] for c in best if c[:2] == (d.get("fs"), d.get("open"))]
        return max(found) if found else None
    return best.get((d.get("fs"), d.get("open"), d.get("direct_write")))

def peak(fs, name):
    vals = [int(f[name]) for f in fs if f.get(name, "").isdigit()]
    return max(vals) if vals else None

def short(key):
    """The fields that tell write configurations apart, for the list of misses."""
    d = dict(key)
    keep = ["mem", "fs", "open", "direct_write", "threads", "settings", "tag", "variant"]
    return " ".join(f"{a}={d[a]}" for a in keep if a in d)

targets = defaultdict(lambda: [0, 0, []])  # number -> [met, measured, missed configurations]
def judge(number, ok, name):
    t = targets[number]
    t[1] += 1
    if ok:
        t[0] += 1
    else:
        t[2].append(name)
    return f"{number}:{'ok' if ok else 'MISS'}"

print()
print(f"{'gdsroute':>9} {'kvikio':>9} {'ratio':>6} {'ceiling':>8} {'g/ceil':>6} {'cpu g/k':>8} {'g pinned':>10} {'k pinned':>10} {'n g/k':>6}  targets      configuration")
for key in write_keys:
    g, k = rows[key].get("gdsroute", []), rows[key].get("kvikio", [])
    d = dict(key)
    name = " ".join(f"{a}={b}" for a, b in key if a != "dir")
    brief = short(key)
    if d.get("settings") == "default":
        name += " (g:{}t dw={} k:{}t dw={})".format(g[0]["threads"] if g else "?", g[0].get("direct_write", "?") if g else "?",
                                                  k[0]["threads"] if k else "?", k[0].get("direct_write", "?") if k else "?")
    gg, kg = med(g, "gbps"), med(k, "gbps")
    gc, kc = med(g, "cpu_s_per_gb"), med(k, "cpu_s_per_gb")
    ratio = gg / kg if gg is not None and kg else None
    cpu = gc / kc if gc is not None and kc else None
    ceiling = ceiling_of(key)
    of_ceiling = gg / ceiling if gg is not None and ceiling else None
    verdicts = []
    if gg is not None and kg:
        if d.get("settings") == "default":
            verdicts.append(judge(2, ratio >= 1.5, brief))
        elif of_ceiling is not None:
            verdicts.append(judge(1, of_ceiling >= 0.9 and ratio >= 1.2, brief))
        if d.get("open") == "r+" or d.get("fs") == "shm":
            verdicts.append(judge(3, ratio >= 1.2, brief))
    complete = all("pinned_bytes_peak" in f and "cpu_s_per_gb" in f for f in g) and all("cpu_s_per_gb" in f for f in k)
    verdicts.append(judge(4, complete, brief))
    print(f"{fmt(gg, '9.2f')} {fmt(kg, '9.2f')} {fmt(ratio, '6.2f')} {fmt(ceiling, '8.2f')} {fmt(of_ceiling, '6.2f')} "
          f"{fmt(cpu, '8.2f')} {fmt(peak(g, 'pinned_bytes_peak'), '10d')} {fmt(peak(k, 'bounce_pool_bytes'), '10d')} "
          f"{len(g):>3}/{len(k):<2}  {' '.join(verdicts):<12} {name}")
print("ceiling: the best ceiling line of the same fs, open and direct_write (default settings: the better of direct_write 0 and 1);")
print("g pinned: gdsroute's pinned_bytes_peak (process-wide, so far in that process); k pinned: KvikIO's bounce-buffer pools after the configuration")
texts = {
    1: "every write configuration at equal settings >= 0.9 of its file system's ceiling and >= 1.2x KvikIO",
    2: "defaults >= 1.5x KvikIO's defaults",
    3: "\"r+\" rewrites and /dev/shm >= 1.2x KvikIO",
    4: "pinned-memory peak and CPU s/GB in each RESULT line",
}
print("targets:")
for number in sorted(texts):
    met, measured, missed = targets[number]
    status = "not measured" if measured == 0 else ("met" if met == measured else "MISSED")
    print(f"  ({number}) {texts[number]}: {status}, {met} of {measured}" + (f"; missed: {'; '.join(missed)}" if missed else ""))
PY
}

READS=0 WRITES=${BENCH_WRITES:-0} DEVICES=0 QUICK=0
while [ $# -gt 0 ]; do
    case $1 in
        --ratios) ratios "$2"; exit ;;
        --reads) READS=1 ;;
        --writes) WRITES=1 ;;
        --devices) DEVICES=1 ;;
        --quick) QUICK=1 ;;
        *) echo "usage: $0 [--reads] [--writes [--quick]] [--devices] | --ratios FILE" >&2; exit 2 ;;
    esac
    shift
done
[ "$WRITES" = 1 ] || [ "$DEVICES" = 1 ] || READS=1   # no section named: the reads, as always

FILE=${BENCH_FILE:-/var/tmp/gdsroute-bench-1g.bin}
SIZE=${BENCH_SIZE:-1073741824}
REPS=${BENCH_REPS:-3}
PY=${PYTHON:-python3}
BENCH=.device/gdsroute-bench
RESULTS=${OUT:-/tmp}/bench.txt
LOG=${OUT:-/tmp}/bench-log.txt
: > "$RESULTS"
: > "$LOG"
START=$SECONDS

# The KVIKIO_* variables are read by both libraries: none may leak into the runs.
unset KVIKIO_COMPAT_MODE KVIKIO_NTHREADS KVIKIO_NUM_THREADS KVIKIO_TASK_SIZE KVIKIO_GDS_THRESHOLD \
      KVIKIO_BOUNCE_BUFFER_SIZE KVIKIO_AUTO_DIRECT_IO_READ KVIKIO_AUTO_DIRECT_IO_WRITE GDSROUTE_CUFILE_STATS \
      GDSROUTE_PAGE_CACHE_PIN_MAX GDSROUTE_CUFILE_FD BENCH_TAG BENCH_VARIANT
export CUFILE_LOGFILE_PATH=/dev/null   # no cufile.log in the working directory

[ -x "$BENCH" ] || { echo "missing $BENCH: run tools/gpu/bench-build.sh where Rust is and copy .device here" >&2; exit 1; }
ls .whl/*.whl >/dev/null 2>&1 || { echo "missing .whl: run tools/gpu/bench-build.sh and copy .whl here" >&2; exit 1; }
$PY -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | grep -v "WARNING: Running pip as" || true
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
$PY -c "import kvikio, cupy; print('kvikio', kvikio.__version__, 'cupy', cupy.__version__)" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
if [ "${BENCH_UDEV:-0}" = 1 ] && [ -x tools/gpu/udev-entry.sh ]; then
    tools/gpu/udev-entry.sh "$FILE" || true
fi
echo "/run/udev: $([ -d /run/udev ] && echo present || echo absent)"
echo "sections: reads=$READS writes=$WRITES$([ "$QUICK" = 1 ] && echo " (quick)") devices=$DEVICES"

if [ "$READS" = 1 ] || [ "$DEVICES" = 1 ]; then
    if [ ! -s "$FILE" ] || [ "$(stat -c %s "$FILE")" != "$SIZE" ]; then
        mkdir -p "$(dirname "$FILE")"
        head -c "$SIZE" /dev/urandom > "$FILE"
    fi
    cat "$FILE" > /dev/null   # warm the page cache
fi
$BENCH --help >/dev/null  # page in the binary

# run NAME LIMIT CMD...: one invocation; RESULT/NOTE lines go to $RESULTS, everything to $LOG.
run() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS rc
    echo "--- $name: $*" >> "$LOG"
    timeout "$limit" "$@" > /tmp/bench-step.txt 2>&1
    rc=$?
    cat /tmp/bench-step.txt >> "$LOG"
    grep -E '^(RESULT|NOTE) ' /tmp/bench-step.txt | tee -a "$RESULTS"
    [ "$rc" = 0 ] || { echo "!!! $name exited $rc (last lines follow)"; tail -3 /tmp/bench-step.txt; }
    echo "    ($name: $((SECONDS - t0)) s, total $((SECONDS - START)) s)"
}
G() { run "gdsroute $1" "$2" "$BENCH" --file "$FILE" --no-table "${@:3}"; }
K() { run "kvikio $1" "$2" "$PY" tools/gpu/bench-kvikio.py --file "$FILE" --no-table "${@:3}"; }

# Each step runs both implementations; the order alternates so that neither always runs second.
step() {  # step N NAME LIMIT ARGS...
    local n=$1 name=$2 limit=$3
    shift 3
    if [ $((n % 2)) = 0 ]; then G "$name" "$limit" "$@"; K "$name" "$limit" "$@"
    else K "$name" "$limit" "$@"; G "$name" "$limit" "$@"; fi
}

reads() {
    FIRST_PROCS=${BENCH_FIRST_PROCS:-3}
    echo "=== fresh-process first reads (device, big, warm; $FIRST_PROCS processes each): 16 threads auto, then default settings"
    for i in $(seq "$FIRST_PROCS"); do
        step $i "first#$i" 60 --first-only --mem device --kinds big --cache warm --threads 16 --task-sizes 4194304 --modes auto
    done
    for i in $(seq "$FIRST_PROCS"); do
        step $((i + 1)) "first-default#$i" 60 --first-only --default-settings --mem device --kinds big --cache warm
    done
    echo "=== fresh-process first reads after priming the GPU (256 MiB copied without either library first)"
    for i in 1 2 3; do
        step $i "first-primed#$i" 60 --first-only --prime-gpu --mem device --kinds big --cache warm --threads 16 --task-sizes 4194304 --modes auto
    done
    echo "=== device big warm: modes on,auto x threads ${BENCH_THREADS:=1,4,8,16}"
    step 0 device-big-on 120 --mem device --kinds big --cache warm --modes on --threads "$BENCH_THREADS" --reps "$REPS"
    step 1 device-big-auto 120 --mem device --kinds big --cache warm --modes auto --threads "$BENCH_THREADS" --reps "$REPS"
    echo "=== the same, gdsroute with its registered page cache off (bounce buffers only)"
    GDSROUTE_PAGE_CACHE_PIN_MAX=0 G device-big-on-nocache 120 --mem device --kinds big --cache warm --modes on --threads "$BENCH_THREADS" --reps "$REPS"
    # Host reads move 18-45 GB/s with a spread of +-10% between invocations on one machine
    # (2026-11-30), so several alternating invocations; the table gives the median of their lines.
    HOST_PASSES=${BENCH_HOST_PASSES:-3}
    echo "=== host big warm: threads 4,8,16, $HOST_PASSES alternating passes"
    for p in $(seq "$HOST_PASSES"); do
        step "$p" "host-big#$p" 120 --mem host --kinds big --cache warm --modes auto --threads 4,8,16 --reps "$REPS"
    done
    echo "=== device random reads 4 KiB and 64 KiB, 16 threads, 4 callers"
    step 1 device-rand 120 --mem device --kinds rand4k,rand64k --cache warm --modes auto --threads 16 --reps "$REPS"
    echo "=== default settings (device big warm)"
    step 0 defaults 120 --default-settings --mem device --kinds big --cache warm --reps "$REPS"
    # dd_read IMPL [FLAG]: one `dd` of the whole file after dropping caches, as a RESULT line of
    # impl=IMPL; FLAG is dd's iflag (direct: the disk without the page cache).
    dd_read() {
        sync; echo 3 > /proc/sys/vm/drop_caches
        local line bytes secs
        line=$(dd if="$FILE" of=/dev/null bs=4M ${2:+iflag=$2} 2>&1 | tail -1)
        echo "--- $1: $line" >> "$LOG"
        bytes=${line%% bytes*}
        secs=$(echo "$line" | sed -E 's/.*copied, ([0-9.]+) s.*/\1/')
        awk -v i="$1" -v b="$bytes" -v s="$secs" 'BEGIN { printf "RESULT impl=%s mem=device mode=on threads=16 task=4194304 cache=cold kind=big phase=steady settings=set callers=1 gbps=%.3f\n", i, b / s / 1e9 }' | tee -a "$RESULTS"
    }
    COLD_PASSES=${BENCH_COLD_PASSES:-5}
    echo "=== cold: dd iflag=direct, then device big 16 threads (2 reps, caches dropped before each), $COLD_PASSES passes"
    # The registered page cache is off here: pinned pages survive drop_caches, so with it on the
    # repetitions after the second would not be cold.
    # gdsroute right after dd in every pass (the per-pass ratio pairs them), then KvikIO.
    # Then a buffered `dd` (one stream through the page cache): what page-cache reads of this disk
    # reach at the moment, beside the direct ones (2026-11-30: 1.7-1.8 against 2.3 GB/s). Last, both
    # libraries with KVIKIO_AUTO_DIRECT_IO_READ=1 (tag direct-io; BENCH_COLD_DIRECT=0 skips them).
    for p in $(seq "$COLD_PASSES"); do
        dd_read dd direct
        GDSROUTE_PAGE_CACHE_PIN_MAX=0 G "device-big-cold#$p" 120 --mem device --kinds big --cache cold --modes on --threads 16 --reps 2
        K "device-big-cold#$p" 120 --mem device --kinds big --cache cold --modes on --threads 16 --reps 2
        dd_read dd-buffered
        if [ "${BENCH_COLD_DIRECT:-1}" = 1 ]; then
            BENCH_TAG=direct-io KVIKIO_AUTO_DIRECT_IO_READ=1 step "$p" "device-big-cold-direct#$p" 120 --mem device --kinds big --cache cold --modes on --threads 16 --reps 2
        fi
    done
    cat "$FILE" > /dev/null

    if [ "${BENCH_CUFILE_ROUTE:-1}" = 1 ] && [ "${BENCH_UDEV:-0}" != 1 ]; then
        echo "=== cuFile route: udev record written, AUTO, device big warm (both libraries call cuFile)"
        tools/gpu/udev-entry.sh "$FILE" > /dev/null || true
        BENCH_TAG=cufile-route step 0 cufile-route 180 --mem device --kinds big --cache warm --modes auto --threads 4,16 --reps 3
        # gdsroute handing cuFile an O_DIRECT descriptor as KvikIO does (GDSROUTE_CUFILE_FD=direct).
        BENCH_TAG=cufile-route BENCH_VARIANT=direct-fd GDSROUTE_CUFILE_FD=direct \
            G cufile-route-direct 180 --mem device --kinds big --cache warm --modes auto --threads 4,16 --reps 3
        rm -rf /run/udev   # as the machine came
    fi
}

# Writes: 1 GiB from device memory per timed write, into a new file (w) and rewriting a cached one
# (r+), on the disk's file system and on /dev/shm, with direct-I/O writes off and on
# (KVIKIO_AUTO_DIRECT_IO_WRITE, set per process for both libraries alike), then each library's
# defaults (nothing set); beside them the ceilings of the same file system in the same call:
# plain pwrite from pinned memory (buffered at each thread count, O_DIRECT at 1 and 16 threads)
# and dd oflag=direct. --quick: threads 1,16 and defaults, disk only.
# WFS and WFILE name the file system and file of the current pass.
GW() { rm -f "$WFILE"; run "gdsroute $1" "$2" "$BENCH" --file "$WFILE" --write --fs "$WFS" --size "$SIZE" --mem device --no-table "${@:3}"; rm -f "$WFILE"; }
KW() { rm -f "$WFILE"; run "kvikio $1" "$2" "$PY" tools/gpu/bench-kvikio.py --file "$WFILE" --write --fs "$WFS" --size "$SIZE" --mem device --no-table "${@:3}"; rm -f "$WFILE"; }
wstep() {  # wstep N NAME LIMIT ARGS...: both libraries, alternating which goes first
    local n=$1 name=$2 limit=$3
    shift 3
    if [ $((n % 2)) = 0 ]; then GW "$name" "$limit" "$@"; KW "$name" "$limit" "$@"
    else KW "$name" "$limit" "$@"; GW "$name" "$limit" "$@"; fi
}
# dd_write: one dd of SIZE zero bytes with oflag=direct into a new file, as a RESULT line.
dd_write() {
    local line bytes secs
    rm -f "$WFILE"
    line=$(timeout 60 dd if=/dev/zero of="$WFILE" bs=4M count=$((SIZE / 4194304)) oflag=direct 2>&1 | tail -1)
    rm -f "$WFILE"
    echo "--- dd-write $WFS: $line" >> "$LOG"
    case $line in
        *copied*) ;;
        *) echo "NOTE dd oflag=direct failed on fs=$WFS: $line" | tee -a "$RESULTS"; return ;;
    esac
    bytes=${line%% bytes*}
    secs=$(echo "$line" | sed -E 's/.*copied, ([0-9.]+) s.*/\1/')
    awk -v fs="$WFS" -v b="$bytes" -v s="$secs" 'BEGIN { printf "RESULT impl=dd-write dir=write mem=zero fs=%s open=w direct_write=1 mode=na threads=1 task=4194304 kind=big phase=steady settings=set callers=1 gbps=%.3f bytes=%d\n", fs, b / s / 1e9, b }' | tee -a "$RESULTS"
}
writes() {
    local threads=${BENCH_WRITE_THREADS:-1,4,8,16} systems="disk shm" dw n=0
    if [ "$QUICK" = 1 ]; then threads=1,16; systems=disk; fi
    for WFS in $systems; do
        case $WFS in
            disk) WFILE=${BENCH_WRITE_DIR:-/var/tmp}/gdsroute-bench-write.bin ;;
            shm) WFILE=/dev/shm/gdsroute-bench-write.bin ;;
        esac
        echo "=== writes, fs=$WFS ($WFILE): ceilings, dd, direct writes off then on (threads $threads), defaults"
        rm -f "$WFILE"
        run "ceiling $WFS" 180 "$BENCH" --file "$WFILE" --fs "$WFS" --size "$SIZE" --reps "$REPS" --no-table \
            --ceiling "$threads" --ceiling-direct 1,16
        rm -f "$WFILE"
        dd_write
        for dw in 0 1; do
            KVIKIO_AUTO_DIRECT_IO_WRITE=$dw wstep $((n++)) "write-$WFS-direct$dw" 180 --modes on --threads "$threads" --reps "$REPS"
        done
        wstep $((n++)) "write-$WFS-defaults" 120 --default-settings --reps "$REPS"
        rm -f "$WFILE"
    done
}

# Reads into several GPUs at once: 1 GiB warm into each listed GPU together (one caller thread
# per GPU, one shared handle), then into each alone. BENCH_DEVICES (default: 0,1 on a machine
# with two or more GPUs, else 0, which reports the one GPU alone).
devices() {
    local gpus list
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    list=${BENCH_DEVICES:-$([ "${gpus:-0}" -ge 2 ] && echo 0,1 || echo 0)}
    echo "=== reads into GPU(s) $list: each alone, then all at once if several ($gpus GPU(s) present); 16 threads ON, then defaults"
    step 0 "devices-$list" 180 --devices "$list" --modes on --threads 16 --reps "$REPS"
    step 1 "devices-$list-defaults" 180 --devices "$list" --default-settings --reps "$REPS"
}

[ "$READS" = 1 ] && reads
[ "$WRITES" = 1 ] && writes
[ "$DEVICES" = 1 ] && devices

echo
echo "=== gdsroute / KvikIO ($(grep -c '^RESULT' "$RESULTS") RESULT lines in $RESULTS, log in $LOG; $((SECONDS - START)) s)"
ratios "$RESULTS"
