#!/usr/bin/env bash
# Compiles the relay kernels (src/sys/cuda/relay/relay.cu) to the PTX the library embeds
# (src/sys/cuda/relay/relay.ptx). Needs clang (its CUDA front end; no CUDA toolkit):
#   bash tools/gpu/relay-ptx.sh
# sm_70: the oldest architecture with nanosleep; the driver compiles the PTX for the GPU it
# runs on when the module is loaded.
set -euo pipefail
cd "$(dirname "$0")/../.."
clang=${CLANG:-$(command -v clang || command -v clang-14)}
"$clang" --version | head -n 1
"$clang" -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_70 -O3 -S \
    -Xclang -target-feature -Xclang +ptx63 -o src/sys/cuda/relay/relay.ptx src/sys/cuda/relay/relay.cu
# The kernels share no memory inside a block (a flag in shared memory was read before the
# barrier once the compiler hoisted its load): keep it so.
if grep -q 'shared' src/sys/cuda/relay/relay.ptx; then echo "relay.ptx uses shared memory" >&2; exit 1; fi
echo "wrote src/sys/cuda/relay/relay.ptx ($(wc -c < src/sys/cuda/relay/relay.ptx) bytes)"
