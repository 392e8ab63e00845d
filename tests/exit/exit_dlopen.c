/*
 * exit_dlopen: loads gdsroute with dlopen (the program is not linked against it), reads a file
 * into device memory through it, dlcloses it and returns from main. The library starts threads
 * and exit handlers, so it must stay mapped after dlclose (it is linked with -z nodelete).
 *
 * usage: exit_dlopen LIBRARY FILE [SIZE]
 * Prints "main-return-at T" (CLOCK_MONOTONIC seconds) just before returning. Exit status 0, or
 * 1 when a call failed, 3 on a setup error.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "exit_watch.h"

typedef uint32_t (*open_fn)(const char *, const char *, uint32_t, void **);
typedef uint32_t (*pread_fn)(const void *, void *, size_t, uint64_t, void **);
typedef uint32_t (*wait_fn)(void *, size_t *);
typedef void (*free_fn)(void *);

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIBRARY FILE [SIZE]\n", argv[0]);
        return 3;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t size = argc > 3 ? (size_t)strtoull(argv[3], NULL, 0) : (64u << 20);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) return 3;
    int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    int (*cu_retain)(void **, int) = (int (*)(void **, int))dlsym(cuda, "cuDevicePrimaryCtxRetain");
    int (*cu_set_current)(void *) = (int (*)(void *))dlsym(cuda, "cuCtxSetCurrent");
    int (*cu_mem_alloc)(uint64_t *, size_t) = (int (*)(uint64_t *, size_t))dlsym(cuda, "cuMemAlloc_v2");
    void *ctx = NULL;
    uint64_t device = 0;
    if (!cu_init || cu_init(0) || cu_retain(&ctx, 0) || cu_set_current(ctx) || cu_mem_alloc(&device, size)) return 3;

    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 3;
    }
    open_fn file_open = (open_fn)dlsym(lib, "gdsroute_file_open");
    pread_fn file_pread = (pread_fn)dlsym(lib, "gdsroute_file_pread");
    wait_fn op_wait = (wait_fn)dlsym(lib, "gdsroute_op_wait");
    free_fn op_free = (free_fn)dlsym(lib, "gdsroute_op_free");
    free_fn file_free = (free_fn)dlsym(lib, "gdsroute_file_free");
    if (!file_open || !file_pread || !op_wait || !op_free || !file_free) return 3;
    void *file = NULL, *op = NULL;
    size_t got = 0;
    int bad = file_open(argv[2], "r", 0, &file) != 0 || file_pread(file, (void *)(uintptr_t)device, size, 0, &op) != 0 ||
              op_wait(op, &got) != 0 || got != size;
    printf("read %zu of %zu bytes through dlopen\n", got, size);
    op_free(op);
    file_free(file);
    exit_watch_phase("dlclose");
    printf("dlclose -> %d\n", dlclose(lib));
    exit_watch_phase("main returned");
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("main-return-at %.6f\n", (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    fflush(stdout);
    return bad;
}
