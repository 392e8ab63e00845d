/*
 * cuda_setup.h: the CUDA set-up of the GPU tools (first_read.c, many_files.c, ranks_read.c,
 * tools/hdf5/bench_hdf5.c, and tests/hdf5's device memory), as an application
 * does it: libcuda opened at run time (so the tools build without the CUDA toolkit), cuInit,
 * device 0's primary context made current, one device buffer. Header-only; each tool includes it
 * once.
 */
#ifndef GDSROUTE_TOOLS_CUDA_SETUP_H
#define GDSROUTE_TOOLS_CUDA_SETUP_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

static int (*cu_init)(unsigned);
static int (*cu_retain)(void **, int);
static int (*cu_set_current)(void *);
static int (*cu_mem_alloc)(uint64_t *, size_t);
static int (*cu_memset_d8)(uint64_t, unsigned char, size_t);
static int (*cu_memcpy_dtoh)(void *, uint64_t, size_t);
static int (*cu_memcpy_htod)(uint64_t, const void *, size_t);

/* Loads the driver API, makes device 0's primary context current and allocates `size` bytes into
 * `*device`, each set to `fill` when `fill` >= 0. 1 on success, 0 when any step failed. */
static int cuda_setup(size_t size, int fill, uint64_t *device) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) return 0;
    cu_init = (int (*)(unsigned))dlsym(lib, "cuInit");
    cu_retain = (int (*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain");
    cu_set_current = (int (*)(void *))dlsym(lib, "cuCtxSetCurrent");
    cu_mem_alloc = (int (*)(uint64_t *, size_t))dlsym(lib, "cuMemAlloc_v2");
    cu_memset_d8 = (int (*)(uint64_t, unsigned char, size_t))dlsym(lib, "cuMemsetD8_v2");
    cu_memcpy_dtoh = (int (*)(void *, uint64_t, size_t))dlsym(lib, "cuMemcpyDtoH_v2");
    cu_memcpy_htod = (int (*)(uint64_t, const void *, size_t))dlsym(lib, "cuMemcpyHtoD_v2");
    if (!cu_init || !cu_retain || !cu_set_current || !cu_mem_alloc || !cu_memset_d8 || !cu_memcpy_dtoh || !cu_memcpy_htod)
        return 0;
    void *ctx = NULL;
    if (cu_init(0) != 0 || cu_retain(&ctx, 0) != 0 || cu_set_current(ctx) != 0 || cu_mem_alloc(device, size) != 0) return 0;
    return fill < 0 || cu_memset_d8(*device, (unsigned char)fill, size) == 0;
}

#endif
