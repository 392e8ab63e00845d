/* Reads through the C ABI compared byte for byte with the file: random contents, sizes around
 * page and task boundaries, unaligned offsets, offsets near and past the end, task sizes x thread
 * counts set through the settings API, guard bytes around every destination buffer. Then the
 * operation lifecycle (poll, wait twice, free without wait, close while in flight) and the
 * counters of a 1 GiB sparse read. The mapping handle's reads are checked the same way. */
#define _GNU_SOURCE
#include "check.h"
#include "test_data.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static char dir[256];
static unsigned char *content;
static size_t content_len;


static void make_random_file(const char *path, size_t len) {
    content = malloc(len);
    if (content == NULL) {
        exit(2);
    }
    for (size_t i = 0; i < len; i += 8) {
        uint64_t r = next_random();
        memcpy(content + i, &r, len - i < 8 ? len - i : 8);
    }
    content_len = len;
    write_file_bytes(path, content, len);
}

static size_t expected_bytes(size_t size, uint64_t offset) {
    if (offset >= content_len) {
        return 0;
    }
    size_t left = content_len - (size_t)offset;
    return size < left ? size : left;
}

/* A buffer of `size` bytes between two poisoned guards. */
static int failures_reported;

static void verify(const char *how, const unsigned char *buf, size_t size, uint64_t offset, size_t n,
                   size_t task, size_t threads) {
    size_t want = expected_bytes(size, offset);
    int ok_len = n == want;
    int ok_data = ok_len && (n == 0 || memcmp(buf, content + offset, n) == 0);
    int ok_guard = guards_intact(buf, size);
    CHECK(ok_len);
    CHECK(ok_data);
    CHECK(ok_guard);
    if ((!ok_len || !ok_data || !ok_guard) && failures_reported++ < 20) {
        fprintf(stderr, "  %s size %zu offset %llu task %zu threads %zu: got %zu want %zu%s%s\n", how,
                size, (unsigned long long)offset, task, threads, n, want, ok_data ? "" : ", data differs",
                ok_guard ? "" : ", guard bytes overwritten");
    }
}

static void read_case(gdsroute_file *file, size_t size, uint64_t offset, size_t task, size_t threads,
                      int also_sync) {
    unsigned char *buf = guarded_alloc(size);
    gdsroute_op *op = NULL;
    size_t n = (size_t)-1;
    CHECK_STATUS(gdsroute_file_pread(file, buf, size, offset, &op), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_op_wait(op, &n), GDSROUTE_STATUS_OK);
    gdsroute_op_free(op);
    verify("pread", buf, size, offset, n, task, threads);
    if (also_sync) {
        memset(buf - GUARD, POISON, size + 2 * GUARD);
        n = (size_t)-1;
        CHECK_STATUS(gdsroute_file_read(file, buf, size, offset, &n), GDSROUTE_STATUS_OK);
        verify("read", buf, size, offset, n, task, threads);
    }
    guarded_free(buf);
}

static void test_matrix(const char *path) {
    static const size_t tasks[] = {4096, 65536, 1 * MiB, 4 * MiB};
    static const size_t thread_counts[] = {1, 2, 4, 8};
    gdsroute_file *file = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &file), GDSROUTE_STATUS_OK);
    if (file == NULL) {
        return;
    }
    uint64_t size = 0;
    CHECK_STATUS(gdsroute_file_size(file, &size), GDSROUTE_STATUS_OK);
    CHECK(size == content_len);
    const uint64_t len = content_len;
    for (size_t ti = 0; ti < sizeof tasks / sizeof tasks[0]; ti++) {
        for (size_t hi = 0; hi < sizeof thread_counts / sizeof thread_counts[0]; hi++) {
            const size_t task = tasks[ti], threads = thread_counts[hi];
            size_t got = 0;
            CHECK_STATUS(gdsroute_settings_set_task_size(task), GDSROUTE_STATUS_OK);
            CHECK_STATUS(gdsroute_settings_get_task_size(&got), GDSROUTE_STATUS_OK);
            CHECK(got == task);
            CHECK_STATUS(gdsroute_settings_set_num_threads(threads), GDSROUTE_STATUS_OK);
            CHECK_STATUS(gdsroute_settings_get_num_threads(&got), GDSROUTE_STATUS_OK);
            CHECK(got == threads);
            const int sync = hi == 0; /* the synchronous read does not depend on the pool */
            const struct {
                size_t size;
                uint64_t offset;
            } cases[] = {
                {0, 0}, {1, 0}, {4095, 0}, {4096, 0}, {4097, 0},
                {task - 1, 0}, {task, 0}, {task + 1, 0}, {3 * task + 5, 777},
                {content_len, 0}, {content_len - 4097, 4097}, {5 * MiB + 3, 12345},
                {4096, len - 100}, {1, len - 1}, {task + 1, len - task}, {100, len},
                {100, len + 4096}, {task, 1}, {2 * task, task - 1},
            };
            for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
                read_case(file, cases[ci].size, cases[ci].offset, task, threads, sync);
            }
        }
    }
    gdsroute_file_free(file);
}

