/*
 * stream_wait_probe: which CUDA and cuFile calls wait for a stream that waits on the host.
 *
 * A stream-ordered call (src/io/stream_order.rs) makes the caller's stream wait on a flag word
 * (cuStreamWaitValue32_v2) and moves the bytes on host threads; whatever those threads call that
 * waits for that stream (or for the whole device) deadlocks. For each candidate call and each kind
 * of waiting stream (legacy NULL stream, a blocking stream, a non-blocking stream), this holds the
 * stream on a flag, runs the call on another thread with the context current, and reports whether
 * it returned while the stream waited (and how long it took) or only after the flag was released
 * (BLOCKS). The flag is released after HOLD_MS (default 1500) in any case, so nothing hangs.
 *
 *   stream_wait_probe [FILE]   with FILE (and libcufile loadable, CUFILE_LIB, default
 *                              libcufile.so.0): the cuFile calls too (driver open, handle and
 *                              buffer registration, cuFileRead/cuFileWrite into device memory).
 *
 *   HOLDER=sync|dtoh_pinned|dtoh_pageable stream_wait_probe FILE
 *                              the second set: while the stream is held, another thread sits
 *                              in a synchronous call behind it (cuStreamSynchronize on it, or a
 *                              legacy-stream cuMemcpyDtoH into pinned or pageable memory, which
 *                              waits for every blocking stream), as a program's own thread would;
 *                              the candidates are the calls a stream-ordered task makes: copies,
 *                              a copy from a second context, and cuFileRead on a fresh thread and
 *                              on threads that made a first cuFile call of one kind or another
 *                              before the hold ("after X:"), and cuFile calls with the second
 *                              context current. It checks first that copies and cuFile calls
 *                              in the second context move the right bytes (REPEAT=N: each copy
 *                              and second-context candidate N times).
 *
 * libcuda and libcufile are opened with dlopen, so this builds without the toolkit.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef void *CUcontext, *CUstream, *CUevent;
typedef uint64_t CUdeviceptr;

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuCtxSynchronize)(void);
static CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
static CUresult (*cuMemFreeHost)(void *);
static CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
static CUresult (*cuMemHostRegister)(void *, size_t, unsigned);
static CUresult (*cuMemHostUnregister)(void *);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemFree)(CUdeviceptr);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamDestroy)(CUstream);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuStreamWaitValue32)(CUstream, CUdeviceptr, uint32_t, unsigned);
static CUresult (*cuEventCreate)(CUevent *, unsigned);
static CUresult (*cuEventDestroy)(CUevent);
static CUresult (*cuEventRecord)(CUevent, CUstream);
static CUresult (*cuEventQuery)(CUevent);
static CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
static CUresult (*cuMemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
static CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
static CUresult (*cuCtxCreate)(CUcontext *, unsigned, int);
static CUresult (*cuCtxPushCurrent)(CUcontext);
static CUresult (*cuCtxPopCurrent)(CUcontext *);
static CUresult (*cuMemGetInfo)(size_t *, size_t *);

typedef struct { int err; int cu_err; } CUfileError_t;
typedef struct { int type; union { int fd; void *handle; } handle; const void *fs_ops; } CUfileDescr_t;
static CUfileError_t (*cuFileDriverOpen)(void);
static CUfileError_t (*cuFileHandleRegister)(void **, CUfileDescr_t *);
static CUfileError_t (*cuFileBufRegister)(const void *, size_t, int);
static CUfileError_t (*cuFileBufDeregister)(const void *);
static long (*cuFileRead)(void *, void *, size_t, long, long);
static long (*cuFileWrite)(void *, const void *, size_t, long, long);

#define MIB (1ul << 20)
#define LOAD(lib, f, name) (*(void **)&f = dlsym(lib, name))

static CUcontext ctx;
static volatile uint32_t *flag;
static CUdeviceptr flag_device;
static uint32_t flag_value;
static long hold_ms = 1500;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void must(const char *what, CUresult r) {
    if (r != 0) {
        fprintf(stderr, "%s failed: %d\n", what, r);
        exit(2);
    }
}

/* State the candidates use, made before the stream is held. */
static CUdeviceptr dev_buf, dev_spare;
static void *pinned_buf, *pinned_spare, *plain_4m, *plain_64m, *file_map;
static size_t file_map_len;
static CUstream side_stream, made_stream;
static CUevent made_event;
static void *cufile_handle;
static int file_fd = -1;
static CUcontext second_ctx;
static CUstream second_stream;
static const char *holder;
static CUstream held_stream;

