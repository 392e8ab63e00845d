/*
 * first_read: the program of issue 29's targets (docs/performance.md, "The first read of a fresh
 * process"). It sets up CUDA as an application does (cuInit, device 0's primary context, one
 * buffer of the file's size in device memory), then opens FILE with gdsroute and reads it once
 * into that buffer, timed from the start of main to the end of the read; then checks every byte
 * against a plain pread of the file.
 *
 *   first_read FILE [--early] [--warm-with OTHER] [--threads N] [--no-verify]
 *     --early       gdsroute_begin_device_setup() first thing in main, so that the library's
 *                   CUDA and cuFile set-up overlaps the program's own
 *     --warm-with   the baseline: before the timed open, read OTHER once through gdsroute (CUDA,
 *                   the library and cuFile's driver all set up); FILE is then a file this warm
 *                   process has not read
 *     --fresh-buffer with --warm-with: the timed read goes into a buffer allocated after the warm-up
 *                   read, as the fresh process's goes into one allocated just before its open (a
 *                   first copy into new device memory is slower for ~50 ms: docs/routing.md)
 *     --threads N   gdsroute_settings_set_num_threads(N) before anything else
 *     --work-ms N   the program's other set-up: N ms between its CUDA set-up and the open
 *     --gap-ms N    N ms between the open and the read (the program allocating, say)
 *
 * Prints one line: FIRST early=0|1 warm=0|1 cuda_s open_read_s (gap included) read_s total_s (from main) gbps
 * (of the read) cufile_tasks posix_tasks n nvfs posix (cuFile's own per-GPU counters, deltas)
 * reason (the file's cuFile verdict: GDSROUTE_FALLBACK_REASON_*, 0 = cuFile serves it) verified. Exit status 0, or 1 on any failure (a wrong byte included).
 *
 * libcuda is opened with dlopen, so this builds without the CUDA toolkit (tools/gpu/gpu-build.sh).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gdsroute.h"
#include "cuda_setup.h"


static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(const char *what, gdsroute_status st) {
    char msg[512];
    gdsroute_last_error_message(msg, sizeof msg);
    fprintf(stderr, "first_read: %s: status %u (%s): %s\n", what, (unsigned)st, gdsroute_status_str(st), msg);
    return 1;
}


static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&ts, &ts) != 0) {}
}

/* Opens `path`, waits `gap_ms`, and reads `size` bytes into `device` (pread + wait); returns the
 * bytes or -1, and when the read began in `*read_at`. */
static long long open_and_read(const char *path, uint64_t device, size_t size, gdsroute_file **out, long gap_ms, double *read_at) {
    gdsroute_file *file = NULL;
    gdsroute_status st = gdsroute_file_open(path, "r", 0, &file);
    if (st != GDSROUTE_STATUS_OK) return fail("open", st), -1;
    *out = file;
    sleep_ms(gap_ms);
    *read_at = now();
    gdsroute_op *op = NULL;
    st = gdsroute_file_pread(file, (void *)(uintptr_t)device, size, 0, &op);
    if (st != GDSROUTE_STATUS_OK) return fail("pread", st), -1;
    size_t got = 0;
    st = gdsroute_op_wait(op, &got);
    gdsroute_op_free(op);
    if (st != GDSROUTE_STATUS_OK) return fail("wait", st), -1;
    return (long long)got;
}

static int verify(const char *path, uint64_t device, size_t size) {
    unsigned char *want = malloc(size), *got = malloc(size);
    int fd = open(path, O_RDONLY);
    int ok = want && got && fd >= 0;
    for (size_t done = 0; ok && done < size;) {
        ssize_t n = pread(fd, want + done, size - done, (off_t)done);
        if (n <= 0) ok = 0;
        else done += (size_t)n;
    }
    ok = ok && cu_memcpy_dtoh(got, device, size) == 0 && memcmp(want, got, size) == 0;
    if (fd >= 0) close(fd);
    free(want);
    free(got);
    return ok;
}

