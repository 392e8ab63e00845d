#!/usr/bin/env bash
# Probes behind docs/performance.md, "Many small files" (the GPU machine; .device built by
# tools/gpu/gpu-build.sh, tools/gpu/many-files-build.sh and a trace build of the library in
# .device/trace/): (1) how the batch and in-flight rates of 512 files of 2 MiB scale with threads,
# without the registered page cache and without small reads spread; (2) a timeline of one batch
# (trace build; TRACE lines of every task); (3) the cuFile route's crash with thousands of
# handles: which mode and descriptor, with the debugger's stack where one is installed.
set -u
cd "$(dirname "$0")/../.."
D=$PWD/.device
A=/var/tmp/many-files/a B=/var/tmp/many-files/b
export LD_LIBRARY_PATH=$D CUFILE_LOGFILE_PATH=/dev/null
M() { "$D/many_files" "$@" 2>&1 | grep -E '^(MANY|many_files)' | cut -c1-230; }
rm -rf /run/udev
M $A 512 2M serial --host --no-verify > /dev/null; M $B 4096 64K serial --host --no-verify > /dev/null
echo "=== POSIX route: serial, GDSROUTE_MIN_TASK_SIZE"
for r in 1 2; do for m in 0 65536 131072 262144; do echo "min=$m $(GDSROUTE_MIN_TASK_SIZE=$m M $A 512 2M serial --warm-up)"; done; done
for m in 0 262144; do echo "min=$m $(GDSROUTE_MIN_TASK_SIZE=$m M $A 512 2M inflight --warm-up)"; done
echo "=== POSIX route: threads"
for t in 8 16; do M $A 512 2M batch --threads $t --warm-up; M $A 512 2M inflight --threads $t --warm-up; done
echo "=== POSIX route: page cache registration off, spread off"
GDSROUTE_PAGE_CACHE_PIN_MAX=0 M $A 512 2M batch --warm-up
GDSROUTE_MIN_TASK_SIZE=0 M $A 512 2M batch --warm-up
echo "=== POSIX route: host memory"
M $A 512 2M batch --host --warm-up; M $A 512 2M serial --host --warm-up
echo "=== trace of one batch"
LD_LIBRARY_PATH=$D/trace GDSROUTE_TRACE_FILE=/tmp/trace.txt "$D/many_files" $A 512 2M batch --warm-up --no-verify | grep MANY
python3 - /tmp/trace.txt <<'PY'
import sys, collections
ev=[l.split() for l in open(sys.argv[1]) if l.startswith("TRACE ")]
starts={}; durs=collections.defaultdict(list); threads=set(); first=None; last=None
for _,t,th,name,val in ev:
    t=float(t)
    if name=="bounce.start": starts[th]=t; threads.add(th); first=t if first is None else min(first,t)
    elif name=="bounce.buffer" and th in starts: durs["acquire"].append(t-starts[th])
    elif name=="bounce.end" and th in starts: durs["task"].append(t-starts.pop(th)); last=t if last is None else max(last,t)
for k,v in durs.items():
    v.sort(); print(k, "n", len(v), "median_us %.1f p90 %.1f max %.1f" % (v[len(v)//2], v[int(len(v)*.9)], v[-1]))
print("threads", len(threads), "tasks span_ms %.2f" % ((last-first)/1000 if first is not None else 0))
names=collections.Counter(e[3] for e in ev); print(dict(names.most_common(12)))
PY
echo "=== cuFile route: which modes crash"
bash tools/gpu/udev-entry.sh "$B" > /dev/null
# The library as it was (.device/unserialised, if there) beside the one built now.
for lib in unserialised .; do
  [ -f "$D/$lib/libgdsroute.so.0" ] || continue
  for mode in inflight batch; do
    for r in 1 2 3; do
      LD_LIBRARY_PATH=$D/$lib "$D/many_files" $B 4096 64K $mode --warm-up --no-verify > /tmp/o.txt 2>&1; echo "lib=$lib mode=$mode exit=$? $(grep -E '^MANY' /tmp/o.txt | cut -c1-200)"
    done
  done
done
echo "=== cuFile route: where a small file's 1.2 ms goes (trace build, 256 files one after another)"
LD_LIBRARY_PATH=$D/trace GDSROUTE_TRACE_FILE=/tmp/trace2.txt "$D/many_files" $B 256 64K serial --warm-up --no-verify | grep MANY | cut -c1-200
python3 - /tmp/trace2.txt <<'PY'
import sys, collections
ev=[l.split() for l in open(sys.argv[1]) if l.startswith("TRACE ")]
open_={}; d=collections.defaultdict(list)
pairs={"cufile.register.start":"cufile.register.end","cufile_task.start":"cufile_task.end","pread":None}
last={}
for _,t,th,name,val in ev:
    t=float(t)
    if name.endswith(".start"): open_[(th,name[:-6])]=t
    elif name.endswith(".end") and (th,name[:-4]) in open_: d[name[:-4]].append(t-open_.pop((th,name[:-4])))
    if name=="pread": last[th]=t
for k,v in sorted(d.items()):
    v.sort(); print("%-24s n %5d median_us %8.1f p90 %8.1f" % (k, len(v), v[len(v)//2], v[int(len(v)*.9)]))
PY
echo "=== gpu_batch with the udev record"
timeout 120 "$D/gpu_batch" --ignored --test-threads 1 --nocapture 2>&1 | tail -5; echo "exit $?"
G=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
echo "debugger: ${G:-none}"
if [ -n "$G" ]; then
  LD_LIBRARY_PATH=$D/unserialised timeout 150 "$G" -batch -ex run -ex bt --args "$D/many_files" $B 4096 64K batch --warm-up --no-verify 2>&1 | grep -E "^#|SIGFPE|signal|exited" | head -30
fi
rm -rf /run/udev