/* The mapping handle's read and pread at mapped ranges from the whole file to an unaligned part,
 * reads at the ends of the range and across task boundaries, task sizes (0: the setting) x
 * thread counts, every byte and the guards checked as for the file handle. */
static void test_mapping_matrix(const char *path) {
    static const struct {
        uint64_t offset;
        size_t size;
    } ranges[] = {{0, 0}, {4097, 0}, {12345, 5 * MiB}};
    static const size_t tasks[] = {0, 4096, 65536, 1 * MiB};
    static const size_t thread_counts[] = {1, 4};
    for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++) {
        gdsroute_mapping *m = NULL;
        CHECK_STATUS(gdsroute_mapping_open(path, ranges[ri].offset, ranges[ri].size, &m), GDSROUTE_STATUS_OK);
        if (m == NULL) {
            return;
        }
        uint64_t start = 0;
        size_t len = 0;
        CHECK_STATUS(gdsroute_mapping_map_offset(m, &start), GDSROUTE_STATUS_OK);
        CHECK_STATUS(gdsroute_mapping_map_size(m, &len), GDSROUTE_STATUS_OK);
        CHECK(start == ranges[ri].offset && len == (ranges[ri].size ? ranges[ri].size : content_len - start));
        const uint64_t end = start + len;
        for (size_t ti = 0; ti < sizeof tasks / sizeof tasks[0]; ti++) {
            for (size_t hi = 0; hi < sizeof thread_counts / sizeof thread_counts[0]; hi++) {
                const size_t task = tasks[ti], threads = thread_counts[hi];
                CHECK_STATUS(gdsroute_settings_set_num_threads(threads), GDSROUTE_STATUS_OK);
                const size_t t = task ? task : 4096;
                const struct {
                    size_t size;
                    uint64_t offset;
                } cases[] = {
                    {0, start}, {0, end}, {1, start}, {1, end - 1}, {4097, start + 1},
                    {4096, end - 4096}, {t + 1, start + 3}, {3 * t + 5, end - 3 * t - 5}, {len, start},
                };
                for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
                    const size_t size = cases[ci].size;
                    const uint64_t offset = cases[ci].offset;
                    unsigned char *buf = guarded_alloc(size);
                    gdsroute_op *op = NULL;
                    size_t n = (size_t)-1;
                    CHECK_STATUS(gdsroute_mapping_pread(m, buf, size, offset, task, &op), GDSROUTE_STATUS_OK);
                    CHECK_STATUS(gdsroute_op_wait(op, &n), GDSROUTE_STATUS_OK);
                    gdsroute_op_free(op);
                    verify("mapping pread", buf, size, offset, n, task, threads);
                    if (ti == 0 && hi == 0) {
                        memset(buf - GUARD, POISON, size + 2 * GUARD);
                        n = (size_t)-1;
                        CHECK_STATUS(gdsroute_mapping_read(m, buf, size, offset, &n), GDSROUTE_STATUS_OK);
                        verify("mapping read", buf, size, offset, n, task, threads);
                    }
                    guarded_free(buf);
                }
            }
        }
        gdsroute_mapping_free(m);
    }
}

