#!/usr/bin/env bash
# The HDF5 driver's figures (issue 28; docs/performance.md, "HDF5 driver (issue 28)"): a SIZE
# contiguous dataset read into device memory and written from it, three ways in turn, each run a
# fresh process of tools/hdf5/bench_hdf5.c: through the gdsroute HDF5 driver (driver-read,
# driver-write), gdsroute_file_pread/_pwrite of the same bytes (pread-read, pwrite-write), and
# what such a program does today, sec2 into host memory and a copy (sec2-read, sec2-write).
# KvikIO is not run beside it: it has no HDF5 driver. Build here first:
#   bash tools/hdf5/bench-build.sh                      (.device/hdf5/: the bench, the driver, HDF5)
# then on the GPU machine, carrying .device/hdf5:
#   SIZE=1G ROUNDS=5 bash tools/hdf5/bench.sh > hdf5.txt
#   bash tools/hdf5/bench.sh --summary hdf5.txt         (the summary of an earlier output, anywhere)
# ROUNDS rounds of the six modes, reads then writes, the order within each reversed every other
# round. Before every run the written files are removed and `sync` run (no dirty pages of an
# earlier run pending), and before every read the file is read once with cat (warm in the page
# cache): every run starts from the same state, and no process has read the file before, which
# would change its route (docs/routing.md, "Registered page cache"). Each process first makes one
# untimed transfer of its mode with a small other file (--warm-with; HDF5_BENCH_COLD_PROCESS=1:
# none, the timed transfer is the process's first).
# Knobs: SIZE (1G), ROUNDS (5), FILE_DIR (/var/tmp/gdsroute-hdf5), MEMORY (auto: device memory where
# a GPU is usable, else host; device: fail without one), BENCH_DIR (.device/hdf5), BUDGET_S (480:
# no round starts after that many seconds). The udev record (/run/udev) is left as found and
# reported: without it AUTO takes gdsroute's POSIX route (bounce buffers).
# Lines: HDF5 (one run: round= and the program's fields), NOTE, ERR (a failure), then SUMMARY
# (median GB/s per mode over its verified runs) and RATIO (driver / pread, against the issue's 0.9).
set -u
cd "$(dirname "$0")/../.."
READS="driver-read pread-read sec2-read"
WRITES="driver-write pwrite-write sec2-write"

summarize() {  # FILE: the SUMMARY and RATIO lines of its HDF5 lines
    local file=$1 mode vals n median failed
    declare -A med=()
    for mode in $READS $WRITES; do
        local lines
        lines=$(grep "^HDF5 .* mode=$mode " "$file" | grep ' verified=1')
        vals=$(printf '%s\n' "$lines" | sed -n 's/.* gbps=\([0-9.]*\) .*/\1/p' | sort -g)
        n=$(printf '%s\n' "$vals" | grep -c .)
        failed=$(grep -c "^ERR .* mode=$mode .*exit=" "$file")
        if [ "$n" = 0 ]; then echo "SUMMARY mode=$mode runs=0 failed=$failed"; continue; fi
        median=$(printf '%s\n' "$vals" | awk -v n="$n" '{ v[NR] = $1 } END {
            if (n % 2) printf "%.3f", v[(n + 1) / 2]; else printf "%.3f", (v[n / 2] + v[n / 2 + 1]) / 2 }')
        med[$mode]=$median
        printf 'SUMMARY mode=%s runs=%s gbps_median=%s gbps_min=%s gbps_max=%s mem=%s copy=%s route=%s threads=%s failed=%s\n' \
            "$mode" "$n" "$median" "$(printf '%s\n' "$vals" | head -1)" "$(printf '%s\n' "$vals" | tail -1)" \
            "$(printf '%s\n' "$lines" | sed -n 's/.* mem=\([^ ]*\) .*/\1/p' | sort -u | paste -sd,)" \
            "$(printf '%s\n' "$lines" | sed -n 's/.* copy=\([^ ]*\) .*/\1/p' | sort -u | paste -sd,)" \
            "$(printf '%s\n' "$lines" | sed -n 's/.* route=\([^ ]*\) .*/\1/p' | sort -u | paste -sd,)" \
            "$(printf '%s\n' "$lines" | sed -n 's/.* threads=\([^ ]*\) .*/\1/p' | sort -u | paste -sd,)" \
            "$failed"
    done
    local dir driver raw sec2
    for dir in read write; do
        driver=${med[driver-$dir]:-} sec2=${med[sec2-$dir]:-}
        if [ $dir = read ]; then raw=${med[pread-read]:-}; else raw=${med[pwrite-write]:-}; fi
        if [ -z "$driver" ] || [ -z "$raw" ] || [ -z "$sec2" ]; then echo "RATIO dir=$dir incomplete"; continue; fi
        awk -v d="$dir" -v a="$driver" -v p="$raw" -v s="$sec2" 'BEGIN {
            raw = (d == "read") ? "pread" : "pwrite"; met = (a / p >= 0.9) ? "yes" : "no"
            printf "RATIO dir=%s driver/%s=%.3f sec2/%s=%.3f driver/sec2=%.3f target=0.9 met=%s\n", d, raw, a / p, raw, s / p, a / s, met }'
    done
}

if [ "${1:-}" = --summary ]; then
    [ -f "${2:-}" ] || { echo "usage: $0 --summary FILE" >&2; exit 2; }
    summarize "$2"
    exit 0
