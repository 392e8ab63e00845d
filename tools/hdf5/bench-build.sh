#!/usr/bin/env bash
# Builds (here, where Rust, CMake and HDF5 are) what tools/hdf5/bench.sh runs on the GPU machine,
# into .device/hdf5/ (ignored by git; carry that folder with the working tree):
#   bench_hdf5                  tools/hdf5/bench_hdf5.c, against include/, drivers/hdf5/ and HDF5's
#                               headers (pkg-config HDF5_PC, default hdf5-serial: Debian's)
#   libgdsroute.so.0, libhdf5_vfd_gdsroute.so
#                               the library and the driver from the CMake build GDSROUTE_BUILD
#                               (default /tmp/cbuild-d; configured Release and built here, targets
#                               gdsroute_cargo and gdsroute_hdf5 only)
#   test_hdf5_datasets          the driver's dataset test (tests/hdf5), which reads and writes
#                               device memory where a GPU is: on the GPU machine,
#                               LD_LIBRARY_PATH=.device/hdf5 .device/hdf5/test_hdf5_datasets roundtrip DIR
#   libhdf5_serial.so.103 and the libraries it needs, found with ldd, less glibc's own and libgcc_s
#   NEEDS                       the newest glibc symbol version any of them needs
# All stripped; the script fails when the folder exceeds 32 MiB (a call carries at most 64 MiB).
#
# What it assumes of the GPU machine, which has no HDF5: x86-64 Linux with a glibc at least as new
# as the one in NEEDS (every other binary of .device assumes this machine's glibc, Debian 12's 2.36,
# too) and libgcc_s (which libgdsroute needs anyway). Debian's HDF5 links curl, OpenSSL, GnuTLS,
# Kerberos, LDAP, ... for its ROS3 driver, so they travel along, whatever the machine has of its
# own: bench.sh runs with LD_LIBRARY_PATH=.device/hdf5, which wins over the system's, and stops,
# naming them, when a library does not load or the glibc is older than NEEDS.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${GDSROUTE_BUILD:-/tmp/cbuild-d}
PC=${HDF5_PC:-hdf5-serial}
OUT=.device/hdf5
LIMIT_KIB=$((32 * 1024))

pkg-config --exists "$PC" || { echo "bench-build: pkg-config finds no $PC (HDF5_PC names another .pc)" >&2; exit 1; }
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD" -j"${JOBS:-2}" --target gdsroute_cargo gdsroute_hdf5 test_hdf5_datasets
DRIVER=$BUILD/hdf5-plugin/libhdf5_vfd_gdsroute.so
[ -f "$DRIVER" ] || { echo "bench-build: $DRIVER was not built (CMake found no HDF5? see its output)" >&2; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT"
# shellcheck disable=SC2046 # pkg-config's flags are words
cc -O2 -Wall -Wextra -Werror -std=gnu11 -Iinclude -Idrivers/hdf5 -Itools/gpu $(pkg-config --cflags "$PC") \
   tools/hdf5/bench_hdf5.c -o "$OUT/bench_hdf5" \
   -L"$BUILD/lib" -L"$BUILD/hdf5-plugin" -lhdf5_vfd_gdsroute -lgdsroute $(pkg-config --libs "$PC") -ldl
strip -o "$OUT/libgdsroute.so.0" "$BUILD/lib/libgdsroute.so.0"
strip -o "$OUT/libhdf5_vfd_gdsroute.so" "$DRIVER"
strip "$OUT/bench_hdf5"
strip -o "$OUT/test_hdf5_datasets" "$BUILD/drivers/hdf5/tests/test_hdf5_datasets"

# The bench and the driver must name the same HDF5 (the driver was linked by CMake's FindHDF5).
hdf5_of() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(libhdf5[^]]*\)\]/\1/p' | grep -v '^libhdf5_vfd_'; }
[ "$(hdf5_of "$OUT/bench_hdf5")" = "$(hdf5_of "$OUT/libhdf5_vfd_gdsroute.so")" ] \
    || { echo "bench-build: the bench links $(hdf5_of "$OUT/bench_hdf5"), the driver $(hdf5_of "$OUT/libhdf5_vfd_gdsroute.so")" >&2; exit 1; }

# Every other library the bench loads, as resolved here, less those of every glibc system.
system='^(linux-vdso|ld-linux[^ ]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s)\.so'
LD_LIBRARY_PATH=$OUT ldd "$OUT/bench_hdf5" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    [[ $name =~ $system ]] && continue
    [ -e "$OUT/$name" ] && continue          # ours, from the build
    cp -L "$path" "$OUT/$name"
    chmod u+w "$OUT/$name"
    strip --strip-unneeded "$OUT/$name"
done
missing=$(LD_LIBRARY_PATH=$OUT ldd "$OUT/bench_hdf5" | grep -E 'not found' || true)
[ -z "$missing" ] || { echo "bench-build: not found here: $missing" >&2; exit 1; }
# The newest glibc version any carried file needs.
need=$(for f in "$OUT"/*; do objdump -T "$f"; done | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
echo "glibc $need" > "$OUT/NEEDS"
LD_LIBRARY_PATH=$OUT "$OUT/bench_hdf5" version

ls -l "$OUT"
kib=$(du -sk "$OUT" | cut -f1)
echo "bench-build: $OUT holds $((kib / 1024)) MiB (glibc $need or newer needed); carry it: \"carry\": [\"$OUT\"]"
[ "$kib" -le "$LIMIT_KIB" ] || { echo "bench-build: $OUT exceeds $((LIMIT_KIB / 1024)) MiB" >&2; exit 1; }
