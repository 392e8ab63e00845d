/*
 * test_tsan: a program built with -fsanitize=thread that uses gdsroute from several threads, as a
 * user's would: its own handles and a shared one, parallel reads (gdsroute_file_pread, the pool's
 * threads writing the caller's buffer) and synchronous ones, counters and settings read while
 * reads run. The library itself is not instrumented, so ThreadSanitizer sees the pool's writes
 * (through its pread and memcpy interceptors) without the synchronisation that orders them
 * (futexes inside Rust) and reports races that are not there; run with
 * TSAN_OPTIONS=suppressions=share/gdsroute/tsan.supp it must report nothing (ctest: tsan_*).
 * Each thread checks every byte it read; the program prints "N passed, 0 failed".
 * test_tsan racy: also races on a counter of its own, which the suppressions must not hide.
 */
#define _POSIX_C_SOURCE 200809L
#include <gdsroute.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 6
#define FILE_SIZE (9u * 1024u * 1024u + 4321u) /* three tasks and a tail at the default size */

static char path[256];
static long racy_counter; /* written by two threads without synchronisation in "racy" mode */

static void *racy(void *arg) {
    (void)arg;
    for (int i = 0; i < 100000; i++) {
        racy_counter++;
    }
    return NULL;
}
static gdsroute_file *shared_file;

static unsigned char byte_at(size_t offset) { return (unsigned char)((offset * 2654435761u) >> 13); }

static int check_bytes(const unsigned char *buf, size_t len, size_t offset) {
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != byte_at(offset + i)) {
            fprintf(stderr, "byte %zu: %u, expected %u\n", offset + i, buf[i], byte_at(offset + i));
            return 1;
        }
    }
    return 0;
}

struct result {
    int passed;
    int failed;
};

static void check(struct result *r, int ok, const char *what) {
    if (ok) {
        r->passed++;
    } else {
        r->failed++;
        char message[512];
        gdsroute_last_error_message(message, sizeof message);
        fprintf(stderr, "FAIL: %s (%s)\n", what, message);
    }
}

static void *worker(void *arg) {
    struct result *r = arg;
    unsigned char *buf = malloc(FILE_SIZE);
    if (buf == NULL) {
        r->failed++;
        return NULL;
    }
    for (int round = 0; round < ROUNDS; round++) {
        gdsroute_file *own = NULL;
        check(r, gdsroute_file_open(path, "r", 0, &own) == GDSROUTE_STATUS_OK, "open");
        gdsroute_file *file = round % 2 == 0 ? own : shared_file;
        /* A parallel read of the whole file: the pool's threads write buf. */
        memset(buf, 0, FILE_SIZE);
        gdsroute_op *op = NULL;
        size_t got = 0;
        check(r, gdsroute_file_pread(file, buf, FILE_SIZE, 0, &op) == GDSROUTE_STATUS_OK, "pread");
        check(r, op != NULL && gdsroute_op_wait(op, &got) == GDSROUTE_STATUS_OK && got == FILE_SIZE, "wait");
        gdsroute_op_free(op);
        check(r, check_bytes(buf, FILE_SIZE, 0) == 0, "pread bytes");
        /* A synchronous read at an odd offset on this thread. */
        size_t offset = 12345u * (size_t)(round + 1);
        check(r, gdsroute_file_read(file, buf, 100000, offset, &got) == GDSROUTE_STATUS_OK && got == 100000, "read");
        check(r, check_bytes(buf, 100000, offset) == 0, "read bytes");
        /* Counters and settings while the other threads read. */
        gdsroute_stats stats = {.struct_size = sizeof stats};
        check(r, gdsroute_stats_get(&stats) == GDSROUTE_STATUS_OK && stats.calls > 0, "stats");
        gdsroute_stats per_file = {.struct_size = sizeof per_file};
        check(r, gdsroute_file_stats(file, &per_file) == GDSROUTE_STATUS_OK, "file stats");
        size_t task_size = 0;
        check(r, gdsroute_settings_get_task_size(&task_size) == GDSROUTE_STATUS_OK && task_size > 0, "task size");
        gdsroute_file_free(own);
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    int with_race = argc > 1 && strcmp(argv[1], "racy") == 0;
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/gdsroute-tsan-XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        return 2;
    }
    unsigned char *data = malloc(FILE_SIZE);
    if (data == NULL) {
        return 2;
    }
    for (size_t i = 0; i < FILE_SIZE; i++) {
        data[i] = byte_at(i);
    }
    for (size_t done = 0; done < FILE_SIZE;) {
        ssize_t n = write(fd, data + done, FILE_SIZE - done);
        if (n <= 0) {
            perror("write");
            return 2;
        }
        done += (size_t)n;
    }
    close(fd);
    free(data);

    if (gdsroute_file_open(path, "r", 0, &shared_file) != GDSROUTE_STATUS_OK) {
        fprintf(stderr, "open %s failed\n", path);
        return 2;
    }
    pthread_t threads[THREADS];
    struct result results[THREADS];
    memset(results, 0, sizeof results);
    for (int i = 0; i < THREADS; i++) {
        if (pthread_create(&threads[i], NULL, worker, &results[i]) != 0) {
            return 2;
        }
    }
    if (with_race) {
        pthread_t a, b;
        pthread_create(&a, NULL, racy, NULL);
        pthread_create(&b, NULL, racy, NULL);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        printf("racy counter: %ld\n", racy_counter);
    }
    int passed = 0, failed = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        passed += results[i].passed;
        failed += results[i].failed;
    }
    gdsroute_file_free(shared_file);
    unlink(path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
