/* Faults under the POSIX backend, with the pread/preadv2 shim (fault_shim.c) preloaded by ctest:
 * EINTR and short reads (every byte must still be right, status OK), EIO in the middle of a
 * multi-task pread (IO_ERROR, errno EIO, message with path and offset, nothing written outside
 * the buffer, the library works for the next call), a file truncated by another thread during a
 * large pread, a file that grows after open, a FIFO (with a writer present), a directory,
 * /dev/zero and /dev/null. The shim's variables are set with setenv only while no read runs.
 * Prints the faults injected (from the shim) and the hostile inputs tried, then
 * "N passed, M failed". */
#define _GNU_SOURCE
#include "check.h"
#include "test_data.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static char dir[256];
static unsigned char *content;
static size_t content_len;
static int bad_inputs; /* hostile files and injected-error scenarios tried */
static int operations; /* reads completed (any status) */


/* Guards intact and, from `from` on, the buffer untouched (POISON) up to `size`. */
static int untouched(const unsigned char *buf, size_t from, size_t size) {
    if (!guards_intact(buf, size)) {
        return 0;
    }
    for (size_t i = from; i < size; i++) {
        if (buf[i] != POISON) {
            return 0;
        }
    }
    return 1;
}

static void set_env_num(const char *name, unsigned long long v) {
    char text[32];
    snprintf(text, sizeof text, "%llu", v);
    setenv(name, text, 1);
}

static void clear_faults(void) {
    unsetenv("FAULT_EINTR_EVERY");
    unsetenv("FAULT_SHORT_EVERY");
    unsetenv("FAULT_EIO_AT");
    unsetenv("FAULT_DELAY_US");
}

typedef void (*counts_fn)(unsigned long long out[4]);
static counts_fn shim_counts;

static unsigned long long faults_injected(void) {
    unsigned long long c[4] = {0, 0, 0, 0};
    if (shim_counts != NULL) {
        shim_counts(c);
    }
    return c[0] + c[1] + c[2];
}

/* pread (or read when sync) of content[offset, offset+size) through `f`; checks status OK,
 * the count, every byte and the guards. */
static void read_and_check(gdsroute_file *f, size_t size, uint64_t offset, int sync) {
    unsigned char *buf = guarded_alloc(size);
    size_t got = (size_t)-1;
    if (sync) {
        CHECK_STATUS(gdsroute_file_read(f, buf, size, offset, &got), GDSROUTE_STATUS_OK);
    } else {
        gdsroute_op *op = NULL;
        CHECK_STATUS(gdsroute_file_pread(f, buf, size, offset, &op), GDSROUTE_STATUS_OK);
        CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_OK);
        gdsroute_op_free(op);
    }
    operations++;
    size_t expect = offset >= content_len ? 0 : (content_len - offset < size ? content_len - offset : size);
    CHECK(got == expect);
    if (got == expect) {
        CHECK(memcmp(buf, content + offset, got) == 0);
        CHECK(untouched(buf, got, size));
    }
    guarded_free(buf);
}

static void random_reads(gdsroute_file *f, int count) {
    for (int i = 0; i < count; i++) {
        size_t size = (size_t)(next_random() % (6 * MiB)) + 1;
        uint64_t offset = next_random() % (content_len + 1000);
        read_and_check(f, size, offset, i % 3 == 0);
    }
    read_and_check(f, content_len, 0, 0); /* the whole file, every task */
    read_and_check(f, content_len, 0, 1);
}

static void test_eintr_and_short(const char *path) {
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &f), GDSROUTE_STATUS_OK);
    unsigned long long before = faults_injected();

    clear_faults();
    setenv("FAULT_EINTR_EVERY", "3", 1);
    random_reads(f, 12);
    unsigned long long after_eintr = faults_injected();
    CHECK(after_eintr > before);

    clear_faults();
    setenv("FAULT_SHORT_EVERY", "2", 1);
    random_reads(f, 12);
    unsigned long long after_short = faults_injected();
    CHECK(after_short > after_eintr);

    clear_faults();
    setenv("FAULT_EINTR_EVERY", "2", 1); /* half the calls interrupted, a third of the rest short */
    setenv("FAULT_SHORT_EVERY", "3", 1);
    random_reads(f, 12);
    CHECK(faults_injected() > after_short);
    clear_faults();

    gdsroute_stats s = {.struct_size = sizeof s};
    CHECK_STATUS(gdsroute_file_stats(f, &s), GDSROUTE_STATUS_OK);
    CHECK(s.calls_failed == 0 && s.tasks_failed == 0);
    gdsroute_file_free(f);
    printf("eintr+short: %llu faults injected so far\n", faults_injected());
}

