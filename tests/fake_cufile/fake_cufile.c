/* A fake libcufile for CI machines without a GPU: exports the cuFile entry points gdsroute uses,
 * with behaviour chosen by environment variables read at call time, and its own per-GPU counters
 * reported through cuFileGetStatsL3 at the offsets the reported version implies.
 * One job in one file, although over 450 lines: standing in for libcufile, one symbol after another.
 *
 * Build: cc -shared -fPIC -o libfake_cufile.so fake_cufile.c
 *   -DFAKE_CUFILE_NO_STATS      omit every statistics symbol (a pre-1.15 library)
 *   -DFAKE_CUFILE_MISSING_READ  omit cuFileRead
 *   -DFAKE_CUFILE_MISSING_WRITE omit cuFileWrite
 *   -DFAKE_CUFILE_NO_VERSION    omit cuFileGetVersion
 *   -DFAKE_CUFILE_NO_BATCH      omit cuFileBatchIOGetStatus (a library without the whole batch API)
 *
 * Environment:
 *   FAKE_CUFILE_VERSION          cuFileGetVersion result (default 1150); >= 1190 moves L3 fields
 *   FAKE_CUFILE_OPEN_RESULT      cuFileDriverOpen result code (default 0)
 *   FAKE_CUFILE_REGISTER_RESULT  cuFileHandleRegister result code (default 0)
 *   FAKE_CUFILE_READ_MODE        ok | short | errno | negative (default ok)
 *   FAKE_CUFILE_READ_ERRNO       errno for mode errno (default EIO)
 *   FAKE_CUFILE_READ_CODE        code for mode negative (default 5011): returns -code
 *   FAKE_CUFILE_ROUTE            posix | nvfs | p2p: which counter a read or write bumps (default posix)
 *   FAKE_CUFILE_NUM_GPUS         num_gpus written to L3 (default 1; may exceed 16 to test clamping)
 *   FAKE_CUFILE_IO_GPU           unset: every reported GPU entry repeats GPU 0's counters, UUIDs all
 *                                zero (sums are predictable); set to g (0-15): reads and writes count
 *                                on GPU g, and every entry reports its own counters and its UUID,
 *                                the bytes 'F' 'A' 'K' 'E', eleven zeros, then g + 1
 *   FAKE_CUFILE_NVFS_MAJOR/MINOR nvidia-fs version in the driver properties (default 0.0)
 *   FAKE_CUFILE_FAIL_AT          with mode errno/negative: only reads whose range covers this file
 *                                offset fail; the others read normally
 *   FAKE_CUFILE_DEVICE           1: the buffer is CUDA device memory: read into host memory,
 *                                then cuMemcpyHtoD (libcuda.so.1, loaded on first use)
 * Reads otherwise treat the buffer as host memory and pread() the registered fd into it;
 * cuFileWrite likewise pwrite()s from it (FAKE_CUFILE_DEVICE=1: cuMemcpyDtoH first); both honour
 * FAKE_CUFILE_READ_MODE (short: half the size; errno/negative as for reads, FAKE_CUFILE_FAIL_AT too).
 * The batch API (cuFileBatchIO*): Submit runs each I/O at once through the fake's cuFileRead /
 * cuFileWrite above (so FAKE_CUFILE_READ_MODE and FAKE_CUFILE_DEVICE apply) and queues its event;
 * GetStatus hands out at most 7 queued events per call, newest first (cuFile's come in completion
 * order, not in submission order), and answers at once. As cuFile 1.15 on the H200: SetUp refuses
 * more than FAKE_CUFILE_MAX_BATCH I/Os (default 128, also the properties' max_batch_io_size) with
 * 5022; Submit refuses none, or more than were set up (counting those unread), with 5040; an I/O
 * of size 0 never gets an event; Cancel drops the unread events.
 *   FAKE_CUFILE_BATCH_SETUP_RESULT  cuFileBatchIOSetUp result code (default 0)
 *   FAKE_CUFILE_BATCH_SUBMIT_RESULT cuFileBatchIOSubmit result code (default 0; nothing runs)
 *   FAKE_CUFILE_BATCH_STATUS_RESULT cuFileBatchIOGetStatus result code (default 0)
 *   FAKE_CUFILE_BATCH_FAIL_COOKIE   the I/O with this cookie is not run: FAILED, ret -5
 *   FAKE_CUFILE_BATCH_SHORT_COOKIE  the I/O with this cookie moves half its bytes, COMPLETE
 *   FAKE_CUFILE_BATCH_BAD_COOKIE    the event of the I/O with this cookie carries cookie + 1000000
 *   FAKE_CUFILE_BATCH_LOST_COOKIE   the I/O with this cookie runs but never gets an event
 * Test hooks: fake_cufile_reset(), fake_cufile_open_count(), fake_cufile_deregister_count(),
 * fake_cufile_param_string(int param) (last staged string or NULL),
 * fake_cufile_registered_fd() and fake_cufile_registered_flags() (the fd of the last successful
 * cuFileHandleRegister and its fcntl F_GETFL flags then, -1 before any),
 * fake_cufile_deregistered_closed_count() (deregistrations whose fd no longer referred to the
 * registered file: closed, or its number reused), fake_cufile_batch_live() (batch handles set up
 * and not destroyed), fake_cufile_batch_setups(), fake_cufile_batch_submits(),
 * fake_cufile_batch_largest_submit() (most I/Os
 * one accepted submit carried), fake_cufile_batch_cancels().
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct { int err; int cu_err; } fake_status;

/* Same layout as CUfileDrvProps_t (56 bytes on LP64). */
struct fake_props {
    struct {
        unsigned int major, minor;
        size_t poll_thresh_size, max_direct_io_size;
        unsigned int dstatusflags, dcontrolflags;
    } nvfs;
    unsigned int fflags, max_device_cache_size, per_buffer_cache_size,
        max_device_pinned_mem_size, max_batch_io_size, max_batch_io_timeout_msecs;
};
_Static_assert(sizeof(struct fake_props) == 56, "CUfileDrvProps_t is 56 bytes");

