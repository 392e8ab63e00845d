#!/usr/bin/env bash
# Builds (here, where Rust and a C compiler are; no GPU needed) what tools/gpu/many-files.sh runs on
# the GPU machine (issue 25, many small files), into .device/:
#   .device/many_files                  tools/gpu/many_files.c, compiled against include/ and linked
#                                       to .device/libgdsroute.so (tools/gpu/gpu-build.sh makes that
#                                       library: run it first, this script does not)
#   .device/before48335fe/libgdsroute.so.0 (+ libgdsroute.so)
#                                       the library of commit 48335fe, the baseline, built in a git
#                                       worktree with its own target directory (the checkout's
#                                       working tree and target/ are not touched)
#   bash tools/gpu/many-files-build.sh
# MANY_FILES_BASE (default 48335fe), MANY_FILES_WORKTREE (default /work/wt-BASE) and
# MANY_FILES_BASE_TARGET (default /work/target-BASE) change where the baseline comes from.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BASE=${MANY_FILES_BASE:-48335fe}
WT=${MANY_FILES_WORKTREE:-/work/wt-$BASE}
TGT=${MANY_FILES_BASE_TARGET:-/work/target-$BASE}
OUTB=.device/before$BASE

[ -f .device/libgdsroute.so.0 ] && [ -e .device/libgdsroute.so ] \
    || { echo "many-files-build: no .device/libgdsroute.so{,.0}: run tools/gpu/gpu-build.sh first" >&2; exit 1; }

# The baseline library.
if [ ! -e "$WT" ]; then
    git -C "$ROOT" worktree add --detach "$WT" "$BASE"
fi
want=$(git -C "$ROOT" rev-parse "$BASE^{commit}")
have=$(git -C "$WT" rev-parse HEAD)
[ "$want" = "$have" ] || { echo "many-files-build: $WT is at $have, not $BASE ($want)" >&2; exit 1; }
(cd "$WT" && CARGO_TARGET_DIR="$TGT" cargo build --release --lib)
mkdir -p "$OUTB"
strip -o "$OUTB/libgdsroute.so.0" "$TGT/release/libgdsroute.so"
ln -sf libgdsroute.so.0 "$OUTB/libgdsroute.so"

# The program, against today's header (its batch mode looks the batch calls up at run time, so the
# binary also loads against the baseline library, which lacks them).
cc -O2 -Wall -Wextra -Werror -std=gnu11 -Iinclude tools/gpu/many_files.c -o .device/many_files -L.device -lgdsroute -ldl
strip .device/many_files

# Every gdsroute symbol the program links must be in the baseline library, in the same version.
missing=0
for sym in $(objdump -T .device/many_files | awk '/\*UND\*/ && $NF ~ /^gdsroute_/ {print $(NF-1) "@" $NF}'); do
    ver=${sym%%@*}; name=${sym#*@}; ver=${ver#(}; ver=${ver%)}
    if ! nm -D --defined-only "$OUTB/libgdsroute.so.0" | grep -qE " ${name}@@?${ver}\$"; then
        echo "many-files-build: $OUTB/libgdsroute.so.0 lacks $name ($ver)" >&2
        missing=1
    fi
done
[ "$missing" = 0 ] || exit 1
echo "many-files-build: the baseline exports the $(objdump -T .device/many_files | grep -c 'gdsroute_') gdsroute calls many_files links"
du -sh .device/many_files "$OUTB"