static void test_eio(const char *path) {
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &f), GDSROUTE_STATUS_OK);
    const size_t task = 1 * MiB;
    CHECK_STATUS(gdsroute_settings_set_task_size(task), GDSROUTE_STATUS_OK);
    const uint64_t eio_at = 10 * MiB + 777; /* the 11th of 24 tasks */
    const uint64_t task_start = eio_at / task * task;
    char expect_offset[64];
    snprintf(expect_offset, sizeof expect_offset, "offset %llu", (unsigned long long)task_start);

    gdsroute_stats before = {.struct_size = sizeof before};
    CHECK_STATUS(gdsroute_stats_get(&before), GDSROUTE_STATUS_OK);

    clear_faults();
    set_env_num("FAULT_EIO_AT", eio_at);
    for (int round = 0; round < 3; round++) {
        /* Multi-task pread covering the bad offset; three shapes of the request. */
        size_t size = round == 0 ? content_len : (round == 1 ? 5 * MiB + 3 : 2 * MiB);
        uint64_t offset = round == 0 ? 0 : (round == 1 ? 7 * MiB + 1 : eio_at - MiB + 1);
        unsigned char *buf = guarded_alloc(size);
        gdsroute_op *op = NULL;
        size_t got = 12345;
        CHECK_STATUS(gdsroute_file_pread(f, buf, size, offset, &op), GDSROUTE_STATUS_OK);
        CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_IO_ERROR);
        bad_inputs++;
        operations++;
        CHECK(got == 12345); /* outputs only on success */
        CHECK(gdsroute_last_error_errno() == EIO);
        CHECK_MESSAGE(path);
        CHECK_MESSAGE("offset ");
        if (round == 0) {
            CHECK_MESSAGE(expect_offset); /* the failing task's start offset */
        }
        CHECK(untouched(buf, size, size)); /* guards only: inside the range is unspecified */
        /* wait again: same result */
        CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_IO_ERROR);
        gdsroute_op_free(op);
        guarded_free(buf);
    }
    /* Synchronous read over the bad offset. */
    {
        size_t size = 3 * MiB;
        unsigned char *buf = guarded_alloc(size);
        size_t got = 12345;
        CHECK_STATUS(gdsroute_file_read(f, buf, size, eio_at - MiB, &got), GDSROUTE_STATUS_IO_ERROR);
        bad_inputs++;
        operations++;
        CHECK(got == 12345);
        CHECK(gdsroute_last_error_errno() == EIO);
        CHECK_MESSAGE(path);
        CHECK(untouched(buf, size, size));
        guarded_free(buf);
    }
    /* Ranges that avoid the bad offset still work while it is armed. */
    read_and_check(f, eio_at - 1, 0, 0);
    read_and_check(f, content_len - eio_at - 1, eio_at + 1, 0);

    gdsroute_stats after = {.struct_size = sizeof after};
    CHECK_STATUS(gdsroute_stats_get(&after), GDSROUTE_STATUS_OK);
    CHECK(after.calls_failed - before.calls_failed == 4);
    CHECK(after.tasks_failed - before.tasks_failed == 4); /* one task per failed call covers it */

    /* Disarmed: the same handle and a new one read everything. */
    clear_faults();
    read_and_check(f, content_len, 0, 0);
    read_and_check(f, content_len, 0, 1);
    gdsroute_file_free(f);
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &f), GDSROUTE_STATUS_OK);
    read_and_check(f, content_len, 0, 0);
    gdsroute_file_free(f);
    CHECK_STATUS(gdsroute_settings_set_task_size(GDSROUTE_DEFAULT_TASK_SIZE), GDSROUTE_STATUS_OK);
}

