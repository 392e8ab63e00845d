#!/usr/bin/env bash
# Runs on the GPU machine the suites of KvikIO's local API beyond reads and writes (issue 26):
# buffer registration and the bounce buffers' release, cuFile's driver properties and settings
# (each test in a process of its own), the mapping handle into device memory, the pools' figure,
# and gdsroute-diagnose's driver lines; all with the udev record, so that AUTO reaches cuFile.
# The same steps are part of tools/gpu/gpu-proof.sh; this is the short pass. Build here first
# with tools/gpu/gpu-build.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
D=${1:-.device}
export LD_LIBRARY_PATH=$PWD/$D:${LD_LIBRARY_PATH:-}
step() { echo; echo "=== $*"; }
run() { timeout "${GDSROUTE_PROOF_STEP_S:-300}" "$@"; echo "(exit status $?)"; }
F=/var/tmp/gdsroute-local-api.bin
head -c 64M /dev/urandom > "$F"
bash "$here/udev-entry.sh" "$F"
step "diagnose, udev record"; run "$D/gdsroute-diagnose" "$F"
step "buffer registration and bounce buffers"; run "$D/gpu_memory" --ignored --test-threads 1 --nocapture
for t in settings_before_the_open_are_applied_and_after_it_refused a_setting_after_begin_device_setup_is_refused_even_while_the_open_runs each_setting_alone_opens_the_driver_and_exits_cleanly; do
    step "cuFile driver settings: $t"; run "$D/gpu_driver" --ignored --exact "$t" --nocapture
done
[ -x "$D/gpu_mapping" ] && { step "mapping handle into device memory"; run "$D/gpu_mapping" --ignored --test-threads 1 --nocapture; }
step "pools per drive: a disk file and a /dev/shm file at once (figure)"; run "$D/pools" --ignored --nocapture reads_of_two
rm -f "$F"
