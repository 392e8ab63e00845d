/*
 * many_files: the measurement of issue 25, "many files at the copy engine's speed". It reads COUNT
 * files of SIZE bytes each, one after another or all in flight at once, into one buffer of device
 * memory (file i at offset i*SIZE), through gdsroute's C API, and reports files per second and
 * GB/s; then checks every byte.
 *
 *   many_files DIR COUNT SIZE MODE [--threads N] [--host] [--no-verify] [--trace-each K] [--warm-up]
 *     DIR        holds f00000.bin, f00001.bin, ...; a file that is missing or of another size is
 *                (re)written with the bytes of a xorshift generator seeded by its index, before
 *                anything is timed; then every file is read once with read(2) (untimed), so that
 *                the page cache holds them all
 *     SIZE       bytes, or with a K, M or G suffix (binary: 64K, 2M)
 *     MODE       serial       per file: open, pread + op_wait + op_free (KvikIO's pread), file_free
 *                serial-read  the same with the synchronous gdsroute_file_read
 *                inflight     open all, pread all from this thread, wait for all, free all
 *                batch        open all, then the batch API (gdsroute_batch_*): at most
 *                             min(COUNT, 1024) entries in flight, completions reaped as they come
 *     --threads N    gdsroute_settings_set_num_threads(N) before anything else (default: the
 *                    library's own; the line reports the value either way)
 *     --host         a host buffer (malloc) instead of device memory; needs no GPU and no libcuda
 *     --no-verify    skip the byte check (verified=0)
 *     --trace-each K the phases of the first K files of a serial mode, after the line:
 *                    PHASE i open_us read_us free_us (read: pread+wait+op_free, or the read call)
 *     --warm-up      before the timed part, read file 0 once through gdsroute (open, pread, free)
 *                    into its place, then set that place back to 0xA5: the library's set-up of
 *                    the route (and cuFile's driver open, on the cuFile route) is then out of the
 *                    timed part, which shows the cost per file alone (the line says warm=1)
 *
 * Timed from just before the first open to just after the last handle is freed, so no work left
 * in the background is hidden. Prints one line:
 *   MANY mode= files= size= threads= mem=device|host warm=0|1 seconds= files_per_s= gbps= calls=
 *        tasks= posix_tasks= cufile_tasks= verified=1|0
 * the counters being deltas of gdsroute_stats_get over the timed part.
 * Exit status: 0; 1 on a gdsroute error (gdsroute_last_error_message on stderr) or a short read;
 * 2 on a byte mismatch; 3 when the run cannot be set up (no GPU, too few descriptors, batch API
 * absent from this build or library); 4 on a usage error.
 *
 * libcuda is opened with dlopen (device memory only), so this builds without the CUDA toolkit:
 *   cc -O2 -Wall -Wextra -Werror -std=gnu11 -Iinclude tools/gpu/many_files.c -o many_files -L.device -lgdsroute -ldl
 * (tools/gpu/many-files-build.sh). The batch mode compiles only against a header that has the
 * batch API (GDSROUTE_BATCH_READ); without it the mode says so and exits 3. Its calls are looked up
 * with dlsym when the mode runs, so the binary still loads against an older library (the serial
 * modes and inflight use calls every version has; batch then says the library lacks them, exit 3).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gdsroute.h"
#include "cuda_setup.h"
#include "sizes.h"


static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(const char *what, size_t index, gdsroute_status st) {
    char msg[512];
    gdsroute_last_error_message(msg, sizeof msg);
    fprintf(stderr, "many_files: %s (file %zu): status %u (%s): %s\n", what, index, (unsigned)st, gdsroute_status_str(st), msg);
    return 1;
}


/* File i's bytes: xorshift64 seeded by the index. */
static void fill(size_t index, unsigned char *buf, size_t size) {
    uint64_t x = 0x9E3779B97F4A7C15ull ^ ((uint64_t)index * 0xBF58476D1CE4E5B9ull + 1);
    if (x == 0) x = 1;
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
    if (i < size) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + i, &x, size - i);
    }
}

static void file_path(char *out, size_t len, const char *dir, size_t index) {
    snprintf(out, len, "%s/f%05zu.bin", dir, index);
}

