#!/bin/sh
# tools_files.sh PROGRAM DIR H5REPACK H5IMPORT H5DUMP: files the HDF5 tools made, read through the
# gdsroute driver by PROGRAM (test_hdf5_datasets): sec2's file of the datasets rewritten by
# h5repack with gzip and as contiguous datasets, and a float64 dataset h5import made of a binary
# file; and the driver's file of the datasets read by h5dump (through sec2). Prints
# "tools: all passed" when every step did.
set -eu
prog=$1 dir=$2 repack=$3 import=$4 dump=$5
rm -rf "$dir"
mkdir -p "$dir"
"$prog" make "$dir/made.h5"
"$repack" -f GZIP=1 "$dir/made.h5" "$dir/gzip.h5"
"$prog" verify "$dir/gzip.h5"
"$repack" -l CONTI "$dir/made.h5" "$dir/contiguous.h5"
"$prog" verify "$dir/contiguous.h5"

head -c 200000 /dev/urandom > "$dir/doubles.bin"
cat > "$dir/import.cfg" <<CFG
PATH imported
INPUT-CLASS FP
INPUT-SIZE 64
INPUT-BYTE-ORDER LE
RANK 2
DIMENSION-SIZES 100 250
OUTPUT-CLASS FP
OUTPUT-SIZE 64
OUTPUT-ARCHITECTURE IEEE
OUTPUT-BYTE-ORDER LE
CFG
"$import" "$dir/doubles.bin" -c "$dir/import.cfg" -o "$dir/imported.h5"
"$prog" verify-import "$dir/imported.h5" "$dir/doubles.bin"

"$prog" make-driver "$dir/driver.h5"
"$dump" -H "$dir/driver.h5" > "$dir/dump.txt"
grep -q 'DATASET "compound_3d_chunked"' "$dir/dump.txt"
"$dump" -d /u8_1d_contig -s 5 -c 3 "$dir/driver.h5" > /dev/null
echo "tools: all passed"
