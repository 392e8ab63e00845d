#!/usr/bin/env bash
# Every test, from a clean clone: Rust unit and integration tests, clippy, the header staleness
# check, then the CMake build and ctest (C/C++ tests, examples, installed consumer, valgrind, the
# HDF5 driver and MPI ranks where HDF5 and MPI are found), the HDF5 driver against HDF5 2.2.0
# built from source (tools/hdf5/plugin-test.sh), the C tests under the sanitizers, ThreadSanitizer.
# Every step runs even if an earlier one failed; the summary lists the failed steps and the exit
# status is non-zero if any failed.
# The tools beyond Rust (cmake, pkg-config, compilers, binutils, valgrind) are installed first if
# missing (scripts/install-deps.sh, Debian/Ubuntu).
# Environment: BUILD_DIR (default build/), JOBS (default: number of cores).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/scripts/install-deps.sh" --test
build_dir=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# KVIKIO_*, CUFILE_* and GDSROUTE_* variables from the caller's shell would change the defaults
# the tests expect (GDSROUTE_TEST_* are the tests' own switches and stay).
while read -r var; do unset "$var"; done < <(compgen -e | grep -E '^(KVIKIO|CUFILE|GDSROUTE)_' | grep -v '^GDSROUTE_TEST_' || true)

start=$SECONDS
failed=()
# Fresh CI machines have had little disk (once under 1 GiB free; a run has failed for it inside the
# ThreadSanitizer build). Each phase's outputs are removed once its steps are done, unless
# GDSROUTE_TEST_KEEP_OUTPUTS=1; the free space is printed before each phase.
free_mib() { df -Pm "$root" | awk 'NR == 2 { print $4 }'; }
phase_done() {
    if [ "${GDSROUTE_TEST_KEEP_OUTPUTS:-0}" != 1 ]; then
        rm -rf "$@"
    fi
    printf '\n==> %s MiB free\n' "$(free_mib)"
}
printf '==> %s MiB free at the start\n' "$(free_mib)"
summary=()
step() {
    local name=$1
    shift
    local t0=$SECONDS
    printf '\n==> %s   [at %ds]\n' "$name" $((t0 - start))
    if "$@"; then
        summary+=("ok     $(printf '%4ds' $((SECONDS - t0)))  $name")
    else
        summary+=("FAILED $(printf '%4ds' $((SECONDS - t0)))  $name")
        failed+=("$name")
    fi
}

step "cargo test --all-targets" cargo test --all-targets -j "$jobs"
# Every write test again with direct-I/O writes on (the setting's default is off).
step "posix_writes with KVIKIO_AUTO_DIRECT_IO_WRITE=1" env KVIKIO_AUTO_DIRECT_IO_WRITE=1 cargo test --test posix_writes -j "$jobs"
if cargo clippy --version >/dev/null 2>&1; then
    step "cargo clippy --all-targets -- -D warnings" cargo clippy --all-targets -j "$jobs" -- -D warnings
else
    summary+=("skip           clippy (not installed)")
fi
# The investigation timeline (src/trace.rs) builds and records with its feature on.
step "cargo test --features trace --lib trace" cargo test --features trace --lib -j "$jobs" trace
if cargo clippy --version >/dev/null 2>&1; then
    step "cargo clippy --features trace --all-targets -- -D warnings" cargo clippy --features trace --all-targets -j "$jobs" -- -D warnings
fi
step "header is current (cargo test --test header)" cargo test --test header -j "$jobs"
phase_done "$root/target/debug"
step "cmake configure" cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
step "cmake build" cmake --build "$build_dir" -j "$jobs"
step "ctest" bash -c 'cd "$1" && ctest --output-on-failure -j "$2"' ctest "$build_dir" "$jobs"
# The HDF5 driver against HDF5 2.2.0 built from its crates.io source, both ways in (the property
# call, and HDF5_DRIVER with HDF5_PLUGIN_PATH, which Debian's 1.10.8 lacks): 76 s from nothing
# on a 2-core machine (2026-12-04), of which HDF5's build 49 s.
hdf5_dir=${build_dir}-hdf5
step "HDF5 driver against HDF5 2.2.0, both ways in (tools/hdf5/plugin-test.sh)" \
    env GDSROUTE_BUILD="$build_dir" JOBS="$jobs" "$root/tools/hdf5/plugin-test.sh" "$hdf5_dir"
phase_done "$build_dir" "$hdf5_dir"
# The C tests again under AddressSanitizer, UBSan and LeakSanitizer (GDSROUTE_SANITIZE, see
# tests/c/CMakeLists.txt); the installed-package consumer and valgrind tests are not rebuilt there.
san_dir=${build_dir}-sanitize
step "cmake configure (sanitizers)" cmake -S "$root" -B "$san_dir" -DCMAKE_BUILD_TYPE=Release -DGDSROUTE_SANITIZE=ON
step "cmake build (sanitizers)" cmake --build "$san_dir" -j "$jobs"
step "ctest (sanitizers)" bash -c 'cd "$1" && ctest --output-on-failure -j "$2" -E consumer' ctest "$san_dir" "$jobs"

phase_done "$san_dir"

# Concurrency tests under ThreadSanitizer: needs the nightly toolchain with rust-src (std is rebuilt
# instrumented). The fork test is left out: TSan does not support fork in threaded processes.
# On a 2-core machine (2026-12-01) posix_writes (writes, their faults in children) took 41-61 s
# there and stress (reads, then writers and readers of shared files) 103-121 s; batch 4 s (2026-12-03).
# Its build (std included) took 1.9 GiB on 2026-12-04.
if [ "$(free_mib)" -lt 4096 ]; then
    summary+=("skip           ThreadSanitizer (only $(free_mib) MiB free; its build needs about 2 GiB)")
elif cargo +nightly --version >/dev/null 2>&1 &&
    { rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src' ||
      rustup component add rust-src --toolchain nightly >/dev/null 2>&1; }; then
    step "ThreadSanitizer (lib, posix_reads, posix_writes, faults, stress, batch)" env RUSTFLAGS=-Zsanitizer=thread \
        TSAN_OPTIONS=halt_on_error=1 CARGO_TARGET_DIR="$root/target/tsan" GDSROUTE_TEST_SKIP_HUGE=1 \
        cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu -j "$jobs" \
        --lib --test posix_reads --test posix_writes --test faults --test stress --test batch
else
    summary+=("skip           ThreadSanitizer (no nightly toolchain with rust-src)")
fi

printf '\n==> summary (%ds)\n' $((SECONDS - start))
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[*]}"
    exit 1
fi
echo "all tests passed"
