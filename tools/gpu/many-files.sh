#!/usr/bin/env bash
# Many small files into device memory, side by side with KvikIO and with the library of commit
# 48335fe, on the GPU machine (issue 25, "many files at the copy engine's speed"). Build here first:
#   bash tools/gpu/gpu-build.sh            (.device/libgdsroute.so)
#   bash tools/gpu/many-files-build.sh     (.device/many_files, .device/before48335fe/)
# then on the GPU machine, with .device and .whl carried:
#   bash tools/gpu/many-files.sh > many.txt; python3 tools/gpu/many-files-summary.py many.txt
# Workloads: a = 512 files of 2 MiB, b = 4096 files of 64 KiB, in /var/tmp/many-files/{a,b}
# (MANY_FILES_DIR), written once (tools/gpu/many_files.c writes a missing file) and in the page cache
# (every program reads each file once, untimed, before its timed part). ROUNDS rounds (default 5),
# the order of the configurations reversed every other round:
#   gdsroute serial, serial-read, inflight, batch (device memory, the library's default threads),
#   and serial, inflight, batch with --warm-up (file 0 read once before the timed part);
#   serial and inflight with GDSROUTE_MIN_TASK_SIZE=0 (impl gdsroute-min0: small reads not spread);
#   the library of 48335fe in serial mode (the same binary: it links only calls that library has);
#   KvikIO serial and inflight at KVIKIO_NTHREADS=1 and 16, and at 16 with --warm-up;
#   the machine's page-cache read rate: one cat of every file to /dev/null, and 16 cats at once.
# The POSIX route (no udev record: /run/udev removed). MANY_CUFILE=1 adds one round on the cuFile
# route (tools/gpu/udev-entry.sh writes the record of the directory's file system; cuFile's
# driver open then falls in the first file's read unless --warm-up). MANY_THREADS="4 16" adds
# gdsroute serial, inflight and batch at those --threads. After the rounds, one traced serial run per
# workload (PHASE lines: open, read and free of the first 32 files, cold and with --warm-up).
# Every result is a MANY line (cat's with impl=cat), a traced file a PHASE line; ERR lines are
# failures. MANY_BUDGET_S (default 420) stops starting rounds after that many seconds;
# MANY_WORKLOADS ("a:512:2M b:4096:64K") and MANY_HOST=1 (host memory) are for trying it elsewhere;
# MANY_LIB_DIR (default .device) is the directory of the libgdsroute.so.0 measured.
set -u
cd "$(dirname "$0")/../.."
D=.device
ROUNDS=${ROUNDS:-5}
DIR=${MANY_FILES_DIR:-/var/tmp/many-files}
BASE=${MANY_FILES_BASE:-48335fe}
BUDGET=${MANY_BUDGET_S:-420}
PY=${PYTHON:-python3}

# The KVIKIO_* variables are read by both libraries: none may leak into the runs.
unset KVIKIO_COMPAT_MODE KVIKIO_NTHREADS KVIKIO_NUM_THREADS KVIKIO_TASK_SIZE KVIKIO_GDS_THRESHOLD \
      KVIKIO_BOUNCE_BUFFER_SIZE KVIKIO_AUTO_DIRECT_IO_READ KVIKIO_AUTO_DIRECT_IO_WRITE
export CUFILE_LOGFILE_PATH=/dev/null   # no cufile.log in the working directory

[ -x "$D/many_files" ] || { echo "missing $D/many_files: run tools/gpu/many-files-build.sh where Rust is and carry .device" >&2; exit 1; }
[ -f "$D/before$BASE/libgdsroute.so.0" ] || { echo "missing $D/before$BASE: run tools/gpu/many-files-build.sh" >&2; exit 1; }
if [ -d .whl ]; then
    $PY -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>&1 | grep -v "^WARNING" || true
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export LD_LIBRARY_PATH=${MANY_LIB_DIR:-$PWD/$D}
# Whether the batch mode runs: built against a header with the batch API, and the library has it
# (one file of 4 KiB in $DIR/probe).
HAVE_BATCH=0
"$D/many_files" "$DIR/probe" 1 4096 batch --host --no-verify > /dev/null 2>&1 && HAVE_BATCH=1