static int candidate(const char *name);

/* Set while a candidate runs with the second context pushed on this thread (`in_second_context`). */
static __thread int second_current;

/* The non-blocking stream of the context current on this thread: the primary's or the second's. */
static CUstream own_stream(void) { return second_current ? second_stream : side_stream; }

#define SECOND " in a second context"

/* "X in a second context": candidate X with the process's own second context current, its copies
 * on that context's stream, into and out of the primary context's memory. */
static int in_second_context(const char *name) {
    char base[128];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(name) - strlen(SECOND)), name);
    int r = cuCtxPushCurrent(second_ctx);
    if (r) return r;
    second_current = 1;
    r = candidate(base);
    second_current = 0;
    CUcontext popped;
    cuCtxPopCurrent(&popped);
    return r;
}

static int candidate(const char *name) {
    size_t len = strlen(name);
    if (len > strlen(SECOND) && !strcmp(name + len - strlen(SECOND), SECOND)) return in_second_context(name);
    if (!strcmp(name, "cuMemHostAlloc 4 MiB")) return cuMemHostAlloc(&pinned_spare, 4 * MIB, 1);
    if (!strcmp(name, "cuMemFreeHost 4 MiB")) return cuMemFreeHost(pinned_spare);
    if (!strcmp(name, "cuMemHostRegister 4 MiB")) return cuMemHostRegister(plain_4m, 4 * MIB, 1);
    if (!strcmp(name, "cuMemHostUnregister 4 MiB")) return cuMemHostUnregister(plain_4m);
    if (!strcmp(name, "cuMemHostRegister 64 MiB")) return cuMemHostRegister(plain_64m, 64 * MIB, 1);
    if (!strcmp(name, "cuMemHostUnregister 64 MiB")) return cuMemHostUnregister(plain_64m);
    if (!strcmp(name, "cuMemHostRegister file map READ_ONLY")) return cuMemHostRegister(file_map, file_map_len, 1 | 8);
    if (!strcmp(name, "cuMemHostUnregister file map")) return cuMemHostUnregister(file_map);
    if (!strcmp(name, "cuMemAlloc 4 MiB")) return cuMemAlloc(&dev_spare, 4 * MIB);
    if (!strcmp(name, "cuMemFree 4 MiB")) return cuMemFree(dev_spare);
    if (!strcmp(name, "cuStreamCreate non-blocking")) return cuStreamCreate(&made_stream, 1);
    if (!strcmp(name, "cuStreamDestroy")) return cuStreamDestroy(made_stream);
    if (!strcmp(name, "cuEventCreate")) return cuEventCreate(&made_event, 2);
    if (!strcmp(name, "cuEventRecord+Query on a side stream")) {
        int r = cuEventRecord(made_event, side_stream);
        return r ? r : (cuEventQuery(made_event) == 600 ? 0 : cuEventQuery(made_event));
    }
    if (!strcmp(name, "cuEventDestroy")) return cuEventDestroy(made_event);
    if (!strcmp(name, "cuMemGetAddressRange")) {
        CUdeviceptr base; size_t size;
        return cuMemGetAddressRange(&base, &size, dev_buf + 100);
    }
    if (!strcmp(name, "HtoD async on a non-blocking stream + sync")) {
        int r = cuMemcpyHtoDAsync(dev_buf, pinned_buf, 4 * MIB, own_stream());
        return r ? r : cuStreamSynchronize(own_stream());
    }
    if (!strcmp(name, "DtoH async on a non-blocking stream + sync")) {
        int r = cuMemcpyDtoHAsync(pinned_buf, dev_buf, 4 * MIB, own_stream());
        return r ? r : cuStreamSynchronize(own_stream());
    }
    if (!strcmp(name, "cuFileRead 4 KiB")) return cuFileRead(cufile_handle, (void *)dev_buf, 4096, 0, 0) == 4096 ? 0 : -1;
    if (!strcmp(name, "cuFileRead 0 bytes")) return (int)cuFileRead(cufile_handle, (void *)dev_buf, 0, 0, 0);
    if (!strcmp(name, "cuFileRead 4 KiB past the end")) return (int)cuFileRead(cufile_handle, (void *)dev_buf, 4096, 1l << 40, 0);
    if (!strcmp(name, "cuFileWrite 0 bytes")) return (int)cuFileWrite(cufile_handle, (void *)dev_buf, 0, 64 * MIB, 0);
    if (!strcmp(name, "cuFileWrite 4 KiB")) return cuFileWrite(cufile_handle, (void *)dev_buf, 4096, 64 * MIB, 0) == 4096 ? 0 : -1;
    if (!strcmp(name, "cuMemcpyHtoD (legacy stream)")) return cuMemcpyHtoD(dev_buf, pinned_buf, 4 * MIB);
    if (!strcmp(name, "cuMemsetD8 (legacy stream)")) return cuMemsetD8(dev_buf, 1, 4 * MIB);
    if (!strcmp(name, "cuCtxSynchronize (control: must block)")) return cuCtxSynchronize();
    if (!strcmp(name, "cuFileDriverOpen")) return cuFileDriverOpen().err;
    if (!strcmp(name, "cuFileHandleRegister")) {
        CUfileDescr_t d;
        memset(&d, 0, sizeof d);
        d.type = 1;
        d.handle.fd = file_fd;
        return cuFileHandleRegister(&cufile_handle, &d).err;
    }
    if (!strcmp(name, "cuFileRead 4 MiB into device memory")) return cuFileRead(cufile_handle, (void *)dev_buf, 4 * MIB, 0, 0) == (long)(4 * MIB) ? 0 : -1;
    if (!strcmp(name, "cuFileRead 4 MiB at a device offset")) return cuFileRead(cufile_handle, (void *)dev_buf, 4 * MIB, 4 * MIB, 4 * MIB) == (long)(4 * MIB) ? 0 : -1;
    if (!strcmp(name, "cuFileBufRegister 16 MiB")) return cuFileBufRegister((void *)dev_buf, 16 * MIB, 0).err;
    if (!strcmp(name, "cuFileRead 4 MiB into a registered buffer")) return cuFileRead(cufile_handle, (void *)dev_buf, 4 * MIB, 0, 0) == (long)(4 * MIB) ? 0 : -1;
    if (!strcmp(name, "cuFileBufDeregister")) return cuFileBufDeregister((void *)dev_buf).err;
    if (!strcmp(name, "cuFileWrite 4 MiB from device memory")) return cuFileWrite(cufile_handle, (void *)dev_buf, 4 * MIB, 64 * MIB, 0) == (long)(4 * MIB) ? 0 : -1;
    fprintf(stderr, "unknown candidate %s\n", name);
    exit(2);
}

