/*
 * mpi_ranks: MPI ranks sharing one file through gdsroute. Every rank writes its slice of FILE
 * (random bytes from a seed of its own) at its offset, rank * SLICE, with a parallel write; after
 * a barrier each rank reads the slice of the next rank (rank + 1 mod size, so every read crosses
 * what another process wrote) into its own memory with a parallel read and checks every byte,
 * and that nothing around the slice was written. Rank 0 prints the ranks' counters summed
 * (MPI_Reduce of gdsroute_stats: calls, bytes and tasks per route, for writes and reads), each
 * rank's thread count (the rank-aware default unless KVIKIO_NTHREADS sets one), and
 * "every byte matches".
 *
 *   mpirun -np 4 mpi_ranks FILE [SLICE_BYTES]      (SLICE_BYTES defaults to 8 MiB + 12345,
 *                                                   so that slices start off page boundaries)
 *
 * Memory: device memory when libcuda loads and a GPU is there (each rank takes the GPU of its
 * local rank modulo the GPUs on the node), host memory otherwise. The CUDA driver is loaded at run
 * time (dlopen), as gdsroute does, so this builds and runs without CUDA.
 *
 * Errors: each rank that fails prints gdsroute's message (status, text) itself; then all ranks
 * agree at the next step and leave with exit status 1 (2 on a byte mismatch, 3 on a usage or
 * set-up error), so a bad path ends the job with every rank's message instead of a hang.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdsroute.h"

static int rank, size;

/* ---- The CUDA driver, loaded at run time ---------------------------------------------------- */

struct cuda {
    int (*mem_alloc)(uint64_t *, size_t);
    int (*mem_free)(uint64_t);
    int (*memset_d8)(uint64_t, unsigned char, size_t);
    int (*memcpy_htod)(uint64_t, const void *, size_t);
    int (*memcpy_dtoh)(void *, uint64_t, size_t);
};

/* Returns 1 with device `local_rank % GPUs`'s primary context current, 0 when there is no usable GPU. */
static int cuda_setup(struct cuda *cu, int local_rank) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(lib, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(lib, "cuDeviceGetCount");
    int (*device_get)(int *, int) = (int (*)(int *, int))dlsym(lib, "cuDeviceGet");
    int (*retain)(void **, int) = (int (*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain");
    int (*set_current)(void *) = (int (*)(void *))dlsym(lib, "cuCtxSetCurrent");
    cu->mem_alloc = (int (*)(uint64_t *, size_t))dlsym(lib, "cuMemAlloc_v2");
    cu->mem_free = (int (*)(uint64_t))dlsym(lib, "cuMemFree_v2");
    cu->memset_d8 = (int (*)(uint64_t, unsigned char, size_t))dlsym(lib, "cuMemsetD8_v2");
    cu->memcpy_htod = (int (*)(uint64_t, const void *, size_t))dlsym(lib, "cuMemcpyHtoD_v2");
    cu->memcpy_dtoh = (int (*)(void *, uint64_t, size_t))dlsym(lib, "cuMemcpyDtoH_v2");
    if (!init || !count || !device_get || !retain || !set_current || !cu->mem_alloc || !cu->mem_free || !cu->memset_d8 ||
        !cu->memcpy_htod || !cu->memcpy_dtoh)
        return 0;
    int gpus = 0, dev = 0;
    void *ctx = NULL;
    if (init(0) != 0 || count(&gpus) != 0 || gpus < 1) return 0;
    return device_get(&dev, local_rank % gpus) == 0 && retain(&ctx, dev) == 0 && set_current(ctx) == 0;
}

/* ---- Helpers ---------------------------------------------------------------------------------- */

/* Rank r's bytes: xorshift64 seeded by r, so any rank can make any other rank's slice. */
static void fill(int r, unsigned char *buf, size_t n) {
    uint64_t x = 0x9E3779B97F4A7C15ull ^ ((uint64_t)(r + 1) * 0xBF58476D1CE4E5B9ull);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)(x >> 24);
    }
}

/* Prints gdsroute's message for a failed call (on `path`, if not NULL); returns 1 (the failure flag). */
static int fail(const char *what, const char *path, gdsroute_status st) {
    char msg[1024];
    gdsroute_last_error_message(msg, sizeof msg);
    fprintf(stderr, "mpi_ranks: rank %d: %s%s%s failed: status %u (%s): %s\n", rank, what, path ? " " : "", path ? path : "",
            (unsigned)st, gdsroute_status_str(st), msg);
    return 1;
}