echo "=== $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); $ROUNDS rounds"
echo "=== $(nproc) cores; RLIMIT_NOFILE soft $(ulimit -Sn) hard $(ulimit -Hn) (the programs raise the soft limit); $DIR on $(stat -f -c %T "$(dirname "$DIR")")"
echo "=== library $LD_LIBRARY_PATH; kvikio $($PY -c 'import kvikio; print(kvikio.__version__)' 2>/dev/null || echo missing); batch mode $([ $HAVE_BATCH = 1 ] && echo runs || echo "skipped: $("$D/many_files" "$DIR/probe" 1 4096 batch --host --no-verify 2>&1 | tail -1)")"
if command -v nm > /dev/null; then
    for s in file_open file_pread op_wait op_free file_free file_read stats_get settings_get_num_threads settings_set_num_threads; do
        nm -D --defined-only "$D/before$BASE/libgdsroute.so.0" | grep -q " gdsroute_$s@" \
            || echo "ERR the library of $BASE lacks gdsroute_$s"
    done
fi

WORKLOADS=${MANY_WORKLOADS:-a:512:2M b:4096:64K}  # NAME:COUNT:SIZE ...
# MANY_HOST=1: host memory instead (--host), to try the script on a machine without a GPU.
MEM=
[ "${MANY_HOST:-0}" = 1 ] && MEM=--host
route=posix
round=0

# run_one IMPL COMMAND...: runs one program, prefixes its result lines with the context.
run_one() {
    local impl=$1; shift
    local out rc
    out=$("$@" $MEM 2>&1 < /dev/null); rc=$?
    printf '%s\n' "$out" | awk -v ctx="route=$route workload=$wl round=$round" -v impl="$impl" -v rc="$rc" '
        /^MANY / { sub(/^MANY /, ""); sub(/impl=[^ ]* /, ""); print "MANY " ctx " impl=" impl " " $0; next }
        /^PHASE / { sub(/^PHASE /, ""); print "PHASE " ctx " impl=" impl " " $0; next }
        /wrote [0-9]+ of [0-9]+ files|^many_files: note:/ { print "NOTE " ctx " impl=" impl " " $0; next }
        /^(many_files|usage|Traceback|[A-Za-z]*Error)/ { print "ERR " ctx " impl=" impl " " $0 }
        END { if (rc != 0) print "ERR " ctx " impl=" impl " exit=" rc }'
}
G() { run_one gdsroute "$D/many_files" "$DIR/$wl" "$n" "$sz" "$@"; }
# The same library with small reads not spread over the pool (KvikIO's split, GDSROUTE_MIN_TASK_SIZE=0).
G0() { GDSROUTE_MIN_TASK_SIZE=0 run_one gdsroute-min0 "$D/many_files" "$DIR/$wl" "$n" "$sz" "$@"; }
GB() { LD_LIBRARY_PATH=$PWD/$D/before$BASE run_one "gdsroute-$BASE" "$D/many_files" "$DIR/$wl" "$n" "$sz" "$@"; }
K() { local t=$1; shift; KVIKIO_NTHREADS=$t run_one kvikio $PY tools/gpu/many_files_kvikio.py "$DIR/$wl" "$n" "$sz" "$@"; }
# The page-cache read rate: one cat of every file, and 16 at once (xargs -P16).
C() {
    local s e
    s=$(date +%s%N); cat "$DIR/$wl"/f*.bin > /dev/null; e=$(date +%s%N)
    awk -v ctx="route=$route workload=$wl round=$round" -v n="$n" -v b="$bytes" -v ns=$((e - s)) 'BEGIN {
        s = ns / 1e9; printf "MANY %s impl=cat mode=page-cache files=%d size=%d threads=1 seconds=%.6f files_per_s=%.1f gbps=%.3f\n", ctx, n, b / n, s, n / s, b / s / 1e9 }'
    s=$(date +%s%N); (cd "$DIR/$wl" && ls | grep '^f.*\.bin$' | xargs -P 16 -n $(( (n + 15) / 16 )) cat > /dev/null); e=$(date +%s%N)
    awk -v ctx="route=$route workload=$wl round=$round" -v n="$n" -v b="$bytes" -v ns=$((e - s)) 'BEGIN {
        s = ns / 1e9; printf "MANY %s impl=cat mode=page-cache files=%d size=%d threads=16 seconds=%.6f files_per_s=%.1f gbps=%.3f\n", ctx, n, b / n, s, n / s, b / s / 1e9 }'
}