static void test_operation_lifecycle(const char *path) {
    CHECK_STATUS(gdsroute_settings_set_task_size(256 * 1024), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_settings_set_num_threads(4), GDSROUTE_STATUS_OK);
    gdsroute_file *file = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &file), GDSROUTE_STATUS_OK);
    if (file == NULL) {
        return;
    }

    /* poll until done, then wait twice: same result. */
    unsigned char *buf = guarded_alloc(content_len);
    gdsroute_op *op = NULL;
    CHECK_STATUS(gdsroute_file_pread(file, buf, content_len, 0, &op), GDSROUTE_STATUS_OK);
    bool done = false;
    for (int spins = 0; !done && spins < 100000; spins++) {
        CHECK_STATUS(gdsroute_op_poll(op, &done), GDSROUTE_STATUS_OK);
        if (!done) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    CHECK(done);
    size_t n1 = 0, n2 = 0;
    CHECK_STATUS(gdsroute_op_wait(op, &n1), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_op_wait(op, &n2), GDSROUTE_STATUS_OK);
    CHECK(n1 == content_len && n2 == n1);
    done = false;
    CHECK_STATUS(gdsroute_op_poll(op, &done), GDSROUTE_STATUS_OK);
    CHECK(done);
    verify("poll+wait", buf, content_len, 0, n1, 256 * 1024, 4);
    gdsroute_op_free(op);

    /* free without wait: free waits, so the guards are intact and the buffer is ours again. */
    memset(buf - GUARD, POISON, content_len + 2 * GUARD);
    op = NULL;
    CHECK_STATUS(gdsroute_file_pread(file, buf, content_len, 0, &op), GDSROUTE_STATUS_OK);
    gdsroute_op_free(op);
    CHECK(guards_intact(buf, content_len));
    CHECK(memcmp(buf, content, content_len) == 0);

    /* close, then free, the handle while a read is in flight: the read completes. */
    memset(buf - GUARD, POISON, content_len + 2 * GUARD);
    op = NULL;
    CHECK_STATUS(gdsroute_file_pread(file, buf, content_len, 0, &op), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_close(file), GDSROUTE_STATUS_OK);
    gdsroute_file_free(file);
    n1 = 0;
    CHECK_STATUS(gdsroute_op_wait(op, &n1), GDSROUTE_STATUS_OK);
    verify("close-in-flight", buf, content_len, 0, n1, 256 * 1024, 4);
    gdsroute_op_free(op);
    guarded_free(buf);
}

static void check_counters(const gdsroute_stats *s, uint64_t calls, uint64_t tasks, uint64_t bytes,
                           uint64_t calls_short) {
    CHECK(s->struct_size == sizeof *s);
    CHECK(s->calls == calls);
    CHECK(s->calls_failed == 0);
    CHECK(s->calls_short == calls_short);
    CHECK(s->bytes_read == bytes);
    CHECK(s->tasks == tasks);
    CHECK(s->tasks_failed == 0);
    CHECK(s->task_bytes == bytes);
    CHECK(s->posix_tasks == tasks);
    CHECK(s->posix_bytes == bytes);
    CHECK(s->posix_tasks_host_memory == tasks);
    CHECK(s->posix_tasks_below_threshold == 0 && s->posix_tasks_compat_on == 0 &&
          s->posix_tasks_auto_fallback == 0);
    CHECK(s->cufile_tasks == 0 && s->cufile_bytes == 0);
}

