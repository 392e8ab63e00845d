/*
 * exit_paths: one way of ending a process that used gdsroute, chosen by the first argument.
 * Run many times by tests/exit/run_exit_suite.py on the GPU machine; every mode must end with
 * the expected status (never a crash or a hang) and, where main returns, within 1 s of it.
 *
 * usage: exit_paths MODE FILE [SIZE]
 *   main-return       read SIZE bytes into device memory (pread + wait), print the counters,
 *                     free everything, return from main
 *   exit-in-flight    start a parallel device read of SIZE bytes and call exit(0) at once
 *   exit-in-flight-bounce   the same on a handle opened with compat mode ON (POSIX bounce
 *                     buffers and CUDA copies in flight instead of cuFile reads)
 *   exit-from-thread  a second thread reads, then calls exit(0) while main waits in join
 *   leak              read, never free the handle or the operation, open a second handle,
 *                     return from main
 *   shutdown-then-calls   read, gdsroute_shutdown(), then: an AUTO read (must fall back to
 *                     POSIX and succeed), an OFF open or read (must fail with a status), the
 *                     counters, a second shutdown; return
 *   sigterm           read in a loop until killed (the suite sends SIGTERM)
 *   open-then-return  open a handle (which starts cuFile's driver open in the background) and
 *                     return from main at once, before any read
 *   open-then-exit    the same, calling exit(0) instead
 *   begin-then-return gdsroute_begin_device_setup() before the program's own CUDA set-up, then
 *                     return from main at once
 *   host-only         no CUDA in the program: open, a host read, close; then libcuda and
 *                     libcufile must not be mapped and no thread but gdsroute's pool may run
 *                     (a host-only program never loads CUDA or cuFile or starts their threads)
 *   fork-after-open   open, fork at once; the child makes one device read (which must not hang:
 *                     CUDA and cuFile are the parent's) and calls exit(0); the parent waits for
 *                     the child, reads, checks the bytes count and returns
 *   exit-stream-queued  queue 300 memsets of the buffer on a stream, then 8 stream-ordered reads of
 *                     SIZE/8 bytes behind them (gdsroute_file_read_async), and call exit(0) at
 *                     once: the library must release the streams' waits at exit (no hang)
 *   main-return-stream-queued   the same, returning from main instead
 *   exit-relay-queued, main-return-relay-queued   the same under the default `auto` on the legacy
 *                     stream, where the reads are relayed (a kernel on the stream moves the bytes):
 *                     the library must tell the kernels to end at exit
 * Prints "main-return-at T" (CLOCK_MONOTONIC seconds) just before returning from main.
 * Exit status: 0, or 1 on an unexpected gdsroute result, 3 on a setup error.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exit_watch.h"
#include "gdsroute.h"

static int (*cu_init)(unsigned);
static int (*cu_retain)(void **, int);
static int (*cu_set_current)(void *);
static int (*cu_mem_alloc)(uint64_t *, size_t);
static int (*cu_stream_create)(void **, unsigned);
static int (*cu_memset_async)(uint64_t, unsigned char, size_t, void *);
static void *ctx;
static const char *path;
static size_t size = 64u << 20;
static uint64_t device;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cuda_setup(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) return 0;
    cu_init = (int (*)(unsigned))dlsym(lib, "cuInit");
    cu_retain = (int (*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain");
    cu_set_current = (int (*)(void *))dlsym(lib, "cuCtxSetCurrent");
    cu_mem_alloc = (int (*)(uint64_t *, size_t))dlsym(lib, "cuMemAlloc_v2");
    cu_stream_create = (int (*)(void **, unsigned))dlsym(lib, "cuStreamCreate");
    cu_memset_async = (int (*)(uint64_t, unsigned char, size_t, void *))dlsym(lib, "cuMemsetD8Async");
    if (!cu_init || !cu_retain || !cu_set_current || !cu_mem_alloc || !cu_stream_create || !cu_memset_async) return 0;
    return cu_init(0) == 0 && cu_retain(&ctx, 0) == 0 && cu_set_current(ctx) == 0 && cu_mem_alloc(&device, size) == 0;
}

static int check(const char *what, gdsroute_status st, gdsroute_status want) {
    if (st == want) return 0;
    char msg[512];
    gdsroute_last_error_message(msg, sizeof msg);
    printf("%s: status %u, expected %u: %s\n", what, (unsigned)st, (unsigned)want, msg);
    return 1;
}

/* One device read through the pool; returns the bytes read or -1. */
static long long read_once(gdsroute_file *file, int free_op) {
    gdsroute_op *op = NULL;
    if (check("pread", gdsroute_file_pread(file, (void *)(uintptr_t)device, size, 0, &op), GDSROUTE_STATUS_OK)) return -1;
    size_t got = 0;
    gdsroute_status st = gdsroute_op_wait(op, &got);
    if (free_op) gdsroute_op_free(op);
    return check("wait", st, GDSROUTE_STATUS_OK) ? -1 : (long long)got;
}

