/* Sizes on the GPU tools' command lines: a decimal count of bytes with an optional binary
 * suffix, "64K", "2MiB", "1G" or "4096B"; 0 for anything else (each tool treats 0 as a usage
 * error). */
#ifndef GDSROUTE_TOOLS_SIZES_H
#define GDSROUTE_TOOLS_SIZES_H

#include <stdint.h>
#include <stdlib.h>

static inline uint64_t parse_size(const char *s) {
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return 0;
    switch (*end) {
        case 'k': case 'K': v <<= 10; end++; break;
        case 'm': case 'M': v <<= 20; end++; break;
        case 'g': case 'G': v <<= 30; end++; break;
        default: break;
    }
    if (*end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    return *end == '\0' ? (uint64_t)v : 0;
}

#endif
