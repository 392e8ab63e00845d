/* Test data shared by the C tests: a seeded xorshift64* generator (never all zeros, the same bytes
 * on every run) and a write loop that survives short writes. */
#ifndef GDSROUTE_TEST_DATA_H
#define GDSROUTE_TEST_DATA_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

#endif