/* Same layout as CUfileDescr_t. */
struct fake_descr {
    int type;
    union { int fd; void *handle; } handle;
    const void *fs_ops;
};
_Static_assert(sizeof(struct fake_descr) == 24, "CUfileDescr_t is 24 bytes");

#define FAKE_MAX_GPUS 16
#define PER_GPU_SIZE 248
struct counters {
    uint64_t read_bytes, total, p2p, nvfs, posix, unaligned, err;
    uint64_t write_bytes, w_total, w_p2p, w_nvfs, w_posix, w_err;
};

struct fake_handle { uint32_t magic; int fd; dev_t dev; ino_t ino; };
#define HANDLE_MAGIC 0xC0F1E5u

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int open_count, stats_level, stats_started, deregister_count;
static int registered_fd = -1, registered_flags = -1, deregistered_closed_count;
static struct counters gpu[FAKE_MAX_GPUS];
static char *param_string[8];

static fake_status status(int code) { fake_status s = { code, 0 }; return s; }

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : def;
}

static __attribute__((unused)) const char *env_str(const char *name, const char *def) {
    const char *v = getenv(name);
    return (v && *v) ? v : def;
}

static int batch_live, batch_setups, batch_submits, batch_largest_submit, batch_cancels;

EXPORT void fake_cufile_reset(void) {
    pthread_mutex_lock(&lock);
    open_count = stats_level = stats_started = deregister_count = deregistered_closed_count = 0;
    batch_live = batch_setups = batch_submits = batch_largest_submit = batch_cancels = 0;
    registered_fd = registered_flags = -1;
    memset(gpu, 0, sizeof gpu);
    for (int i = 0; i < 8; i++) { free(param_string[i]); param_string[i] = NULL; }
    pthread_mutex_unlock(&lock);
}
EXPORT int fake_cufile_open_count(void) { return open_count; }
EXPORT int fake_cufile_deregister_count(void) { return deregister_count; }
EXPORT int fake_cufile_registered_fd(void) { return registered_fd; }
EXPORT int fake_cufile_registered_flags(void) { return registered_flags; }
EXPORT int fake_cufile_deregistered_closed_count(void) { return deregistered_closed_count; }
EXPORT int fake_cufile_batch_live(void) { return batch_live; }
EXPORT int fake_cufile_batch_setups(void) { return batch_setups; }
EXPORT int fake_cufile_batch_submits(void) { return batch_submits; }
EXPORT int fake_cufile_batch_largest_submit(void) { return batch_largest_submit; }
EXPORT int fake_cufile_batch_cancels(void) { return batch_cancels; }
EXPORT const char *fake_cufile_param_string(int param) {
    return (param >= 0 && param < 8) ? param_string[param] : NULL;
}

