#!/usr/bin/env bash
# install-deps.sh [--test]: installs the tools gdsroute's scripts need beyond Rust, if missing:
# cmake, pkg-config, make, a C and a C++ compiler and binutils (nm, objcopy, ld); with --test also
# valgrind, HDF5 (headers and tools) and Open MPI (optional: the tests that need one are skipped
# without it). Used by scripts/demo.sh, scripts/test.sh and .ci/run, so that each works on a bare
# Debian/Ubuntu machine with only Rust.
# apt-get (update, then install) runs only when something is missing: directly as root, through
# sudo otherwise. Where it cannot install (no apt-get; not root and no sudo; GDSROUTE_NO_INSTALL=1)
# it names what is missing and exits 1 if a required tool is missing, 0 if only optional ones are.
set -euo pipefail

usage="usage: install-deps.sh [--test]"
want_test=0
for arg in "$@"; do
    case $arg in
        --test) want_test=1 ;;
        -h | --help)
            sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "install-deps.sh: unknown argument '$arg'; $usage" >&2
            exit 2
            ;;
    esac
done

required=()
optional=()
need() { command -v "$1" >/dev/null 2>&1 || required+=("$2"); }
want() { command -v "$1" >/dev/null 2>&1 || optional+=("$2"); }
need cmake cmake
need pkg-config pkg-config
need make make
need cc gcc
need c++ g++
need nm binutils
need objcopy binutils
need ld binutils
if [ $want_test -eq 1 ]; then
    want valgrind valgrind
    # The HDF5 driver (drivers/hdf5) and its tests; the MPI ranks example.
    want h5cc libhdf5-dev
    want h5dump hdf5-tools
    want mpicc libopenmpi-dev
    want mpirun openmpi-bin
fi
packages=("${required[@]}" "${optional[@]}")
if [ ${#packages[@]} -eq 0 ]; then
    exit 0
fi
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)

cannot_install() {
    if [ ${#required[@]} -gt 0 ]; then
        echo "install-deps.sh: missing: ${packages[*]} ($1); install them to continue" >&2
        exit 1
    fi
    echo "install-deps.sh: optional and missing: ${packages[*]} ($1); the tests that need them are skipped" >&2
    exit 0
}
if [ "${GDSROUTE_NO_INSTALL:-0}" = 1 ]; then
    cannot_install "GDSROUTE_NO_INSTALL=1"
fi
if ! command -v apt-get >/dev/null 2>&1; then
    cannot_install "no apt-get here"
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || cannot_install "not root and no sudo"
    sudo=(sudo)
fi
echo "install-deps.sh: installing ${packages[*]}"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"
