#!/bin/sh
# check_exports.sh LIBRARY HEADER HDF5_VERSION: the driver library exports exactly the functions
# its header declares with H5FD_GDSROUTE_API, plus H5PLget_plugin_type and H5PLget_plugin_info
# where HDF5 loads drivers at run time (1.13.2 and later). Prints "exports: as expected".
set -eu
lib=$1 header=$2 version=$3
want=$(sed -n 's/^H5FD_GDSROUTE_API [^(]*[ *]\([A-Za-z0-9_]*\)(.*/\1/p' "$header")
if [ "$(printf '%s\n1.13.2\n' "$version" | sort -V | head -n 1)" = 1.13.2 ]; then
    want="$want H5PLget_plugin_type H5PLget_plugin_info"
fi
want=$(printf '%s\n' $want | sort)
got=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRW]$/ { print $3 }' | sort)
if [ "$want" != "$got" ]; then
    echo "exports of $lib differ from the header's:"
    echo "want: $want"
    echo "got:  $got"
    exit 1
fi
echo "exports: as expected ($(echo $got | wc -w) symbols)"