static void print_counters(void) {
    gdsroute_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    if (gdsroute_stats_get(&s) != GDSROUTE_STATUS_OK) return;
    printf("counters: cufile_tasks=%" PRIu64 " posix_tasks=%" PRIu64 " cufile_stats_state=%" PRIu64 " n=%" PRIu64 " nvfs=%" PRIu64
           " posix=%" PRIu64 "\n",
           s.cufile_tasks, s.posix_tasks, s.cufile_stats_state, s.cufile_n_total_reads, s.cufile_n_nvfs_reads,
           s.cufile_n_posix_reads);
}

static void *thread_reads_then_exits(void *unused) {
    (void)unused;
    cu_set_current(ctx);
    gdsroute_file *f = NULL;
    if (gdsroute_file_open(path, "r", 0, &f) != GDSROUTE_STATUS_OK) exit(1);
    long long got = read_once(f, 1);
    printf("thread read %lld\n", got);
    fflush(stdout);
    exit_watch_phase("exit() from a second thread");
    exit(got == (long long)size ? 0 : 1);
}

static int returning(int status);

/* Whether /proc/self/maps maps a file whose name contains `what`. */
static int mapped(const char *what) {
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (maps && fgets(line, sizeof line, maps))
        found |= strstr(line, what) != NULL;
    if (maps) fclose(maps);
    return found;
}

/* The names of this process's threads other than main and gdsroute's pool workers, or "". */
static void foreign_threads(char *out, size_t cap) {
    out[0] = 0;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cat /proc/%d/task/*/comm", (int)getpid());
    FILE *names = popen(cmd, "r");
    char name[64];
    int first = 1;
    while (names && fgets(name, sizeof name, names)) {
        name[strcspn(name, "\n")] = 0;
        if (first) { first = 0; continue; } /* the main thread */
        if (strncmp(name, "gdsroute-", 9) == 0) continue;
        strncat(out, name, cap - strlen(out) - 2);
        strncat(out, " ", cap - strlen(out) - 1);
    }
    if (names) pclose(names);
}

static int host_only(void) {
    gdsroute_file *file = NULL;
    if (check("open", gdsroute_file_open(path, "r", 0, &file), GDSROUTE_STATUS_OK)) return 1;
    static char buf[1 << 20];
    size_t got = 0;
    if (check("host read", gdsroute_file_read(file, buf, sizeof buf, 0, &got), GDSROUTE_STATUS_OK)) return 1;
    gdsroute_file_free(file);
    char others[1024];
    foreign_threads(others, sizeof others);
    int cuda = mapped("libcuda"), cufile = mapped("libcufile");
    printf("host-only: read %zu bytes; libcuda mapped %d, libcufile mapped %d, other threads: [%s]\n", got, cuda, cufile, others);
    return returning(cuda || cufile || others[0] != 0);
}

