/* Load on the shared pool: 8 threads x 16 files x mixed sizes (1 B to 9 MiB, random offsets,
 * some past the end), pread+wait and read, every read checked byte for byte (and its guards)
 * against the file contents, for a fixed number of iterations. Meanwhile one thread resizes the
 * pool (1..16 threads) and some reads close and free their own handle while in flight. At the
 * end the process counters must add up exactly and the number of OS threads must be back to
 * where it was. Prints the operations completed, then "N passed, M failed". */
#define _GNU_SOURCE
#include "check.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define GUARD 32
#define POISON 0x5A
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define NFILES 16
#define NTHREADS 8
#define ITERATIONS 1000 /* per thread; about 3 s on 2 cores */

static char dir[256];
static char paths[NFILES][300];
static unsigned char *contents[NFILES];
static size_t sizes[NFILES];
static gdsroute_file *shared_handles[NFILES];

static atomic_ullong reads_issued, bytes_requested, bytes_returned, closed_in_flight;
/* Reads of a closed handle: failed calls, counted in calls and calls_failed (process-wide). */
static atomic_ullong rejected_after_close;
static atomic_int failures, stop_resizer, resizes;

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static int count_tasks(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (d == NULL) {
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    return n;
}

static void fail(const char *what, int file, size_t size, uint64_t offset, gdsroute_status st) {
    char msg[512];
    gdsroute_last_error_message(msg, sizeof msg);
    fprintf(stderr, "%s: file %d size %zu offset %llu status %u (%s)\n", what, file, size,
            (unsigned long long)offset, (unsigned)st, msg);
    atomic_fetch_add(&failures, 1);
}

/* Random size, log-uniform from 1 B to 9 MiB. */
static size_t random_size(uint64_t *s) {
    unsigned bits = (unsigned)(xorshift(s) % 24); /* 2^0 .. 2^23 */
    size_t size = ((size_t)1 << bits) + (size_t)(xorshift(s) % ((size_t)1 << bits));
    return size > 9 * MiB ? 9 * MiB : size;
}

static void *reader(void *arg) {
    uint64_t seed = 0x9E3779B97F4A7C15ULL * (uint64_t)((intptr_t)arg + 1);
    unsigned char *raw = malloc(9 * MiB + 2 * GUARD);
    for (int it = 0; it < ITERATIONS; it++) {
        int fi = (int)(xorshift(&seed) % NFILES);
        size_t size = random_size(&seed);
        uint64_t offset = xorshift(&seed) % (sizes[fi] + 64 * KiB); /* sometimes past the end */
        unsigned mode = (unsigned)(xorshift(&seed) % 8);             /* 0-4 pread, 5-6 read, 7 close in flight */
        unsigned char *buf = raw + GUARD;
        memset(raw, POISON, size + 2 * GUARD);
        size_t got = 0;
        gdsroute_status st;
        if (mode <= 4) {
            gdsroute_op *op = NULL;
            st = gdsroute_file_pread(shared_handles[fi], buf, size, offset, &op);
            if (st == GDSROUTE_STATUS_OK) {
                st = gdsroute_op_wait(op, &got);
            }
            gdsroute_op_free(op);
        } else if (mode <= 6) {
            st = gdsroute_file_read(shared_handles[fi], buf, size, offset, &got);
        } else {
            /* A private handle closed and freed while its read is in flight. */
            gdsroute_file *f = NULL;
            st = gdsroute_file_open(paths[fi], "r", 0, &f);
            gdsroute_op *op = NULL;
            if (st == GDSROUTE_STATUS_OK) {
                st = gdsroute_file_pread(f, buf, size, offset, &op);
            }
            if (xorshift(&seed) % 2) {
                if (gdsroute_file_close(f) != GDSROUTE_STATUS_OK) {
                    fail("close", fi, size, offset, 0);
                }
                size_t dummy;
                gdsroute_op *op2 = NULL;
                if (gdsroute_file_pread(f, buf, size, offset, &op2) != GDSROUTE_STATUS_CLOSED_HANDLE) {
                    fail("pread after close", fi, size, offset, 0);
                }
                if (gdsroute_file_read(f, buf, 1, 0, &dummy) != GDSROUTE_STATUS_CLOSED_HANDLE) {
                    fail("read after close", fi, size, offset, 0);
                }
                atomic_fetch_add(&rejected_after_close, 2);
            }
            gdsroute_file_free(f);
            atomic_fetch_add(&closed_in_flight, 1);
            if (st == GDSROUTE_STATUS_OK) {
                st = gdsroute_op_wait(op, &got);
            }
            gdsroute_op_free(op);
        }
        atomic_fetch_add(&reads_issued, 1);
        atomic_fetch_add(&bytes_requested, size);
        if (st != GDSROUTE_STATUS_OK) {
            fail("read failed", fi, size, offset, st);
            continue;
        }
        atomic_fetch_add(&bytes_returned, got);
        size_t expect = offset >= sizes[fi] ? 0 : (sizes[fi] - offset < size ? sizes[fi] - offset : size);
        if (got != expect) {
            fail("wrong count", fi, size, offset, st);
            continue;
        }
        if (memcmp(buf, contents[fi] + offset, got) != 0) {
            fail("wrong bytes", fi, size, offset, st);
        }
        for (size_t i = 0; i < GUARD; i++) {
            if (raw[i] != POISON) {
                fail("front guard written", fi, size, offset, st);
                break;
            }
        }
        for (size_t i = GUARD + got; i < GUARD + size + GUARD; i++) {
            if (raw[i] != POISON) {
                fail("bytes written past the read", fi, size, offset, st);
                break;
            }
        }
    }
    free(raw);
    return NULL;
}

static void *resizer(void *arg) {
    (void)arg;
    const size_t counts[] = {1, 3, 16, 2, 8, 5, 4};
    unsigned i = 0;
    while (!atomic_load(&stop_resizer)) {
        if (gdsroute_settings_set_num_threads(counts[i++ % 7]) != GDSROUTE_STATUS_OK) {
            atomic_fetch_add(&failures, 1);
        }
        if (gdsroute_settings_set_task_size(i % 2 ? 256 * KiB : 1 * MiB) != GDSROUTE_STATUS_OK) {
            atomic_fetch_add(&failures, 1);
        }
        atomic_fetch_add(&resizes, 1);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int main(void) {
    alarm(240);
    snprintf(dir, sizeof dir, "/tmp/gdsroute-stress-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    uint64_t seed = 12345;
    for (int i = 0; i < NFILES; i++) {
        sizes[i] = i == 0 ? 1 : (size_t)(xorshift(&seed) % (12 * MiB)) + 1;
        contents[i] = malloc(sizes[i] + 8);
        for (size_t j = 0; j < sizes[i]; j += 8) {
            uint64_t r = xorshift(&seed);
            memcpy(contents[i] + j, &r, 8);
        }
        snprintf(paths[i], sizeof paths[i], "%s/f%02d.bin", dir, i);
        int fd = open(paths[i], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, contents[i], sizes[i]) != (ssize_t)sizes[i]) {
            perror(paths[i]);
            return 2;
        }
        close(fd);
        CHECK_STATUS(gdsroute_file_open(paths[i], "r", 0, &shared_handles[i]), GDSROUTE_STATUS_OK);
    }
    CHECK_STATUS(gdsroute_settings_set_num_threads(4), GDSROUTE_STATUS_OK);
    /* Start the pool, then count OS threads. */
    {
        unsigned char b[16];
        gdsroute_op *op = NULL;
        size_t got;
        CHECK_STATUS(gdsroute_file_pread(shared_handles[1], b, sizeof b, 0, &op), GDSROUTE_STATUS_OK);
        CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_OK);
        gdsroute_op_free(op);
    }
    int threads_before = count_tasks();
    CHECK_STATUS(gdsroute_stats_reset(), GDSROUTE_STATUS_OK);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t readers[NTHREADS], resize_thread;
    pthread_create(&resize_thread, NULL, resizer, NULL);
    for (intptr_t i = 0; i < NTHREADS; i++) {
        pthread_create(&readers[i], NULL, reader, (void *)i);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(readers[i], NULL);
    }
    atomic_store(&stop_resizer, 1);
    pthread_join(resize_thread, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

    CHECK(atomic_load(&failures) == 0);
    gdsroute_stats s = {.struct_size = sizeof s};
    CHECK_STATUS(gdsroute_stats_get(&s), GDSROUTE_STATUS_OK);
    unsigned long long issued = atomic_load(&reads_issued);
    CHECK(issued == (unsigned long long)NTHREADS * ITERATIONS);
    unsigned long long rejected = atomic_load(&rejected_after_close);
    CHECK(s.calls == issued + rejected);
    CHECK(s.calls_failed == rejected);
    CHECK(s.tasks_failed == 0);
    CHECK(s.bytes_requested == atomic_load(&bytes_requested));
    CHECK(s.bytes_read == atomic_load(&bytes_returned));
    CHECK(s.task_bytes == s.bytes_read);
    CHECK(s.tasks == s.posix_tasks);
    CHECK(s.posix_tasks == s.posix_tasks_host_memory);
    CHECK(s.posix_bytes == s.task_bytes);
    CHECK(s.cufile_tasks == 0 && s.cufile_bytes == 0);
    if (s.calls != issued + rejected || s.bytes_read != atomic_load(&bytes_returned)) {
        fprintf(stderr, "counters: calls %llu (issued %llu + rejected %llu), bytes_read %llu (returned %llu)\n",
                (unsigned long long)s.calls, issued, rejected, (unsigned long long)s.bytes_read,
                (unsigned long long)atomic_load(&bytes_returned));
    }

    /* Per-handle counters of the shared handles are part of the process totals. */
    uint64_t handle_calls = 0;
    for (int i = 0; i < NFILES; i++) {
        gdsroute_stats h = {.struct_size = sizeof h};
        CHECK_STATUS(gdsroute_file_stats(shared_handles[i], &h), GDSROUTE_STATUS_OK);
        handle_calls += h.calls;
    }
    CHECK(handle_calls + atomic_load(&closed_in_flight) + rejected == s.calls + 1); /* +1: the warm-up read */

    /* Back to 4 threads: surplus workers leave once idle (up to 30 s: sanitizer builds on a
     * loaded machine are slow to get there). */
    CHECK_STATUS(gdsroute_settings_set_num_threads(4), GDSROUTE_STATUS_OK);
    int threads_after = count_tasks();
    for (int i = 0; i < 3000 && threads_after > threads_before; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        threads_after = count_tasks();
    }
    CHECK(threads_after <= threads_before);
    size_t n = 0;
    CHECK_STATUS(gdsroute_settings_get_num_threads(&n), GDSROUTE_STATUS_OK);
    CHECK(n == 4);

    for (int i = 0; i < NFILES; i++) {
        gdsroute_file_free(shared_handles[i]);
        unlink(paths[i]);
        free(contents[i]);
    }
    rmdir(dir);
    printf("stress: %llu reads (%llu closed in flight), %.1f MiB delivered, %d pool resizes, "
           "%.1f s; OS threads %d before, %d after\n",
           issued, (unsigned long long)atomic_load(&closed_in_flight),
           (double)atomic_load(&bytes_returned) / (double)MiB, atomic_load(&resizes), secs,
           threads_before, threads_after);
    return check_summary();
}