#ifndef FAKE_CUFILE_NO_VERSION
EXPORT fake_status cuFileGetVersion(int *version) {
    if (!version) return status(5022);
    *version = env_int("FAKE_CUFILE_VERSION", 1150);
    return status(0);
}
#endif

EXPORT fake_status cuFileDriverOpen(void) {
    int r = env_int("FAKE_CUFILE_OPEN_RESULT", 0);
    if (r == 0) {
        pthread_mutex_lock(&lock);
        open_count++;
        /* The real library clears staged parameters when it opens. */
        for (int i = 0; i < 8; i++) { free(param_string[i]); param_string[i] = NULL; }
        pthread_mutex_unlock(&lock);
    }
    return status(r);
}

static fake_status close_impl(void) {
    pthread_mutex_lock(&lock);
    int r = open_count > 0 ? 0 : 5001;
    if (r == 0) open_count--;
    pthread_mutex_unlock(&lock);
    return status(r);
}
EXPORT fake_status cuFileDriverClose(void) { return close_impl(); }
EXPORT fake_status cuFileDriverClose_v2(void) { return close_impl(); }

/* The driver setters as cuFile 1.15 behaves (measured on the H200): staged before the driver
 * opens and reported by the properties from then on; after the open they return success and
 * change nothing. Values in KiB; 0 = not set (the defaults below). */
static size_t set_poll_thresh, set_max_direct_io, set_max_cache, set_max_pinned;
static int set_poll_mode = -1;
static int fake_stage(size_t *slot, size_t value) {
    pthread_mutex_lock(&lock);
    if (open_count == 0) *slot = value;
    pthread_mutex_unlock(&lock);
    return 0;
}
EXPORT fake_status cuFileDriverSetPollMode(bool poll, size_t threshold_kb) {
    pthread_mutex_lock(&lock);
    if (open_count == 0) {
        set_poll_mode = poll;
        set_poll_thresh = threshold_kb;
    }
    pthread_mutex_unlock(&lock);
    return status(0);
}
EXPORT fake_status cuFileDriverSetMaxDirectIOSize(size_t kb) { return status(fake_stage(&set_max_direct_io, kb)); }
EXPORT fake_status cuFileDriverSetMaxCacheSize(size_t kb) { return status(fake_stage(&set_max_cache, kb)); }
EXPORT fake_status cuFileDriverSetMaxPinnedMemSize(size_t kb) { return status(fake_stage(&set_max_pinned, kb)); }

EXPORT fake_status cuFileDriverGetProperties(void *out) {
    if (!out) return status(5022);
    struct fake_props p;
    memset(&p, 0, sizeof p);
    p.nvfs.major = (unsigned)env_int("FAKE_CUFILE_NVFS_MAJOR", 0);
    p.nvfs.minor = (unsigned)env_int("FAKE_CUFILE_NVFS_MINOR", 0);
    pthread_mutex_lock(&lock);
    p.nvfs.poll_thresh_size = set_poll_mode >= 0 ? set_poll_thresh : 4;
    p.nvfs.max_direct_io_size = set_max_direct_io ? set_max_direct_io : 16384;
    p.nvfs.dcontrolflags = (1u << 1) | (set_poll_mode > 0 ? 1u : 0u); /* ALLOW_COMPAT_MODE, USE_POLL_MODE */
    p.fflags = 1u << 1;             /* BATCH_IO */
    p.max_device_cache_size = set_max_cache ? (unsigned)set_max_cache : 131072;
    p.per_buffer_cache_size = 1024;
    p.max_device_pinned_mem_size = set_max_pinned ? (unsigned)set_max_pinned : 33554432;
    pthread_mutex_unlock(&lock);
    p.max_batch_io_size = (unsigned)env_int("FAKE_CUFILE_MAX_BATCH", 128);
    p.max_batch_io_timeout_msecs = 5;
    memcpy(out, &p, sizeof p);
    return status(0);
}