static int returning(int status) {
    exit_watch_phase("main returned");
    printf("main-return-at %.6f\n", now());
    fflush(stdout);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODE FILE [SIZE]\n", argv[0]);
        return 3;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argv[1];
    path = argv[2];
    if (argc > 3) size = (size_t)strtoull(argv[3], NULL, 0);
    if (strcmp(mode, "host-only") == 0) return host_only();
    if (strcmp(mode, "begin-then-return") == 0 &&
        check("begin device setup", gdsroute_begin_device_setup(), GDSROUTE_STATUS_OK))
        return 1;
    if (!cuda_setup()) {
        fprintf(stderr, "no usable GPU\n");
        return 3;
    }
    exit_watch_phase(mode);

    if (strcmp(mode, "exit-from-thread") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, thread_reads_then_exits, NULL);
        pthread_join(t, NULL);
        return 1; /* not reached: the thread exits the process */
    }

    gdsroute_file *file = NULL;
    int bounce = strcmp(mode, "exit-in-flight-bounce") == 0;
    if (check("open",
              bounce ? gdsroute_file_open_with_compat_mode(path, "r", 0, GDSROUTE_COMPAT_MODE_ON, &file)
                     : gdsroute_file_open(path, "r", 0, &file),
              GDSROUTE_STATUS_OK))
        return 1;

    if (strcmp(mode, "open-then-return") == 0 || strcmp(mode, "begin-then-return") == 0) {
        gdsroute_file_free(file);
        return returning(0);
    }
    if (strcmp(mode, "open-then-exit") == 0) {
        exit_watch_phase("exit() right after the open");
        exit(0);
    }
    if (strcmp(mode, "fork-after-open") == 0) {
        fflush(stdout);
        pid_t child = fork();
        if (child < 0) return 3;
        if (child == 0) {
            gdsroute_op *op = NULL;
            size_t n = 0;
            gdsroute_status st = gdsroute_file_pread(file, (void *)(uintptr_t)device, size, 0, &op);
            if (st == GDSROUTE_STATUS_OK) st = gdsroute_op_wait(op, &n);
            gdsroute_op_free(op);
            printf("child read: status %u (%s), %zu bytes\n", (unsigned)st, gdsroute_status_str(st), n);
            fflush(stdout);
            exit(0);
        }
        int status = 0;
        if (waitpid(child, &status, 0) != child) return 3;
        printf("child ended: %s %d\n", WIFEXITED(status) ? "status" : "signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
        long long got = read_once(file, 1);
        printf("read %lld of %zu bytes\n", got, size);
        if (got != (long long)size) return 1;
        print_counters();
        gdsroute_file_free(file);
        return returning(0);
    }
    if (strncmp(mode, "exit-in-flight", 14) == 0) {
        gdsroute_op *op = NULL;
        if (check("pread", gdsroute_file_pread(file, (void *)(uintptr_t)device, size, 0, &op), GDSROUTE_STATUS_OK)) return 1;
        exit_watch_phase("exit() with a read in flight");
        exit(0);
    }
    if (strstr(mode, "stream-queued") != NULL || strstr(mode, "relay-queued") != NULL) {
        /* Calls queued behind a flag wait on a blocking stream (`on`), or behind relay kernels on
         * the legacy stream (the default `auto`). */
        int relayed = strstr(mode, "relay-queued") != NULL;
        gdsroute_stream_ordered ordered = relayed ? GDSROUTE_STREAM_ORDERED_AUTO : GDSROUTE_STREAM_ORDERED_ON;
        if (check("stream ordered", gdsroute_settings_set_stream_ordered(ordered), GDSROUTE_STATUS_OK)) return 1;
        void *stream = NULL;
        if (!relayed && cu_stream_create(&stream, 0) != 0) return 3;
        /* GPU work ahead of the reads (300 memsets of the whole buffer), then the reads, none
         * waited for: at exit they are queued or running. */
        for (int i = 0; i < 300; i++)
            if (cu_memset_async(device, (unsigned char)i, size, stream) != 0) return 3;
        for (int i = 0; i < 8; i++) {
            gdsroute_op *op = NULL;
            size_t part = size / 8;
            if (check("read_async", gdsroute_file_read_async(file, (void *)(uintptr_t)(device + i * part), part, i * part, stream, &op),
                      GDSROUTE_STATUS_OK))
                return 1;
        }
        if (strncmp(mode, "exit", 4) == 0) {
            exit_watch_phase("exit() with stream-ordered reads queued");
            exit(0);
        }
        return returning(0);
    }
    if (strcmp(mode, "sigterm") == 0) {
        printf("reading until killed\n");
        for (;;)
            if (read_once(file, 1) < 0) return 1;
    }

    long long got = read_once(file, strcmp(mode, "leak") != 0);
    printf("read %lld of %zu bytes\n", got, size);
    if (got != (long long)size) return 1;
    print_counters();

    if (strcmp(mode, "main-return") == 0) {
        gdsroute_file_free(file);
        return returning(0);
    }
    if (strcmp(mode, "leak") == 0) {
        gdsroute_file *second = NULL;
        if (check("second open", gdsroute_file_open(path, "r", 0, &second), GDSROUTE_STATUS_OK)) return 1;
        return returning(0);
    }
    if (strcmp(mode, "shutdown-then-calls") == 0) {
        int bad = check("shutdown", gdsroute_shutdown(), GDSROUTE_STATUS_OK);
        long long again = read_once(file, 1);
        printf("AUTO read after shutdown: %lld bytes\n", again);
        bad |= again != (long long)size;
        uint32_t reason = 0;
        char why[512] = "";
        size_t len = 0;
        bad |= check("verdict after shutdown", gdsroute_file_cufile_verdict(file, &reason, why, sizeof why, &len),
                     GDSROUTE_STATUS_OK);
        printf("verdict after shutdown: reason %u: %s\n", (unsigned)reason, why);
        bad |= reason == 0;
        gdsroute_file *off = NULL;
        gdsroute_status st = gdsroute_file_open_with_compat_mode(path, "r", 0, GDSROUTE_COMPAT_MODE_OFF, &off);
        if (st == GDSROUTE_STATUS_OK) {
            gdsroute_op *op = NULL;
            st = gdsroute_file_pread(off, (void *)(uintptr_t)device, size, 0, &op);
            size_t n = 0;
            if (st == GDSROUTE_STATUS_OK) st = gdsroute_op_wait(op, &n);
            gdsroute_op_free(op);
            gdsroute_file_free(off);
        }
        char msg[512];
        gdsroute_last_error_message(msg, sizeof msg);
        printf("OFF after shutdown: status %u (%s): %s\n", (unsigned)st, gdsroute_status_str(st), msg);
        bad |= st == GDSROUTE_STATUS_OK;
        print_counters();
        bad |= check("second shutdown", gdsroute_shutdown(), GDSROUTE_STATUS_OK);
        gdsroute_file_free(file);
        return returning(bad);
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 3;
}