int main(int argc, char **argv) {
    double t_main = now();
    const char *path = NULL, *warm_with = NULL;
    int early = 0, check = 1, fresh_buffer = 0;
    long threads = 0, work_ms = 0, gap_ms = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--early") == 0) early = 1;
        else if (strcmp(argv[i], "--no-verify") == 0) check = 0;
        else if (strcmp(argv[i], "--fresh-buffer") == 0) fresh_buffer = 1;
        else if (strcmp(argv[i], "--warm-with") == 0 && i + 1 < argc) warm_with = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--work-ms") == 0 && i + 1 < argc) work_ms = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--gap-ms") == 0 && i + 1 < argc) gap_ms = strtol(argv[++i], NULL, 10);
        else if (!path && argv[i][0] != '-') path = argv[i];
        else return fprintf(stderr, "usage: %s FILE [--early] [--warm-with OTHER [--fresh-buffer]] [--threads N] [--work-ms N] [--gap-ms N] [--no-verify]\n", argv[0]), 2;
    }
    if (!path) return fprintf(stderr, "first_read: no FILE\n"), 2;
    if (early) {
        gdsroute_status st = gdsroute_begin_device_setup();
        if (st != GDSROUTE_STATUS_OK) return fail("begin device setup", st);
    }
    if (threads > 0) {
        gdsroute_status st = gdsroute_settings_set_num_threads((size_t)threads);
        if (st != GDSROUTE_STATUS_OK) return fail("set threads", st);
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || sb.st_size <= 0) return fprintf(stderr, "first_read: cannot stat %s\n", path), 1;
    size_t size = (size_t)sb.st_size;
    uint64_t device = 0;
    if (!cuda_setup(size, -1, &device)) return fprintf(stderr, "first_read: no usable GPU\n"), 3;
    double t_cuda = now();
    sleep_ms(work_ms);

    if (warm_with) {
        gdsroute_file *other = NULL;
        struct stat wb;
        if (stat(warm_with, &wb) != 0) return fprintf(stderr, "first_read: cannot stat %s\n", warm_with), 1;
        size_t n = (size_t)wb.st_size < size ? (size_t)wb.st_size : size;
        double ignored;
        if (open_and_read(warm_with, device, n, &other, 0, &ignored) != (long long)n) return 1;
        gdsroute_file_free(other);
        if (fresh_buffer && cu_mem_alloc(&device, size) != 0) return fprintf(stderr, "first_read: no second buffer\n"), 3;
    }
    gdsroute_stats before;
    memset(&before, 0, sizeof before);
    before.struct_size = sizeof before;
    if (gdsroute_stats_get(&before) != GDSROUTE_STATUS_OK) return 1;

    double t_open = now();
    gdsroute_file *file = NULL;
    double t_read = 0;
    long long got = open_and_read(path, device, size, &file, gap_ms, &t_read);
    double t_end = now();
    if (got != (long long)size) return fprintf(stderr, "first_read: read %lld of %zu bytes\n", got, size), 1;

    gdsroute_stats after;
    memset(&after, 0, sizeof after);
    after.struct_size = sizeof after;
    if (gdsroute_stats_get(&after) != GDSROUTE_STATUS_OK) return 1;
    uint32_t reason = 0;
    size_t reason_len = 0;
    char why[256] = "";
    if (gdsroute_file_cufile_verdict(file, &reason, why, sizeof why, &reason_len) != GDSROUTE_STATUS_OK) return 1;
    int verified = check ? verify(path, device, size) : -1;
    printf("FIRST impl=gdsroute early=%d warm=%d fresh_buffer=%d threads=%ld work_ms=%ld gap_ms=%ld cuda_s=%.4f open_read_s=%.4f read_s=%.4f total_s=%.4f gbps=%.2f "
           "cufile_tasks=%" PRIu64 " posix_tasks=%" PRIu64 " n=%" PRIu64 " nvfs=%" PRIu64 " posix=%" PRIu64 " reason=%u verified=%d\n",
           early, warm_with != NULL, fresh_buffer, threads, work_ms, gap_ms, t_cuda - t_main, t_end - t_open, t_end - t_read, t_end - t_main,
           (double)size / (t_end - t_read) / 1e9,
           after.cufile_tasks - before.cufile_tasks, after.posix_tasks - before.posix_tasks,
           after.cufile_n_total_reads - before.cufile_n_total_reads, after.cufile_n_nvfs_reads - before.cufile_n_nvfs_reads,
           after.cufile_n_posix_reads - before.cufile_n_posix_reads, (unsigned)reason, verified);
    /* The same moments on CLOCK_MONOTONIC, for a trace build's GDSROUTE_TRACE_FILE (src/trace.rs). */
    printf("MARKS main_us=%.0f cuda_ready_us=%.0f open_us=%.0f read_end_us=%.0f\n", t_main * 1e6, t_cuda * 1e6, t_open * 1e6,
           t_end * 1e6);
    gdsroute_file_free(file);
    return verified == 0 ? 1 : 0;
}