static int write_all(int fd, const unsigned char *buf, size_t size) {
    for (size_t done = 0; done < size;) {
        ssize_t n = write(fd, buf + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        done += (size_t)n;
    }
    return 1;
}

/* Reads up to `size` bytes of the file at `path` from offset 0 into `buf`; returns the bytes read
 * or -1. */
static ssize_t read_file(const char *path, unsigned char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t n = pread(fd, buf + done, size - done, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return close(fd), -1;
        if (n == 0) break;
        done += (size_t)n;
    }
    close(fd);
    return (ssize_t)done;
}

/* mkdir -p. */
static int make_dirs(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) return 0;
        *p = '/';
    }
    return mkdir(path, 0755) == 0 || errno == EEXIST;
}

/* Writes the files that are missing or of another size; then reads each once (the page cache). */
static int prepare(const char *dir, size_t count, size_t size, unsigned char *scratch, size_t *created) {
    char path[4096];
    *created = 0;
    if (!make_dirs(dir)) return fprintf(stderr, "many_files: mkdir %s: %s\n", dir, strerror(errno)), 0;
    for (size_t i = 0; i < count; i++) {
        file_path(path, sizeof path, dir, i);
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == (uint64_t)size) continue;
        fill(i, scratch, size);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int ok = fd >= 0 && write_all(fd, scratch, size);
        if (fd >= 0 && close(fd) != 0) ok = 0;
        if (!ok) return fprintf(stderr, "many_files: cannot write %s: %s\n", path, strerror(errno)), 0;
        ++*created;
    }
    for (size_t i = 0; i < count; i++) {
        file_path(path, sizeof path, dir, i);
        if (read_file(path, scratch, size) != (ssize_t)size) return fprintf(stderr, "many_files: cannot read %s\n", path), 0;
    }
    return 1;
}

/* The program raises RLIMIT_NOFILE's soft limit to the hard limit (the library does not: a
 * process that keeps many handles open must do it itself, as with KvikIO). Returns the limit. */
static rlim_t raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur;
}

static int get_stats(gdsroute_stats *s) {
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    gdsroute_status st = gdsroute_stats_get(s);
    return st == GDSROUTE_STATUS_OK ? 1 : (fail("stats_get", 0, st), 0);
}

enum mode { SERIAL, SERIAL_READ, INFLIGHT, BATCH };

/* The timed parts. Each returns 0, or the exit status. */

static int run_serial(const char *dir, size_t count, size_t size, unsigned char *dst, int sync_read, size_t trace_each,
                      double *phases) {
    char path[4096];
    for (size_t i = 0; i < count; i++) {
        double t0 = i < trace_each ? now() : 0;
        file_path(path, sizeof path, dir, i);
        gdsroute_file *f = NULL;
        gdsroute_status st = gdsroute_file_open(path, "r", 0, &f);
        if (st != GDSROUTE_STATUS_OK) return fail("open", i, st);
        double t1 = i < trace_each ? now() : 0;
        size_t got = 0;
        if (sync_read) {
            st = gdsroute_file_read(f, dst + i * size, size, 0, &got);
            if (st != GDSROUTE_STATUS_OK) return fail("read", i, st);
        } else {
            gdsroute_op *op = NULL;
            st = gdsroute_file_pread(f, dst + i * size, size, 0, &op);
            if (st != GDSROUTE_STATUS_OK) return fail("pread", i, st);
            st = gdsroute_op_wait(op, &got);
            gdsroute_op_free(op);
            if (st != GDSROUTE_STATUS_OK) return fail("op_wait", i, st);
        }
        if (got != size) return fprintf(stderr, "many_files: file %zu: read %zu of %zu bytes\n", i, got, size), 1;
        double t2 = i < trace_each ? now() : 0;
        gdsroute_file_free(f);
        if (i < trace_each) {
            double t3 = now();
            phases[3 * i] = t1 - t0;
            phases[3 * i + 1] = t2 - t1;
            phases[3 * i + 2] = t3 - t2;
        }
    }
    return 0;
}

static int open_all(const char *dir, size_t count, gdsroute_file **files) {
    char path[4096];
    for (size_t i = 0; i < count; i++) {
        file_path(path, sizeof path, dir, i);
        gdsroute_status st = gdsroute_file_open(path, "r", 0, &files[i]);
        if (st != GDSROUTE_STATUS_OK) return fail("open", i, st);
    }
    return 0;
}

static void free_all(size_t count, gdsroute_file **files) {
    for (size_t i = 0; i < count; i++) gdsroute_file_free(files[i]);
}