EXPORT fake_status cuFileSetParameterString(int param, const char *value) {
    if (param < 0 || param > 2 || !value) return status(5022);
    pthread_mutex_lock(&lock);
    int r = 0;
    if (open_count > 0) {
        r = 5026; /* DRIVER_ALREADY_OPEN */
    } else {
        free(param_string[param]);
        param_string[param] = strdup(value);
    }
    pthread_mutex_unlock(&lock);
    return status(r);
}

EXPORT fake_status cuFileHandleRegister(void **fh, struct fake_descr *descr) {
    if (!fh || !descr) return status(5022);
    /* Checks that the caller's descriptor layout is right. */
    if (descr->type != 1 || descr->fs_ops != NULL) return status(5022);
    if (fcntl(descr->handle.fd, F_GETFD) < 0) return status(5022);
    int r = env_int("FAKE_CUFILE_REGISTER_RESULT", 0);
    if (r != 0) return status(r);
    struct stat st;
    if (fstat(descr->handle.fd, &st) != 0) return status(5022);
    struct fake_handle *h = malloc(sizeof *h);
    if (!h) return status(5043);
    h->magic = HANDLE_MAGIC;
    h->fd = descr->handle.fd;
    h->dev = st.st_dev;
    h->ino = st.st_ino;
    *fh = h;
    pthread_mutex_lock(&lock);
    registered_fd = h->fd;
    registered_flags = fcntl(h->fd, F_GETFL);
    pthread_mutex_unlock(&lock);
    return status(0);
}

EXPORT void cuFileHandleDeregister(void *fh) {
    struct fake_handle *h = fh;
    if (!h || h->magic != HANDLE_MAGIC) return;
    struct stat st;
    int closed = fstat(h->fd, &st) != 0 || st.st_dev != h->dev || st.st_ino != h->ino;
    h->magic = 0;
    free(h);
    pthread_mutex_lock(&lock);
    deregister_count++;
    deregistered_closed_count += closed;
    pthread_mutex_unlock(&lock);
}

EXPORT fake_status cuFileBufRegister(const void *base, size_t len, int flags) {
    (void)len; (void)flags;
    return status(base ? 0 : 5022);
}
EXPORT fake_status cuFileBufDeregister(const void *base) { return status(base ? 0 : 5022); }

/* The GPU entry I/O is counted on: FAKE_CUFILE_IO_GPU, else 0. */
static struct counters *io_gpu(void) {
    int g = env_int("FAKE_CUFILE_IO_GPU", 0);
    return &gpu[g < 0 ? 0 : g >= FAKE_MAX_GPUS ? FAKE_MAX_GPUS - 1 : g];
}

static __attribute__((unused)) void count_write(ssize_t ret) {
    pthread_mutex_lock(&lock);
    if (stats_started && stats_level >= 3) {
        struct counters *c = io_gpu();
        c->w_total++;
        if (ret < 0) {
            c->w_err++;
        } else {
            const char *route = env_str("FAKE_CUFILE_ROUTE", "posix");
            if (strcmp(route, "nvfs") == 0) c->w_nvfs++;
            else if (strcmp(route, "p2p") == 0) c->w_p2p++;
            else c->w_posix++;
            c->write_bytes += (uint64_t)ret;
        }
    }
    pthread_mutex_unlock(&lock);
}

