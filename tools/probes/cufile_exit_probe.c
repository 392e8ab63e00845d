/*
 * cufile_exit_probe: raw cuFile calls (no gdsroute) to find out why a process that used cuFile
 * with statistics on can crash at exit, and which teardown avoids it. Runs on the GPU machine.
 *
 * usage: cufile_exit_probe FILE        (FILE: at least PROBE_READS * 4 MiB, udev record present)
 * Environment (defaults in brackets):
 *   PROBE_STATS=N          cuFileSetStatsLevel before the driver opens; 0 = never touched [3]
 *   PROBE_READS=N          4 MiB cuFileReads [16]
 *   PROBE_READ_ON=main|thread|thread_alive   thread: the register, reads and deregister run
 *                          on a pthread joined before main returns; thread_alive: on a pthread
 *                          that stays alive until the process ends (as a pool thread) [main]
 *   PROBE_EXIT=none|stop|close|stopclose|stopclose_wait|level0_stopclose
 *                          what the exit handler does [stopclose]; _wait then waits (at most
 *                          1 s) for the threads libcufile started to end
 *   PROBE_HANDLER=early|late    early: exit handler registered right after the driver opened
 *                          (as gdsroute does); late: after the reads [early]
 *   PROBE_LEVEL_AT=before|after  set the level before the driver opens, or after it (the order
 *                          of KvikIO users going through cuda.bindings.cufile) [before]
 *   PROBE_QUICK_EXIT=1     leave main through _exit (no destructors) instead of returning
 * Output: exit_watch lines on stderr (threads at each step, registrations of libcufile's
 * exit-time destructors, a crash report if one happens). Build: see tools/probes/README.md.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../tests/exit/exit_watch.h"

typedef struct { int err; int cu_err; } cufile_error;
typedef struct {
    int type; /* CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1 */
    union { int fd; void *handle; } handle;
    const void *fs_ops;
} cufile_descr;

static struct {
    cufile_error (*driver_open)(void);
    cufile_error (*driver_close)(void);
    cufile_error (*handle_register)(void **, cufile_descr *);
    void (*handle_deregister)(void *);
    ssize_t (*read)(void *, void *, size_t, off_t, off_t);
    cufile_error (*set_level)(int);
    cufile_error (*stats_start)(void);
    cufile_error (*stats_stop)(void);
} cf;

static int (*cu_init)(unsigned);
static int (*cu_retain)(void **, int);
static int (*cu_set_current)(void *);
static int (*cu_mem_alloc)(uint64_t *, size_t);
static void *ctx;

static const char *path;
static int n_reads = 16;
static const char *exit_mode = "stopclose";

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "missing %s\n", name);
        exit(3);
    }
    return p;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int baseline_threads;

static void exit_handler(void) {
    exit_watch_phase("exit: probe handler");
    int stop = strstr(exit_mode, "stop") != NULL, close_ = strstr(exit_mode, "close") != NULL;
    if (strncmp(exit_mode, "level0", 6) == 0) fprintf(stderr, "probe: set level 0 -> %d\n", cf.set_level(0).err);
    if (stop) fprintf(stderr, "probe: stats stop -> %d\n", cf.stats_stop().err);
    exit_watch_threads("after stop");
    if (close_) fprintf(stderr, "probe: driver close -> %d\n", cf.driver_close().err);
    exit_watch_threads("after close");
    if (strstr(exit_mode, "wait")) {
        double t0 = now();
        int n = 0;
        while (now() - t0 < 1.0) {
            n = exit_watch_count_threads_named("") - baseline_threads;
            if (n <= 0) break;
            usleep(1000);
        }
        fprintf(stderr, "probe: waited %.1f ms, %d threads beyond the baseline left\n", (now() - t0) * 1e3, n);
        exit_watch_threads("after wait");
    }
    exit_watch_phase("exit: after probe handler");
}

static pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t io_done_cond = PTHREAD_COND_INITIALIZER;
static int io_done;

static void *io(void *unused);

static void *io_then_stay(void *unused) {
    io(unused);
    pthread_mutex_lock(&io_lock);
    io_done = 1;
    pthread_cond_signal(&io_done_cond);
    pthread_mutex_unlock(&io_lock);
    for (;;) pause();
    return NULL;
}

