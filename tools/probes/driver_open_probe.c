/*
 * driver_open_probe: what a fresh process pays for CUDA and for cuFileDriverOpen, without
 * gdsroute (docs/performance.md, "The first read of a fresh process"). One line per run:
 *
 *   driver_open_probe cuda          cuInit, device 0's primary context, 1 GiB cuMemAlloc (the
 *                                   program's CUDA set-up alone)
 *   driver_open_probe open [--stats3]   cuInit + context, then cuFileDriverOpen alone (with
 *                                   --stats3: cuFileSetStatsLevel(3) before it, as gdsroute does)
 *   driver_open_probe open-no-cuda  cuFileDriverOpen with no CUDA call before it (cuFile's trap:
 *                                   prints its result)
 *   driver_open_probe overlap       a thread runs cuInit + context + cuFileDriverOpen while main
 *                                   runs cuInit + context + 1 GiB cuMemAlloc: the best an early
 *                                   start in the background can do
 *   driver_open_probe first-reads FILE T [tiny]   after the driver open and the file's
 *                                   registration (buffered descriptor; needs the udev record), T
 *                                   threads at once each make their first 4 MiB cuFileRead and then
 *                                   a second one into a 1 GiB cuMemAlloc buffer (with "tiny": a
 *                                   4 KiB read first, to see whether it takes the first read's cost)
 * cuFile's own knobs come from the environment (CUFILE_ENV_PATH_JSON, CUFILE_SKIP_TOPOLOGY_DETECTION,
 * ...); tools/gpu/first-read.sh runs the variants. libcuda and libcufile are opened with dlopen
 * (CUFILE_LIB, default libcufile.so.0), so this builds without the toolkit.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int err;
    int cu_err;
} cufile_error_t;

static int (*cu_init)(unsigned);
static int (*cu_retain)(void **, int);
static int (*cu_set_current)(void *);
static int (*cu_mem_alloc)(uint64_t *, size_t);
static cufile_error_t (*driver_open)(void);
static cufile_error_t (*driver_close)(void);
static cufile_error_t (*set_stats_level)(int);
static cufile_error_t (*handle_register)(void **, void *);
static long (*cufile_read)(void *, void *, size_t, long, long);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int load(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    const char *name = getenv("CUFILE_LIB") ? getenv("CUFILE_LIB") : "libcufile.so.0";
    void *cufile = dlopen(name, RTLD_NOW);
    if (!cuda || !cufile) return fprintf(stderr, "dlopen: %s\n", dlerror()), 0;
    cu_init = (int (*)(unsigned))dlsym(cuda, "cuInit");
    cu_retain = (int (*)(void **, int))dlsym(cuda, "cuDevicePrimaryCtxRetain");
    cu_set_current = (int (*)(void *))dlsym(cuda, "cuCtxSetCurrent");
    cu_mem_alloc = (int (*)(uint64_t *, size_t))dlsym(cuda, "cuMemAlloc_v2");
    driver_open = (cufile_error_t (*)(void))dlsym(cufile, "cuFileDriverOpen");
    driver_close = (cufile_error_t (*)(void))dlsym(cufile, "cuFileDriverClose_v2");
    set_stats_level = (cufile_error_t (*)(int))dlsym(cufile, "cuFileSetStatsLevel");
    handle_register = (cufile_error_t (*)(void **, void *))dlsym(cufile, "cuFileHandleRegister");
    cufile_read = (long (*)(void *, void *, size_t, long, long))dlsym(cufile, "cuFileRead");
    return cu_init && cu_retain && cu_set_current && cu_mem_alloc && driver_open && driver_close;
}

static double cuda_init_ctx(void) {
    double t = now();
    void *ctx = NULL;
    if (cu_init(0) != 0 || cu_retain(&ctx, 0) != 0 || cu_set_current(ctx) != 0) {
        fprintf(stderr, "CUDA set-up failed\n");
        exit(3);
    }
    return now() - t;
}

static double timed_open(cufile_error_t *r) {
    double t = now();
    *r = driver_open();
    return now() - t;
}

static double open_s, open_done_at;
static cufile_error_t open_result;

static void *background_open(void *unused) {
    (void)unused;
    cuda_init_ctx();
    open_s = timed_open(&open_result);
    open_done_at = now();
    return NULL;
}

/* cuFile's CUfileDescr_t: the handle type (1: an opaque descriptor), the descriptor, fs ops. */
typedef struct {
    int type;
    union {
        int fd;
        void *handle;
    } handle;
    const void *fs_ops;
} cufile_descr_t;

static void *file_handle;
static uint64_t device_buffer;
static int tiny_first;
static pthread_barrier_t barrier;
static void *probe_ctx;

typedef struct {
    int index;
    double tiny_s, first_s, second_s;
    long got;
} reader_t;