#ifndef FAKE_CUFILE_MISSING_READ
static void count_read(off_t file_offset, size_t size, off_t buf_offset, ssize_t ret) {
    pthread_mutex_lock(&lock);
    if (stats_started && stats_level >= 3) {
        struct counters *c = io_gpu();
        c->total++;
        if (ret < 0) {
            c->err++;
        } else {
            const char *route = env_str("FAKE_CUFILE_ROUTE", "posix");
            if (strcmp(route, "nvfs") == 0) c->nvfs++;
            else if (strcmp(route, "p2p") == 0) c->p2p++;
            else c->posix++;
            c->read_bytes += (uint64_t)ret;
        }
        if (((uint64_t)file_offset | (uint64_t)size | (uint64_t)buf_offset) & 4095u) c->unaligned++;
    }
    pthread_mutex_unlock(&lock);
}

/* Reads `want` bytes into the caller's buffer: directly, or through host memory and
 * cuMemcpyHtoD when FAKE_CUFILE_DEVICE=1 (a GPU test). */
static ssize_t read_into(int fd, char *dst, size_t want, off_t file_offset) {
    if (env_int("FAKE_CUFILE_DEVICE", 0) != 1) return pread(fd, dst, want, file_offset);
    typedef int (*htod_fn)(uint64_t, const void *, size_t);
    static htod_fn htod;
    if (!htod) {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        htod = cuda ? (htod_fn)dlsym(cuda, "cuMemcpyHtoD_v2") : NULL;
        if (!htod) { errno = ENOSYS; return -1; }
    }
    /* Real cuFile's compat path aligns O_DIRECT I/O itself; the fake just reads buffered. */
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_DIRECT)) fcntl(fd, F_SETFL, flags & ~O_DIRECT);
    char *tmp = malloc(want ? want : 1);
    if (!tmp) { errno = ENOMEM; return -1; }
    ssize_t n = pread(fd, tmp, want, file_offset);
    if (n > 0 && htod((uint64_t)(uintptr_t)dst, tmp, (size_t)n) != 0) { errno = EFAULT; n = -1; }
    free(tmp);
    return n;
}

EXPORT ssize_t cuFileRead(void *fh, void *base, size_t size, off_t file_offset, off_t buf_offset) {
    struct fake_handle *h = fh;
    if (!h || h->magic != HANDLE_MAGIC) { errno = EBADF; return -1; }
    const char *mode = env_str("FAKE_CUFILE_READ_MODE", "ok");
    long long fail_at = env_int("FAKE_CUFILE_FAIL_AT", -1);
    int covered = fail_at < 0 || (fail_at >= file_offset && fail_at < file_offset + (off_t)size);
    ssize_t ret;
    if (strcmp(mode, "errno") == 0 && covered) {
        count_read(file_offset, size, buf_offset, -1);
        errno = env_int("FAKE_CUFILE_READ_ERRNO", EIO);
        return -1;
    } else if (strcmp(mode, "negative") == 0 && covered) {
        ret = -(ssize_t)env_int("FAKE_CUFILE_READ_CODE", 5011);
    } else {
        size_t want = strcmp(mode, "short") == 0 && size > 1 ? size / 2 : size;
        ret = read_into(h->fd, (char *)base + buf_offset, want, file_offset);
    }
    int saved = errno;
    count_read(file_offset, size, buf_offset, ret);
    errno = saved;
    return ret;
}
#endif

#ifndef FAKE_CUFILE_MISSING_WRITE
/* Writes `want` bytes of the caller's buffer: directly, or through host memory and cuMemcpyDtoH
 * when FAKE_CUFILE_DEVICE=1 (a GPU test). */
static ssize_t write_from(int fd, const char *src, size_t want, off_t file_offset) {
    if (env_int("FAKE_CUFILE_DEVICE", 0) != 1) return pwrite(fd, src, want, file_offset);
    typedef int (*dtoh_fn)(void *, uint64_t, size_t);
    static dtoh_fn dtoh;
    if (!dtoh) {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        dtoh = cuda ? (dtoh_fn)dlsym(cuda, "cuMemcpyDtoH_v2") : NULL;
        if (!dtoh) { errno = ENOSYS; return -1; }
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_DIRECT)) fcntl(fd, F_SETFL, flags & ~O_DIRECT);
    char *tmp = malloc(want ? want : 1);
    if (!tmp) { errno = ENOMEM; return -1; }
    ssize_t n = -1;
    if (dtoh(tmp, (uint64_t)(uintptr_t)src, want) != 0) errno = EFAULT;
    else n = pwrite(fd, tmp, want, file_offset);
    free(tmp);
    return n;
}

