/* Times direct-I/O writes and reads of host memory that is not page-aligned, through the C ABI:
 * the cost of the scratch-buffer copies (issue 23: memcpy before, process_vm_readv/writev after).
 * gdsroute-bench has no option for a buffer offset, hence this program.
 *
 * Each repetition writes SIZE bytes from buf + MISALIGN to FILE with gdsroute_file_pwrite, then
 * fdatasyncs (not timed), then reads them back into the same buffer with gdsroute_file_pread
 * and checks every byte. Direct I/O is turned on for reads and writes with the setters (the
 * same as KVIKIO_AUTO_DIRECT_IO_READ=1 and KVIKIO_AUTO_DIRECT_IO_WRITE=1). One line per
 * repetition and a median line per direction:
 *   RESULT dir=write misalign=1 size=1073741824 threads=16 task=4194304 rep=2 s=0.61 gbps=1.76 direct=1073741824
 *   MEDIAN dir=write misalign=1 ... gbps=1.75
 * `direct` is what the counters say went through O_DIRECT (posix_direct_write_bytes,
 * posix_direct_bytes): 0 means the file system refused O_DIRECT and the numbers mean nothing.
 *
 * Build against either library (the ABI is the same, so one binary runs with both through
 * LD_LIBRARY_PATH):
 *   cc -O2 -std=c11 -Iinclude tools/gpu/bench_misaligned.c -o bench_misaligned -Lbuild/lib -lgdsroute
 * Usage: bench_misaligned FILE [SIZE [MISALIGN [REPS [THREADS [TASK_SIZE]]]]]
 *   defaults: 1 GiB, 1, 5, 16, 4 MiB. FILE is created or overwritten. */
#define _GNU_SOURCE
#include <gdsroute.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void must(gdsroute_status st, const char *what) {
    if (st != GDSROUTE_STATUS_OK) {
        char msg[1024];
        gdsroute_last_error_message(msg, sizeof msg);
        fprintf(stderr, "bench_misaligned: %s: %s (%s)\n", what, gdsroute_status_str(st), msg);
        exit(1);
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static unsigned long long arg(int argc, char **argv, int i, unsigned long long fallback) {
    return argc > i ? strtoull(argv[i], NULL, 0) : fallback;
}

/* One timed operation of `size` bytes; returns the seconds. */
static double timed(gdsroute_file *f, int write, unsigned char *buf, size_t size) {
    gdsroute_op *op = NULL;
    size_t done = 0;
    double t0 = now_s();
    must(write ? gdsroute_file_pwrite(f, buf, size, 0, &op) : gdsroute_file_pread(f, buf, size, 0, &op), write ? "pwrite" : "pread");
    must(gdsroute_op_wait(op, &done), "wait");
    double t = now_s() - t0;
    gdsroute_op_free(op);
    if (done != size) {
        fprintf(stderr, "bench_misaligned: %zu of %zu bytes\n", done, size);
        exit(1);
    }
    return t;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [SIZE [MISALIGN [REPS [THREADS [TASK_SIZE]]]]]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    size_t size = (size_t)arg(argc, argv, 2, 1ULL << 30);
    size_t misalign = (size_t)arg(argc, argv, 3, 1);
    int reps = (int)arg(argc, argv, 4, 5);
    size_t threads = (size_t)arg(argc, argv, 5, 16);
    size_t task = (size_t)arg(argc, argv, 6, 4ULL << 20);
    if (reps < 1 || reps > 100) {
        reps = 5;
    }
    unsigned char *raw = NULL;
    if (posix_memalign((void **)&raw, 4096, size + 4096) != 0) {
        fprintf(stderr, "bench_misaligned: no memory for %zu bytes\n", size);
        return 1;
    }
    unsigned char *buf = raw + misalign;
    for (size_t i = 0; i < size; i++) {
        buf[i] = (unsigned char)(i * 2654435761u >> 13);
    }
    must(gdsroute_settings_set_num_threads(threads), "threads");
    must(gdsroute_settings_set_task_size(task), "task size");
    must(gdsroute_settings_set_auto_direct_io_read(true), "direct reads");
    must(gdsroute_settings_set_auto_direct_io_write(true), "direct writes");
    gdsroute_file *f = NULL;
    must(gdsroute_file_open(path, "w+", 0644, &f), "open");
    int fd = open(path, O_RDONLY);

    double secs[2][100];
    for (int rep = 0; rep < reps; rep++) {
        for (int write = 1; write >= 0; write--) {
            gdsroute_stats before = {.struct_size = sizeof before}, after = {.struct_size = sizeof after};
            must(gdsroute_stats_get(&before), "stats");
            if (!write) {
                memset(buf, 0, size);
            }
            double t = timed(f, write, buf, size);
            must(gdsroute_stats_get(&after), "stats");
            if (write && fd >= 0) {
                fdatasync(fd);
            }
            if (!write) {
                for (size_t i = 0; i < size; i++) {
                    if (buf[i] != (unsigned char)(i * 2654435761u >> 13)) {
                        fprintf(stderr, "bench_misaligned: byte %zu differs after the read\n", i);
                        return 1;
                    }
                }
            }
            unsigned long long direct = write ? after.posix_direct_write_bytes - before.posix_direct_write_bytes
                                              : after.posix_direct_bytes - before.posix_direct_bytes;
            secs[write][rep] = t;
            printf("RESULT dir=%s misalign=%zu size=%zu threads=%zu task=%zu rep=%d s=%.3f gbps=%.2f direct=%llu\n",
                   write ? "write" : "read", misalign, size, threads, task, rep, t, (double)size / t / 1e9, direct);
        }
    }
    for (int write = 1; write >= 0; write--) {
        qsort(secs[write], (size_t)reps, sizeof secs[write][0], by_value);
        double median = secs[write][reps / 2];
        printf("MEDIAN dir=%s misalign=%zu size=%zu threads=%zu task=%zu reps=%d s=%.3f gbps=%.2f\n",
               write ? "write" : "read", misalign, size, threads, task, reps, median, (double)size / median / 1e9);
    }
    if (fd >= 0) {
        close(fd);
    }
    gdsroute_file_free(f);
    free(raw);
    return 0;
}
