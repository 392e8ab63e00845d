set -u
D=.device; export LD_LIBRARY_PATH=$PWD/$D
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t() { local name=$1; shift; local s=$(date +%s.%N); timeout 200 "$D/gpu_stream" --ignored --exact "$name" --nocapture --test-threads 1 > /tmp/t.log 2>&1; rc=$?; echo "TEST $label $name rc=$rc $(echo "$(date +%s.%N) - $s" | bc)s"; [ $rc = 0 ] || tail -25 /tmp/t.log; grep -E 'FIGURE|relayed .*:' /tmp/t.log | head -8; }
for label in noudev udev; do
  if [ $label = udev ]; then bash tools/gpu/udev-entry.sh /var/tmp > /dev/null; else rm -rf /run/udev; fi
  for n in relayed_reads_are_ordered_beside_synchronous_legacy_calls relayed_writes_are_ordered_beside_synchronous_legacy_calls many_relayed_calls_on_one_legacy_stream_and_a_failing_write synchronous_cuda_calls_of_the_host_while_calls_are_queued_do_not_deadlock; do t $n; done
done
rm -rf /run/udev
label=noudev t figures_relayed_printed
