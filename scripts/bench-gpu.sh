#!/usr/bin/env bash
# Runs gdsroute-bench and scripts/bench-kvikio.py side by side on the GPU machine, on the same
# 1 GiB file, in one call (about 4-6 minutes on the H200; every step has a time limit). Needs
# .device/ and .whl/ from scripts/bench-build.sh (carried). Method: docs/performance.md.
#
#   scripts/bench-gpu.sh                 # the whole matrix; RESULT lines to $OUT/bench.txt if $OUT is set
#   scripts/bench-gpu.sh --ratios FILE   # only the gdsroute/KvikIO ratio table of a file of RESULT lines
#
# Environment: BENCH_FILE (default /var/tmp/gdsroute-bench-1g.bin), BENCH_SIZE (1073741824), BENCH_REPS (3),
# PYTHON (python3),
# BENCH_FIRST_PROCS (3: fresh processes per first-read configuration), BENCH_COLD_PASSES (5: dd iflag=direct,
# both libraries cold, then a buffered dd, then both with direct I/O unless BENCH_COLD_DIRECT=0), BENCH_HOST_PASSES (3: alternating host-read invocations),
# BENCH_UDEV=1 to write the udev record first (scripts/udev-entry.sh: AUTO then uses cuFile),
# BENCH_CUFILE_ROUTE=0 to skip the closing cuFile-route steps (udev record written, then removed).
set -uo pipefail
cd "$(dirname "$0")/.."

ratios() {
    python3 - "$1" <<'PY'
import statistics, sys
from collections import defaultdict

KEY = ["mem", "mode", "threads", "task", "cache", "kind", "phase", "settings", "callers", "primed", "tag"]
DEFAULT_KEY = ["mem", "cache", "kind", "phase", "settings", "callers", "primed", "tag"]  # settings differ by design
rows = defaultdict(lambda: defaultdict(list))
order = []
bases = {}
for line in open(sys.argv[1]):
    if not line.startswith("RESULT "):
        continue
    f = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
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
    return "-".rjust(int(spec.split(".")[0])) if v is None else format(v, spec)

print(f"{'gdsroute':>9} {'kvikio':>9} {'ratio':>6} {'cpu g/k':>8} {'n g/k':>6}  configuration")
borrowed = {bases[key] for key in order if bases[key] != key}
for key in order:
    g, k = rows[key].get("gdsroute", []), rows[key].get("kvikio", [])
    if not g and key in borrowed:
        continue  # KvikIO's lines are shown beside the gdsroute variant that uses them
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
print("GB/s: median over the lines of each side (fresh-process first reads: one line per process);")
print("ratio = gdsroute/KvikIO GB/s (reads/s for rand kinds is the same ratio); cpu g/k = CPU s/GB ratio, lower is better for gdsroute")
PY
}

if [ "${1:-}" = "--ratios" ]; then
    ratios "$2"
    exit
fi

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
      KVIKIO_BOUNCE_BUFFER_SIZE KVIKIO_AUTO_DIRECT_IO_READ GDSROUTE_CUFILE_STATS GDSROUTE_PAGE_CACHE_PIN_MAX GDSROUTE_CUFILE_FD \
      BENCH_TAG BENCH_VARIANT
export CUFILE_LOGFILE_PATH=/dev/null   # no cufile.log in the working directory

[ -x "$BENCH" ] || { echo "missing $BENCH: run scripts/bench-build.sh where Rust is and copy .device here" >&2; exit 1; }
ls .whl/*.whl >/dev/null 2>&1 || { echo "missing .whl: run scripts/bench-build.sh and copy .whl here" >&2; exit 1; }
$PY -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | grep -v "WARNING: Running pip as" || true
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
$PY -c "import kvikio, cupy; print('kvikio', kvikio.__version__, 'cupy', cupy.__version__)" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
if [ "${BENCH_UDEV:-0}" = 1 ] && [ -x scripts/udev-entry.sh ]; then
    scripts/udev-entry.sh "$FILE" || true
fi
echo "/run/udev: $([ -d /run/udev ] && echo present || echo absent)"

if [ ! -s "$FILE" ] || [ "$(stat -c %s "$FILE")" != "$SIZE" ]; then
    mkdir -p "$(dirname "$FILE")"
    head -c "$SIZE" /dev/urandom > "$FILE"
fi
cat "$FILE" > /dev/null   # warm the page cache
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
K() { run "kvikio $1" "$2" "$PY" scripts/bench-kvikio.py --file "$FILE" --no-table "${@:3}"; }

# Each step runs both implementations; the order alternates so that neither always runs second.
step() {  # step N NAME LIMIT ARGS...
    local n=$1 name=$2 limit=$3
    shift 3
    if [ $((n % 2)) = 0 ]; then G "$name" "$limit" "$@"; K "$name" "$limit" "$@"
    else K "$name" "$limit" "$@"; G "$name" "$limit" "$@"; fi
}

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
    scripts/udev-entry.sh "$FILE" > /dev/null || true
    BENCH_TAG=cufile-route step 0 cufile-route 180 --mem device --kinds big --cache warm --modes auto --threads 4,16 --reps 3
    # gdsroute handing cuFile an O_DIRECT descriptor as KvikIO does (GDSROUTE_CUFILE_FD=direct).
    BENCH_TAG=cufile-route BENCH_VARIANT=direct-fd GDSROUTE_CUFILE_FD=direct \
        G cufile-route-direct 180 --mem device --kinds big --cache warm --modes auto --threads 4,16 --reps 3
    rm -rf /run/udev   # as the machine came
fi

echo
echo "=== gdsroute / KvikIO ($(grep -c '^RESULT' "$RESULTS") RESULT lines in $RESULTS, log in $LOG; $((SECONDS - START)) s)"
ratios "$RESULTS"
