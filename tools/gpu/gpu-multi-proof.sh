#!/usr/bin/env bash
# Runs on the two-GPU machine (device kind nvidia-h200-x2): the two-GPU suite
# (tests/gpu_multi_device.rs: concurrent reads and writes into both devices through one pool, device
# 1's memory with device 0's context current, peer memory, managed memory touched by both, counters
# per device adding up to the totals, preparation at open for both devices), without the udev record
# (AUTO falls back to the POSIX route) and with it (AUTO takes cuFile's route), then the one-GPU
# counters suite, which uses device 0 only. Build here first with tools/gpu/gpu-build.sh; the
# binaries travel in .device/. Exits non-zero if any step failed; every test of the two-GPU suite
# fails on a machine with fewer than two GPUs.
set -u
here=$(cd "$(dirname "$0")" && pwd)   # tools/gpu: the scripts beside this one
D=${1:-.device}
export LD_LIBRARY_PATH=$PWD/$D:${LD_LIBRARY_PATH:-}
export GDSROUTE_TEST_DIR=${GDSROUTE_TEST_DIR:-/var/tmp}
failed=0
step() { echo; echo "=== $*"; }
run() { "$@"; local rc=$?; echo "(exit status $rc)"; [ "$rc" = 0 ] || failed=1; }
step "GPUs, their PCI bus ids and NUMA nodes (sysfs)"
nvidia-smi --query-gpu=index,pci.bus_id,name --format=csv,noheader 2>&1
for dev in /sys/bus/pci/drivers/nvidia/0000:*; do
    [ -e "$dev/numa_node" ] && echo "$(basename "$dev") numa_node $(cat "$dev/numa_node")"
done
nvidia-smi topo -m 2>&1 | head -20
rm -rf /run/udev
step "two-GPU tests, no udev record"; run "$D/gpu_multi_device" --ignored --test-threads 1 --nocapture
bash "$here/udev-entry.sh" "$GDSROUTE_TEST_DIR"
step "two-GPU tests, udev record"; run "$D/gpu_multi_device" --ignored --test-threads 1 --nocapture
step "counters per device, device 0 of two"; run "$D/gpu_devices" --ignored --test-threads 1 --nocapture
step "stray cufile.log in the working directory?"; ls -l cufile.log 2>&1
echo; [ "$failed" = 0 ] && echo "gpu-multi-proof: all passed" || echo "gpu-multi-proof: FAILED"
exit "$failed"
