/*
 * gpu_read: the tutorial program. Reads a file into GPU memory through gdsroute (into host
 * memory where there is no GPU), checks every byte against a plain read of the file, and prints
 * gdsroute's route counters next to cuFile's own in the "n= nvfs= posix=" form.
 *
 * usage: gpu_read FILE [SIZE [OFFSET]]     (SIZE defaults to the whole file)
 *
 * The CUDA driver is loaded at run time (dlopen), like gdsroute does, so this program builds and
 * runs on machines without CUDA. Exit status: 0 when every byte matched, 1 on a gdsroute error,
 * 2 on a byte mismatch, 3 on a usage or setup error.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gdsroute.h"

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_ctx_retain_fn)(void **, int);
typedef int (*cu_ctx_set_fn)(void *);
typedef int (*cu_mem_alloc_fn)(uint64_t *, size_t);
typedef int (*cu_mem_free_fn)(uint64_t);
typedef int (*cu_memcpy_dtoh_fn)(void *, uint64_t, size_t);

struct cuda {
    cu_mem_alloc_fn mem_alloc;
    cu_mem_free_fn mem_free;
    cu_memcpy_dtoh_fn memcpy_dtoh;
};

/* Returns 1 when a GPU is usable, 0 otherwise (then host memory is used). */
static int cuda_setup(struct cuda *cu) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
    cu_init_fn init = (cu_init_fn)dlsym(lib, "cuInit");
    cu_device_get_fn device_get = (cu_device_get_fn)dlsym(lib, "cuDeviceGet");
    cu_ctx_retain_fn retain = (cu_ctx_retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
    cu_ctx_set_fn set_current = (cu_ctx_set_fn)dlsym(lib, "cuCtxSetCurrent");
    cu->mem_alloc = (cu_mem_alloc_fn)dlsym(lib, "cuMemAlloc_v2");
    cu->mem_free = (cu_mem_free_fn)dlsym(lib, "cuMemFree_v2");
    cu->memcpy_dtoh = (cu_memcpy_dtoh_fn)dlsym(lib, "cuMemcpyDtoH_v2");
    if (!init || !device_get || !retain || !set_current || !cu->mem_alloc || !cu->mem_free || !cu->memcpy_dtoh)
        return 0;
    int dev = 0;
    void *ctx = NULL;
    if (init(0) != 0 || device_get(&dev, 0) != 0 || retain(&ctx, dev) != 0 || set_current(ctx) != 0) return 0;
    return 1;
}

