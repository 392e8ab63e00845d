/* Test data shared by the C tests: a seeded xorshift64* generator (never all zeros, the same bytes
 * on every run), file writing that survives short writes, and destination buffers with poisoned
 * guard margins (GUARD bytes of POISON on each side) that reads must leave untouched. */
#ifndef GDSROUTE_TEST_DATA_H
#define GDSROUTE_TEST_DATA_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GUARD 64
#define POISON 0xA5

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static inline uint64_t next_random(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static inline void write_all(int fd, const unsigned char *data, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n <= 0) {
            perror("write");
            exit(2);
        }
        data += n;
        len -= (size_t)n;
    }
}

/* Writes `len` bytes of `data` to a new (truncated) file at `path`; exits on failure. */
static inline void write_file_bytes(const char *path, const unsigned char *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        exit(2);
    }
    write_all(fd, data, len);
    close(fd);
}

/* `size` bytes with GUARD poisoned bytes before and after; free with guarded_free. */
static inline unsigned char *guarded_alloc(size_t size) {
    unsigned char *raw = malloc(size + 2 * GUARD);
    if (raw == NULL) {
        exit(2);
    }
    memset(raw, POISON, size + 2 * GUARD);
    return raw + GUARD;
}

static inline void guarded_free(unsigned char *buf) { free(buf - GUARD); }

/* Both margins still POISON. */
static inline int guards_intact(const unsigned char *buf, size_t size) {
    for (size_t i = 0; i < GUARD; i++) {
        if (buf[-(ptrdiff_t)GUARD + (ptrdiff_t)i] != POISON || buf[size + i] != POISON) {
            return 0;
        }
    }
    return 1;
}

#endif
