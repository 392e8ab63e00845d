/* LD_PRELOAD fault injector for pread/pread64 and preadv2/preadv64v2 (one iovec; the library's
 * first read of a task, flagged RWF_NOWAIT), and for pwrite/pwrite64 (the same faults: a short
 * write writes half), used by test_faults (and tests/faults.rs, tests/posix_writes.rs).
 *
 * Environment variables, read at every call (so a test may change them between reads):
 *   FAULT_EINTR_EVERY=N   every Nth intercepted call returns -1 with errno EINTR (nothing read)
 *   FAULT_SHORT_EVERY=N   every Nth intercepted call reads only half of what was asked (>= 1 byte)
 *   FAULT_EIO_AT=OFF[,OFF...]  a call whose range [offset, offset + count) covers one of the
 *                         offsets (decimal, comma-separated) returns -1 with errno FAULT_ERRNO
 *   FAULT_ERRNO=N         the errno of FAULT_EIO_AT's failures (default EIO; 28 is ENOSPC)
 *   FAULT_EIO_PARTIAL=1   as a disk's bad block: a call that covers a FAULT_EIO_AT offset past
 *                         its start moves the bytes before that offset and returns their count;
 *                         only a call that starts at the offset fails
 *   FAULT_DELAY_US=N      every intercepted call sleeps N microseconds first (widens races)
 *   FAULT_PATH_CONTAINS=S only descriptors whose /proc/self/fd link contains S are faulted
 *   FAULT_COUNT_FILE=P    at exit, append "pid=<pid> eintr=<n> short=<n> eio=<n> calls=<n>"
 *   FAULT_PROCESS_VM_ERRNO=N  process_vm_readv/process_vm_writev (the library's copies between a
 *                         caller's buffer and its direct-I/O scratch buffer) return -1 with errno
 *                         N before copying anything, as under a seccomp filter (38 is ENOSYS, 1
 *                         EPERM); used by test_bad_pages
 * Calls are forwarded to the next definition (libc) through dlsym(RTLD_NEXT, ...).
 * fault_shim_counts() lets a test that finds it with dlsym(RTLD_DEFAULT, ...) read the totals;
 * fault_shim_process_vm_calls() the process_vm_* calls intercepted and refused.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
typedef ssize_t (*preadv2_fn)(int, const struct iovec *, int, off_t, int);

/* How an intercepted call reads for real: a pread-like call through `real` with `ctx`. */
typedef ssize_t (*read_at_fn)(void *ctx, int fd, void *buf, size_t count, off_t offset);

static _Atomic unsigned long long calls;      /* intercepted calls on matching descriptors */
static _Atomic unsigned long long eintr_count;
static _Atomic unsigned long long short_count;
static _Atomic unsigned long long eio_count;
static _Atomic unsigned long long eintr_seq;  /* separate sequences so the faults interleave */
static _Atomic unsigned long long short_seq;

/* Totals so far: [0] EINTR, [1] short reads, [2] FAULT_EIO_AT failures (EIO or FAULT_ERRNO), [3]
 * intercepted calls. */
void fault_shim_counts(unsigned long long out[4]) {
    out[0] = eintr_count;
    out[1] = short_count;
    out[2] = eio_count;
    out[3] = calls;
}

static unsigned long long env_u64(const char *name, int *present) {
    const char *v = getenv(name);
    *present = v != NULL && *v != '\0';
    return *present ? strtoull(v, NULL, 10) : 0;
}

/* The bytes of [offset, offset + count) before the first of FAULT_EIO_AT's comma-separated
 * offsets it covers, or -1 when it covers none. */
static long long bytes_before_fault(off_t offset, size_t count) {
    const char *v = getenv("FAULT_EIO_AT");
    long long first = -1;
    if (v == NULL || *v == '\0' || count == 0) {
        return -1;
    }
    while (*v != '\0') {
        char *end;
        unsigned long long at = strtoull(v, &end, 10);
        if (end == v) {
            break; /* not a number: no more offsets */
        }
        if ((unsigned long long)offset <= at && at - (unsigned long long)offset < count) {
            long long before = (long long)(at - (unsigned long long)offset);
            if (first < 0 || before < first) first = before;
        }
        v = *end == ',' ? end + 1 : end;
    }
    return first;
}

static int fd_matches(int fd) {
    const char *want = getenv("FAULT_PATH_CONTAINS");
    if (want == NULL || *want == '\0') {
        return 1;
    }
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) {
        return 0;
    }
    target[n] = '\0';
    return strstr(target, want) != NULL;
}

