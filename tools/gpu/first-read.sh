#!/usr/bin/env bash
# The first read of a fresh process, side by side with KvikIO, on the GPU machine
# (docs/performance.md, "The first read of a fresh process"). Build here first:
#   bash tools/gpu/first-read-build.sh [BEFORE_LIB]    (puts everything in .device/)
# then on the GPU machine, with .device and .whl carried:
#   bash tools/gpu/first-read.sh [PROCS]               (PROCS fresh processes per configuration, default 5)
# FIRST_READ_SECTIONS picks sections (default: probes posix cufile extra cold timelines; also
# buffers: the baseline with a fresh buffer and smaller bounce buffers).
# Sections: cuFile's raw costs and knobs (tools/probes/driver_open_probe.c); the POSIX route (no
# udev record) and the cuFile route (udev record written: AUTO registers the file and cuFile's
# compatibility path serves it); cold first reads; a timeline of each route's first read (trace
# build). Every gdsroute read is checked byte for byte (first_read.c); KvikIO's first and last 4 MiB.
set -u
cd "$(dirname "$0")/../.."
D=.device
N=${1:-5}
DIR=${FIRST_READ_DIR:-/var/tmp/first-read}
mkdir -p "$DIR"
A=$DIR/a.bin B=$DIR/b.bin
for f in "$A" "$B"; do [ -f "$f" ] || head -c 1G /dev/urandom > "$f"; done
warm() { cat "$A" "$B" > /dev/null; }
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
    export PYTHONPATH=/tmp/site
fi
export LD_LIBRARY_PATH=$PWD/$D
G() { "$D/first_read" "$@" 2>&1 | grep -E '^(FIRST|first_read)' | sed "s/^/$label /"; }
GB() { LD_LIBRARY_PATH=$PWD/$D/before "$D/first_read" "$@" 2>&1 | grep -E '^(FIRST|first_read)' | sed 's/impl=gdsroute/impl=gdsroute-before/' | sed "s/^/$label /"; }
K() { KVIKIO_NTHREADS=${KVIKIO_NTHREADS:-16} python3 tools/gpu/first_read_kvikio.py "$@" 2>&1 | grep -E '^(FIRST|Traceback|[A-Za-z]*Error)' | sed "s/^/$label /"; }
P() { "$D/driver_open_probe" "$@" 2>&1 | grep -E '^PROBE|failed|dlopen' | sed "s/^/$label /"; }

route_matrix() {  # the five configurations, alternating their order each round
    for i in $(seq "$N"); do
        warm
        if [ $((i % 2)) = 1 ]; then
            G "$A"; GB "$A"; G "$A" --early; G "$A" --warm-with "$B"; K "$A"; K "$A" --warm-with "$B"
        else
            K "$A" --warm-with "$B"; K "$A"; G "$A" --warm-with "$B"; G "$A" --early; GB "$A"; G "$A"
        fi
    done
}

want() { [[ " ${FIRST_READ_SECTIONS:-probes posix cufile extra cold timelines} " == *" $1 "* ]]; }
echo "=== $(date -u +%F) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null); $N processes each"
rm -rf /run/udev
label=probe
if want probes; then
echo "=== cuFile's raw costs (no udev record needed for the driver open)"
for i in $(seq "$N"); do P cuda; P open; P overlap; done
for i in 1 2 3; do P open --stats3; done
for i in 1 2; do P open-no-cuda; done
echo "=== cuFile's knobs on the driver open"
cat > /tmp/cufile-small.json <<'EOF'
{ "logging": { "level": "ERROR" },
  "profile": { "cufile_stats": 0 },
  "properties": { "max_device_cache_size_kb": 16384, "max_device_pinned_mem_size_kb": 65536, "allow_compat_mode": true } }
EOF
for i in 1 2 3; do
    label=knob-skip-topology CUFILE_SKIP_TOPOLOGY_DETECTION=true P open
    label=knob-small-json CUFILE_ENV_PATH_JSON=/tmp/cufile-small.json P open
    label=knob-both CUFILE_SKIP_TOPOLOGY_DETECTION=true CUFILE_ENV_PATH_JSON=/tmp/cufile-small.json P open
done

fi
if want posix; then
echo "=== POSIX route (no udev record)"
rm -rf /run/udev
label=posix route_matrix
fi
if want cufile; then
echo "=== cuFile route (udev record written)"
bash tools/gpu/udev-entry.sh "$A" > /dev/null
label=cufile route_matrix
fi
if want extra; then
bash tools/gpu/udev-entry.sh "$A" > /dev/null
echo "=== cuFile route: the program works between its CUDA set-up and the open, or between the open and the read"
for i in $(seq "$N"); do
    warm
    label=cufile-work G "$A" --work-ms 500; label=cufile-work G "$A" --work-ms 500 --early; label=cufile-work GB "$A" --work-ms 500
    label=cufile-gap G "$A" --gap-ms 500; label=cufile-gap GB "$A" --gap-ms 500
done
echo "=== cuFile route: fewer threads; CUFILE_SKIP_TOPOLOGY_DETECTION"
for i in 1 2 3; do
    label=cufile-threads G "$A" --threads 4; label=cufile-threads G "$A" --threads 8
    label=cufile-skip-topology CUFILE_SKIP_TOPOLOGY_DETECTION=true "$D/first_read" "$A" 2>&1 | tail -3 | sed "s/^/cufile-skip-topology /"
done
echo "=== cuFile's first reads per thread (raw, after the driver open and the registration)"
for t in 1 4 16; do for tiny in "" tiny; do label=probe-first P first-reads "$A" $t $tiny; done; done
fi

if want buffers; then
echo "=== POSIX route: the baseline with a fresh buffer; smaller bounce buffers (16 x 2 MiB pinned)"
rm -rf /run/udev
for i in $(seq "$N"); do
    warm
    label=posix G "$A"; label=posix G "$A" --warm-with "$B"; label=posix G "$A" --warm-with "$B" --fresh-buffer
    label=posix-bounce-2m KVIKIO_BOUNCE_BUFFER_SIZE=2097152 G "$A"
    label=posix-bounce-2m KVIKIO_BOUNCE_BUFFER_SIZE=2097152 G "$A" --warm-with "$B" --fresh-buffer
    label=posix K "$A"
done
fi
if want cold; then
echo "=== cold first reads (caches dropped before each)"
for route in posix cufile; do
    if [ $route = posix ]; then rm -rf /run/udev; else bash tools/gpu/udev-entry.sh "$A" > /dev/null; fi
    for i in 1 2 3; do
        label=cold-$route
        sync; echo 3 > /proc/sys/vm/drop_caches; G "$A" --no-verify
        sync; echo 3 > /proc/sys/vm/drop_caches; K "$A"
    done
done

fi
if want timelines; then
echo "=== timelines (trace build, one process per route and start)"
for route in posix cufile; do
    if [ $route = posix ]; then rm -rf /run/udev; else bash tools/gpu/udev-entry.sh "$A" > /dev/null; fi
    warm
    # The baseline too: the same windows in a warm process.
    for early in "" --early "--warm-with $B"; do
        GDSROUTE_TRACE_FILE=/tmp/trace.txt LD_LIBRARY_PATH=$PWD/$D/trace "$D/first_read" "$A" $early --no-verify > /tmp/out.txt 2>&1
        echo "--- timeline: $route ${early:-default}: $(grep FIRST /tmp/out.txt)"
        python3 tools/probes/first-read-timeline.py /tmp/out.txt /tmp/trace.txt
    done
done
rm -rf /run/udev
fi
rm -rf /run/udev
