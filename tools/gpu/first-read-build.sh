#!/usr/bin/env bash
# Builds (here, where Rust is) what tools/gpu/first-read.sh runs on the GPU machine, into .device/:
# the release library, a trace build of it (.device/trace/), the program first_read and the probe
# driver_open_probe; and, given BEFORE_LIB (a libgdsroute.so of an earlier commit), .device/before/.
#   bash tools/gpu/first-read-build.sh [BEFORE_LIB]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --lib
CARGO_TARGET_DIR=target/trace cargo build --release --lib --features trace
mkdir -p .device/trace .device/before
cp target/release/libgdsroute.so .device/libgdsroute.so.0
ln -sf libgdsroute.so.0 .device/libgdsroute.so
cp target/trace/release/libgdsroute.so .device/trace/libgdsroute.so.0
if [ $# -gt 0 ]; then cp "$1" .device/before/libgdsroute.so.0; fi
# Lazy binding: the program also runs against an earlier library that lacks
# gdsroute_begin_device_setup (never called then: no --early).
cc -O2 -Wall -Wextra -Werror -std=gnu11 -Iinclude -Wl,-z,lazy tools/gpu/first_read.c -o .device/first_read -L.device -lgdsroute -ldl
cc -O2 -Wall -Wextra -Werror -std=gnu11 tools/probes/driver_open_probe.c -o .device/driver_open_probe -ldl -lpthread
strip .device/libgdsroute.so.0 .device/trace/libgdsroute.so.0 .device/first_read .device/driver_open_probe
[ ! -f .device/before/libgdsroute.so.0 ] || strip .device/before/libgdsroute.so.0
du -sh .device