static ssize_t faulty(read_at_fn read_at, void *ctx, int fd, void *buf, size_t count, off_t offset) {
    if (!fd_matches(fd)) {
        return read_at(ctx, fd, buf, count, offset);
    }
    calls++;
    int present;
    unsigned long long delay = env_u64("FAULT_DELAY_US", &present);
    if (present && delay > 0) {
        struct timespec ts = {(time_t)(delay / 1000000), (long)(delay % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    long long before = bytes_before_fault(offset, count);
    if (before > 0 && env_u64("FAULT_EIO_PARTIAL", &present) > 0) {
        return read_at(ctx, fd, buf, (size_t)before, offset); /* up to the bad block */
    }
    if (before >= 0) {
        unsigned long long code = env_u64("FAULT_ERRNO", &present);
        eio_count++;
        errno = present && code > 0 ? (int)code : EIO;
        return -1;
    }
    unsigned long long every = env_u64("FAULT_EINTR_EVERY", &present);
    if (present && every > 0 && ++eintr_seq % every == 0) {
        eintr_count++;
        errno = EINTR;
        return -1;
    }
    every = env_u64("FAULT_SHORT_EVERY", &present);
    if (present && every > 0 && count > 1 && ++short_seq % every == 0) {
        short_count++;
        return read_at(ctx, fd, buf, count / 2, offset);
    }
    return read_at(ctx, fd, buf, count, offset);
}

static ssize_t through_pread(void *ctx, int fd, void *buf, size_t count, off_t offset) {
    return ((pread_fn)ctx)(fd, buf, count, offset);
}

struct preadv2_call {
    preadv2_fn real;
    int flags;
};

static ssize_t through_preadv2(void *ctx, int fd, void *buf, size_t count, off_t offset) {
    struct preadv2_call *call = ctx;
    struct iovec one = {buf, count};
    return call->real(fd, &one, 1, offset, call->flags);
}

/* The next definition of `name` (libc's), looked up once into *slot; NULL with errno ENOSYS when
 * there is none. */
static void *next_definition(const char *name, void **slot) {
    if (*slot == NULL) {
        *slot = dlsym(RTLD_NEXT, name);
    }
    if (*slot == NULL) {
        errno = ENOSYS;
    }
    return *slot;
}

static ssize_t shim_pread(const char *name, void **slot, int fd, void *buf, size_t count, off_t offset) {
    pread_fn real = (pread_fn)next_definition(name, slot);
    return real == NULL ? -1 : faulty(through_pread, (void *)real, fd, buf, count, offset);
}

static ssize_t shim_preadv2(const char *name, void **slot, int fd, const struct iovec *iov, int iovcnt,
                            off_t offset, int flags) {
    preadv2_fn real = (preadv2_fn)next_definition(name, slot);
    if (real == NULL) {
        return -1;
    }
    if (iovcnt != 1) { /* not how the library reads: passed through unfaulted */
        return real(fd, iov, iovcnt, offset, flags);
    }
    struct preadv2_call call = {real, flags};
    return faulty(through_preadv2, &call, fd, iov[0].iov_base, iov[0].iov_len, offset);
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
    static void *real;
    return shim_pread("pread", &real, fd, buf, count, offset);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset) {
    static void *real;
    return shim_pread("pread64", &real, fd, buf, count, offset);
}

ssize_t preadv2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
    static void *real;
    return shim_preadv2("preadv2", &real, fd, iov, iovcnt, offset, flags);
}

ssize_t preadv64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
    static void *real;
    return shim_preadv2("preadv64v2", &real, fd, iov, iovcnt, offset, flags);
}

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);

static ssize_t through_pwrite(void *ctx, int fd, void *buf, size_t count, off_t offset) {
    return ((pwrite_fn)ctx)(fd, buf, count, offset);
}

static ssize_t shim_pwrite(const char *name, void **slot, int fd, const void *buf, size_t count, off_t offset) {
    pwrite_fn real = (pwrite_fn)next_definition(name, slot);
    /* The buffer is only read: faulty() hands it to through_pwrite unchanged. */
    return real == NULL ? -1 : faulty(through_pwrite, (void *)real, fd, (void *)(uintptr_t)buf, count, offset);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    static void *real;
    return shim_pwrite("pwrite", &real, fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    static void *real;
    return shim_pwrite("pwrite64", &real, fd, buf, count, offset);
}

typedef ssize_t (*process_vm_fn)(pid_t, const struct iovec *, unsigned long, const struct iovec *,
                                 unsigned long, unsigned long);

static _Atomic unsigned long long process_vm_calls;
static _Atomic unsigned long long process_vm_refused;

/* [0] process_vm_readv/process_vm_writev calls intercepted, [1] of them refused. */
void fault_shim_process_vm_calls(unsigned long long out[2]) {
    out[0] = process_vm_calls;
    out[1] = process_vm_refused;
}

static ssize_t shim_process_vm(const char *name, void **slot, pid_t pid, const struct iovec *local,
                               unsigned long liovcnt, const struct iovec *remote,
                               unsigned long riovcnt, unsigned long flags) {
    process_vm_fn real = (process_vm_fn)next_definition(name, slot);
    if (real == NULL) {
        return -1;
    }
    process_vm_calls++;
    int present;
    unsigned long long code = env_u64("FAULT_PROCESS_VM_ERRNO", &present);
    if (present && code > 0) {
        process_vm_refused++;
        errno = (int)code;
        return -1;
    }
    return real(pid, local, liovcnt, remote, riovcnt, flags);
}

ssize_t process_vm_readv(pid_t pid, const struct iovec *local, unsigned long liovcnt,
                         const struct iovec *remote, unsigned long riovcnt, unsigned long flags) {
    static void *real;
    return shim_process_vm("process_vm_readv", &real, pid, local, liovcnt, remote, riovcnt, flags);
}

ssize_t process_vm_writev(pid_t pid, const struct iovec *local, unsigned long liovcnt,
                          const struct iovec *remote, unsigned long riovcnt, unsigned long flags) {
    static void *real;
    return shim_process_vm("process_vm_writev", &real, pid, local, liovcnt, remote, riovcnt, flags);
}

__attribute__((destructor)) static void write_counts(void) {
    const char *path = getenv("FAULT_COUNT_FILE");
    if (path == NULL || *path == '\0' || calls == 0) { /* children such as system() stay quiet */
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        return;
    }
    char line[256];
    int n = snprintf(line, sizeof line, "pid=%ld eintr=%llu short=%llu eio=%llu calls=%llu\n",
                     (long)getpid(), (unsigned long long)eintr_count,
                     (unsigned long long)short_count, (unsigned long long)eio_count,
                     (unsigned long long)calls);
    if (n > 0) {
        ssize_t w = write(fd, line, (size_t)n);
        (void)w;
    }
    close(fd);
}