EXPORT ssize_t cuFileWrite(void *fh, const void *base, size_t size, off_t file_offset, off_t buf_offset) {
    struct fake_handle *h = fh;
    if (!h || h->magic != HANDLE_MAGIC) { errno = EBADF; return -1; }
    const char *mode = env_str("FAKE_CUFILE_READ_MODE", "ok");
    long long fail_at = env_int("FAKE_CUFILE_FAIL_AT", -1);
    int covered = fail_at < 0 || (fail_at >= file_offset && fail_at < file_offset + (off_t)size);
    ssize_t ret;
    if (strcmp(mode, "errno") == 0 && covered) {
        count_write(-1);
        errno = env_int("FAKE_CUFILE_READ_ERRNO", EIO);
        return -1;
    } else if (strcmp(mode, "negative") == 0 && covered) {
        ret = -(ssize_t)env_int("FAKE_CUFILE_READ_CODE", 5011);
    } else {
        size_t want = strcmp(mode, "short") == 0 && size > 1 ? size / 2 : size;
        ret = write_from(h->fd, (const char *)base + buf_offset, want, file_offset);
    }
    int saved = errno;
    count_write(ret);
    errno = saved;
    return ret;
}
#endif

/* The stream API: the fake ignores the stream and moves the bytes at once, as cuFile does on a
 * stream it has not registered; the result goes to *bytes_p, the call returns success. */
static int registered_streams;
EXPORT int fake_cufile_registered_streams(void) { return registered_streams; }
EXPORT fake_status cuFileStreamRegister(void *stream, unsigned flags) {
    (void)stream;
    if (flags > 15) return status(5022);
    registered_streams++;
    return status(0);
}
EXPORT fake_status cuFileStreamDeregister(void *stream) {
    (void)stream;
    registered_streams--;
    return status(0);
}
#ifndef FAKE_CUFILE_MISSING_READ
EXPORT fake_status cuFileReadAsync(void *fh, void *base, size_t *size_p, off_t *file_offset_p, off_t *buf_offset_p, ssize_t *bytes_p,
                                   void *stream) {
    (void)stream;
    *bytes_p = cuFileRead(fh, base, *size_p, *file_offset_p, *buf_offset_p);
    return status(0);
}
#endif
#ifndef FAKE_CUFILE_MISSING_WRITE
EXPORT fake_status cuFileWriteAsync(void *fh, void *base, size_t *size_p, off_t *file_offset_p, off_t *buf_offset_p, ssize_t *bytes_p,
                                    void *stream) {
    (void)stream;
    *bytes_p = cuFileWrite(fh, base, *size_p, *file_offset_p, *buf_offset_p);
    return status(0);
}
#endif

/* Same layouts as CUfileIOParams_t and CUfileIOEvents_t. */
struct fake_batch_io {
    int mode;
    union {
        struct { void *devPtr_base; off_t file_offset; off_t devPtr_offset; size_t size; } batch;
    } u;
    void *fh;
    int opcode;
    void *cookie;
};
_Static_assert(sizeof(struct fake_batch_io) == 64, "CUfileIOParams_t is 64 bytes");
_Static_assert(offsetof(struct fake_batch_io, fh) == 40 && offsetof(struct fake_batch_io, cookie) == 56, "CUfileIOParams_t");
struct fake_batch_event { void *cookie; unsigned status; size_t ret; };
_Static_assert(sizeof(struct fake_batch_event) == 24, "CUfileIOEvents_t is 24 bytes");

#define BATCH_MAGIC 0xBA7C4u
#define FAKE_BATCH_MAX 1024
struct fake_batch { uint32_t magic; unsigned max_nr, queued; struct fake_batch_event *events; };