static void test_counters(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/sparse-1GiB", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)GiB) != 0) {
        perror(path);
        exit(2);
    }
    close(fd);

    CHECK_STATUS(gdsroute_settings_set_task_size(GDSROUTE_DEFAULT_TASK_SIZE), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_stats_reset(), GDSROUTE_STATUS_OK);
    gdsroute_file *file = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &file), GDSROUTE_STATUS_OK);
    if (file == NULL) {
        return;
    }
    unsigned char *buf = malloc(GiB);
    if (buf == NULL) {
        exit(2);
    }
    memset(buf, POISON, GiB);
    gdsroute_op *op = NULL;
    size_t n = 0;
    CHECK_STATUS(gdsroute_file_pread(file, buf, GiB, 0, &op), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_op_wait(op, &n), GDSROUTE_STATUS_OK);
    gdsroute_op_free(op);
    CHECK(n == GiB);
    int all_zero = 1;
    for (size_t i = 0; i < GiB; i += 4096) {
        all_zero &= buf[i] == 0 && buf[i + 4095] == 0;
    }
    CHECK(all_zero);

    gdsroute_stats process = {.struct_size = sizeof process};
    gdsroute_stats handle = {.struct_size = sizeof handle};
    CHECK_STATUS(gdsroute_stats_get(&process), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_stats(file, &handle), GDSROUTE_STATUS_OK);
    CHECK(process.tasks == 256 && process.posix_tasks_host_memory == 256);
    check_counters(&process, 1, 256, GiB, 0);
    CHECK(process.bytes_requested == GiB);
    check_counters(&handle, 1, 256, GiB, 0);
    CHECK(handle.bytes_requested == GiB);
    CHECK(handle.cufile_stats_state == GDSROUTE_CUFILE_STATS_STATE_PROCESS_WIDE_ONLY);
    if (process.tasks != 256) {
        fprintf(stderr, "  1 GiB with 4 MiB tasks: tasks = %llu\n", (unsigned long long)process.tasks);
    }

    /* A short synchronous read: one more call, one task, counted short. */
    size_t got = 0;
    CHECK_STATUS(gdsroute_file_read(file, buf, 100, GiB - 10, &got), GDSROUTE_STATUS_OK);
    CHECK(got == 10);
    CHECK_STATUS(gdsroute_stats_get(&process), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_stats(file, &handle), GDSROUTE_STATUS_OK);
    check_counters(&process, 2, 257, GiB + 10, 1);
    check_counters(&handle, 2, 257, GiB + 10, 1);
    CHECK(process.bytes_requested == GiB + 100);

    /* Resets: the handle's and the process's are independent. */
    CHECK_STATUS(gdsroute_file_stats_reset(file), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_stats(file, &handle), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_stats_get(&process), GDSROUTE_STATUS_OK);
    CHECK(handle.calls == 0 && handle.tasks == 0 && handle.bytes_read == 0);
    CHECK(process.calls == 2);
    CHECK_STATUS(gdsroute_stats_reset(), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_stats_get(&process), GDSROUTE_STATUS_OK);
    CHECK(process.calls == 0 && process.tasks == 0 && process.bytes_read == 0);

    /* The text and JSON renderings carry the numbers. */
    CHECK_STATUS(gdsroute_stats_reset(), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_read(file, buf, 4096, 0, &got), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_stats_get(&process), GDSROUTE_STATUS_OK);
    char text[8192];
    size_t len = 0;
    CHECK_STATUS(gdsroute_stats_render(&process, GDSROUTE_STATS_FORMAT_JSON, text, sizeof text, &len),
                 GDSROUTE_STATUS_OK);
    CHECK(len > 0 && len < sizeof text && strlen(text) == len);
    CHECK(text[0] == '{' && strstr(text, "4096") != NULL);
    CHECK_STATUS(gdsroute_stats_render(&process, GDSROUTE_STATS_FORMAT_TEXT, text, sizeof text, &len),
                 GDSROUTE_STATUS_OK);
    CHECK(len > 0 && strstr(text, "4096") != NULL);

    free(buf);
    gdsroute_file_free(file);
    unlink(path);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/gdsroute-reads-XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/random", dir);
    make_random_file(path, 9 * MiB + 4321); /* not a multiple of any task size */

    test_matrix(path);
    test_mapping_matrix(path);
    test_operation_lifecycle(path);
    test_counters();

    unlink(path);
    rmdir(dir);
    free(content);
    return check_summary();
}
