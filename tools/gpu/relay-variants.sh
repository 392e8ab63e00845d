#!/usr/bin/env bash
# The relay kernel's grid and loads in flight against its read rate (docs/performance.md,
# "Relayed stream-ordered calls"): relayed reads ran at 0.40 of pread on the H200 with 8 blocks of
# 512 threads and 4 loads of 16 bytes in flight per thread (2026-12-07).
#   bash tools/gpu/relay-variants.sh build   here: tests/gpu_stream.rs for each VARIANTS entry
#                                            (blocks:loads), built in a worktree of HEAD with
#                                            MOVING_BLOCKS and RELAY_LOADS changed, into
#                                            .device/variants/; and tools/probes/zero_copy.cu's PTX
#   bash tools/gpu/relay-variants.sh run     there (.device carried): the zero-copy probe, then
#                                            figures_relayed_printed of each variant
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
VARIANTS=${VARIANTS:-"8:4 16:8 32:4 32:8 64:8"}
case "${1:-}" in
build)
    clang=${CLANG:-$(command -v clang || command -v clang-14)}
    ptx() { "$clang" -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_70 -O3 -S \
                -Xclang -target-feature -Xclang +ptx63 "$@"; }
    mkdir -p .device/variants
    ptx -o .device/zero_copy.ptx tools/probes/zero_copy.cu
    tree=$(mktemp -d)/gdsroute
    git worktree add --detach "$tree" HEAD > /dev/null
    trap 'git worktree remove --force "$tree"' EXIT
    for v in $VARIANTS; do
        blocks=${v%:*} loads=${v#*:}
        ptx -DRELAY_LOADS="$loads" -o "$tree/src/sys/cuda/relay/relay.ptx" "$tree/src/sys/cuda/relay/relay.cu"
        if grep -q shared "$tree/src/sys/cuda/relay/relay.ptx"; then echo "relay.ptx uses shared memory" >&2; exit 1; fi
        sed -i "s/^const MOVING_BLOCKS: u32 = .*;/const MOVING_BLOCKS: u32 = $blocks;/" "$tree/src/sys/cuda/relay.rs"
        bin=$(cd "$tree" && CARGO_TARGET_DIR="$root/target/variants" cargo test --release --test gpu_stream --no-run --message-format=json 2>/dev/null \
              | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep "/gpu_stream-" | head -1)
        cp "$bin" ".device/variants/gpu_stream_b${blocks}_u${loads}"
        strip ".device/variants/gpu_stream_b${blocks}_u${loads}"
        echo "built blocks $blocks, loads $loads"
    done
    ;;
run)
    export LD_LIBRARY_PATH=$PWD/.device
    (cd tools/probes && timeout 60 python3 probe-zero-copy.py ../../.device/zero_copy.ptx)
    rm -rf /run/udev
    for v in $VARIANTS; do
        b=.device/variants/gpu_stream_b${v%:*}_u${v#*:}
        [ -x "$b" ] || continue
        timeout 60 "$b" --ignored --exact figures_relayed_printed --nocapture --test-threads 1 2>&1 \
            | grep -E "GB/s|overlap [0-9]|panicked" | sed "s/^/blocks ${v%:*} loads ${v#*:}: /"
    done
    ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