static int run_inflight(const char *dir, size_t count, size_t size, unsigned char *dst, gdsroute_file **files) {
    gdsroute_op **ops = calloc(count, sizeof *ops);
    if (!ops) return fprintf(stderr, "many_files: out of memory\n"), 1;
    int rc = open_all(dir, count, files);
    for (size_t i = 0; rc == 0 && i < count; i++) {
        gdsroute_status st = gdsroute_file_pread(files[i], dst + i * size, size, 0, &ops[i]);
        if (st != GDSROUTE_STATUS_OK) rc = fail("pread", i, st);
    }
    for (size_t i = 0; rc == 0 && i < count; i++) {
        size_t got = 0;
        gdsroute_status st = gdsroute_op_wait(ops[i], &got);
        if (st != GDSROUTE_STATUS_OK) rc = fail("op_wait", i, st);
        else if (got != size) rc = (fprintf(stderr, "many_files: file %zu: read %zu of %zu bytes\n", i, got, size), 1);
    }
    if (rc != 0) return rc;
    for (size_t i = 0; i < count; i++) gdsroute_op_free(ops[i]);
    free_all(count, files);
    free(ops);
    return 0;
}

#ifdef GDSROUTE_BATCH_READ
/* The batch calls are looked up at run time rather than linked: they sit in a newer symbol version
 * of the library than the calls above, and a binary that links them does not load against an
 * older library at all (ld.so checks every needed version at load, lazy binding or not). */
static __typeof__(gdsroute_batch_create) *batch_create;
static __typeof__(gdsroute_batch_submit) *batch_submit;
static __typeof__(gdsroute_batch_wait) *batch_wait;
static __typeof__(gdsroute_batch_free) *batch_free;

static int batch_api(void) {
    batch_create = (__typeof__(batch_create))dlsym(RTLD_DEFAULT, "gdsroute_batch_create");
    batch_submit = (__typeof__(batch_submit))dlsym(RTLD_DEFAULT, "gdsroute_batch_submit");
    batch_wait = (__typeof__(batch_wait))dlsym(RTLD_DEFAULT, "gdsroute_batch_wait");
    batch_free = (__typeof__(batch_free))dlsym(RTLD_DEFAULT, "gdsroute_batch_free");
    return batch_create && batch_submit && batch_wait && batch_free;
}

static int run_batch(const char *dir, size_t count, size_t size, unsigned char *dst, gdsroute_file **files) {
    size_t max_entries = count < 1024 ? count : 1024;
    gdsroute_batch_entry *entries = calloc(max_entries, sizeof *entries);
    gdsroute_batch_completion *done = calloc(max_entries, sizeof *done);
    unsigned char *seen = calloc(count, 1);
    if (!entries || !done || !seen) return fprintf(stderr, "many_files: out of memory\n"), 1;
    int rc = open_all(dir, count, files);
    if (rc != 0) return rc;
    gdsroute_batch *batch = NULL;
    gdsroute_status st = batch_create(max_entries, &batch);
    if (st != GDSROUTE_STATUS_OK) return fail("batch_create", 0, st);
    size_t submitted = 0, completed = 0;
    while (completed < count) {
        size_t in_flight = submitted - completed;
        size_t n = max_entries - in_flight;
        if (n > count - submitted) n = count - submitted;
        if (n > 0) {
            for (size_t k = 0; k < n; k++) {
                size_t i = submitted + k;
                gdsroute_batch_entry *e = &entries[k];
                memset(e, 0, sizeof *e);
                e->file = files[i];
                e->buf = dst + i * size;
                e->size = size;
                e->file_offset = 0;
                e->opcode = GDSROUTE_BATCH_READ;
                e->reserved = 0;
                e->cookie = i;
            }
            st = batch_submit(batch, entries, n);
            if (st != GDSROUTE_STATUS_OK) return fail("batch_submit", submitted, st);
            submitted += n;
        }
        size_t got = 0;
        st = batch_wait(batch, 1, max_entries, -1, done, &got);
        if (st != GDSROUTE_STATUS_OK) return fail("batch_wait", completed, st);
        if (got == 0 || got > submitted - completed)
            return fprintf(stderr, "many_files: batch_wait gave %zu completions with %zu in flight\n", got, submitted - completed), 1;
        for (size_t k = 0; k < got; k++) {
            const gdsroute_batch_completion *c = &done[k];
            if (c->cookie >= submitted || seen[c->cookie])
                return fprintf(stderr, "many_files: batch completion with cookie %" PRIu64 " (bad or repeated)\n", c->cookie), 1;
            seen[c->cookie] = 1;
            if (c->status != GDSROUTE_STATUS_OK)
                return fprintf(stderr, "many_files: batch entry %" PRIu64 ": status %u (%s), errno %d\n", c->cookie, (unsigned)c->status,
                               gdsroute_status_str(c->status), (int)c->errno_value), 1;
            if (c->bytes != size)
                return fprintf(stderr, "many_files: batch entry %" PRIu64 ": %zu of %zu bytes\n", c->cookie, c->bytes, size), 1;
        }
        completed += got;
    }
    batch_free(batch);
    free_all(count, files);
    free(entries);
    free(done);
    free(seen);
    return 0;
}
#endif

