#!/usr/bin/env bash
# Runs tools/probes/cufile_exit_probe under several exit strategies, RUNS times each, and counts
# the processes that crashed. On the GPU machine: run_cufile_exit_probe.sh BIN_DIR FILE [RUNS]
# (FILE with its udev record). The first crash of each configuration is printed whole.
set -u
bin=$1/cufile_exit_probe
file=$2
runs=${3:-40}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
try() {
    local label=$1 n=$2
    shift 2
    local crashed=0 other=0 shown=0
    for _ in $(seq "$n"); do
        out=$(env "$@" "$bin" "$file" 2>&1)
        rc=$?
        if [ $rc -ge 128 ]; then
            crashed=$((crashed + 1))
            if [ $shown -eq 0 ]; then shown=1; echo "--- first crash, $label (exit $rc)"; echo "$out" | grep -v '^\[exit_watch\] registration' | tail -40; fi
        elif [ $rc -ne 0 ]; then
            other=$((other + 1))
            [ $other -eq 1 ] && { echo "--- $label exit $rc"; echo "$out" | tail -5; }
        fi
    done
    echo "RESULT $label: $crashed of $n crashed ($other other failures)"
}

try "no teardown at exit" $((runs / 4)) PROBE_EXIT=none
try "stats never enabled, no teardown" $((runs / 4)) PROBE_STATS=0 PROBE_EXIT=none
try "stop + close, handler after driver open (as shipped)" "$runs" PROBE_EXIT=stopclose
try "stop + close, handler after the reads" "$runs" PROBE_EXIT=stopclose PROBE_HANDLER=late
try "stop + close + wait for cuFile's threads" "$runs" PROBE_EXIT=stopclose_wait
try "stop only" "$runs" PROBE_EXIT=stop
try "close only" "$runs" PROBE_EXIT=close
try "I/O on a joined thread, stop + close" "$runs" PROBE_EXIT=stopclose PROBE_READ_ON=thread
try "no teardown, _exit" $((runs / 4)) PROBE_EXIT=none PROBE_QUICK_EXIT=1
echo "--- one logged run, no teardown"
EXIT_WATCH_LOG=1 PROBE_EXIT=none "$bin" "$file" 2>&1 | tail -80
echo "--- one logged run, stop + close + wait"
EXIT_WATCH_LOG=1 PROBE_EXIT=stopclose_wait "$bin" "$file" 2>&1 | grep -v 'registration #' | tail -40
