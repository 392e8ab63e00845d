#!/usr/bin/env bash
# MPI ranks sharing one GPU, on the GPU machine (docs/routing.md, "MPI ranks": the figures this
# fills in). Build here first:
#   bash tools/gpu/gpu-build.sh            (.device/libgdsroute.so.0 and .device/ranks_read)
# then on the GPU machine, with .device carried:
#   bash tools/gpu/ranks.sh > ranks.txt
# RANKS (default 4) plain processes stand for the ranks: each runs tools/gpu/ranks_read.c with
# OMPI_COMM_WORLD_LOCAL_SIZE=RANKS set, as mpirun sets it (so no MPI is needed on the machine),
# and reads its slice of one file of RANKS_FILE_SIZE (default 4G) into device memory of GPU 0,
# every byte checked. The reads start together (ranks_read --go: each rank announces itself set up,
# the script then starts them all); the aggregate rate is the bytes of all ranks over the span from
# the first start to the last end. Beside it, one process reads the whole file. Each process first
# reads a small other file (--warm-with), so the pool, bounce buffers and cuFile are set up and
# the timed read is the steady rate. Configurations, the order reversed every other round:
#   single        one process, the whole file, the library's default (a process alone: one thread
#                 per usable core, 4 to 16, as before ranks counted)
#   ranks-old     RANKS ranks at the old default's count, set explicitly (--threads OLD: what a
#                 process alone gets here, 16 on the 16-core H200 machine: 64 threads in all)
#   ranks-new     RANKS ranks at the rank-aware default's count, set explicitly (--threads NEW)
#   ranks-default RANKS ranks at the library's own default (no --threads): must be NEW, else ERR
#   ranks-T       for each T of RANKS_THREADS (say "2 8"): RANKS ranks at --threads T
# each with the file in the page cache (warm: cat'ed first) and out of it (cold: drop_caches where
# writable, else ranks_read --evict, fadvise DONTNEED). Lines: RESULT per run (ERR on any failure,
# a wrong byte included), SUMMARY per configuration (the median GB/s over the rounds).
# Knobs: ROUNDS (3), RANKS (4), RANKS_FILE_SIZE (4G), RANKS_DIR (/var/tmp/ranks), RANKS_THREADS,
# RANKS_CACHES ("warm cold"), RANKS_HOST=1 (host memory: to try the script where there is no GPU),
# RANKS_DEVICE_DIR (.device: where ranks_read and libgdsroute.so.0 are).
set -u
cd "$(dirname "$0")/../.."
D=${RANKS_DEVICE_DIR:-.device}
case $D in /*) ;; *) D=$PWD/$D ;; esac
N=${RANKS:-4}
ROUNDS=${ROUNDS:-3}
SIZE=${RANKS_FILE_SIZE:-4G}
DIR=${RANKS_DIR:-/var/tmp/ranks}
FILE=$DIR/shared.bin
WARM=$DIR/warm.bin
MEM=
[ "${RANKS_HOST:-0}" = 1 ] && MEM=--host

# Only the variables set here may reach the library: no thread count, no launcher's layout.
unset KVIKIO_NTHREADS KVIKIO_NUM_THREADS OMPI_COMM_WORLD_LOCAL_SIZE MPI_LOCALNRANKS MV2_COMM_WORLD_LOCAL_SIZE \
      PALS_LOCAL_SIZE SLURM_STEP_ID SLURM_STEP_TASKS_PER_NODE SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE
export CUFILE_LOGFILE_PATH=/dev/null   # no cufile.log in the working directory
[ -x "$D/ranks_read" ] || { echo "missing $D/ranks_read: run tools/gpu/gpu-build.sh where Rust is and carry .device" >&2; exit 1; }
export LD_LIBRARY_PATH=$D
R="$D/ranks_read"
mkdir -p "$DIR"
TMPD=$(mktemp -d)
trap 'rm -rf "$TMPD"' EXIT

"$R" "$FILE" --create "$SIZE" || exit 1
"$R" "$WARM" --create 64M || exit 1
# The cold pass: drop_caches where it can be written (root, a writable /proc), else the file's
# own pages dropped (fadvise DONTNEED), which needs no privilege.
sync
if (echo 3 > /proc/sys/vm/drop_caches) 2> /dev/null; then COLD=drop_caches; else COLD="fadvise DONTNEED (drop_caches not writable)"; fi
cold() { sync; if [ "$COLD" = drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; else "$R" "$FILE" --evict; fi; }
warm() { cat "$FILE" > /dev/null; }

# The two counts, as the library computes them here: a process alone (the old default) and a rank
# of N (the rank-aware default).
threads_of() { "$@" 2>&1 | sed -n 's/^RANK .* threads=\([0-9]*\) .*/\1/p'; }
OLD=$(threads_of "$R" "$WARM" 0 1 --host --no-verify)
NEW=$(OMPI_COMM_WORLD_LOCAL_SIZE=$N threads_of "$R" "$WARM" 0 "$N" --host --no-verify)
[ -n "$OLD" ] && [ -n "$NEW" ] || { echo "ERR ranks_read cannot read $WARM: $("$R" "$WARM" 0 1 --host 2>&1 | tail -1)" >&2; exit 1; }

