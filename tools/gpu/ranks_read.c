/*
 * ranks_read: one rank of tools/gpu/ranks.sh, the measurement of MPI ranks sharing a GPU (docs/routing.md,
 * "MPI ranks"). Plain processes, no MPI: the script starts RANKS of them with
 * OMPI_COMM_WORLD_LOCAL_SIZE=RANKS set, as mpirun would, so the library's rank-aware default sees
 * the same thing without Open MPI on the machine. Each reads its slice of FILE (the file divided
 * into RANKS slices, the last one taking the rest) into device memory through gdsroute, timed from
 * a common start (GO, below), then checks every byte and the poisoned guards around the slice.
 *
 *   ranks_read FILE RANK RANKS [--threads N] [--host] [--warm-with OTHER] [--go PATH] [--no-verify]
 *     --threads N  gdsroute_settings_set_num_threads(N) first (default: the library's own, which
 *                  is the rank-aware default under OMPI_COMM_WORLD_LOCAL_SIZE)
 *     --host       a host buffer (malloc) instead of device memory; needs no GPU
 *     --warm-with OTHER  before the timed read, read OTHER (up to the slice's size) into the same
 *                  buffer, then poison it again: the pool's threads, bounce buffers and cuFile are
 *                  then set up, so the timed read measures the steady rate, not the first read
 *     --go PATH    after its set-up (CUDA, buffer, open), create PATH.ready.RANK and wait for PATH
 *                  to exist, so that the ranks' reads start together; without it, read at once
 *   ranks_read FILE --create SIZE   write FILE of SIZE bytes (K/M/G suffixes) with the pattern
 *                                   below, unless it is already that size; then fsync
 *   ranks_read FILE --evict         drop FILE's pages from the page cache (fdatasync, then
 *                                   posix_fadvise DONTNEED): the cold pass where drop_caches is
 *                                   not writable
 *
 * The file's bytes: 64-bit word i is splitmix64(i), so any slice is checked without reading the
 * file again. Prints one line:
 *   RANK rank= ranks= threads= mem=device|host offset= bytes= start_ns= end_ns= seconds= gbps=
 *        posix_tasks= cufile_tasks= verified=1|0
 * (start_ns/end_ns: CLOCK_REALTIME around pread + op_wait, for the script's aggregate; the task
 * counts are deltas over the read). Exit status: 0; 1 on a gdsroute error (its message on stderr)
 * or a short read; 2 on a wrong byte; 3 when the run cannot be set up; 4 on a usage error.
 *
 * libcuda is opened with dlopen (tools/gpu/cuda_setup.h), so this builds without the CUDA toolkit:
 *   cc -O2 -Wall -Wextra -Werror -std=gnu11 -Iinclude tools/gpu/ranks_read.c -o ranks_read -L.device -lgdsroute -ldl
 * (tools/gpu/gpu-build.sh).
 */
#define _GNU_SOURCE
#include <errno.h>
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
#include "sizes.h"

#define GUARD 4096
#define CHUNK (64u << 20) /* bytes checked at a time (device memory is copied back chunk by chunk) */

static int fail(const char *what, gdsroute_status st) {
    char msg[512];
    gdsroute_last_error_message(msg, sizeof msg);
    fprintf(stderr, "ranks_read: %s: status %u (%s): %s\n", what, (unsigned)st, gdsroute_status_str(st), msg);
    return 1;
}

static int get_stats(gdsroute_stats *s) {
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    gdsroute_status st = gdsroute_stats_get(s);
    return st == GDSROUTE_STATUS_OK ? 0 : fail("stats_get", st);
}

/* A parallel read of `size` bytes at `offset` of `file` into `dst`; 0, or 1 after the message. */
static int read_range(gdsroute_file *file, void *dst, size_t size, uint64_t offset, size_t *got) {
    gdsroute_op *op = NULL;
    gdsroute_status st = gdsroute_file_pread(file, dst, size, offset, &op);
    if (st == GDSROUTE_STATUS_OK) st = gdsroute_op_wait(op, got);
    gdsroute_op_free(op);
    return st == GDSROUTE_STATUS_OK ? 0 : fail("pread", st);
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The file's bytes [offset, offset + n) into buf. */
static void pattern(uint64_t offset, unsigned char *buf, size_t n) {
    for (size_t i = 0; i < n;) {
        uint64_t at = offset + i, word = splitmix64(at / 8);
        size_t skip = (size_t)(at % 8), take = 8 - skip < n - i ? 8 - skip : n - i;
        memcpy(buf + i, (unsigned char *)&word + skip, take);
        i += take;
    }
}

static uint64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int create(const char *path, uint64_t size) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == size) return 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    unsigned char *buf = malloc(CHUNK);
    if (fd < 0 || !buf) return fprintf(stderr, "ranks_read: cannot create %s: %s\n", path, strerror(errno)), 3;
    for (uint64_t done = 0; done < size;) {
        size_t n = size - done < CHUNK ? (size_t)(size - done) : CHUNK;
        pattern(done, buf, n);
        for (size_t put = 0; put < n;) {
            ssize_t w = pwrite(fd, buf + put, n - put, (off_t)(done + put));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return fprintf(stderr, "ranks_read: write %s: %s\n", path, strerror(errno)), 3;
            put += (size_t)w;
        }
        done += n;
    }
    if (fsync(fd) != 0 || close(fd) != 0) return fprintf(stderr, "ranks_read: fsync %s: %s\n", path, strerror(errno)), 3;
    free(buf);
    printf("ranks_read: wrote %s (%" PRIu64 " bytes)\n", path, size);
    return 0;
}