struct job {
    const char *name, *prelude;
    int prelude_done, go;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int done, result;
    double took_ms;
};

static void *run_job(void *p) {
    struct job *j = p;
    must("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
    if (j->prelude) {
        /* Before the hold, on this thread: the first call the candidate comes after. */
        int pr = candidate(j->prelude);
        pthread_mutex_lock(&j->lock);
        j->prelude_done = pr == 0 ? 1 : -1;
        pthread_cond_broadcast(&j->cv);
        while (!j->go) pthread_cond_wait(&j->cv, &j->lock);
        pthread_mutex_unlock(&j->lock);
    }
    double t = now_ms();
    int r = candidate(j->name);
    double took = now_ms() - t;
    pthread_mutex_lock(&j->lock);
    j->done = 1;
    j->result = r;
    j->took_ms = took;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

static void *pageable_dst;

/* HOLDER: a program's thread inside a synchronous call behind the held stream. */
static void *run_holder(void *unused) {
    (void)unused;
    must("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
    if (!strcmp(holder, "sync")) must("holder cuStreamSynchronize", cuStreamSynchronize(held_stream));
    else if (!strcmp(holder, "dtoh_pinned")) must("holder cuMemcpyDtoH pinned", cuMemcpyDtoH(pinned_spare, dev_buf, 4 * MIB));
    else must("holder cuMemcpyDtoH pageable", cuMemcpyDtoH(pageable_dst, dev_buf, 4 * MIB));
    return NULL;
}

/* Holds `stream` on the flag, runs `name` on a thread (after `prelude` there, made before the
 * hold, when given), releases the flag after hold_ms. */
static void probe_after(const char *kind, CUstream stream, const char *prelude, const char *name) {
    struct job j = {.name = name, .prelude = prelude, .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    pthread_t th, holder_th;
    pthread_create(&th, NULL, run_job, &j);
    if (prelude) {
        pthread_mutex_lock(&j.lock);
        while (!j.prelude_done) pthread_cond_wait(&j.cv, &j.lock);
        pthread_mutex_unlock(&j.lock);
    }
    flag_value++;
    must("cuStreamWaitValue32", cuStreamWaitValue32(stream, flag_device, flag_value, 0 /* GEQ */));
    if (holder) {
        held_stream = stream;
        pthread_create(&holder_th, NULL, run_holder, NULL);
        usleep(100000); /* the holder is inside its call by now */
    }
    double start = now_ms();
    pthread_mutex_lock(&j.lock);
    j.go = 1;
    pthread_cond_broadcast(&j.cv);
    pthread_mutex_unlock(&j.lock);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += hold_ms / 1000;
    until.tv_nsec += (hold_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_mutex_lock(&j.lock);
    while (!j.done && pthread_cond_timedwait(&j.cv, &j.lock, &until) == 0) {
    }
    int done_while_held = j.done;
    pthread_mutex_unlock(&j.lock);
    double released_at = now_ms() - start;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    *flag = flag_value;
    pthread_join(th, NULL);
    if (holder) pthread_join(holder_th, NULL);
    must("cuStreamSynchronize (held stream)", cuStreamSynchronize(stream));
    char label[160];
    snprintf(label, sizeof label, "%s%s%s%s", prelude ? "after " : "", prelude ? prelude : "", prelude ? ": " : "", name);
    if (prelude && j.prelude_done < 0) printf("%-12s %-44s (the first call failed)\n", kind, label);
    if (done_while_held)
        printf("%-12s %-44s returned while the stream waited: %8.3f ms (result %d)\n", kind, label, j.took_ms, j.result);
    else
        printf("%-12s %-44s BLOCKS until the flag is released (%.0f ms held, returned after %.3f ms, result %d)\n", kind, label,
               released_at, j.took_ms, j.result);
    fflush(stdout);
}

static void probe(const char *kind, CUstream stream, const char *name) { probe_after(kind, stream, NULL, name); }

/* A copy queued in the second context into (and out of) the primary context's memory moves the
 * right bytes. */
static void check_second_context_bytes(void) {
    unsigned char *src = pinned_buf, *back = pinned_spare;
    for (size_t i = 0; i < 4 * MIB; i++) src[i] = (unsigned char)(i * 7 + 3);
    memset(back, 0, 4 * MIB);
    must("second HtoD", candidate("HtoD async on a non-blocking stream + sync" SECOND));
    must("primary DtoH", cuMemcpyDtoH(back, dev_buf, 4 * MIB));
    printf("second context HtoD into primary memory: bytes %s\n", memcmp(src, back, 4 * MIB) ? "DIFFER" : "equal");
}

/* cuFileRead and cuFileWrite with the second context current move the file's bytes. */
static void check_second_context_cufile(void) {
    unsigned char *got = pinned_spare, *want = malloc(4096);
    must("cuMemsetD8", cuMemsetD8(dev_buf, 0, 4096));
    int r = candidate("cuFileRead 4 KiB" SECOND);
    must("primary DtoH", cuMemcpyDtoH(got, dev_buf, 4096));
    if (pread(file_fd, want, 4096, 0) != 4096) perror("pread");
    printf("cuFileRead with the second context current: %s, bytes %s\n", r ? "FAILED" : "4096 bytes", memcmp(got, want, 4096) ? "DIFFER" : "equal");
    for (size_t i = 0; i < 4096; i++) got[i] = (unsigned char)(i * 13 + 1);
    must("primary HtoD", cuMemcpyHtoD(dev_buf, got, 4096));
    r = candidate("cuFileWrite 4 KiB" SECOND);
    if (pread(file_fd, want, 4096, 64 * MIB) != 4096) perror("pread");
    printf("cuFileWrite with the second context current: %s, bytes %s\n", r ? "FAILED" : "4096 bytes", memcmp(got, want, 4096) ? "DIFFER" : "equal");
    free(want);
}

int main(int argc, char **argv) {
    if (getenv("HOLD_MS")) hold_ms = atol(getenv("HOLD_MS"));
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) return fprintf(stderr, "dlopen libcuda: %s\n", dlerror()), 2;
    LOAD(cuda, cuInit, "cuInit");
    LOAD(cuda, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    LOAD(cuda, cuCtxSetCurrent, "cuCtxSetCurrent");
    LOAD(cuda, cuCtxSynchronize, "cuCtxSynchronize");
    LOAD(cuda, cuMemHostAlloc, "cuMemHostAlloc");
    LOAD(cuda, cuMemFreeHost, "cuMemFreeHost");
    LOAD(cuda, cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
    LOAD(cuda, cuMemHostRegister, "cuMemHostRegister_v2");
    LOAD(cuda, cuMemHostUnregister, "cuMemHostUnregister");
    LOAD(cuda, cuMemAlloc, "cuMemAlloc_v2");
    LOAD(cuda, cuMemFree, "cuMemFree_v2");
    LOAD(cuda, cuStreamCreate, "cuStreamCreate");
    LOAD(cuda, cuStreamDestroy, "cuStreamDestroy_v2");
    LOAD(cuda, cuStreamSynchronize, "cuStreamSynchronize");
    LOAD(cuda, cuStreamWaitValue32, "cuStreamWaitValue32_v2");
    LOAD(cuda, cuEventCreate, "cuEventCreate");
    LOAD(cuda, cuEventDestroy, "cuEventDestroy_v2");
    LOAD(cuda, cuEventRecord, "cuEventRecord");
    LOAD(cuda, cuEventQuery, "cuEventQuery");
    LOAD(cuda, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
    LOAD(cuda, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    LOAD(cuda, cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    LOAD(cuda, cuMemsetD8, "cuMemsetD8_v2");
    LOAD(cuda, cuMemGetAddressRange, "cuMemGetAddressRange_v2");
    LOAD(cuda, cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    LOAD(cuda, cuCtxCreate, "cuCtxCreate_v2");
    LOAD(cuda, cuCtxPushCurrent, "cuCtxPushCurrent_v2");
    LOAD(cuda, cuCtxPopCurrent, "cuCtxPopCurrent_v2");
    LOAD(cuda, cuMemGetInfo, "cuMemGetInfo_v2");
    must("cuInit", cuInit(0));
    must("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, 0));
    must("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
    void *f;
    must("cuMemHostAlloc flag", cuMemHostAlloc(&f, 4, 1 | 2 /* PORTABLE | DEVICEMAP */));
    flag = f;
    *flag = 0;
    must("cuMemHostGetDevicePointer", cuMemHostGetDevicePointer(&flag_device, f, 0));
    must("cuMemAlloc", cuMemAlloc(&dev_buf, 16 * MIB));
    must("cuMemHostAlloc", cuMemHostAlloc(&pinned_buf, 4 * MIB, 1));
    must("cuStreamCreate side", cuStreamCreate(&side_stream, 1));
    plain_4m = aligned_alloc(4096, 4 * MIB);
    plain_64m = aligned_alloc(4096, 64 * MIB);
    memset(plain_4m, 1, 4 * MIB);
    memset(plain_64m, 1, 64 * MIB);

    const char *file = argc > 1 ? argv[1] : NULL;
    if (file) {
        file_fd = open(file, O_RDWR);
        if (file_fd < 0) return perror("open"), 2;
        file_map_len = 64 * MIB;
        file_map = mmap(NULL, file_map_len, PROT_READ, MAP_SHARED | MAP_POPULATE, file_fd, 0);
        if (file_map == MAP_FAILED) return perror("mmap"), 2;
    }

    CUstream blocking, nonblocking;
    must("cuStreamCreate blocking", cuStreamCreate(&blocking, 0));
    must("cuStreamCreate non-blocking", cuStreamCreate(&nonblocking, 1));
    struct { const char *kind; CUstream s; } streams[] = {{"legacy", NULL}, {"blocking", blocking}, {"non-blocking", nonblocking}};
    holder = getenv("HOLDER");
    if (holder) {
        if (!file) return fprintf(stderr, "HOLDER needs FILE\n"), 2;
        pageable_dst = malloc(4 * MIB);
        must("cuMemHostAlloc spare", cuMemHostAlloc(&pinned_spare, 4 * MIB, 1));
        /* A legacy-stream DtoH waits for the legacy and blocking streams only. */
        size_t first = 0, last = !strcmp(holder, "sync") ? 3 : 2;
        size_t free_before, free_after, total;
        must("cuMemGetInfo", cuMemGetInfo(&free_before, &total));
        must("cuCtxCreate", cuCtxCreate(&second_ctx, 0, 0));
        must("cuCtxSynchronize second", cuCtxSynchronize());
        must("cuMemGetInfo", cuMemGetInfo(&free_after, &total));
        must("cuStreamCreate second", cuStreamCreate(&second_stream, 1));
        printf("a second context took %.1f MiB of device memory\n", (double)(free_before - free_after) / MIB);
        CUcontext popped;
        must("cuCtxPopCurrent", cuCtxPopCurrent(&popped));
        must("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
        check_second_context_bytes();
        const char *copies[] = {"HtoD async on a non-blocking stream + sync", "HtoD async on a non-blocking stream + sync" SECOND,
                                "DtoH async on a non-blocking stream + sync" SECOND, "cuStreamCreate non-blocking",
                                "cuStreamDestroy", "cuEventCreate", "cuEventRecord+Query on a side stream", "cuEventDestroy"};
        int repeat = getenv("REPEAT") ? atoi(getenv("REPEAT")) : 1;
        for (int r = 0; r < repeat; r++)
            for (size_t s = first; s < last; s++)
                for (size_t c = 0; c < sizeof copies / sizeof *copies; c++) probe(streams[s].kind, streams[s].s, copies[c]);
        const char *name = getenv("CUFILE_LIB") ? getenv("CUFILE_LIB") : "libcufile.so.0";
        void *cufile = dlopen(name, RTLD_NOW);
        if (!cufile) return printf("no libcufile (%s): cuFile calls not probed\n", dlerror()), 0;
        LOAD(cufile, cuFileDriverOpen, "cuFileDriverOpen");
        LOAD(cufile, cuFileHandleRegister, "cuFileHandleRegister");
        LOAD(cufile, cuFileRead, "cuFileRead");
        LOAD(cufile, cuFileWrite, "cuFileWrite");
        must("cuFileDriverOpen", cuFileDriverOpen().err);
        if (candidate("cuFileHandleRegister")) return printf("cuFileHandleRegister failed: cuFile reads not probed (no udev record?)\n"), 0;
        const char *firsts[] = {NULL, "cuFileRead 4 KiB", "cuFileRead 0 bytes", "cuFileRead 4 KiB past the end", "cuFileWrite 0 bytes", "cuFileWrite 4 KiB"};
        const char *then[] = {"cuFileRead 4 KiB", "cuFileWrite 4 KiB"};
        check_second_context_cufile();
        for (size_t s = first; s < last; s++)
            for (size_t f = 0; f < sizeof firsts / sizeof *firsts; f++)
                for (size_t t = 0; t < 2; t++) probe_after(streams[s].kind, streams[s].s, firsts[f], then[t]);
        const char *second[] = {"cuFileRead 4 KiB" SECOND, "cuFileWrite 4 KiB" SECOND};
        for (int r = 0; r < repeat; r++)
            for (size_t s = first; s < last; s++)
                for (size_t f = 0; f < 2; f++)
                    for (size_t t = 0; t < 2; t++) probe_after(streams[s].kind, streams[s].s, f ? second[0] : NULL, second[t]);
        return 0;
    }
    /* Pairs in order: each creates what the next frees. */
    const char *cuda_calls[] = {"cuMemHostAlloc 4 MiB", "cuMemFreeHost 4 MiB", "cuMemHostRegister 4 MiB", "cuMemHostUnregister 4 MiB",
                                "cuMemHostRegister 64 MiB", "cuMemHostUnregister 64 MiB", "cuMemAlloc 4 MiB", "cuMemFree 4 MiB",
                                "cuStreamCreate non-blocking", "cuStreamDestroy", "cuEventCreate", "cuEventRecord+Query on a side stream",
                                "cuEventDestroy", "cuMemGetAddressRange", "HtoD async on a non-blocking stream + sync",
                                "DtoH async on a non-blocking stream + sync", "cuMemcpyHtoD (legacy stream)", "cuMemsetD8 (legacy stream)",
                                "cuCtxSynchronize (control: must block)"};
    for (size_t s = 0; s < 3; s++)
        for (size_t c = 0; c < sizeof cuda_calls / sizeof *cuda_calls; c++) probe(streams[s].kind, streams[s].s, cuda_calls[c]);
    if (file) {
        for (size_t s = 0; s < 3; s++) {
            probe(streams[s].kind, streams[s].s, "cuMemHostRegister file map READ_ONLY");
            probe(streams[s].kind, streams[s].s, "cuMemHostUnregister file map");
        }
        const char *name = getenv("CUFILE_LIB") ? getenv("CUFILE_LIB") : "libcufile.so.0";
        void *cufile = dlopen(name, RTLD_NOW);
        if (!cufile) return printf("no libcufile (%s): cuFile calls not probed\n", dlerror()), 0;
        LOAD(cufile, cuFileDriverOpen, "cuFileDriverOpen");
        LOAD(cufile, cuFileHandleRegister, "cuFileHandleRegister");
        LOAD(cufile, cuFileBufRegister, "cuFileBufRegister");
        LOAD(cufile, cuFileBufDeregister, "cuFileBufDeregister");
        LOAD(cufile, cuFileRead, "cuFileRead");
        LOAD(cufile, cuFileWrite, "cuFileWrite");
        /* The driver open and the handle's registration once, each while the blocking stream waits. */
        probe("blocking", blocking, "cuFileDriverOpen");
        probe("blocking", blocking, "cuFileHandleRegister");
        if (!cufile_handle) return printf("cuFileHandleRegister failed: cuFile reads not probed (no udev record?)\n"), 0;
        const char *cufile_calls[] = {"cuFileRead 4 MiB into device memory", "cuFileRead 4 MiB at a device offset", "cuFileWrite 4 MiB from device memory",
                                      "cuFileBufRegister 16 MiB", "cuFileRead 4 MiB into a registered buffer", "cuFileBufDeregister"};
        for (size_t s = 0; s < 3; s++)
            for (size_t c = 0; c < sizeof cufile_calls / sizeof *cufile_calls; c++) probe(streams[s].kind, streams[s].s, cufile_calls[c]);
    }
    return 0;
}
