#!/usr/bin/env bash
# Relayed stream-ordered calls on the GPU machine (docs/performance.md, "Relayed stream-ordered
# calls"): each relayed test of tests/gpu_stream.rs (and the legacy-stream test) in a process of
# its own, without and with the udev record; the exit suite's relayed modes; the relayed figures;
# KvikIO's stream-ordered read beside them (tools/gpu/stream_kvikio.py, with .whl carried).
# Build here first: bash tools/gpu/gpu-build.sh; then, there, with .device (and .whl) carried:
#   bash tools/gpu/relay-run.sh [SECTIONS]     (default: tests exit figures kvikio)
set -u
cd "$(dirname "$0")/../.."
D=.device; export LD_LIBRARY_PATH=$PWD/$D
want() { [[ " ${1:-tests exit figures kvikio} " == *" $2 "* ]]; }
echo "=== $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
t() {
    local name=$1 s; s=$(date +%s.%N)
    timeout -s KILL "${LIMIT:-90}" "$D/gpu_stream" --ignored --exact "$name" --nocapture --test-threads 1 > /tmp/t.log 2>&1
    local rc=$?
    echo "TEST $label $name rc=$rc $(python3 -c "import time; print(round(time.time() - $s, 1))") s"
    [ $rc = 0 ] || tail -30 /tmp/t.log
    grep -oE 'FIGURE .*|^relayed .*: [0-9].*' /tmp/t.log
}
RELAYED="relayed_reads_copy_from_registered_windows_and_fail_once_the_file_changed the_pointer_form_takes_size_and_offset_when_the_stream_gets_there relayed_reads_are_ordered_beside_synchronous_legacy_calls relayed_writes_are_ordered_beside_synchronous_legacy_calls many_relayed_calls_on_one_legacy_stream_and_a_failing_write synchronous_cuda_calls_of_the_host_while_calls_are_queued_do_not_deadlock"
# In order of what matters most, so that a call cut short keeps the rest.
if want "$*" tests; then
    rm -rf /run/udev
    for n in $RELAYED; do label=noudev t "$n"; done
fi
if want "$*" figures; then rm -rf /run/udev; LIMIT=150 label=noudev t figures_relayed_printed; fi
if want "$*" kvikio && [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
    f=/var/tmp/kvikio-stream.bin
    [ -f $f ] || head -c 1G /dev/urandom > $f
    cat $f > /dev/null
    echo "=== KvikIO 26.10 stream-ordered read, no udev record, 16 threads"
    PYTHONPATH=/tmp/site KVIKIO_NTHREADS=16 timeout 200 python3 tools/gpu/stream_kvikio.py $f 2>&1 | grep -E 'FIGURE|Error|error' | head
fi
if want "$*" exit; then
    echo "=== exit suite, relayed modes (udev record written by gpu-exit.sh)"
    bash tools/gpu/gpu-exit.sh "$D" exit-relay-queued=${EXIT_RUNS:-25} main-return-relay-queued=${EXIT_RUNS:-25} 2>&1 | tail -6
fi
if want "$*" tests; then
    bash tools/gpu/udev-entry.sh /var/tmp > /dev/null
    for n in $RELAYED; do label=udev t "$n"; done
fi
rm -rf /run/udev