/* Every rank passes here with its own failure flag (0 or an exit status); all leave with the
 * largest, so no rank waits for one that stopped. Returns 0 when every rank succeeded. */
static int agree(int failed, const char *step) {
    int worst = 0;
    MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (worst && !failed) fprintf(stderr, "mpi_ranks: rank %d: stopping at %s: another rank failed (its message above)\n", rank, step);
    return worst;
}

static int finish(int status) {
    fflush(stdout);
    fflush(stderr);
    MPI_Finalize();
    return status;
}

/* The counters rank 0 prints, summed over the ranks: name and field. */
#define STAT_FIELDS(X)                                                                                                  \
    X(write_calls) X(write_calls_failed) X(bytes_written) X(write_tasks) X(posix_write_tasks) X(posix_write_bytes)      \
    X(cufile_write_tasks) X(cufile_write_bytes) X(calls) X(calls_failed) X(bytes_read) X(tasks) X(posix_tasks)         \
    X(posix_bytes) X(posix_tasks_host_memory) X(posix_tasks_below_threshold) X(posix_tasks_compat_on)                  \
    X(posix_tasks_auto_fallback) X(cufile_tasks) X(cufile_bytes)
#define STAT_VALUE(f) stats.f,
#define STAT_NAME(f) #f,

/* ---- The program ------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || argc > 3) {
        if (rank == 0) fprintf(stderr, "usage: %s FILE [SLICE_BYTES]\n", argv[0]);
        return finish(3);
    }
    const char *path = argv[1];
    char *end = NULL;
    unsigned long long slice_arg = argc > 2 ? strtoull(argv[2], &end, 0) : (8ull << 20) + 12345;
    if ((argc > 2 && (*end != '\0' || end == argv[2])) || slice_arg == 0 || slice_arg > (1ull << 34)) {
        if (rank == 0) fprintf(stderr, "mpi_ranks: SLICE_BYTES %s: expected 1 to 2^34\n", argv[2]);
        return finish(3);
    }
    const size_t slice = (size_t)slice_arg, guard = 4096;
    const int peer = (rank + 1) % size;

    /* The ranks of this node, as MPI sees them (a GPU each, modulo the GPUs there). */
    MPI_Comm node;
    int local_rank = 0, local_size = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);

    struct cuda cu;
    memset(&cu, 0, sizeof cu);
    int gpu = cuda_setup(&cu, local_rank);
    /* Host copies: what this rank writes, what it expects of its peer, and what it read back. */
    unsigned char *mine = malloc(slice), *expect = malloc(slice), *back = malloc(slice + 2 * guard);
    uint64_t dev_src = 0, dev_dst = 0;
    int failed = !mine || !expect || !back;
    if (!failed) {
        fill(rank, mine, slice);
        fill(peer, expect, slice);
        memset(back, 0xA5, slice + 2 * guard); /* poison: the guards must stay so */
    }
    if (!failed && gpu) {
        failed = cu.mem_alloc(&dev_src, slice) != 0 || cu.mem_alloc(&dev_dst, slice + 2 * guard) != 0 ||
                 cu.memcpy_htod(dev_src, mine, slice) != 0 || cu.memset_d8(dev_dst, 0xA5, slice + 2 * guard) != 0;
    }
    if (failed) fprintf(stderr, "mpi_ranks: rank %d: cannot allocate %zu bytes of %s memory\n", rank, slice, gpu ? "device" : "host");
    if (agree(failed ? 3 : 0, "set-up")) return finish(3);

    size_t threads = 0;
    gdsroute_status st = gdsroute_settings_get_num_threads(&threads);
    failed = st != GDSROUTE_STATUS_OK && fail("gdsroute_settings_get_num_threads", NULL, st);
    if (!failed) {
        st = gdsroute_stats_reset();
        failed = st != GDSROUTE_STATUS_OK && fail("gdsroute_stats_reset", NULL, st);
    }
    if (agree(failed, "settings")) return finish(1);
    if (rank == 0)
        printf("mpi_ranks: %d ranks (%d on rank 0's node), %zu bytes each into %s memory, file %s\n", size, local_size, slice,
               gpu ? "device" : "host", path);

    /* Every rank opens with "w" (create, truncate) before any rank writes: the truncations all
     * happen before the barrier, the writes after it. */
    gdsroute_file *file = NULL;
    st = gdsroute_file_open(path, "w", 0644, &file);
    failed = st != GDSROUTE_STATUS_OK && fail("gdsroute_file_open", path, st);
    if (agree(failed, "open for writing")) {
        gdsroute_file_free(file);
        return finish(1);
    }
    const void *src = gpu ? (const void *)(uintptr_t)dev_src : (const void *)mine;
    gdsroute_op *op = NULL;
    size_t written = 0;
    st = gdsroute_file_pwrite(file, src, slice, (uint64_t)rank * slice, &op);
    if (st == GDSROUTE_STATUS_OK) st = gdsroute_op_wait(op, &written);
    gdsroute_op_free(op);
    failed = st != GDSROUTE_STATUS_OK && fail("gdsroute_file_pwrite", path, st);
    /* fsync and close before the barrier: on a shared file system the readers of other nodes see
     * the bytes once the writer closed (close-to-open consistency). */
    if (!failed) {
        st = gdsroute_file_sync(file);
        failed = st != GDSROUTE_STATUS_OK && fail("gdsroute_file_sync", path, st);
    }
    gdsroute_file_free(file);
    file = NULL; /* a failed open below leaves it as it is */
    if (agree(failed, "write")) return finish(1);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Each rank reads its peer's slice into the middle of its poisoned buffer. */
    st = gdsroute_file_open(path, "r", 0, &file);
    failed = st != GDSROUTE_STATUS_OK && fail("gdsroute_file_open", path, st);
    size_t got = 0;
    if (!failed) {
        void *dst = gpu ? (void *)(uintptr_t)(dev_dst + guard) : (void *)(back + guard);
        op = NULL;
        st = gdsroute_file_pread(file, dst, slice, (uint64_t)peer * slice, &op);
        if (st == GDSROUTE_STATUS_OK) st = gdsroute_op_wait(op, &got);
        gdsroute_op_free(op);
        failed = st != GDSROUTE_STATUS_OK && fail("gdsroute_file_pread", path, st);
    }
    gdsroute_file_free(file);
    if (!failed && gpu && cu.memcpy_dtoh(back, dev_dst, slice + 2 * guard) != 0) {
        fprintf(stderr, "mpi_ranks: rank %d: cuMemcpyDtoH failed\n", rank);
        failed = 1;
    }
    if (agree(failed, "read")) return finish(1);

    /* Every byte: the peer's slice in the middle, the poison around it untouched. */
    int mismatch = written != slice || got != slice || memcmp(back + guard, expect, slice) != 0;
    for (size_t i = 0; i < guard && !mismatch; i++) mismatch = back[i] != 0xA5 || back[guard + slice + i] != 0xA5;
    if (mismatch)
        fprintf(stderr, "mpi_ranks: rank %d: MISMATCH reading rank %d's slice (wrote %zu, read %zu of %zu)\n", rank, peer, written,
                got, slice);

    gdsroute_stats stats;
    memset(&stats, 0, sizeof stats);
    stats.struct_size = sizeof stats;
    st = gdsroute_stats_get(&stats);
    failed = st != GDSROUTE_STATUS_OK && fail("gdsroute_stats_get", NULL, st);
    if (agree(failed, "counters")) return finish(1);
    uint64_t local[] = {STAT_FIELDS(STAT_VALUE)};
    static const char *const names[] = {STAT_FIELDS(STAT_NAME)};
    enum { FIELDS = sizeof local / sizeof local[0] };
    uint64_t total[FIELDS];
    unsigned long long my_threads = threads, all_threads[4096];
    MPI_Reduce(local, total, FIELDS, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (size <= 4096)
        MPI_Gather(&my_threads, 1, MPI_UNSIGNED_LONG_LONG, all_threads, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    int bad = 0;
    MPI_Reduce(&mismatch, &bad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mpi_ranks: counters summed over %d ranks:", size);
        for (int i = 0; i < FIELDS; i++) printf(" %s=%" PRIu64, names[i], total[i]);
        printf("\n");
        if (size <= 4096) {
            printf("mpi_ranks: threads per rank:");
            for (int i = 0; i < size; i++) printf(" %llu", all_threads[i]);
            printf("\n");
        }
        if (bad)
            printf("mpi_ranks: MISMATCH in %d of %d ranks\n", bad, size);
        else
            printf("mpi_ranks: %d ranks wrote and read %zu bytes each across ranks: every byte matches\n", size, slice);
    }
    free(mine);
    free(expect);
    free(back);
    if (gpu) {
        cu.mem_free(dev_src);
        cu.mem_free(dev_dst);
    }
    /* All ranks leave with the same status: 2 when any rank saw a wrong byte. */
    int any = 0;
    MPI_Allreduce(&mismatch, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return finish(any ? 2 : 0);
}