EXPORT fake_status cuFileBatchIOSetUp(void **out, unsigned max_nr) {
    if (!out) return status(5022);
    int r = env_int("FAKE_CUFILE_BATCH_SETUP_RESULT", 0);
    if (r != 0) return status(r);
    unsigned limit = (unsigned)env_int("FAKE_CUFILE_MAX_BATCH", 128);
    if (max_nr == 0 || max_nr > limit || max_nr > FAKE_BATCH_MAX) return status(5022);
    struct fake_batch *b = calloc(1, sizeof *b);
    if (b) b->events = calloc(max_nr, sizeof *b->events);
    if (!b || !b->events) { free(b); return status(5043); }
    b->magic = BATCH_MAGIC;
    b->max_nr = max_nr;
    *out = b;
    pthread_mutex_lock(&lock);
    batch_live++;
    batch_setups++;
    pthread_mutex_unlock(&lock);
    return status(0);
}

static struct fake_batch *batch_of(void *h) {
    struct fake_batch *b = h;
    return b && b->magic == BATCH_MAGIC ? b : NULL;
}

/* Runs one I/O; its event's status and ret. */
static struct fake_batch_event run_batch_io(const struct fake_batch_io *io) {
    struct fake_batch_event ev = { io->cookie, 16 /* COMPLETE */, 0 };
    long cookie = (long)(intptr_t)io->cookie;
    size_t size = io->u.batch.size;
    ssize_t ret;
    if (io->mode != 1 || (io->opcode != 0 && io->opcode != 1)) {
        ev.status = 4; /* INVALID */
        ret = -5022;
    } else if (cookie == env_int("FAKE_CUFILE_BATCH_FAIL_COOKIE", -1)) {
        ev.status = 64; /* FAILED */
        ret = -5;
    } else {
        if (cookie == env_int("FAKE_CUFILE_BATCH_SHORT_COOKIE", -1) && size > 1) size /= 2;
        ret = -5022;
#ifndef FAKE_CUFILE_MISSING_READ
        if (io->opcode == 0) ret = cuFileRead(io->fh, io->u.batch.devPtr_base, size, io->u.batch.file_offset, io->u.batch.devPtr_offset);
#endif
#ifndef FAKE_CUFILE_MISSING_WRITE
        if (io->opcode == 1) ret = cuFileWrite(io->fh, io->u.batch.devPtr_base, size, io->u.batch.file_offset, io->u.batch.devPtr_offset);
#endif
        if (ret < 0) ev.status = 64;
    }
    if (cookie == env_int("FAKE_CUFILE_BATCH_BAD_COOKIE", -1)) ev.cookie = (void *)(intptr_t)(cookie + 1000000);
    ev.ret = (size_t)ret;
    return ev;
}

EXPORT fake_status cuFileBatchIOSubmit(void *h, unsigned nr, struct fake_batch_io *ios, unsigned flags) {
    struct fake_batch *b = batch_of(h);
    if (!b || !ios || flags != 0) return status(5022);
    if (nr == 0 || nr + b->queued > b->max_nr) return status(5040);
    int r = env_int("FAKE_CUFILE_BATCH_SUBMIT_RESULT", 0);
    if (r != 0) return status(r);
    for (unsigned i = 0; i < nr; i++) {
        struct fake_batch_event ev = run_batch_io(&ios[i]);
        long cookie = (long)(intptr_t)ios[i].cookie;
        if (ios[i].u.batch.size > 0 && cookie != env_int("FAKE_CUFILE_BATCH_LOST_COOKIE", -1)) b->events[b->queued++] = ev;
    }
    pthread_mutex_lock(&lock);
    batch_submits++;
    if ((int)nr > batch_largest_submit) batch_largest_submit = (int)nr;
    pthread_mutex_unlock(&lock);
    return status(0);
}

#ifndef FAKE_CUFILE_NO_BATCH
EXPORT fake_status cuFileBatchIOGetStatus(void *h, unsigned min_nr, unsigned *nr, struct fake_batch_event *events, struct timespec *timeout) {
    struct fake_batch *b = batch_of(h);
    if (!b || !nr || !events || !timeout || min_nr > *nr) return status(5022);
    int r = env_int("FAKE_CUFILE_BATCH_STATUS_RESULT", 0);
    if (r != 0) return status(r);
    unsigned n = 0;
    while (n < *nr && n < 7 && b->queued > 0) events[n++] = b->events[--b->queued];
    *nr = n;
    return status(0);
}
#endif