struct truncator {
    const char *path;
    off_t new_size;
    unsigned delay_us;
};

static void *truncate_later(void *arg) {
    struct truncator *t = arg;
    struct timespec ts = {0, (long)t->delay_us * 1000};
    nanosleep(&ts, NULL);
    if (truncate(t->path, t->new_size) != 0) {
        perror("truncate");
    }
    return NULL;
}

/* The `got` bytes of a read that raced a truncation to `cut`: exact below the cut; above it each
 * byte is the file's or 0 (Linux zeroes the tail of the folio at the cut while a racing reader
 * may be copying it). */
static int right_across_cut(const unsigned char *buf, size_t got, size_t cut) {
    size_t below = got < cut ? got : cut;
    if (memcmp(buf, content, below) != 0) {
        return 0;
    }
    for (size_t i = below; i < got; i++) {
        if (buf[i] != content[i] && buf[i] != 0) {
            return 0;
        }
    }
    return 1;
}

/* Another thread truncates the file while a large pread (many small, slowed tasks) runs.
 * Allowed: OK with a short count whose bytes are right, or IO_ERROR. Never a crash or hang. */
static void test_truncate_during_read(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/truncated.bin", dir);
    CHECK_STATUS(gdsroute_settings_set_task_size(256 * KiB), GDSROUTE_STATUS_OK);
    setenv("FAULT_DELAY_US", "300", 1); /* ~96 tasks x 0.3 ms over 4 threads: ~7 ms per read */
    int shorts = 0, errors = 0, full = 0;
    const off_t cuts[] = {0, 1, 4096, 3 * MiB + 5, 11 * MiB, 17 * MiB + 99};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        for (unsigned delay = 500; delay <= 4500; delay += 2000) {
            write_file_bytes(path, content, content_len);
            gdsroute_file *f = NULL;
            CHECK_STATUS(gdsroute_file_open(path, "r", 0, &f), GDSROUTE_STATUS_OK);
            unsigned char *buf = guarded_alloc(content_len);
            gdsroute_op *op = NULL;
            CHECK_STATUS(gdsroute_file_pread(f, buf, content_len, 0, &op), GDSROUTE_STATUS_OK);
            struct truncator t = {path, cuts[i], delay};
            pthread_t th;
            pthread_create(&th, NULL, truncate_later, &t);
            size_t got = 0;
            gdsroute_status st = gdsroute_op_wait(op, &got);
            pthread_join(th, NULL);
            bad_inputs++;
            operations++;
            CHECK(st == GDSROUTE_STATUS_OK || st == GDSROUTE_STATUS_IO_ERROR);
            if (st == GDSROUTE_STATUS_OK) {
                CHECK(got <= content_len);
                CHECK(right_across_cut(buf, got, (size_t)cuts[i]));
                if (got < content_len) {
                    shorts++;
                } else {
                    full++;
                }
            } else {
                errors++;
            }
            CHECK(untouched(buf, content_len, content_len));
            gdsroute_op_free(op);
            /* Afterwards the handle sees the new size and reads stop there. */
            uint64_t size = 0;
            CHECK_STATUS(gdsroute_file_size(f, &size), GDSROUTE_STATUS_OK);
            CHECK(size == (uint64_t)cuts[i]);
            size_t tail = 0;
            unsigned char one[8];
            CHECK_STATUS(gdsroute_file_read(f, one, sizeof one, size, &tail), GDSROUTE_STATUS_OK);
            CHECK(tail == 0);
            guarded_free(buf);
            gdsroute_file_free(f);
        }
    }
    unsetenv("FAULT_DELAY_US");
    CHECK(shorts > 0); /* the race was actually hit */
    printf("truncate during read: %d short, %d io_error, %d full\n", shorts, errors, full);
    CHECK_STATUS(gdsroute_settings_set_task_size(GDSROUTE_DEFAULT_TASK_SIZE), GDSROUTE_STATUS_OK);
}

