/* Requests far larger than the file (issue 15): gdsroute_file_read and gdsroute_file_pread of
 * 2^62 bytes and of the largest size the API accepts (offset + size up to INT64_MAX) on a
 * 5,000-byte file, evicted from the page cache and cached, return OK with 5000 bytes, the file's
 * bytes, one task, and write nothing past them. The destination is a large MAP_NORESERVE mapping
 * whose pages past the first two are PROT_NONE, so a write past the file's bytes would fail the
 * read (EFAULT) or crash the test. Before the fix, read never returned (readahead advice walked
 * the range past the end of file) and pread aborted the process (a task list of 2^40 entries). */
#define _GNU_SOURCE
#include "check.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

enum { FILE_LEN = 5000, PAGE = 4096, OPEN = 2 * PAGE, POISON = 0xA5 };

static unsigned char byte_at(size_t i) { return (unsigned char)(i * 131u + 7u); }

static void write_file(const char *path) {
    unsigned char data[FILE_LEN];
    for (size_t i = 0; i < FILE_LEN; i++) data[i] = byte_at(i);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, data, sizeof data) != (ssize_t)sizeof data || fsync(fd) != 0 || close(fd) != 0) {
        perror(path);
        exit(2);
    }
}

/* Drops the file's pages from the page cache (may not take on tmpfs: then it reads cached). */
static void evict(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

/* The largest mapping the address space allows, from 1 TiB down; the first OPEN bytes
 * writable. */
static unsigned char *map_destination(size_t *len) {
    for (*len = (size_t)1 << 40; *len >= ((size_t)1 << 30); *len /= 2) {
        void *p = mmap(NULL, *len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED) {
            if (mprotect(p, OPEN, PROT_READ | PROT_WRITE) != 0) {
                perror("mprotect");
                exit(2);
            }
            return p;
        }
    }
    perror("mmap");
    exit(2);
}

static int bytes_right(const unsigned char *buf) {
    for (size_t i = 0; i < FILE_LEN; i++) {
        if (buf[i] != byte_at(i)) return 0;
    }
    for (size_t i = FILE_LEN; i < OPEN; i++) {
        if (buf[i] != POISON) return 0;
    }
    return 1;
}

static uint64_t tasks_of(const gdsroute_file *f) {
    gdsroute_stats s = {.struct_size = sizeof s};
    CHECK_STATUS(gdsroute_file_stats(f, &s), GDSROUTE_STATUS_OK);
    return s.tasks;
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s/gdsroute-huge-XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    snprintf(path, sizeof path, "%s/small.bin", dir);
    write_file(path);
    size_t mapped = 0;
    unsigned char *buf = map_destination(&mapped);
    printf("destination: %zu GiB mapped, %d bytes writable\n", mapped >> 30, (int)OPEN);

    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &f), GDSROUTE_STATUS_OK);
    if (f == NULL) return check_summary();
    const size_t sizes[] = {mapped, (size_t)1 << 62, (size_t)INT64_MAX};
    for (int cached = 0; cached < 2; cached++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            for (int parallel = 0; parallel < 2; parallel++) {
                if (!cached) evict(path);
                memset(buf, POISON, OPEN);
                uint64_t tasks = tasks_of(f);
                size_t got = 99;
                if (parallel) {
                    gdsroute_op *op = NULL;
                    CHECK_STATUS(gdsroute_file_pread(f, buf, sizes[k], 0, &op), GDSROUTE_STATUS_OK);
                    CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_OK);
                    gdsroute_op_free(op);
                } else {
                    CHECK_STATUS(gdsroute_file_read(f, buf, sizes[k], 0, &got), GDSROUTE_STATUS_OK);
                }
                CHECK(got == FILE_LEN);
                CHECK(bytes_right(buf));
                CHECK(tasks_of(f) - tasks == 1);
                if (got != FILE_LEN || !bytes_right(buf)) {
                    fprintf(stderr, "size %zu cached %d parallel %d: got %zu\n", sizes[k], cached, parallel, got);
                }
            }
        }
    }
    /* At the end and past it: 0 bytes, no task. */
    for (int parallel = 0; parallel < 2; parallel++) {
        const uint64_t offsets[] = {FILE_LEN, (uint64_t)1 << 62};
        for (size_t k = 0; k < 2; k++) {
            uint64_t tasks = tasks_of(f);
            size_t got = 99;
            size_t size = (size_t)(INT64_MAX - offsets[k]);
            if (parallel) {
                gdsroute_op *op = NULL;
                CHECK_STATUS(gdsroute_file_pread(f, buf, size, offsets[k], &op), GDSROUTE_STATUS_OK);
                CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_OK);
                gdsroute_op_free(op);
            } else {
                CHECK_STATUS(gdsroute_file_read(f, buf, size, offsets[k], &got), GDSROUTE_STATUS_OK);
            }
            CHECK(got == 0);
            CHECK(tasks_of(f) == tasks);
        }
    }
    gdsroute_file_free(f);
    munmap(buf, mapped);
    unlink(path);
    rmdir(dir);
    return check_summary();
}
