/* make_sample_file PATH MiB: writes MiB mebibytes of seeded pseudo-random bytes (never zeros),
 * the input of the example tests. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PATH MiB\n", argv[0]);
        return 2;
    }
    FILE *out = fopen(argv[1], "wb");
    if (out == NULL) {
        perror(argv[1]);
        return 1;
    }
    uint64_t state = 0x243F6A8885A308D3ULL;
    static uint64_t block[1 << 17]; /* 1 MiB */
    long mib = strtol(argv[2], NULL, 10);
    for (long m = 0; m < mib; m++) {
        for (size_t i = 0; i < sizeof block / sizeof block[0]; i++) {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            block[i] = state * 0x2545F4914F6CDD1DULL;
        }
        if (fwrite(block, sizeof block, 1, out) != 1) {
            perror("fwrite");
            return 1;
        }
    }
    return fclose(out) == 0 ? 0 : 1;
}
