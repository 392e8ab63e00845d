#!/usr/bin/env bash
# Every test, from a clean clone: Rust unit and integration tests, clippy, the header staleness
# check, then the CMake build and ctest (C/C++ tests, examples, installed-consumer, valgrind).
# Environment: BUILD_DIR (default build/), JOBS (default: number of cores).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# KVIKIO_* variables from the caller's shell would change the defaults the tests expect.
while read -r var; do unset "$var"; done < <(compgen -e | grep '^KVIKIO_' || true)

start=$SECONDS
step() {
    printf '\n==> %s   [%ds]\n' "$*" $((SECONDS - start))
}

step "cargo test --all-targets"
cargo test --all-targets -j "$jobs"

if cargo clippy --version >/dev/null 2>&1; then
    step "cargo clippy --all-targets -- -D warnings"
    cargo clippy --all-targets -j "$jobs" -- -D warnings
else
    step "clippy not installed: skipped"
fi

step "header is current (cargo test --test header)"
cargo test --test header -j "$jobs"

step "cmake configure + build ($build_dir)"
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j "$jobs"

step "ctest"
(cd "$build_dir" && ctest --output-on-failure -j "$jobs")

step "all tests passed in $((SECONDS - start))s"
