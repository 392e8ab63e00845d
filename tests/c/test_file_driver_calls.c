/* The C ABI of the calls a file driver needs: exclusive creation ("x", "x+"),
 * gdsroute_file_open_fd and _with_compat_mode, gdsroute_file_truncate, gdsroute_file_lock and
 * _unlock. Every NULL argument, closed handle and bad value gives its documented status, a
 * message naming the problem and the errno where one is documented, with outputs untouched;
 * the successes move every byte right (random data inside guard bytes), and a lock conflicts
 * with another process's. */
#define _GNU_SOURCE
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static void path_in_dir(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", dir, name);
}

/* `n` pseudo-random bytes (xorshift), never the guard byte's pattern throughout. */
static void fill_random(unsigned char *buf, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        buf[i] = (unsigned char)s;
    }
}

enum { GUARD = 64, GUARD_BYTE = 0xA5 };

/* A buffer of `n` bytes between two guards of GUARD_BYTE. */
static unsigned char *guarded(size_t n) {
    unsigned char *all = malloc(n + 2 * GUARD);
    if (all == NULL) {
        perror("malloc");
        exit(2);
    }
    memset(all, GUARD_BYTE, n + 2 * GUARD);
    return all + GUARD;
}

static int guards_intact(const unsigned char *buf, size_t n) {
    for (size_t i = 0; i < GUARD; i++) {
        if (buf[-1 - (ptrdiff_t)i] != GUARD_BYTE || buf[n + i] != GUARD_BYTE) return 0;
    }
    return 1;
}

static void free_guarded(unsigned char *buf) { free(buf - GUARD); }

/* Whether the file at `path` holds exactly `want[0, n)`. */
static int file_is(const char *path, const unsigned char *want, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    unsigned char *back = malloc(n + 1);
    ssize_t got = back ? pread(fd, back, n + 1, 0) : -1;
    int same = got == (ssize_t)n && (n == 0 || memcmp(back, want, n) == 0);
    free(back);
    close(fd);
    return same;
}

/* "x" and "x+": a new file is created with the mode (less the umask); an existing one is
 * OPEN_FAILED with EEXIST, the handle untouched, the file unchanged. */
static void test_exclusive_create(void) {
    static const struct { const char *flags; int access; } modes[] = {{"x", O_WRONLY}, {"x+", O_RDWR}};
    const mode_t mask = umask(0);
    umask(mask);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char path[512];
        path_in_dir(path, sizeof path, modes[i].flags);
        unlink(path);
        gdsroute_file *f = NULL;
        CHECK_STATUS(gdsroute_file_open(path, modes[i].flags, 0604, &f), GDSROUTE_STATUS_OK);
        struct stat st;
        CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == (0604 & ~mask));
        int flags = 0;
        CHECK_STATUS(gdsroute_file_fd_open_flags(f, &flags), GDSROUTE_STATUS_OK);
        CHECK((flags & O_ACCMODE) == modes[i].access);
        unsigned char data[5000];
        fill_random(data, sizeof data, 10 + i);
        size_t n = 0;
        CHECK_STATUS(gdsroute_file_write(f, data, sizeof data, 0, &n), GDSROUTE_STATUS_OK);
        CHECK(n == sizeof data);
        gdsroute_file_free(f);

        gdsroute_file *const sentinel = (gdsroute_file *)(uintptr_t)0x1;
        for (size_t j = 0; j < sizeof modes / sizeof modes[0]; j++) {
            f = sentinel;
            CHECK_STATUS(gdsroute_file_open(path, modes[j].flags, 0600, &f), GDSROUTE_STATUS_OPEN_FAILED);
            CHECK(gdsroute_last_error_errno() == EEXIST);
            CHECK_MESSAGE(path);
            CHECK(f == sentinel);
            CHECK_STATUS(gdsroute_file_open_with_compat_mode(path, modes[j].flags, 0600, GDSROUTE_COMPAT_MODE_ON, &f),
                         GDSROUTE_STATUS_OPEN_FAILED);
            CHECK(gdsroute_last_error_errno() == EEXIST);
            CHECK(f == sentinel);
        }
        CHECK(file_is(path, data, sizeof data));
        unlink(path);
    }
}