static int fail(const char *what, gdsroute_status status) {
    char msg[1024];
    gdsroute_last_error_message(msg, sizeof msg);
    fprintf(stderr, "%s failed: status %u (%s): %s\n", what, (unsigned)status, gdsroute_status_str(status), msg);
    return 1;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [SIZE [OFFSET]]\n", argv[0]);
        return 3;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* every line reaches a pipe even if the process dies */
    const char *path = argv[1];
    gdsroute_file *file = NULL;
    gdsroute_status st = gdsroute_file_open(path, "r", 0644, &file);
    if (st != GDSROUTE_STATUS_OK) return fail("gdsroute_file_open", st);
    uint64_t file_size = 0;
    st = gdsroute_file_size(file, &file_size);
    if (st != GDSROUTE_STATUS_OK) return fail("gdsroute_file_size", st);
    uint64_t offset = argc > 3 ? strtoull(argv[3], NULL, 0) : 0;
    size_t size = argc > 2 ? (size_t)strtoull(argv[2], NULL, 0) : (size_t)(file_size - (offset < file_size ? offset : file_size));

    struct cuda cu = {0};
    int gpu = cuda_setup(&cu);
    uint64_t device = 0;
    unsigned char *host = NULL;
    void *dst;
    if (gpu) {
        if (cu.mem_alloc(&device, size ? size : 1) != 0) {
            fprintf(stderr, "cuMemAlloc(%zu) failed\n", size);
            return 3;
        }
        dst = (void *)(uintptr_t)device;
    } else {
        host = malloc(size ? size : 1);
        if (!host) return 3;
        dst = host;
    }
    printf("destination: %s memory, %zu bytes at file offset %" PRIu64 "\n", gpu ? "device (cuMemAlloc)" : "host (no GPU)", size, offset);

    uint32_t reason = 0;
    char why[1024];
    size_t why_len = 0;
    st = gdsroute_file_cufile_verdict(file, &reason, why, sizeof why, &why_len);
    if (st != GDSROUTE_STATUS_OK) return fail("gdsroute_file_cufile_verdict", st);
    printf("cuFile verdict: reason %u: %s\n", (unsigned)reason, why);

    st = gdsroute_stats_reset();
    if (st != GDSROUTE_STATUS_OK) return fail("gdsroute_stats_reset", st);
    double t0 = now_seconds();
    gdsroute_op *op = NULL;
    st = gdsroute_file_pread(file, dst, size, offset, &op);
    if (st != GDSROUTE_STATUS_OK) return fail("gdsroute_file_pread", st);
    size_t got = 0;
    st = gdsroute_op_wait(op, &got);
    double seconds = now_seconds() - t0;
    gdsroute_op_free(op);
    if (st != GDSROUTE_STATUS_OK) return fail("gdsroute_op_wait", st);
    printf("read %zu bytes in %.3f s (%.2f GB/s)\n", got, seconds, seconds > 0 ? (double)got / seconds / 1e9 : 0.0);

    /* Every byte: compare with a plain pread of the same range. */
    unsigned char *expect = malloc(got ? got : 1), *actual = malloc(got ? got : 1);
    int fd = open(path, O_RDONLY);
    size_t done = 0;
    while (fd >= 0 && done < got) {
        ssize_t n = pread(fd, expect + done, got - done, (off_t)(offset + done));
        if (n <= 0) break;
        done += (size_t)n;
    }
    if (fd >= 0) close(fd);
    if (gpu) {
        if (got && cu.memcpy_dtoh(actual, device, got) != 0) {
            fprintf(stderr, "cuMemcpyDtoH failed\n");
            return 3;
        }
    } else {
        memcpy(actual, host, got);
    }
    int mismatch = done != got || memcmp(expect, actual, got) != 0;
    printf("verify: %s\n", mismatch ? "MISMATCH" : "every byte matches the file");

    gdsroute_stats stats;
    memset(&stats, 0, sizeof stats);
    stats.struct_size = sizeof stats;
    st = gdsroute_stats_get(&stats);
    if (st != GDSROUTE_STATUS_OK) return fail("gdsroute_stats_get", st);
    printf("gdsroute: calls=%" PRIu64 " tasks=%" PRIu64 " posix_tasks=%" PRIu64 " (host=%" PRIu64 " below_threshold=%" PRIu64
           " compat_on=%" PRIu64 " auto_fallback=%" PRIu64 ") cufile_tasks=%" PRIu64 " bytes=%" PRIu64 "\n",
           stats.calls, stats.tasks, stats.posix_tasks, stats.posix_tasks_host_memory, stats.posix_tasks_below_threshold,
           stats.posix_tasks_compat_on, stats.posix_tasks_auto_fallback, stats.cufile_tasks, stats.bytes_read);
    if (stats.cufile_stats_state == GDSROUTE_CUFILE_STATS_STATE_ACTIVE)
        printf("cuFile:   n=%" PRIu64 " nvfs=%" PRIu64 " posix=%" PRIu64 " p2p=%" PRIu64 " unaligned=%" PRIu64 " err=%" PRIu64
               " bytes=%" PRIu64 "\n",
               stats.cufile_n_total_reads, stats.cufile_n_nvfs_reads, stats.cufile_n_posix_reads, stats.cufile_n_p2p_reads,
               stats.cufile_n_unaligned_reads, stats.cufile_n_reads_err, stats.cufile_read_bytes);
    else
        printf("cuFile:   counters not live (state %" PRIu64 ": 0 not loaded, 1 no stats API)\n", stats.cufile_stats_state);

    free(expect);
    free(actual);
    free(host);
    if (gpu) cu.mem_free(device);
    gdsroute_file_free(file);
    return mismatch ? 2 : 0;
}
