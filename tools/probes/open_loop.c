/*
 * open_loop: gdsroute_file_open + a 4 KiB host read + gdsroute_file_free, COUNT times (default
 * 10,000), for the paired before/after timing of opening a handle (docs/performance.md, "The first
 * read of a fresh process": opening a handle stays cheap). Run against each library with
 * LD_LIBRARY_PATH, the two timed as whole processes in turn (docs/performance.md gives the loop).
 *   open_loop FILE [COUNT]
 */
#include <stdio.h>
#include <stdlib.h>

#include "gdsroute.h"

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: %s FILE [COUNT]\n", argv[0]), 2;
    long count = argc > 2 ? strtol(argv[2], NULL, 10) : 10000;
    static char buf[4096];
    for (long i = 0; i < count; i++) {
        gdsroute_file *file = NULL;
        size_t got = 0;
        if (gdsroute_file_open(argv[1], "r", 0, &file) != GDSROUTE_STATUS_OK ||
            gdsroute_file_read(file, buf, sizeof buf, 0, &got) != GDSROUTE_STATUS_OK || got != sizeof buf)
            return fprintf(stderr, "open_loop: call %ld failed\n", i), 1;
        gdsroute_file_free(file);
    }
    return 0;
}