echo "=== $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); $ROUNDS rounds"
echo "=== $(nproc) usable cores of $(getconf _NPROCESSORS_ONLN) online; $N ranks; $FILE $(stat -c %s "$FILE") bytes on $(stat -f -c %T "$DIR"); memory ${MEM:-device}"
echo "=== threads: old default (a process alone) $OLD, rank-aware default for $N ranks $NEW; cold pass: $COLD"
echo "=== library: $("$D/gdsroute-diagnose" 2>/dev/null | grep -m1 '^gdsroute ' || echo "$LD_LIBRARY_PATH")"

# report CACHE CONFIG OUT...: one RESULT line from the RANK lines of the files OUT..., or ERR.
report() {
    local cache=$1 config=$2; shift 2
    cat "$@" | awk -v ctx="cache=$cache config=$config round=$round" -v want="$#" -v expect="${expect:-}" '
        /^RANK / {
            for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            n++; bytes += v["bytes"]; posix += v["posix_tasks"]; cufile += v["cufile_tasks"]
            if (n == 1 || v["start_ns"] < first) first = v["start_ns"]
            if (n == 1 || v["end_ns"] > last) last = v["end_ns"]
            if (n == 1 || v["gbps"] < lo) lo = v["gbps"]
            if (n == 1 || v["gbps"] > hi) hi = v["gbps"]
            threads = threads (n > 1 ? "," : "") v["threads"]
            if (v["verified"] != 1) bad++
            if (expect != "" && v["threads"] != expect) print "ERR " ctx " rank " v["rank"] " has " v["threads"] " threads, the rank-aware default is " expect
            next
        }
        /^ranks_read/ { print "ERR " ctx " " $0 }
        END {
            if (n != want) { print "ERR " ctx " " n " of " want " processes reported"; exit }
            s = (last - first) / 1e9
            printf "RESULT %s procs=%d threads=%s bytes=%d seconds=%.6f gbps=%.3f per_proc_gbps=%.3f-%.3f posix_tasks=%d cufile_tasks=%d verified=%d\n",
                   ctx, n, threads, bytes, s, (s > 0 ? bytes / s / 1e9 : 0), lo, hi, posix, cufile, (bad == 0)
        }'
}

# ranks CACHE CONFIG ARGS...: N processes with the launcher's variables, started together.
ranks() {
    local cache=$1 config=$2; shift 2
    local go=$TMPD/go.$config.$cache.$round pids=() r outs=()
    for r in $(seq 0 $((N - 1))); do
        OMPI_COMM_WORLD_LOCAL_SIZE=$N OMPI_COMM_WORLD_LOCAL_RANK=$r \
            "$R" "$FILE" "$r" "$N" --warm-with "$WARM" --go "$go" $MEM "$@" > "$TMPD/out.$r" 2>&1 < /dev/null &
        pids+=($!); outs+=("$TMPD/out.$r")
    done
    # Start them once every one is set up (or one has died: then the others are released too).
    local waited=0
    while [ "$(ls "$go".ready.* 2>/dev/null | wc -l)" -lt "$N" ] && [ $waited -lt 60000 ]; do
        local alive=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
        [ $alive -lt "$N" ] && break
        sleep 0.005; waited=$((waited + 5))
    done
    touch "$go"
    for p in "${pids[@]}"; do wait "$p" || echo "ranks_read: exit $? (rank of pid $p)" >> "$TMPD/out.0"; done
    report "$cache" "$config" "${outs[@]}"
}

single() {
    "$R" "$FILE" 0 1 --warm-with "$WARM" $MEM > "$TMPD/out.single" 2>&1 < /dev/null || echo "ranks_read: exit $?" >> "$TMPD/out.single"
    report "$1" single "$TMPD/out.single"
}

configs() {  # one a line: FUNCTION CONFIG ARGS
    echo "single"
    echo "ranks ranks-old --threads $OLD"
    echo "ranks ranks-new --threads $NEW"
    echo "ranks ranks-default"
    for t in ${RANKS_THREADS:-}; do echo "ranks ranks-$t --threads $t"; done
}

for round in $(seq "$ROUNDS"); do
    list=$(configs)
    [ $((round % 2)) = 0 ] && list=$(printf '%s\n' "$list" | tac)
    for cache in ${RANKS_CACHES:-warm cold}; do
        while read -r fn config args; do
            [ -n "$fn" ] || continue
            if [ "$cache" = warm ]; then warm; else cold; fi
            expect=
            [ "$config" = ranks-default ] && expect=$NEW
            if [ "$fn" = single ]; then single "$cache"; else ranks "$cache" "$config" $args; fi
        done <<< "$list"
    done
done | tee "$TMPD/all"

awk '/^RESULT/ {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        key = "cache=" v["cache"] " config=" v["config"] " procs=" v["procs"] " threads=" v["threads"]
        n[key]++; g[key, n[key]] = v["gbps"]
     }
     END {
        for (key in n) {
            m = n[key]
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (g[key, j] < g[key, i]) { t = g[key, i]; g[key, i] = g[key, j]; g[key, j] = t }
            med = m % 2 ? g[key, (m + 1) / 2] : (g[key, m / 2] + g[key, m / 2 + 1]) / 2
            printf "SUMMARY %s runs=%d gbps_median=%.3f min=%.3f max=%.3f\n", key, m, med, g[key, 1], g[key, m]
        }
     }' "$TMPD/all" | sort
echo "=== done in ${SECONDS}s"
