#!/usr/bin/env bash
# The shortest GPU check of the relayed calls and the first read, for a call with little device
# time: the relayed read, write and many-calls tests of tests/gpu_stream.rs (no udev record), the
# relayed figures, and a few fresh first reads (default, the library in .device/before, and the
# warm-process baseline). Build here first: bash tools/gpu/gpu-build.sh && bash
# tools/gpu/first-read-build.sh BEFORE_LIB; then, there, with .device carried:
#   bash tools/gpu/quick-check.sh [FIRST_READ_ROUNDS]
set -u
cd "$(dirname "$0")/../.."
D=.device; export LD_LIBRARY_PATH=$PWD/$D
echo "=== $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
rm -rf /run/udev
for t in relayed_reads_are_ordered_beside_synchronous_legacy_calls relayed_writes_are_ordered_beside_synchronous_legacy_calls \
         many_relayed_calls_on_one_legacy_stream_and_a_failing_write; do
    timeout -s KILL 45 "$D/gpu_stream" --ignored --exact "$t" --nocapture --test-threads 1 > /tmp/quick.log 2>&1
    rc=$?; echo "TEST $t rc=$rc"; [ $rc = 0 ] || tail -15 /tmp/quick.log
    grep -E '^relayed .*: [0-9]' /tmp/quick.log | head -3
done
timeout -s KILL 110 "$D/gpu_stream" --ignored --exact figures_relayed_printed --nocapture --test-threads 1 2>&1 | grep -E '^FIGURE|panicked'
DIR=/var/tmp/first-read; mkdir -p $DIR; A=$DIR/a.bin B=$DIR/b.bin
for f in $A $B; do [ -f $f ] || head -c 1G /dev/urandom > $f; done
for i in $(seq "${1:-3}"); do
    cat $A $B > /dev/null
    "$D/first_read" $A 2>&1 | grep -E '^(FIRST|first_read)'
    LD_LIBRARY_PATH=$PWD/$D/before "$D/first_read" $A 2>&1 | grep -E '^(FIRST|first_read)' | sed 's/impl=gdsroute/impl=gdsroute-before/'
    "$D/first_read" $A --warm-with $B 2>&1 | grep -E '^(FIRST|first_read)'
done
