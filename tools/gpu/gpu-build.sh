#!/usr/bin/env bash
# Builds (here, where Rust is) what tools/gpu/gpu-proof.sh (one GPU), tools/gpu/gpu-multi-proof.sh
# (two GPUs) and tools/gpu/ranks.sh (MPI ranks sharing a GPU) run on the GPU machine, into .device/
# (ignored by git; copy it to the GPU machine with the working tree).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --lib --bins
mkdir -p .device
cp target/release/libgdsroute.so .device/libgdsroute.so.0
ln -sf libgdsroute.so.0 .device/libgdsroute.so
cp target/release/gdsroute-diagnose .device/
cc -O2 -Wall -Wextra -Werror -std=c11 -Iinclude examples-c/gpu_read.c -o .device/gpu_read -L.device -lgdsroute -ldl
cc -O2 -Wall -Wextra -Werror -std=gnu11 -Iinclude tools/gpu/ranks_read.c -o .device/ranks_read -L.device -lgdsroute -ldl
# The exit suite (tests/exit): -rdynamic so that exit_watch's __cxa_atexit sees every library's
# exit-time destructors.
cc -O1 -g -Wall -Wextra -Werror -std=gnu11 -rdynamic -Iinclude tests/exit/exit_paths.c tests/exit/exit_watch.c \
   -o .device/exit_paths -L.device -lgdsroute -ldl -lpthread
cc -O1 -g -Wall -Wextra -Werror -std=gnu11 -rdynamic tests/exit/exit_dlopen.c tests/exit/exit_watch.c \
   -o .device/exit_dlopen -ldl -lpthread
cc -O1 -g -Wall -Wextra -Werror -std=gnu11 -rdynamic tools/probes/cufile_exit_probe.c tests/exit/exit_watch.c \
   -o .device/cufile_exit_probe -ldl -lpthread
cc -shared -fPIC -O1 -g -Wall -Wextra -Werror -std=gnu11 tests/exit/exit_watch.c -o .device/libexit_watch.so -ldl
for variant in full:"" nostats:-DFAKE_CUFILE_NO_STATS; do
  cc -shared -fPIC -O1 -Wall -Wextra -Werror -pthread ${variant#*:} -o ".device/libfake_cufile_${variant%%:*}.so" tests/fake_cufile/fake_cufile.c
done
# The fault shim for tests/gpu_writes.rs (GDSROUTE_TEST_FAULT_SHIM; the GPU machine may have no C
# compiler at test time).
cc -shared -fPIC -O2 -Wall -Wextra -Werror -o .device/libfault_shim.so tests/c/fault_shim.c -ldl
# The NVTX tool of tests/nvtx.rs (GDSROUTE_TEST_NVTX_INJECTION), for the same reason.
cc -shared -fPIC -O1 -Wall -Wextra -Werror -pthread -o .device/libcounting_nvtx_injection.so tests/nvtx/counting_injection.c
for t in gpu_routes gpu_batch cufile_batch gpu_faults gpu_page_cache gpu_writes gpu_stream gpu_devices gpu_multi_device gpu_memory gpu_driver gpu_mapping pools monitors gpu_counters nvtx; do
  bin=$(cargo test --release --test "$t" --no-run --message-format=json 2>/dev/null \
        | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep "/$t-" | head -1)
  cp "$bin" ".device/$t"
  # tools/gpu/stream-stacks.sh's copy keeps the symbol table, for readable stacks.
  if [ "$t" = gpu_stream ]; then cp "$bin" .device/gpu_stream_syms && strip --strip-debug .device/gpu_stream_syms; fi
done
cc -O1 -g -Wall -Wextra -Werror -std=gnu11 tools/probes/stream_wait_probe.c -o .device/stream_wait_probe -ldl -lpthread
# The CUDA layer's GPU tests are unit tests (src/sys/cuda/gpu_tests.rs): the library's test binary.
bin=$(cargo test --release --lib --no-run --message-format=json 2>/dev/null \
      | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep "/gdsroute-" | head -1)
cp "$bin" .device/gdsroute_unit
strip .device/gdsroute_unit .device/gpu_routes .device/gpu_batch .device/cufile_batch .device/gpu_faults .device/gpu_page_cache .device/gpu_writes .device/gpu_stream .device/gpu_devices .device/gpu_memory .device/gpu_driver .device/pools .device/gpu_mapping .device/monitors .device/gpu_counters .device/nvtx \
      .device/gpu_multi_device .device/gdsroute-diagnose .device/ranks_read .device/libgdsroute.so.0
du -sh .device
