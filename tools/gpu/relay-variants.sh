#!/usr/bin/env bash
# The queued copies' ring against the relayed calls' rates (docs/performance.md, "Relayed
# stream-ordered calls"): relayed 1 GiB reads ran at 0.73-0.78 of pread on an H100 with 16 slots
# of 4 MiB copied two at a time (2026-12-07); a model says the ring, not the copy engine, bounds
# them (16 threads refill a slot in about 1.5 ms, the copy engine wants it back after 1.1 ms).
#   bash tools/gpu/relay-variants.sh build   here: tests/gpu_stream.rs for each VARIANTS entry
#                                            (slots:slots per read copy:slots per write copy:
#                                            write groups; a read uses every slot), built in a
#                                            worktree of HEAD with QUEUED_SLOTS and shape() changed,
#                                            into .device/variants/ (named with LABEL, if set, to
#                                            set builds of two commits side by side)
#   bash tools/gpu/relay-variants.sh run     there (.device carried): the relayed figures of each
#                                            build in .device/variants/ (no udev record);
#                                            GDSROUTE_TEST_RATES=writes times the writes alone
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
VARIANTS=${VARIANTS:-"16:2:2:8 32:4:2:8 32:4:4:8 32:2:2:16"}
name() { IFS=: read -r s r w g <<< "$1"; echo "gpu_stream_s${s}_r${r}_w${w}x${g}${LABEL:+_$LABEL}"; }
case "${1:-}" in
build)
    mkdir -p .device/variants
    tree=$(mktemp -d)/gdsroute
    git worktree add --detach "$tree" HEAD > /dev/null
    trap 'git worktree remove --force "$tree"' EXIT
    for v in $VARIANTS; do
        IFS=: read -r slots read write groups <<< "$v"
        sed -i -e "s/^pub(super) const QUEUED_SLOTS: u32 = .*;/pub(super) const QUEUED_SLOTS: u32 = $slots;/" \
               -e "s/^        RelayKernel::In => (.*),$/        RelayKernel::In => ($read, QUEUED_SLOTS \/ $read),/" \
               -e "s/^        _ => (.*),$/        _ => ($write, $groups),/" \
               -e "s/^const _: () = assert!(QUEUED_SLOTS.*/const _: () = ();/" \
            "$tree/src/io/relay/queued.rs"
        grep -q "RelayKernel::In => ($read, QUEUED_SLOTS / $read)," "$tree/src/io/relay/queued.rs"
        grep -q "_ => ($write, $groups)," "$tree/src/io/relay/queued.rs"
        bin=$(cd "$tree" && CARGO_TARGET_DIR="$root/target/variants" cargo test --release --test gpu_stream --no-run --message-format=json 2>/dev/null \
              | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep "/gpu_stream-" | head -1)
        cp "$bin" ".device/variants/$(name "$v")"
        strip ".device/variants/$(name "$v")"
        echo "built $(name "$v")"
    done
    ;;
run)
    export LD_LIBRARY_PATH=$PWD/.device
    rm -rf /run/udev
    for b in .device/variants/gpu_stream_*; do
        [ -x "$b" ] || continue
        timeout -s KILL "${LIMIT:-90}" "$b" --ignored --exact figures_relayed_printed --nocapture --test-threads 1 2>&1 \
            | grep -E "GB/s|overlap [0-9]|blocked|counters|panicked" | sed "s/^/${b#*gpu_stream_}: /"
    done
    ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