configs() {  # one configuration a line
    echo "G serial"; echo "G serial-read"; echo "G inflight"
    [ $HAVE_BATCH = 1 ] && echo "G batch"
    echo "G serial --warm-up"; echo "G inflight --warm-up"
    [ $HAVE_BATCH = 1 ] && echo "G batch --warm-up"
    for t in ${MANY_THREADS:-}; do
        echo "G serial --threads $t"; echo "G inflight --threads $t"
        [ $HAVE_BATCH = 1 ] && echo "G batch --threads $t"
    done
    echo "G0 serial"; echo "G0 inflight"
    echo "GB serial"
    echo "K 1 serial"; echo "K 1 inflight"; echo "K 16 serial"; echo "K 16 inflight"
    echo "K 16 serial --warm-up"; echo "K 16 inflight --warm-up"
}

trace_serial() {  # the phases of the first 32 files of each workload, cold and with --warm-up
    for w in $WORKLOADS; do
        IFS=: read -r wl n sz <<< "$w"
        G serial --trace-each 32 --no-verify
        G serial --trace-each 32 --no-verify --warm-up
    done
}

one_round() {  # $1: odd or even (the order)
    local order=$1 wls=$WORKLOADS
    [ "$order" = even ] && wls=$(echo $WORKLOADS | tr ' ' '\n' | tac | tr '\n' ' ')
    for w in $wls; do
        IFS=: read -r wl n sz <<< "$w"
        bytes=$(( n * $(numfmt --from=iec "$sz") ))
        C
        local list
        if [ "$order" = odd ]; then list=$(configs); else list=$(configs | tac); fi
        while read -r cfg; do
            [ -n "$cfg" ] && eval "$cfg"
        done <<< "$list"
    done
}

rm -rf /run/udev
echo "=== the files (written once; later runs find them)"
for w in $WORKLOADS; do
    IFS=: read -r wl n sz <<< "$w"
    mkdir -p "$DIR/$wl"
    MEM= run_one prepare "$D/many_files" "$DIR/$wl" "$n" "$sz" serial --host --no-verify | sed 's/^MANY /PREP /'
done

echo "=== POSIX route (no udev record)"
for r in $(seq "$ROUNDS"); do
    if [ "$SECONDS" -gt "$BUDGET" ]; then echo "=== budget of ${BUDGET}s reached after $((r - 1)) rounds"; break; fi
    round=$r
    if [ $((r % 2)) = 1 ]; then one_round odd; else one_round even; fi
done
echo "=== POSIX route: phases of the first 32 files (serial)"
round=trace
trace_serial

if [ "${MANY_CUFILE:-0}" = 1 ] && [ "$SECONDS" -gt "$BUDGET" ]; then
    echo "=== cuFile route skipped: the budget of ${BUDGET}s is spent (fewer ROUNDS leave room for it)"
elif [ "${MANY_CUFILE:-0}" = 1 ]; then
    echo "=== cuFile route ($(bash tools/gpu/udev-entry.sh "$DIR/a"))"
    route=cufile round=1
    one_round odd
    round=trace
    trace_serial
    rm -rf /run/udev
fi
echo "=== done in ${SECONDS}s"