static void *io(void *unused) {
    (void)unused;
    if (cu_set_current(ctx) != 0) return (void *)1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return (void *)1;
    cufile_descr d;
    memset(&d, 0, sizeof d);
    d.type = 1;
    d.handle.fd = fd;
    void *h = NULL;
    cufile_error e = cf.handle_register(&h, &d);
    fprintf(stderr, "probe: register -> %d\n", e.err);
    exit_watch_threads("after register");
    uint64_t dev = 0;
    size_t chunk = 4u << 20;
    if (cu_mem_alloc(&dev, chunk) != 0) return (void *)1;
    int ok = 0;
    for (int i = 0; e.err == 0 && i < n_reads; i++)
        ok += cf.read(h, (void *)(uintptr_t)dev, chunk, (off_t)i * (off_t)chunk, 0) == (ssize_t)chunk;
    fprintf(stderr, "probe: %d of %d reads whole\n", ok, n_reads);
    exit_watch_threads("after reads");
    if (e.err == 0) cf.handle_deregister(h);
    close(fd);
    exit_watch_threads("after deregister");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 3;
    }
    path = argv[1];
    int level = atoi(env_or("PROBE_STATS", "3"));
    n_reads = atoi(env_or("PROBE_READS", "16"));
    exit_mode = env_or("PROBE_EXIT", "stopclose");
    int late = strcmp(env_or("PROBE_HANDLER", "early"), "late") == 0;
    const char *read_on = env_or("PROBE_READ_ON", "main");
    int on_thread = strcmp(read_on, "thread") == 0, stay = strcmp(read_on, "thread_alive") == 0;
    fprintf(stderr, "probe: stats=%d reads=%d read_on=%s exit=%s handler=%s\n", level, n_reads,
            read_on, exit_mode, late ? "late" : "early");

    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) return 3;
    cu_init = sym(cuda, "cuInit");
    cu_retain = sym(cuda, "cuDevicePrimaryCtxRetain");
    cu_set_current = sym(cuda, "cuCtxSetCurrent");
    cu_mem_alloc = sym(cuda, "cuMemAlloc_v2");
    if (cu_init(0) != 0 || cu_retain(&ctx, 0) != 0 || cu_set_current(ctx) != 0) return 3;
    exit_watch_threads("after CUDA init");
    baseline_threads = exit_watch_count_threads_named("");

    exit_watch_phase("loading libcufile");
    void *lib = dlopen(env_or("PROBE_CUFILE", "libcufile.so.0"), RTLD_NOW | RTLD_NODELETE);
    if (!lib) {
        fprintf(stderr, "dlopen libcufile: %s\n", dlerror());
        return 3;
    }
    cf.driver_open = sym(lib, "cuFileDriverOpen");
    cf.driver_close = sym(lib, "cuFileDriverClose_v2");
    cf.handle_register = sym(lib, "cuFileHandleRegister");
    cf.handle_deregister = sym(lib, "cuFileHandleDeregister");
    cf.read = sym(lib, "cuFileRead");
    cf.set_level = sym(lib, "cuFileSetStatsLevel");
    cf.stats_start = sym(lib, "cuFileStatsStart");
    cf.stats_stop = sym(lib, "cuFileStatsStop");

    int level_after = strcmp(env_or("PROBE_LEVEL_AT", "before"), "after") == 0;
    exit_watch_phase("driver open");
    if (level > 0 && !level_after) fprintf(stderr, "probe: set level %d -> %d\n", level, cf.set_level(level).err);
    fprintf(stderr, "probe: driver open -> %d\n", cf.driver_open().err);
    if (level > 0 && level_after) fprintf(stderr, "probe: set level %d after open -> %d\n", level, cf.set_level(level).err);
    exit_watch_threads("after driver open");
    if (level > 0) fprintf(stderr, "probe: stats start -> %d\n", cf.stats_start().err);
    exit_watch_threads("after stats start");
    if (!late) atexit(exit_handler);

    exit_watch_phase("io");
    if (on_thread) {
        pthread_t t;
        pthread_create(&t, NULL, io, NULL);
        pthread_join(t, NULL);
    } else if (stay) {
        pthread_t t;
        pthread_create(&t, NULL, io_then_stay, NULL);
        pthread_mutex_lock(&io_lock);
        while (!io_done) pthread_cond_wait(&io_done_cond, &io_lock);
        pthread_mutex_unlock(&io_lock);
    } else {
        io(NULL);
    }
    if (late) atexit(exit_handler);
    exit_watch_summary("cufile");
    exit_watch_phase("main returned");
    fflush(NULL);
    if (getenv("PROBE_QUICK_EXIT")) _exit(0);
    return 0;
}
