#!/usr/bin/env bash
# plugin-test.sh [WORK_DIR]: the HDF5 driver against HDF5 2.2.0 built from source, both ways in:
# its tests by the property route (H5Pset_fapl_gdsroute), then the same test program with
# HDF5_DRIVER=gdsroute and HDF5_PLUGIN_PATH instead (the dynamically loaded driver, HDF5 1.13.2+).
#
#   1. HDF5 2.2.0's source: the crate hdf5-metno-src 0.10.4 (its ext/hdf5), fetched with cargo, or
#      HDF5_CRATE=/path/to/hdf5-metno-src-0.10.4.crate
#   2. HDF5 built with CMake, the shared C library only (no Fortran, C++, Java, high-level
#      library, tools, tests or examples; zlib where found), -j2, timed. HDF5 2.2 needs CMake 3.26:
#      an older cmake gets a newer one from PyPI in WORK_DIR/venv.
#   3. gdsroute installed from GDSROUTE_BUILD (a configured and built CMake build folder of this
#      project) or, without it, from a build made here (tests off).
#   4. drivers/hdf5 built alone against both, ctest -L hdf5, then test_hdf5_datasets roundtrip with
#      the two variables, and plain_hdf5 (a program that links HDF5 alone) with them, its I/O seen
#      in the driver's section of gdsroute's exit report.
# WORK_DIR defaults to ${TMPDIR:-/tmp}/gdsroute-hdf5-plugin; it is reused (HDF5 is built once).
# Prints the times of each step; exits non-zero at the first failure.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${1:-${TMPDIR:-/tmp}/gdsroute-hdf5-plugin}
jobs=${JOBS:-2}
mkdir -p "$work"
work=$(cd "$work" && pwd)
timings=()
timed() {
    local name=$1
    shift
    local start=$SECONDS
    "$@"
    timings+=("$name: $((SECONDS - start)) s")
    printf '==> %s: %d s\n' "$name" "$((SECONDS - start))"
}

# 1. The source.
crate=${HDF5_CRATE:-}
if [ -z "$crate" ]; then
    fetch="$work/fetch"
    mkdir -p "$fetch/src"
    cat > "$fetch/Cargo.toml" <<'EOF'
[package]
name = "fetch-hdf5-source"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
hdf5-metno-src = "=0.10.4"
EOF
    : > "$fetch/src/lib.rs"
    cargo fetch --manifest-path "$fetch/Cargo.toml" --quiet
    crate=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/cache" -name 'hdf5-metno-src-0.10.4.crate' | head -n 1)
    [ -n "$crate" ] || { echo "plugin-test: cargo fetched no hdf5-metno-src-0.10.4.crate" >&2; exit 1; }
fi
src="$work/hdf5-metno-src-0.10.4/ext/hdf5"
if [ ! -f "$src/CMakeLists.txt" ]; then
    tar -xzf "$crate" -C "$work"
fi

# 2. HDF5 2.2.0.
cmake_bin=cmake
version_ok() { "$1" -P /dev/stdin <<'EOF'
if(CMAKE_VERSION VERSION_LESS 3.26)
  message(FATAL_ERROR "too old")
endif()
EOF
}
if ! version_ok cmake 2>/dev/null; then
    if [ ! -x "$work/venv/bin/cmake" ]; then
        python3 -m venv "$work/venv"
        "$work/venv/bin/pip" install --quiet 'cmake>=3.26,<4'
    fi
    cmake_bin="$work/venv/bin/cmake"
fi
hdf5="$work/hdf5"
build_hdf5() {
    rm -rf "$work/hdf5-build"
    "$cmake_bin" -S "$src" -B "$work/hdf5-build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$hdf5" \
        -DBUILD_SHARED_LIBS=ON -DBUILD_STATIC_LIBS=OFF -DHDF5_ONLY_SHARED_LIBS=ON -DBUILD_TESTING=OFF \
        -DHDF5_BUILD_TOOLS=OFF -DHDF5_BUILD_EXAMPLES=OFF -DHDF5_BUILD_JAVA=OFF -DHDF5_BUILD_FORTRAN=OFF \
        -DHDF5_BUILD_CPP_LIB=OFF -DHDF5_BUILD_HL_LIB=OFF -DHDF5_BUILD_UTILS=OFF -DHDF5_BUILD_DOC=OFF \
        -DHDF5_ENABLE_ZLIB_SUPPORT=ON -DHDF5_NO_PACKAGES=ON > "$work/hdf5-configure.log"
    "$cmake_bin" --build "$work/hdf5-build" -j "$jobs" > "$work/hdf5-build.log"
    "$cmake_bin" --install "$work/hdf5-build" > "$work/hdf5-install.log"
}
if [ ! -f "$hdf5/include/H5public.h" ]; then
    timed "HDF5 2.2.0 configure, build (-j$jobs) and install" build_hdf5
fi
grep -q '#define H5_VERS_MAJOR 2' "$hdf5/include/H5public.h"

# 3. gdsroute, installed.
gdsroute_build=${GDSROUTE_BUILD:-}
if [ -z "$gdsroute_build" ]; then
    gdsroute_build="$work/gdsroute-build"
    build_gdsroute() {
        cmake -S "$root" -B "$gdsroute_build" -DCMAKE_BUILD_TYPE=Release -DGDSROUTE_BUILD_TESTS=OFF > /dev/null
        cmake --build "$gdsroute_build" -j "$jobs" > "$work/gdsroute-build.log"
    }
    timed "gdsroute build" build_gdsroute
fi
cmake --install "$gdsroute_build" --prefix "$work/gdsroute" > /dev/null

# 4. The driver alone against both, and its tests.
driver="$work/driver"
build_driver() {
    cmake -S "$root/drivers/hdf5" -B "$driver" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$work/gdsroute;$hdf5" -DHDF5_ROOT="$hdf5" > "$work/driver-configure.log"
    grep 'gdsroute HDF5 driver: HDF5 2.2.0' "$work/driver-configure.log"
    cmake --build "$driver" -j "$jobs" > "$work/driver-build.log"
}
timed "driver build against HDF5 2.2.0" build_driver
timed "ctest -L hdf5 (property route, HDF5 2.2.0)" bash -c "cd '$driver' && ctest -L hdf5 --output-on-failure"
plugin_route() {
    local out="$work/plugin-route.log"
    rm -rf "$work/plugin-data"
    mkdir -p "$work/plugin-data"
    env HDF5_DRIVER=gdsroute HDF5_PLUGIN_PATH="$driver/hdf5-plugin" GDSROUTE_HDF5_TEST_ROUTE=env \
        "$driver/tests/test_hdf5_datasets" roundtrip "$work/plugin-data" | tee "$out"
    grep -q '^route: HDF5_DRIVER=gdsroute' "$out"
    grep -Eq '^[0-9]+ passed, 0 failed$' "$out"
    # A program that links HDF5 alone: the driver's section of gdsroute's exit report shows that
    # its reads and writes went through the driver.
    env HDF5_DRIVER=gdsroute HDF5_PLUGIN_PATH="$driver/hdf5-plugin" GDSROUTE_REPORT=stderr \
        "$driver/tests/plain_hdf5" "$work/plugin-data/plain.h5" 2> "$work/plain-report.txt"
    grep -E '^  hdf5: .*raw_read_bytes=960000 .*raw_write_bytes=960000' "$work/plain-report.txt"
}
timed "plugin route (HDF5_DRIVER=gdsroute, HDF5_PLUGIN_PATH)" plugin_route
printf '\nplugin-test: all passed\n'
printf '  %s\n' "${timings[@]}"
