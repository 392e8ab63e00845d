#!/usr/bin/env bash
# The cuFile route with thousands of small files read at once (the SIGFPE inside cuFileRead seen
# on the H200, 2026-12-03): 4,096 files of 64 KiB in flight and in one batch, with the udev record.
set -u
cd "$(dirname "$0")/../.."
D=$PWD/.device B=/var/tmp/many-files/b
export LD_LIBRARY_PATH=$D CUFILE_LOGFILE_PATH=/dev/null
"$D/many_files" $B 4096 64K serial --host --no-verify > /dev/null 2>&1
bash tools/gpu/udev-entry.sh "$B" > /dev/null
for mode in inflight batch; do for r in 1 2; do
  "$D/many_files" $B 4096 64K $mode --warm-up > /tmp/o.txt 2>&1; echo "mode=$mode exit=$? $(grep -E '^MANY' /tmp/o.txt | cut -c1-220)"
done; done
"$D/many_files" $B 4096 64K batch > /tmp/o.txt 2>&1; echo "mode=batch cold exit=$? $(grep -E '^MANY' /tmp/o.txt | cut -c1-220)"
timeout 100 "$D/gpu_batch" --ignored --test-threads 1 --nocapture 2>&1 | tail -4
rm -rf /run/udev
