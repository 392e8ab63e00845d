#!/usr/bin/env bash
# Two builds of gdsroute side by side on the GPU machine, in one call: 5 interleaved rounds (the
# order alternates each round), each round one fresh process per configuration and build: warm
# 1 GiB device reads at 4, 8 and 16 threads and at the library's defaults, and 1 GiB device writes
# at the defaults (new file and rewrite). Every process makes the same number of reads of the file
# before the one it reports (--reps), so the registered page cache is in the same state on both
# sides. KvikIO runs once per read configuration in the same call, and the page-cache ceiling
# (dd, one stream) is measured there too. RESULT lines to $OUT/before-after.txt, then the table.
#
#   tools/gpu/bench-before-after.sh BEFORE_BENCH AFTER_BENCH
#
# Environment: BENCH_FILE (/var/tmp/gdsroute-bench-1g.bin), ROUNDS (5), REPS (5), WFILE
# (/var/tmp/gdsroute-ba-write.bin), KVIKIO=0 to skip KvikIO (needs .whl/, see bench-build.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
BEFORE=$1 AFTER=$2
FILE=${BENCH_FILE:-/var/tmp/gdsroute-bench-1g.bin}
ROUNDS=${ROUNDS:-5} REPS=${REPS:-5}
WFILE=${WFILE:-/var/tmp/gdsroute-ba-write.bin}
RESULTS=${OUT:-/tmp}/before-after.txt
: > "$RESULTS"
unset KVIKIO_COMPAT_MODE KVIKIO_NTHREADS KVIKIO_NUM_THREADS KVIKIO_TASK_SIZE KVIKIO_GDS_THRESHOLD \
      KVIKIO_BOUNCE_BUFFER_SIZE KVIKIO_AUTO_DIRECT_IO_READ KVIKIO_AUTO_DIRECT_IO_WRITE GDSROUTE_CUFILE_STATS \
      GDSROUTE_PAGE_CACHE_PIN_MAX GDSROUTE_CUFILE_FD
export CUFILE_LOGFILE_PATH=/dev/null
echo "/run/udev: $([ -d /run/udev ] && echo present || echo absent)"
[ -s "$FILE" ] && [ "$(stat -c %s "$FILE")" = 1073741824 ] || head -c 1073741824 /dev/urandom > "$FILE"
cat "$FILE" > /dev/null

# one BUILD-LABEL BINARY ARGS...: a fresh process; its RESULT lines tagged with the build.
one() {
    local label=$1 bin=$2
    shift 2
    timeout 120 "$bin" "$@" --no-table 2>/dev/null | grep '^RESULT ' | sed "s/^RESULT /RESULT build=$label /" | tee -a "$RESULTS"
}
configs=("--threads 4" "--threads 8" "--threads 16" "--default-settings")
for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order="before after"; else order="after before"; fi
    for label in $order; do
        bin=$BEFORE; [ "$label" = after ] && bin=$AFTER
        for c in "${configs[@]}"; do
            # shellcheck disable=SC2086 # the configuration is a list of words
            one "$label" "$bin" --file "$FILE" --mem device --kinds big --cache warm --modes auto --reps "$REPS" $c
        done
        rm -f "$WFILE"
        one "$label" "$bin" --file "$WFILE" --write --size 1073741824 --mem device --default-settings --reps 3
        rm -f "$WFILE"
    done
done

if [ "${KVIKIO:-1}" = 1 ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | grep -v "WARNING: Running pip as" || true
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    for c in "${configs[@]}"; do
        # shellcheck disable=SC2086
        timeout 180 python3 tools/gpu/bench-kvikio.py --file "$FILE" --mem device --kinds big --cache warm --modes auto --reps "$REPS" $c --no-table 2>/dev/null \
            | grep '^RESULT ' | sed 's/^RESULT /RESULT build=kvikio /' | tee -a "$RESULTS"
    done
fi
for i in 1 2 3; do
    gbps=$(dd if="$FILE" of=/dev/null bs=4M 2>&1 | grep -o '[0-9.]* GB/s' | cut -d' ' -f1)
    echo "RESULT build=ceiling impl=dd kind=page-cache-one-stream gbps=$gbps" | tee -a "$RESULTS"
done

python3 - "$RESULTS" <<'PY'
import statistics, sys
from collections import defaultdict
rows = defaultdict(lambda: defaultdict(list))
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    if f.get("build") == "ceiling":
        rows[("ceiling dd page cache, one stream",)][f["build"]].append(float(f["gbps"]))
        continue
    key = (f.get("dir", "read"), f.get("settings"), f.get("threads") if f.get("settings") != "default" else "default", f.get("open", "-"))
    rows[key][f["build"]].append(float(f["gbps"]))
print(f"{'configuration':40} {'before min/med':>15} {'after min/med':>15} {'kvikio':>7} verdict")
for key, b in rows.items():
    if key[0].startswith("ceiling"):
        print(f"{key[0]:40} median {statistics.median(b['ceiling']):.2f} GB/s")
        continue
    bef, aft, kv = b.get("before", []), b.get("after", []), b.get("kvikio", [])
    if not bef or not aft:
        continue
    ok = statistics.median(aft) >= min(bef)
    name = " ".join(k for k in key if k and k != "-")
    kvs = f"{statistics.median(kv):7.2f}" if kv else "      -"
    print(f"{name:40} {min(bef):6.2f}/{statistics.median(bef):6.2f}  {min(aft):6.2f}/{statistics.median(aft):6.2f}  {kvs} {'ok' if ok else 'BELOW old minimum'} (n={len(bef)}/{len(aft)})")
PY