/* A handle from a descriptor: every byte through it, both ways, the caller's descriptor kept. */
static void test_open_fd_io(void) {
    char path[512];
    path_in_dir(path, sizeof path, "from-fd");
    const size_t len = (5u << 20) + 333;
    unsigned char *model = malloc(len);
    if (model == NULL) exit(2);
    fill_random(model, len, 20);
    int caller = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(caller >= 0 && pwrite(caller, model, len, 0) == (ssize_t)len);

    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open_fd(caller, &f), GDSROUTE_STATUS_OK);
    int fd = -1, flags = 0;
    CHECK_STATUS(gdsroute_file_fd(f, &fd), GDSROUTE_STATUS_OK);
    CHECK(fd >= 0 && fd != caller && (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    CHECK_STATUS(gdsroute_file_fd_open_flags(f, &flags), GDSROUTE_STATUS_OK);
    CHECK((flags & O_ACCMODE) == O_RDWR);
    uint32_t mode = 99;
    CHECK_STATUS(gdsroute_file_compat_mode(f, &mode), GDSROUTE_STATUS_OK);
    uint32_t process_mode = 98;
    CHECK_STATUS(gdsroute_settings_get_compat_mode(&process_mode), GDSROUTE_STATUS_OK);
    CHECK(mode == process_mode);

    /* Writes at offsets inside and past the end, then the whole file read back in parallel. */
    unsigned char part[70000];
    fill_random(part, sizeof part, 21);
    size_t n = 0;
    CHECK_STATUS(gdsroute_file_write(f, part, sizeof part, 4095, &n), GDSROUTE_STATUS_OK);
    CHECK(n == sizeof part);
    memcpy(model + 4095, part, sizeof part);
    unsigned char *buf = guarded(len + 100);
    gdsroute_op *op = NULL;
    CHECK_STATUS(gdsroute_file_pread(f, buf, len + 100, 0, &op), GDSROUTE_STATUS_OK);
    n = 0;
    CHECK_STATUS(gdsroute_op_wait(op, &n), GDSROUTE_STATUS_OK);
    gdsroute_op_free(op);
    CHECK(n == len && memcmp(buf, model, len) == 0 && guards_intact(buf, len + 100));
    free_guarded(buf);
    CHECK(file_is(path, model, len));

    /* Truncated through the handle: the size, the reads and the caller's view follow. */
    CHECK_STATUS(gdsroute_file_truncate(f, 1000), GDSROUTE_STATUS_OK);
    uint64_t size = 0;
    CHECK_STATUS(gdsroute_file_size(f, &size), GDSROUTE_STATUS_OK);
    struct stat st;
    CHECK(size == 1000 && fstat(caller, &st) == 0 && st.st_size == 1000);
    buf = guarded(4096);
    n = 12345;
    CHECK_STATUS(gdsroute_file_read(f, buf, 4096, 0, &n), GDSROUTE_STATUS_OK);
    CHECK(n == 1000 && memcmp(buf, model, 1000) == 0 && guards_intact(buf, 4096));
    CHECK_STATUS(gdsroute_file_read(f, buf, 4096, 1000, &n), GDSROUTE_STATUS_OK);
    CHECK(n == 0);
    CHECK_STATUS(gdsroute_file_truncate(f, 3000), GDSROUTE_STATUS_OK); /* grows with zeros */
    CHECK_STATUS(gdsroute_file_read(f, buf, 4096, 0, &n), GDSROUTE_STATUS_OK);
    int zeros = 1;
    for (size_t i = 1000; i < 3000; i++) zeros &= buf[i] == 0;
    CHECK(n == 3000 && memcmp(buf, model, 1000) == 0 && zeros && guards_intact(buf, 4096));
    free_guarded(buf);

    /* Freed, the handle leaves the caller's descriptor open and usable. */
    gdsroute_file_free(f);
    CHECK(fcntl(caller, F_GETFD) >= 0);
    CHECK(pwrite(caller, "after", 5, 0) == 5);
    memcpy(model, "after", 5);
    memset(model + 1000, 0, 2000);
    CHECK(file_is(path, model, 3000));

    /* The access mode is the descriptor's: O_RDONLY refuses writes and truncation (EBADF). */
    int ro = open(path, O_RDONLY | O_CLOEXEC);
    CHECK_STATUS(gdsroute_file_open_fd_with_compat_mode(ro, GDSROUTE_COMPAT_MODE_ON, &f), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_compat_mode(f, &mode), GDSROUTE_STATUS_OK);
    CHECK(mode == GDSROUTE_COMPAT_MODE_ON);
    CHECK_STATUS(gdsroute_file_write(f, part, 10, 0, &n), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == EBADF);
    CHECK_MESSAGE("read-only descriptor");
    CHECK_MESSAGE(path);
    CHECK_STATUS(gdsroute_file_truncate(f, 0), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == EBADF);
    gdsroute_file_free(f);
    close(ro);
    CHECK(file_is(path, model, 3000));
    close(caller);
    unlink(path);
    free(model);
}

/* Every bad input of the five calls, outputs untouched. */
static void test_bad_inputs(void) {
    char path[512];
    path_in_dir(path, sizeof path, "bad-inputs");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && write(fd, "0123456789", 10) == 10);
    gdsroute_file *const sentinel = (gdsroute_file *)(uintptr_t)0x1;
    gdsroute_file *f = sentinel;

    /* NULL out-pointers come first, whatever else is wrong. */
    CHECK_STATUS(gdsroute_file_open_fd(fd, NULL), GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_MESSAGE("file");
    CHECK_STATUS(gdsroute_file_open_fd(-1, NULL), GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(gdsroute_file_open_fd_with_compat_mode(fd, GDSROUTE_COMPAT_MODE_ON, NULL),
                 GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_MESSAGE("file");
    CHECK_STATUS(gdsroute_file_truncate(NULL, 0), GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_MESSAGE("file");
    CHECK_STATUS(gdsroute_file_lock(NULL, true, false), GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_MESSAGE("file");
    CHECK_STATUS(gdsroute_file_unlock(NULL), GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_MESSAGE("file");

    /* Descriptors: negative (a bad value), not open and O_PATH (EBADF), O_APPEND that writes. */
    CHECK_STATUS(gdsroute_file_open_fd(-1, &f), GDSROUTE_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE("fd -1");
    CHECK(f == sentinel);
    CHECK_STATUS(gdsroute_file_open_fd_with_compat_mode(-5, GDSROUTE_COMPAT_MODE_ON, &f),
                 GDSROUTE_STATUS_INVALID_ARGUMENT);
    CHECK(f == sentinel);
    CHECK_STATUS(gdsroute_file_open_fd(1 << 30, &f), GDSROUTE_STATUS_OPEN_FAILED);
    CHECK(gdsroute_last_error_errno() == EBADF);
    CHECK_MESSAGE("fd 1073741824");
    CHECK(f == sentinel);
    int path_only = open(path, O_PATH | O_CLOEXEC);
    CHECK_STATUS(gdsroute_file_open_fd(path_only, &f), GDSROUTE_STATUS_OPEN_FAILED);
    CHECK(gdsroute_last_error_errno() == EBADF);
    CHECK_MESSAGE("O_PATH");
    CHECK_MESSAGE(path);
    CHECK(f == sentinel);
    close(path_only);
    int append = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    CHECK_STATUS(gdsroute_file_open_fd(append, &f), GDSROUTE_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE("O_APPEND");
    CHECK(f == sentinel);
    close(append);
    CHECK_STATUS(gdsroute_file_open_fd_with_compat_mode(fd, 7, &f), GDSROUTE_STATUS_INVALID_ENUM);
    CHECK(f == sentinel);

    /* Truncation: a size beyond off_t is a bad value; the file keeps its bytes. */
    gdsroute_file *rw = open_ok(path, "r+");
    CHECK_STATUS(gdsroute_file_truncate(rw, UINT64_MAX), GDSROUTE_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE(path);
    CHECK_STATUS(gdsroute_file_truncate(rw, (uint64_t)INT64_MAX + 1), GDSROUTE_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE("9223372036854775808");
    CHECK(file_is(path, (const unsigned char *)"0123456789", 10));
    gdsroute_file *ro = open_ok(path, "r");
    CHECK_STATUS(gdsroute_file_truncate(ro, 0), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == EBADF);
    CHECK_MESSAGE("opened read-only");
    CHECK(file_is(path, (const unsigned char *)"0123456789", 10));

    /* Closed handles: each call says so and names the file. */
    CHECK_STATUS(gdsroute_file_close(rw), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_truncate(rw, 0), GDSROUTE_STATUS_CLOSED_HANDLE);
    CHECK_MESSAGE(path);
    CHECK_STATUS(gdsroute_file_lock(rw, false, true), GDSROUTE_STATUS_CLOSED_HANDLE);
    CHECK_MESSAGE("closed");
    CHECK_STATUS(gdsroute_file_unlock(rw), GDSROUTE_STATUS_CLOSED_HANDLE);
    CHECK_MESSAGE(path);
    CHECK(file_is(path, (const unsigned char *)"0123456789", 10));
    gdsroute_file_free(rw);
    gdsroute_file_free(ro);
    close(fd);
    unlink(path);
}

/* Locks: two handles conflict (EWOULDBLOCK without waiting), shared ones do not, a lock held here
 * stops another process, and a handle from a descriptor locks with it. */
static void test_locks(void) {
    char path[512];
    path_in_dir(path, sizeof path, "locks");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    gdsroute_file *a = open_ok(path, "r+");
    gdsroute_file *b = open_ok(path, "r");
    CHECK_STATUS(gdsroute_file_lock(a, true, false), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_lock(b, true, false), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == EWOULDBLOCK);
    CHECK_MESSAGE("flock(LOCK_EX | LOCK_NB)");
    CHECK_MESSAGE(path);
    CHECK_STATUS(gdsroute_file_lock(b, false, false), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == EWOULDBLOCK);

    /* Another process, with a description of its own, cannot take it either. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int own = open(path, O_RDONLY);
        int blocked = own >= 0 && flock(own, LOCK_SH | LOCK_NB) == -1 && errno == EWOULDBLOCK;
        _exit(blocked ? 0 : 1);
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    CHECK_STATUS(gdsroute_file_unlock(a), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_lock(b, true, false), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_unlock(b), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_unlock(b), GDSROUTE_STATUS_OK); /* none held: nothing to do */
    CHECK_STATUS(gdsroute_file_lock(a, false, true), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_lock(b, false, true), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_lock(a, true, false), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == EWOULDBLOCK);
    CHECK_STATUS(gdsroute_file_unlock(a), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_unlock(b), GDSROUTE_STATUS_OK);

    /* From a descriptor: the caller's descriptor and the handle hold one lock. */
    gdsroute_file *c = NULL;
    CHECK_STATUS(gdsroute_file_open_fd(fd, &c), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_lock(c, true, false), GDSROUTE_STATUS_OK);
    CHECK(flock(fd, LOCK_EX | LOCK_NB) == 0);
    CHECK_STATUS(gdsroute_file_lock(a, false, false), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == EWOULDBLOCK);
    gdsroute_file_free(c);
    CHECK_STATUS(gdsroute_file_lock(a, false, false), GDSROUTE_STATUS_IO_ERROR); /* still fd's */
    CHECK(flock(fd, LOCK_UN) == 0);
    CHECK_STATUS(gdsroute_file_lock(a, false, false), GDSROUTE_STATUS_OK);
    gdsroute_file_free(a);
    gdsroute_file_free(b);
    close(fd);
    unlink(path);
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/gdsroute-driver-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    test_exclusive_create();
    test_open_fd_io();
    test_bad_inputs();
    test_locks();
    rmdir(dir);
    return check_summary();
}
