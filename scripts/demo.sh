#!/usr/bin/env bash
# One command: build with CMake, make a sample file, read it with the C example (examples-c/read_file.c)
# and print its output: bytes read, GB/s, checksum, a summary of the routes the reads took and why,
# the verdict for a device read of the file on this machine, and the counters that are not 0.
# Environment: BUILD_DIR (default build/), DEMO_FILE (a file to read instead), DEMO_MIB (default 256).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# cmake, pkg-config and a C compiler, installed if missing (Debian/Ubuntu; see the script).
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build_dir" -j "$jobs" --target read_file >/dev/null

file=${DEMO_FILE:-}
if [ -z "$file" ]; then
    file="$build_dir/demo-sample.bin"
    mib=${DEMO_MIB:-256}
    if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" -ne $((mib * 1024 * 1024)) ]; then
        echo "writing a ${mib} MiB random sample file: $file"
        head -c $((mib * 1024 * 1024)) /dev/urandom >"$file"
    fi
fi

echo "\$ read_file $file"
"$build_dir/examples-c/read_file" "$file"
