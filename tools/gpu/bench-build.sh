#!/usr/bin/env bash
# Builds what tools/gpu/bench-gpu.sh needs on the GPU machine (which has no Rust toolchain):
#   .device/gdsroute-bench, .device/libgdsroute.so (release, stripped)
#   .whl/  KvikIO 26.10 wheels for CUDA 13 / Python 3.12 (downloaded once)
# Both folders are git-ignored; copy them to the GPU machine with the working tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/tmp/target-bench}"

cargo build --release --bin gdsroute-bench --lib
mkdir -p .device
cp -f "$CARGO_TARGET_DIR/release/gdsroute-bench" .device/
cp -f "$CARGO_TARGET_DIR/release/libgdsroute.so" .device/
strip .device/gdsroute-bench .device/libgdsroute.so

if ! ls .whl/kvikio_cu13-26.10.0-*.whl .whl/libkvikio_cu13-26.10.0-*.whl .whl/rapids_logger-0.3.0-*.whl >/dev/null 2>&1; then
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_27_x86_64 \
        -d .whl kvikio-cu13==26.10.0 libkvikio-cu13==26.10.0 rapids-logger==0.3.0
fi

ls -l .device .whl
du -shc .device .whl | tail -1   # both together are copied to the GPU machine: keep them small
