#!/usr/bin/env bash
# What makes a process that leaves cuFile's driver open with statistics on crash at exit, and
# KvikIO's Python process not (docs/exit.md). On the GPU machine, after the udev record:
#   run_exit_differences.sh BIN_DIR FILE     (KvikIO wheels installed on PYTHONPATH)
set -u
source <(sed -n '/^try()/,/^}/p' "$(dirname "$0")/run_cufile_exit_probe.sh")
bin=$1/cufile_exit_probe
file=$2
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
try "C, no teardown, I/O on a thread that stays alive" 10 PROBE_EXIT=none PROBE_READ_ON=thread_alive
try "C, no teardown, glibc tcache off" 10 PROBE_EXIT=none GLIBC_TUNABLES=glibc.malloc.tcache_count=0
try "C, no teardown, freed memory poisoned" 10 PROBE_EXIT=none MALLOC_PERTURB_=165
for env in "" "MALLOC_PERTURB_=165" "GLIBC_TUNABLES=glibc.malloc.tcache_count=0"; do
    c=0; o=0
    for _ in $(seq 10); do
        env $env timeout 60 python3 "$(dirname "$0")/kvikio_exit.py" "$file" after >/tmp/kvikio-exit.log 2>&1
        rc=$?
        if [ $rc -ge 128 ]; then c=$((c + 1)); elif [ $rc -ne 0 ]; then o=$((o + 1)); fi
    done
    echo "RESULT KvikIO (Python), no close, ${env:-plain}: $c of 10 crashed ($o other failures)"
    tail -1 /tmp/kvikio-exit.log
done
# Which exit-time destructors run in KvikIO's Python process (BIN_DIR/libexit_watch.so preloaded:
# a diagnostic of someone else's process, not something gdsroute needs).
if [ -f "$1/libexit_watch.so" ]; then
    echo "--- KvikIO (Python) with exit_watch preloaded: libcufile's destructors as they run"
    EXIT_WATCH_LOG=1 LD_PRELOAD=$1/libexit_watch.so timeout 60 python3 "$(dirname "$0")/kvikio_exit.py" "$file" after 2>&1 |
        grep -E 'cufile|CRASH|read ' | grep -v 'registered by thread .* in phase .start' | tail -25
    echo "--- loaded libcufile in that process"
    EXIT_WATCH_LOG=0 python3 -c "import cupy, kvikio; from cuda.bindings import cufile; cufile.driver_open(); print(open('/proc/self/maps').read())" 2>/dev/null | grep -o '/[^ ]*libcufile[^ ]*' | sort -u
fi