/* Checks every byte of every file: the destination (copied back from the device, a file at a time)
 * against a plain read of the file. Returns 1 when all match. */
static int verify(const char *dir, size_t count, size_t size, unsigned char *host, uint64_t device, unsigned char *want,
                  unsigned char *got) {
    char path[4096];
    for (size_t i = 0; i < count; i++) {
        file_path(path, sizeof path, dir, i);
        if (read_file(path, want, size) != (ssize_t)size) return fprintf(stderr, "many_files: verify: cannot read %s\n", path), 0;
        const unsigned char *have = host ? host + i * size : got;
        if (!host && cu_memcpy_dtoh(got, device + i * size, size) != 0) return fprintf(stderr, "many_files: verify: cuMemcpyDtoH failed\n"), 0;
        if (memcmp(want, have, size) != 0) {
            size_t at = 0;
            while (at < size && want[at] == have[at]) at++;
            fprintf(stderr, "many_files: file %zu differs at byte %zu (0x%02x, want 0x%02x)\n", i, at, have[at], want[at]);
            return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *mode_name = NULL;
    size_t count = 0, size = 0, trace_each = 0;
    long threads = 0;
    int host = 0, check = 1, warm_up = 0, positional = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--host") == 0) host = 1;
        else if (strcmp(argv[i], "--no-verify") == 0) check = 0;
        else if (strcmp(argv[i], "--warm-up") == 0) warm_up = 1;
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--trace-each") == 0 && i + 1 < argc) trace_each = (size_t)strtoull(argv[++i], NULL, 10);
        else if (argv[i][0] != '-' && positional == 0) dir = argv[i], positional++;
        else if (argv[i][0] != '-' && positional == 1) count = (size_t)strtoull(argv[i], NULL, 10), positional++;
        else if (argv[i][0] != '-' && positional == 2) size = parse_size(argv[i]), positional++;
        else if (argv[i][0] != '-' && positional == 3) mode_name = argv[i], positional++;
        else positional = -1, i = argc;
    }
    enum mode mode = SERIAL;
    int mode_ok = mode_name != NULL;
    if (mode_ok && strcmp(mode_name, "serial") == 0) mode = SERIAL;
    else if (mode_ok && strcmp(mode_name, "serial-read") == 0) mode = SERIAL_READ;
    else if (mode_ok && strcmp(mode_name, "inflight") == 0) mode = INFLIGHT;
    else if (mode_ok && strcmp(mode_name, "batch") == 0) mode = BATCH;
    else mode_ok = 0;
    if (positional != 4 || !mode_ok || count == 0 || size == 0 || threads < 0) {
        fprintf(stderr, "usage: %s DIR COUNT SIZE serial|serial-read|inflight|batch [--threads N] [--host] [--no-verify] [--trace-each K] [--warm-up]\n",
                argv[0]);
        return 4;
    }
    if (count > 99999) return fprintf(stderr, "many_files: at most 99999 files\n"), 4;
    if (count > SIZE_MAX / size) return fprintf(stderr, "many_files: COUNT*SIZE overflows\n"), 4;
#ifndef GDSROUTE_BATCH_READ
    if (mode == BATCH) return fprintf(stderr, "many_files: batch API not in this build\n"), 3;
#else
    if (mode == BATCH && !batch_api()) return fprintf(stderr, "many_files: batch API not in this library (gdsroute_batch_* missing)\n"), 3;
#endif
    if (threads > 0) {
        gdsroute_status st = gdsroute_settings_set_num_threads((size_t)threads);
        if (st != GDSROUTE_STATUS_OK) return fail("set_num_threads", 0, st);
    }
    size_t nthreads = 0;
    {
        gdsroute_status st = gdsroute_settings_get_num_threads(&nthreads);
        if (st != GDSROUTE_STATUS_OK) return fail("get_num_threads", 0, st);
    }
    rlim_t limit = raise_nofile();
    if ((rlim_t)count + 64 > limit) {
        fprintf(stderr, "many_files: RLIMIT_NOFILE is %llu (hard limit included), below COUNT+64 = %zu\n", (unsigned long long)limit,
                count + 64);
        return 3;
    }
    if ((mode == INFLIGHT || mode == BATCH) && (rlim_t)(2 * count + 64) > limit)
        fprintf(stderr, "many_files: note: RLIMIT_NOFILE %llu is below 2*COUNT+64; a route that opens an O_DIRECT descriptor per handle may run out\n",
                (unsigned long long)limit);

    unsigned char *scratch = malloc(size), *scratch2 = malloc(size);
    if (!scratch || !scratch2) return fprintf(stderr, "many_files: out of memory\n"), 1;
    size_t created = 0;
    if (!prepare(dir, count, size, scratch, &created)) return 1;
    if (created) fprintf(stderr, "many_files: wrote %zu of %zu files in %s\n", created, count, dir);

    size_t total = count * size;
    unsigned char *host_buf = NULL;
    uint64_t device = 0;
    if (host) {
        if (posix_memalign((void **)&host_buf, 4096, total) != 0) return fprintf(stderr, "many_files: cannot allocate %zu bytes\n", total), 1;
        memset(host_buf, 0xA5, total); /* faults the pages in, untimed */
    } else if (!cuda_setup(total, 0xA5, &device)) {
        return fprintf(stderr, "many_files: no usable GPU (libcuda.so.1, device 0, %zu bytes)\n", total), 3;
    }
    unsigned char *dst = host ? host_buf : (unsigned char *)(uintptr_t)device;
    if (mode != SERIAL && mode != SERIAL_READ) trace_each = 0;
    if (trace_each > count) trace_each = count;
    gdsroute_file **files = calloc(count, sizeof *files);
    double *phases = calloc(trace_each ? trace_each * 3 : 1, sizeof *phases);
    if (!files || !phases) return fprintf(stderr, "many_files: out of memory\n"), 1;

    if (warm_up) {
        char path[4096];
        file_path(path, sizeof path, dir, 0);
        gdsroute_file *f = NULL;
        gdsroute_op *op = NULL;
        size_t got = 0;
        gdsroute_status st = gdsroute_file_open(path, "r", 0, &f);
        if (st != GDSROUTE_STATUS_OK) return fail("warm-up open", 0, st);
        st = gdsroute_file_pread(f, dst, size, 0, &op);
        if (st != GDSROUTE_STATUS_OK) return fail("warm-up pread", 0, st);
        st = gdsroute_op_wait(op, &got);
        gdsroute_op_free(op);
        gdsroute_file_free(f);
        if (st != GDSROUTE_STATUS_OK) return fail("warm-up op_wait", 0, st);
        if (host) memset(host_buf, 0xA5, size);
        else if (cu_memset_d8(device, 0xA5, size) != 0) return fprintf(stderr, "many_files: cuMemsetD8 failed\n"), 3;
    }
    gdsroute_stats before, after;
    if (!get_stats(&before)) return 1;
    double t0 = now();
    int rc = 0;
    switch (mode) {
        case SERIAL: rc = run_serial(dir, count, size, dst, 0, trace_each, phases); break;
        case SERIAL_READ: rc = run_serial(dir, count, size, dst, 1, trace_each, phases); break;
        case INFLIGHT: rc = run_inflight(dir, count, size, dst, files); break;
        case BATCH:
#ifdef GDSROUTE_BATCH_READ
            rc = run_batch(dir, count, size, dst, files);
#endif
            break;
    }
    double t1 = now();
    if (rc != 0) return rc;
    if (!get_stats(&after)) return 1;

    int verified = check ? verify(dir, count, size, host_buf, device, scratch, scratch2) : 0;
    double secs = t1 - t0;
    printf("MANY mode=%s files=%zu size=%zu threads=%zu mem=%s warm=%d seconds=%.6f files_per_s=%.1f gbps=%.3f calls=%" PRIu64
           " tasks=%" PRIu64 " posix_tasks=%" PRIu64 " cufile_tasks=%" PRIu64 " verified=%d\n",
           mode_name, count, size, nthreads, host ? "host" : "device", warm_up, secs, (double)count / secs, (double)total / secs / 1e9,
           after.calls - before.calls, after.tasks - before.tasks, after.posix_tasks - before.posix_tasks,
           after.cufile_tasks - before.cufile_tasks, verified);
    for (size_t i = 0; i < trace_each; i++)
        printf("PHASE %zu %.1f %.1f %.1f\n", i, phases[3 * i] * 1e6, phases[3 * i + 1] * 1e6, phases[3 * i + 2] * 1e6);
    fflush(stdout);
    free(files);
    free(phases);
    free(scratch);
    free(scratch2);
    free(host_buf);
    return check && !verified ? 2 : 0;
}