/* A file that grows after open: reads see the new bytes. */
static void test_grow(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/growing.bin", dir);
    write_file_bytes(path, content, MiB);
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &f), GDSROUTE_STATUS_OK);
    unsigned char *buf = guarded_alloc(4 * MiB);
    size_t got = 99;
    CHECK_STATUS(gdsroute_file_read(f, buf, 4 * MiB, MiB, &got), GDSROUTE_STATUS_OK);
    CHECK(got == 0);
    int fd = open(path, O_WRONLY | O_APPEND);
    write_all(fd, content + MiB, 3 * MiB);
    close(fd);
    bad_inputs++;
    uint64_t size = 0;
    CHECK_STATUS(gdsroute_file_size(f, &size), GDSROUTE_STATUS_OK);
    CHECK(size == 4 * MiB);
    gdsroute_op *op = NULL;
    CHECK_STATUS(gdsroute_file_pread(f, buf, 4 * MiB, 0, &op), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_OK);
    gdsroute_op_free(op);
    operations += 2;
    CHECK(got == 4 * MiB && memcmp(buf, content, 4 * MiB) == 0);
    CHECK(untouched(buf, 4 * MiB, 4 * MiB));
    guarded_free(buf);
    gdsroute_file_free(f);
}

struct fifo_writer {
    const char *path;
    int ok;
};

static void *fifo_write(void *arg) {
    struct fifo_writer *w = arg;
    int fd = open(w->path, O_WRONLY); /* blocks until the library's open(2) for reading */
    if (fd >= 0) {
        unsigned char data[100];
        memset(data, 7, sizeof data);
        w->ok = write(fd, data, sizeof data) == (ssize_t)sizeof data;
        close(fd);
    }
    return NULL;
}

/* A FIFO: open(2) for reading blocks until a writer opens it, so a writer thread is present.
 * pread(2) on a pipe fails with ESPIPE: IO_ERROR with that errno, never a hang. */
static void test_fifo(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/fifo", dir);
    if (mkfifo(path, 0600) != 0) {
        perror("mkfifo (FIFO case skipped)");
        return;
    }
    struct fifo_writer w = {path, 0};
    pthread_t th;
    pthread_create(&th, NULL, fifo_write, &w);
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &f), GDSROUTE_STATUS_OK);
    pthread_join(th, NULL);
    CHECK(w.ok);
    bad_inputs++;
    unsigned char *buf = guarded_alloc(64 * KiB);
    size_t got = 99;
    CHECK_STATUS(gdsroute_file_read(f, buf, 64 * KiB, 0, &got), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == ESPIPE);
    CHECK_MESSAGE(path);
    gdsroute_op *op = NULL;
    CHECK_STATUS(gdsroute_file_pread(f, buf, 64 * KiB, 0, &op), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == ESPIPE);
    gdsroute_op_free(op);
    operations += 2;
    CHECK(got == 99);
    CHECK(untouched(buf, 64 * KiB, 64 * KiB));
    guarded_free(buf);
    gdsroute_file_free(f);
}

/* A directory: open "r" works on Linux, reads fail with EISDIR; "w" and "r+" fail to open. */
static void test_directory(void) {
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open(dir, "r", 0, &f), GDSROUTE_STATUS_OK);
    bad_inputs++;
    unsigned char *buf = guarded_alloc(8 * MiB);
    size_t got = 99;
    CHECK_STATUS(gdsroute_file_read(f, buf, 4096, 0, &got), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == EISDIR);
    CHECK_MESSAGE(dir);
    gdsroute_op *op = NULL;
    CHECK_STATUS(gdsroute_file_pread(f, buf, 8 * MiB, 0, &op), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_IO_ERROR);
    CHECK(gdsroute_last_error_errno() == EISDIR);
    gdsroute_op_free(op);
    operations += 2;
    CHECK(got == 99);
    CHECK(untouched(buf, 8 * MiB, 8 * MiB));
    guarded_free(buf);
    gdsroute_file_free(f);
    const char *flags[] = {"w", "r+", "w+"};
    for (int i = 0; i < 3; i++) {
        f = NULL;
        CHECK_STATUS(gdsroute_file_open(dir, flags[i], 0644, &f), GDSROUTE_STATUS_OPEN_FAILED);
        CHECK(gdsroute_last_error_errno() == EISDIR);
        CHECK(f == NULL);
        bad_inputs++;
    }
}

