#!/usr/bin/env bash
# Issue 24's figures in one call on the GPU machine, side by side with KvikIO 26.10: on the POSIX
# route (no udev record) and on cuFile's (udev record written), gdsroute's figures tests of
# tests/gpu_stream.rs (blocked time and rates on a non-blocking stream, overlap, and the relayed
# calls on blocking and legacy streams, each beside its own `pread`/`pwrite` of the same file,
# the route's ceiling in that process), then KvikIO's read_async on the same route
# (tools/gpu/stream_kvikio.py), and the page cache's rate with 16 readers.
# Build here first: bash tools/gpu/gpu-build.sh; there, with .device and .whl carried:
#   bash tools/gpu/stream-side-by-side.sh      (ROUTES="posix cufile" by default; OVERLAP=0: without
#                                              the overlap figures; GDSROUTE_TEST_RATE_ROUNDS=9: medians
#                                              of 9, for writes whose disk rate moves between runs;
#                                              GDSROUTE_TEST_WRITE_DIR=/dev/shm: the rates' writes into
#                                              tmpfs, without the disk's write-back, POSIX route only)
set -u
cd "$(dirname "$0")/../.."
D=.device; export LD_LIBRARY_PATH=$PWD/$D
echo "=== $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
f=/var/tmp/kvikio-stream.bin
[ -f $f ] || head -c 1G /dev/urandom > $f
cat $f > /dev/null
# The page cache's rate with 16 readers (16 `dd`s of 64 MiB each): what host threads can take out
# of it; the copy engine's rate is each figure's `pread` beside it.
s=$(date +%s.%N)
for i in $(seq 0 15); do dd if=$f of=/dev/null bs=4M skip=$((i * 16)) count=16 status=none & done; wait
e=$(date +%s.%N)
echo "FIGURE ceiling: the warm 1 GiB file read by 16 dd processes $(python3 -c "print(round(1.073741824 / ($e - $s), 2))") GB/s"
figures() {
    local name=$1 route=$2
    timeout -s KILL "${LIMIT:-150}" "$D/gpu_stream" --ignored --exact "$name" --nocapture --test-threads 1 > /tmp/f.log 2>&1
    local rc=$?
    echo "TEST $route $name rc=$rc"
    [ $rc = 0 ] || tail -20 /tmp/f.log
    grep -o 'FIGURE .*' /tmp/f.log | sed "s/^FIGURE /FIGURE [$route] /"
}
for route in ${ROUTES:-posix cufile}; do
    if [ "$route" = cufile ]; then bash tools/gpu/udev-entry.sh /var/tmp > /dev/null; else rm -rf /run/udev; fi
    figures figures_blocked_time_and_rates_printed "$route"
    [ "${OVERLAP:-1}" = 0 ] || figures figures_overlap_printed "$route"
    [ "$route" = posix ] && figures figures_relayed_printed "$route"
    echo "=== KvikIO 26.10 stream-ordered read, $route route, 16 threads"
    PYTHONPATH=/tmp/site KVIKIO_NTHREADS=16 timeout 200 python3 tools/gpu/stream_kvikio.py $f 2>&1 \
        | grep -E 'FIGURE|Error|error' | sed "s/^FIGURE /FIGURE [$route] /" | head
done
rm -rf /run/udev