fi

BIN=${BENCH_DIR:-.device/hdf5}
[[ $BIN = /* ]] || BIN=$PWD/$BIN
SIZE=${SIZE:-1G}
ROUNDS=${ROUNDS:-5}
DIR=${FILE_DIR:-/var/tmp/gdsroute-hdf5}
MEMORY=${MEMORY:-auto}
BUDGET=${BUDGET_S:-480}
die() { echo "ERR $*"; echo "bench.sh: $*" >&2; exit 1; }

# The KVIKIO_* variables set gdsroute's settings: none may leak into the runs.
unset KVIKIO_COMPAT_MODE KVIKIO_NTHREADS KVIKIO_NUM_THREADS KVIKIO_TASK_SIZE KVIKIO_GDS_THRESHOLD \
      KVIKIO_BOUNCE_BUFFER_SIZE KVIKIO_AUTO_DIRECT_IO_READ KVIKIO_AUTO_DIRECT_IO_WRITE
export CUFILE_LOGFILE_PATH=/dev/null   # no cufile.log in the working directory
export LD_LIBRARY_PATH=$BIN

# What was carried must load here (tools/hdf5/bench-build.sh, what it assumes).
[ -x "$BIN/bench_hdf5" ] || die "missing $BIN/bench_hdf5: run tools/hdf5/bench-build.sh where Rust and HDF5 are, and carry .device/hdf5"
need=$(sed -n 's/^glibc //p' "$BIN/NEEDS" 2>/dev/null)
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
if [ -n "$need" ] && [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    die "this machine's glibc is $have; the libraries in $BIN need $need or newer (built on a newer system than this one)"
fi
if command -v ldd > /dev/null; then
    missing=$(ldd "$BIN/bench_hdf5" 2>&1 | grep -E 'not found' | sed 's/^[[:space:]]*//' | paste -sd';')
    [ -z "$missing" ] || die "libraries that do not load with LD_LIBRARY_PATH=$BIN: $missing"
fi
version=$("$BIN/bench_hdf5" version 2>&1) || die "$BIN/bench_hdf5 does not start: $version"
bytes=$(numfmt --from=iec "$SIZE" 2>/dev/null) || die "SIZE=$SIZE: a number of bytes with an optional K, M or G"
WARM_SIZE=64M
[ "$bytes" -ge $((64 << 20)) ] || WARM_SIZE=$SIZE

mkdir -p "$DIR" || die "cannot create $DIR"
R=$DIR/read-$SIZE.h5 WARM=$DIR/warm-$WARM_SIZE.h5 W=$DIR/write.h5 WW=$DIR/warm-write.h5
LOG=$(mktemp)
trap 'rm -f "$LOG" "$W" "$WW"' EXIT

echo "=== $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)"
echo "=== $(nproc) cores; SIZE=$SIZE ($bytes bytes) ROUNDS=$ROUNDS MEMORY=$MEMORY; $DIR on $(findmnt -no FSTYPE -T "$DIR" 2>/dev/null || stat -f -c %T "$DIR"), $(df -h --output=avail "$DIR" | tail -1 | tr -d ' ') free"
echo "=== ${version#VERSION }; glibc $have (the carried libraries need ${need:-?}); udev record $([ -d /run/udev ] && echo present || echo absent)"
for pair in "$R:$SIZE" "$WARM:$WARM_SIZE"; do
    f=${pair%%:*} s=${pair#*:}
    [ -f "$f" ] || "$BIN/bench_hdf5" make "$f" "$s" || die "cannot make $f"
done

# run_one MODE: one fresh process, its lines prefixed with the round.
run_one() {
    local mode=$1 file=$W warm=$WW out rc
    case $mode in *-read) file=$R warm=$WARM ;; esac
    rm -f "$W" "$WW"
    sync
    case $mode in *-read) cat "$R" > /dev/null ;; esac
    local args=(--memory "$MEMORY")
    [ "${HDF5_BENCH_COLD_PROCESS:-0}" = 1 ] || args+=(--warm-with "$warm")
    out=$("$BIN/bench_hdf5" "$mode" "$file" "$SIZE" "${args[@]}" 2>&1 < /dev/null); rc=$?
    printf '%s\n' "$out" | awk -v r="$round" -v rc="$rc" -v mode="$mode" '
        /^HDF5 / { sub(/^HDF5 /, ""); print "HDF5 round=" r " " $0; next }
        /^NOTE / { if (r == 1) print; next }
        rc != 0 && NF > 0 { print "ERR round=" r " mode=" mode " | " $0 }
        END { if (rc != 0) print "ERR round=" r " mode=" mode " exit=" rc }' | tee -a "$LOG"
}

round=0
for r in $(seq "$ROUNDS"); do
    if [ "$SECONDS" -gt "$BUDGET" ]; then echo "=== budget of ${BUDGET}s reached after $((r - 1)) rounds"; break; fi
    round=$r
    order="$READS $WRITES"
    [ $((r % 2)) = 0 ] && order=$(echo "$READS" | tr ' ' '\n' | tac | tr '\n' ' ')$(echo "$WRITES" | tr ' ' '\n' | tac | tr '\n' ' ')
    for mode in $order; do run_one "$mode"; done
done
echo "=== summary (median of the verified runs; GB/s = bytes / seconds of the data call / 1e9)"
summarize "$LOG"
echo "=== done in ${SECONDS}s"
