#!/usr/bin/env bash
# Runs on the GPU machine: each test of tests/gpu_stream.rs in a process of its own, without and
# with the udev record, and where one makes no progress for STALL_S seconds (default 30), prints
# every thread's stack (cuda-gdb, the machine's only debugger) before killing it, so that a hang
# of a stream-ordered call shows what waits for what. Then tools/probes/stream_wait_probe (which
# CUDA and cuFile calls wait for a stream held on a flag). Build here first with
# tools/gpu/gpu-build.sh; the binaries travel in .device/ (gpu_stream_syms: the test binary with
# its symbol table, for the stacks).
#   tools/gpu/stream-stacks.sh [TEST_FILTER]     (STACKS_PROBE=0: without the probe)
set -u
here=$(cd "$(dirname "$0")" && pwd)
D=.device
export LD_LIBRARY_PATH=$PWD/$D:${LD_LIBRARY_PATH:-}
F=${GDSROUTE_PROOF_FILE:-/var/tmp/gdsroute-probe.bin}
[ -s "$F" ] || head -c 256M /dev/urandom > "$F"
stall=${STALL_S:-30}
bin=$D/gpu_stream_syms
[ -x "$bin" ] || bin=$D/gpu_stream
tests=$("$bin" --ignored --list 2>/dev/null | sed -n 's/: test$//p' | grep -- "${1:-}")

# Runs "$@" with its output in a log; dumps stacks and kills it when the log stops growing.
watch_run() {
  local log=/tmp/stream-stacks.log
  : > "$log"
  "$@" > "$log" 2>&1 &
  local pid=$! last=-1 quiet=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    local size
    size=$(stat -c %s "$log")
    if [ "$size" = "$last" ]; then quiet=$((quiet + 1)); else quiet=0; last=$size; fi
    if [ "$quiet" -ge "$stall" ]; then
      cat "$log"
      echo "STALL: no output for $stall s; stacks of every thread:"
      timeout 120 cuda-gdb -batch -p "$pid" -ex "set pagination off" -ex "thread apply all bt 40" 2>&1 \
        | grep -v "^\[New\|^warning\|^Reading\|libthread_db\|^$" | cut -c1-220
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      echo "(killed after the stall)"
      return
    fi
  done
  wait "$pid"
  local rc=$?
  cat "$log"
  echo "(exit status $rc)"
}

for udev in no yes; do
  if [ "$udev" = yes ]; then bash "$here/udev-entry.sh" "$F" >/dev/null; else rm -rf /run/udev; fi
  for t in $tests; do
    echo; echo "=== udev record: $udev; $t"
    watch_run "$bin" --ignored --exact "$t" --test-threads 1 --nocapture
  done
done
[ "${STACKS_PROBE:-1}" = 0 ] && exit 0
echo; echo "=== stream_wait_probe, no udev record"
rm -rf /run/udev
timeout 300 "$D/stream_wait_probe" "$F"
echo; echo "=== stream_wait_probe, udev record (cuFile calls)"
bash "$here/udev-entry.sh" "$F" >/dev/null
timeout 300 "$D/stream_wait_probe" "$F"
rm -rf /run/udev