EXPORT fake_status cuFileBatchIOCancel(void *h) {
    struct fake_batch *b = batch_of(h);
    if (!b) return status(5022);
    b->queued = 0;
    pthread_mutex_lock(&lock);
    batch_cancels++;
    pthread_mutex_unlock(&lock);
    return status(0);
}

EXPORT void cuFileBatchIODestroy(void *h) {
    struct fake_batch *b = batch_of(h);
    if (!b) return;
    b->magic = 0;
    free(b->events);
    free(b);
    pthread_mutex_lock(&lock);
    batch_live--;
    pthread_mutex_unlock(&lock);
}

#ifndef FAKE_CUFILE_NO_STATS
EXPORT fake_status cuFileSetStatsLevel(int level) {
    if (level < 0 || level > 3) return status(5022);
    stats_level = level;
    return status(0);
}
EXPORT fake_status cuFileGetStatsLevel(int *level) {
    if (!level) return status(5022);
    *level = stats_level;
    return status(0);
}
EXPORT fake_status cuFileStatsStart(void) {
    if (open_count == 0) return status(5001);
    stats_started = 1;
    return status(0);
}
EXPORT fake_status cuFileStatsStop(void) {
    if (open_count == 0) return status(5001);
    stats_started = 0;
    return status(0);
}
EXPORT fake_status cuFileStatsReset(void) {
    if (open_count == 0) return status(5001);
    pthread_mutex_lock(&lock);
    memset(gpu, 0, sizeof gpu);
    pthread_mutex_unlock(&lock);
    return status(0);
}

static void put_u64(unsigned char *p, size_t at, uint64_t v) { memcpy(p + at, &v, sizeof v); }

EXPORT fake_status cuFileGetStatsL3(void *out) {
    if (open_count == 0) return status(5001);
    if (!out || stats_level < 3) return status(5022);
    int big = env_int("FAKE_CUFILE_VERSION", 1150) >= 1190;
    size_t total = big ? 5112 : 5000, num_at = big ? 1136 : 1024, gpus_at = big ? 1144 : 1032;
    unsigned char *p = out;
    memset(p, 0, total);
    uint32_t n = (uint32_t)env_int("FAKE_CUFILE_NUM_GPUS", 1);
    memcpy(p + num_at, &n, sizeof n);
    const char *io_gpu_env = getenv("FAKE_CUFILE_IO_GPU");
    int per_gpu = io_gpu_env != NULL && *io_gpu_env != 0;
    pthread_mutex_lock(&lock);
    for (uint32_t g = 0; g < n && g < FAKE_MAX_GPUS; g++) {
        size_t e = gpus_at + (size_t)g * PER_GPU_SIZE;
        /* Without FAKE_CUFILE_IO_GPU every entry repeats GPU 0's counters, so sums are predictable;
         * with it each entry has its own counters and names its GPU. */
        const struct counters *c = per_gpu ? &gpu[g] : &gpu[0];
        if (per_gpu) {
            unsigned char uuid[16] = {'F', 'A', 'K', 'E'};
            uuid[15] = (unsigned char)(g + 1);
            memcpy(p + e, uuid, sizeof uuid);
        }
        put_u64(p, e + 16, c->read_bytes);
        put_u64(p, e + 48, c->total);
        put_u64(p, e + 56, c->p2p);
        put_u64(p, e + 64, c->nvfs);
        put_u64(p, e + 72, c->posix);
        put_u64(p, e + 80, c->unaligned);
        put_u64(p, e + 112, c->err);
        put_u64(p, e + 120, c->write_bytes);
        put_u64(p, e + 152, c->w_total);
        put_u64(p, e + 160, c->w_p2p);
        put_u64(p, e + 168, c->w_nvfs);
        put_u64(p, e + 176, c->w_posix);
        put_u64(p, e + 200, c->w_err);
    }
    pthread_mutex_unlock(&lock);
    return status(0);
}
#endif