static void *first_reads(void *arg) {
    reader_t *r = arg;
    cu_set_current(probe_ctx);
    long at = (long)r->index * (16l << 20);
    pthread_barrier_wait(&barrier);
    double t = now();
    if (tiny_first) {
        r->got = cufile_read(file_handle, (void *)(uintptr_t)device_buffer, 4096, at + (8l << 20), at + (8l << 20));
        r->tiny_s = now() - t;
        t = now();
    }
    r->got = cufile_read(file_handle, (void *)(uintptr_t)device_buffer, 4u << 20, at, at);
    r->first_s = now() - t;
    t = now();
    long second = cufile_read(file_handle, (void *)(uintptr_t)device_buffer, 4u << 20, at + (4l << 20), at + (4l << 20));
    r->second_s = now() - t;
    if (second != (4l << 20)) r->got = second;
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int probe_first_reads(const char *path, int threads) {
    cuda_init_ctx();
    void *ctx = NULL;
    cu_retain(&ctx, 0);
    probe_ctx = ctx;
    cufile_error_t r = driver_open();
    if (r.err != 0) return fprintf(stderr, "driver open: %d\n", r.err), 1;
    int fd = open(path, O_RDONLY);
    cufile_descr_t descr = {1, {fd}, NULL};
    double t = now();
    r = handle_register(&file_handle, &descr);
    double register_s = now() - t;
    if (fd < 0 || r.err != 0) return fprintf(stderr, "register: %d (udev record?)\n", r.err), 1;
    if (cu_mem_alloc(&device_buffer, 1u << 30) != 0) return 3;
    reader_t readers[64];
    pthread_t ids[64];
    if (threads > 64) threads = 64;
    pthread_barrier_init(&barrier, NULL, (unsigned)threads);
    double all = now();
    for (int i = 0; i < threads; i++) {
        readers[i] = (reader_t){.index = i};
        pthread_create(&ids[i], NULL, first_reads, &readers[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    double wall = now() - all;
    double first[64], second[64], tiny[64];
    for (int i = 0; i < threads; i++) {
        if (readers[i].got != (4l << 20)) return fprintf(stderr, "thread %d read returned %ld\n", i, readers[i].got), 1;
        first[i] = readers[i].first_s, second[i] = readers[i].second_s, tiny[i] = readers[i].tiny_s;
    }
    qsort(first, (size_t)threads, sizeof(double), cmp_double);
    qsort(second, (size_t)threads, sizeof(double), cmp_double);
    qsort(tiny, (size_t)threads, sizeof(double), cmp_double);
    printf("PROBE mode=first-reads threads=%d tiny=%d register_s=%.4f wall_s=%.4f tiny_median_s=%.4f tiny_max_s=%.4f "
           "first_median_s=%.4f first_max_s=%.4f second_median_s=%.4f second_max_s=%.4f\n",
           threads, tiny_first, register_s, wall, tiny[threads / 2], tiny[threads - 1], first[threads / 2], first[threads - 1],
           second[threads / 2], second[threads - 1]);
    return 0;
}

int main(int argc, char **argv) {
    double t0 = now();
    if (argc < 2) return fprintf(stderr, "usage: %s cuda|open [--stats3]|open-no-cuda|overlap\n", argv[0]), 2;
    if (!load()) return 3;
    double load_s = now() - t0;
    const char *mode = argv[1];
    cufile_error_t r = {0, 0};
    if (strcmp(mode, "cuda") == 0) {
        double init = cuda_init_ctx();
        double t = now();
        uint64_t dev = 0;
        if (cu_mem_alloc(&dev, 1u << 30) != 0) return 3;
        printf("PROBE mode=cuda load_s=%.4f init_ctx_s=%.4f alloc_1gib_s=%.4f cuda_setup_s=%.4f\n", load_s, init, now() - t, now() - t0);
    } else if (strcmp(mode, "open") == 0) {
        double init = cuda_init_ctx();
        if (argc > 2 && strcmp(argv[2], "--stats3") == 0 && set_stats_level) set_stats_level(3);
        double open = timed_open(&r);
        printf("PROBE mode=open load_s=%.4f init_ctx_s=%.4f driver_open_s=%.4f err=%d cu_err=%d\n", load_s, init, open, r.err, r.cu_err);
    } else if (strcmp(mode, "open-no-cuda") == 0) {
        double open = timed_open(&r);
        printf("PROBE mode=open-no-cuda load_s=%.4f driver_open_s=%.4f err=%d cu_err=%d\n", load_s, open, r.err, r.cu_err);
    } else if (strcmp(mode, "first-reads") == 0 && argc > 3) {
        tiny_first = argc > 4 && strcmp(argv[4], "tiny") == 0;
        return probe_first_reads(argv[2], atoi(argv[3]));
    } else if (strcmp(mode, "overlap") == 0) {
        pthread_t thread;
        pthread_create(&thread, NULL, background_open, NULL);
        double init = cuda_init_ctx();
        uint64_t dev = 0;
        if (cu_mem_alloc(&dev, 1u << 30) != 0) return 3;
        double app_done = now() - t0;
        pthread_join(thread, NULL);
        r = open_result;
        double both = open_done_at - t0 > app_done ? open_done_at - t0 : app_done;
        printf("PROBE mode=overlap load_s=%.4f main_init_ctx_s=%.4f main_setup_done_s=%.4f driver_open_s=%.4f both_done_s=%.4f err=%d\n",
               load_s, init, app_done, open_s, both, r.err);
    } else {
        return fprintf(stderr, "unknown mode %s\n", mode), 2;
    }
    if (r.err == 0 && strcmp(mode, "cuda") != 0) driver_close();
    return 0;
}