static int evict(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int err = fd < 0 ? errno : (fdatasync(fd), posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED));
    if (fd >= 0) close(fd);
    if (err) return fprintf(stderr, "ranks_read: evict %s: %s\n", path, strerror(err)), 3;
    return 0;
}

/* Waits for `go` to exist, after announcing this rank ready (go.ready.RANK). */
static int wait_for_go(const char *go, unsigned rank) {
    char ready[4096];
    snprintf(ready, sizeof ready, "%s.ready.%u", go, rank);
    int fd = open(ready, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return fprintf(stderr, "ranks_read: cannot create %s: %s\n", ready, strerror(errno)), 3;
    close(fd);
    uint64_t give_up = now_ns(CLOCK_MONOTONIC) + 600ull * 1000000000ull;
    struct timespec nap = {0, 20000}; /* 20 us: the start skew this adds is tiny beside a read */
    while (access(go, F_OK) != 0) {
        if (now_ns(CLOCK_MONOTONIC) > give_up) return fprintf(stderr, "ranks_read: %s never appeared\n", go), 3;
        nanosleep(&nap, NULL);
    }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && strcmp(argv[2], "--create") == 0) {
        uint64_t size = parse_size(argv[3]);
        return size ? create(argv[1], size) : (fprintf(stderr, "ranks_read: bad SIZE %s\n", argv[3]), 4);
    }
    if (argc == 3 && strcmp(argv[2], "--evict") == 0) return evict(argv[1]);
    if (argc < 4) {
        fprintf(stderr, "usage: %s FILE RANK RANKS [--threads N] [--host] [--go PATH] [--no-verify]\n"
                        "       %s FILE --create SIZE | FILE --evict\n", argv[0], argv[0]);
        return 4;
    }
    const char *path = argv[1], *go = NULL, *warm = NULL;
    char *end = NULL;
    unsigned long rank = strtoul(argv[2], &end, 10);
    int bad = *end != '\0';
    unsigned long ranks = strtoul(argv[3], &end, 10);
    bad |= *end != '\0' || ranks == 0 || rank >= ranks;
    size_t threads = 0;
    int host = 0, verify = 1;
    for (int i = 4; i < argc && !bad; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = strtoul(argv[++i], &end, 10);
            bad |= *end != '\0' || threads == 0;
        } else if (strcmp(argv[i], "--go") == 0 && i + 1 < argc) {
            go = argv[++i];
        } else if (strcmp(argv[i], "--warm-with") == 0 && i + 1 < argc) {
            warm = argv[++i];
        } else if (strcmp(argv[i], "--host") == 0) {
            host = 1;
        } else if (strcmp(argv[i], "--no-verify") == 0) {
            verify = 0;
        } else {
            bad = 1;
        }
    }
    if (bad) return fprintf(stderr, "ranks_read: bad arguments (RANK < RANKS, positive counts)\n"), 4;

    gdsroute_status st;
    if (threads && (st = gdsroute_settings_set_num_threads(threads)) != GDSROUTE_STATUS_OK) return fail("set_num_threads", st);
    if ((st = gdsroute_settings_get_num_threads(&threads)) != GDSROUTE_STATUS_OK) return fail("get_num_threads", st);
    gdsroute_file *file = NULL;
    if ((st = gdsroute_file_open(path, "r", 0, &file)) != GDSROUTE_STATUS_OK) return fail("file_open", st);
    uint64_t file_size = 0;
    if ((st = gdsroute_file_size(file, &file_size)) != GDSROUTE_STATUS_OK) return fail("file_size", st);
    uint64_t share = file_size / ranks, offset = share * rank;
    size_t bytes = (size_t)(rank + 1 == ranks ? file_size - offset : share);
    if (bytes == 0) return fprintf(stderr, "ranks_read: %s is too small for %lu ranks\n", path, ranks), 3;

    /* The destination with a poisoned guard on each side. */
    size_t total = bytes + 2 * GUARD;
    uint64_t device = 0;
    unsigned char *hostbuf = NULL;
    if (host) {
        hostbuf = malloc(total);
        if (!hostbuf) return fprintf(stderr, "ranks_read: cannot allocate %zu bytes\n", total), 3;
        memset(hostbuf, 0xA5, total);
    } else if (!cuda_setup(total, 0xA5, &device)) {
        return fprintf(stderr, "ranks_read: no usable GPU (libcuda, cuInit, context or %zu bytes); --host reads into host memory\n", total), 3;
    }
    void *dst = host ? (void *)(hostbuf + GUARD) : (void *)(uintptr_t)(device + GUARD);
    size_t got = 0;
    if (warm) {
        gdsroute_file *other = NULL;
        if ((st = gdsroute_file_open(warm, "r", 0, &other)) != GDSROUTE_STATUS_OK) return fail("file_open (--warm-with)", st);
        if (read_range(other, dst, bytes, 0, &got) != 0) return 1;
        gdsroute_file_free(other);
        if (host) memset(hostbuf, 0xA5, total);
        else if (cu_memset_d8(device, 0xA5, total) != 0) return fprintf(stderr, "ranks_read: cuMemsetD8 failed\n"), 3;
    }
    if (go && wait_for_go(go, (unsigned)rank) != 0) return 3;

    gdsroute_stats before, after;
    if (get_stats(&before) != 0) return 1;
    uint64_t start = now_ns(CLOCK_REALTIME);
    int failed = read_range(file, dst, bytes, offset, &got);
    uint64_t finish = now_ns(CLOCK_REALTIME);
    if (failed) return 1;
    if (got != bytes) return fprintf(stderr, "ranks_read: short read: %zu of %zu bytes\n", got, bytes), 1;
    if (get_stats(&after) != 0) return 1;
    gdsroute_file_free(file);

    /* Every byte, chunk by chunk: guards, then the slice against the pattern. */
    int wrong = 0;
    if (verify) {
        unsigned char *have = malloc(CHUNK), *want = malloc(CHUNK);
        if (!have || !want) return fprintf(stderr, "ranks_read: cannot allocate the check buffers\n"), 3;
        for (size_t at = 0; at < total && !wrong; at += CHUNK) {
            size_t n = total - at < CHUNK ? total - at : CHUNK;
            if (host) memcpy(have, hostbuf + at, n);
            else if (cu_memcpy_dtoh(have, device + at, n) != 0) return fprintf(stderr, "ranks_read: cuMemcpyDtoH failed\n"), 3;
            for (size_t i = 0; i < n; i++) {
                size_t pos = at + i; /* in the destination, guards included */
                if (pos < GUARD || pos >= GUARD + bytes) {
                    if (have[i] != 0xA5) {
                        fprintf(stderr, "ranks_read: rank %lu: guard byte %zu written\n", rank, pos);
                        wrong = 1;
                        break;
                    }
                    continue;
                }
                /* A run of slice bytes: compare it whole against the pattern. */
                size_t run = (GUARD + bytes - pos) < (n - i) ? (GUARD + bytes - pos) : (n - i);
                pattern(offset + (pos - GUARD), want, run);
                if (memcmp(have + i, want, run) != 0) {
                    size_t j = 0;
                    while (have[i + j] == want[j]) j++;
                    fprintf(stderr, "ranks_read: rank %lu: wrong byte at file offset %" PRIu64 ": %#x, expected %#x\n", rank,
                            offset + (pos - GUARD) + j, have[i + j], want[j]);
                    wrong = 1;
                    break;
                }
                i += run - 1;
            }
        }
        free(have);
        free(want);
    }
    double seconds = (double)(finish - start) / 1e9;
    printf("RANK rank=%lu ranks=%lu threads=%zu mem=%s offset=%" PRIu64 " bytes=%zu start_ns=%" PRIu64 " end_ns=%" PRIu64
           " seconds=%.6f gbps=%.3f posix_tasks=%" PRIu64 " cufile_tasks=%" PRIu64 " verified=%d\n",
           rank, ranks, threads, host ? "host" : "device", offset, bytes, start, finish, seconds,
           seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0, after.posix_tasks - before.posix_tasks,
           after.cufile_tasks - before.cufile_tasks, verify && !wrong);
    free(hostbuf);
    return wrong ? 2 : 0;
}