/* /dev/zero: every byte 0, full count. /dev/null: 0 bytes, OK. */
static void test_devices(void) {
    const size_t size = 9 * MiB + 3;
    unsigned char *buf = guarded_alloc(size);
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open("/dev/zero", "r", 0, &f), GDSROUTE_STATUS_OK);
    gdsroute_op *op = NULL;
    size_t got = 0;
    CHECK_STATUS(gdsroute_file_pread(f, buf, size, 12345, &op), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_OK);
    gdsroute_op_free(op);
    CHECK(got == size);
    int zeros = 1;
    for (size_t i = 0; i < size; i++) {
        zeros &= buf[i] == 0;
    }
    CHECK(zeros);
    CHECK(untouched(buf, size, size));
    memset(buf, POISON, size);
    CHECK_STATUS(gdsroute_file_read(f, buf, 1000, 0, &got), GDSROUTE_STATUS_OK);
    CHECK(got == 1000 && buf[0] == 0 && buf[999] == 0 && buf[1000] == POISON);
    gdsroute_file_free(f);
    bad_inputs++;

    memset(buf, POISON, size);
    CHECK_STATUS(gdsroute_file_open("/dev/null", "r", 0, &f), GDSROUTE_STATUS_OK);
    got = 99;
    CHECK_STATUS(gdsroute_file_pread(f, buf, size, 0, &op), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_OK);
    gdsroute_op_free(op);
    CHECK(got == 0);
    CHECK_STATUS(gdsroute_file_read(f, buf, size, 0, &got), GDSROUTE_STATUS_OK);
    CHECK(got == 0);
    CHECK(untouched(buf, 0, size));
    gdsroute_file_free(f);
    bad_inputs++;
    operations += 4;
    guarded_free(buf);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    alarm(240); /* a hang becomes a failure (SIGALRM), not a stuck ctest */
    shim_counts = (counts_fn)dlsym(RTLD_DEFAULT, "fault_shim_counts");
    if (shim_counts == NULL) {
        fprintf(stderr, "fault shim not preloaded (set LD_PRELOAD=libgdsroute_fault_shim.so)\n");
        CHECK(shim_counts != NULL);
        return check_summary();
    }
    clear_faults();
    unsetenv("FAULT_PATH_CONTAINS");
    snprintf(dir, sizeof dir, "/tmp/gdsroute-faults-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    content_len = 24 * MiB + 4321;
    content = malloc(content_len + 8);
    for (size_t i = 0; i < content_len; i += 8) {
        uint64_t r = next_random();
        memcpy(content + i, &r, 8);
    }
    char path[300];
    snprintf(path, sizeof path, "%s/data.bin", dir);
    write_file_bytes(path, content, content_len);
    CHECK_STATUS(gdsroute_settings_set_num_threads(4), GDSROUTE_STATUS_OK);

    test_eintr_and_short(path);
    test_eio(path);
    test_truncate_during_read();
    test_grow();
    test_fifo();
    test_directory();
    test_devices();

    /* The library still works after all of it. */
    clear_faults();
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &f), GDSROUTE_STATUS_OK);
    read_and_check(f, content_len, 0, 0);
    gdsroute_file_free(f);

    unsigned long long c[4];
    shim_counts(c);
    printf("faults injected: %llu (eintr %llu, short %llu, eio %llu) over %llu intercepted reads\n",
           c[0] + c[1] + c[2], c[0], c[1], c[2], c[3]);
    printf("hostile inputs tried: %d; reads completed: %d\n", bad_inputs, operations);

    char cleanup[400];
    snprintf(cleanup, sizeof cleanup, "rm -rf '%s'", dir);
    if (system(cleanup) != 0) {
        fprintf(stderr, "could not remove %s\n", dir);
    }
    free(content);
    return check_summary();
}
