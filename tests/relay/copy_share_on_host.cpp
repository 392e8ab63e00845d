// The relay kernels' copy (src/sys/cuda/relay/relay.cu, copy_share) run on the host: every thread
// of a grid in turn, as the threads of a block share nothing while they copy. Every byte of the
// range must arrive and no byte around it may change, for each alignment of the buffer (the
// slot's chunk lies at the same distance past a 16-byte boundary: the 16-byte path after the head
// bytes) and for a slot at another distance (the byte path), for lengths around 16-byte and
// block boundaries, and for the grid shapes the library launches and odd ones.
// Built and run by tests/relay_copy.rs. Exit status 0, or 1 with the first wrong case.
#define RELAY_ON_HOST
#include "../../src/sys/cuda/relay/relay.cu"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static int run(u64 dst_lead, u64 src_lead, u64 len, u32 blocks, u32 threads) {
    const u64 guard = 64;
    std::vector<unsigned char> src_mem(len + 2 * guard + 32), dst_mem(len + 2 * guard + 32);
    unsigned char *src_base = (unsigned char *)(((uintptr_t)src_mem.data() + 15) & ~(uintptr_t)15);
    unsigned char *dst_base = (unsigned char *)(((uintptr_t)dst_mem.data() + 15) & ~(uintptr_t)15);
    char *src = (char *)src_base + guard + src_lead, *dst = (char *)dst_base + guard + dst_lead;
    for (u64 i = 0; i < len + 2 * guard; i++) src_base[i] = (unsigned char)(i * 131 + len);
    memset(dst_base, 0xA5, len + 2 * guard + 16);
    host_grid_blocks = blocks;
    host_block_threads = threads;
    for (host_block = 0; host_block < blocks; host_block++)
        for (host_thread = 0; host_thread < threads; host_thread++) copy_share(dst, src, len, 1);
    for (u64 i = 0; i < len; i++)
        if (dst[i] != src[i]) return fprintf(stderr, "byte %llu of %llu wrong (dst lead %llu, src lead %llu, %u x %u)\n", i, len, dst_lead, src_lead, blocks, threads), 1;
    for (u64 i = 0; i < guard + dst_lead; i++)
        if (dst_base[i] != 0xA5) return fprintf(stderr, "byte before the range written (len %llu, lead %llu)\n", len, dst_lead), 1;
    for (u64 i = guard + dst_lead + len; i < len + 2 * guard + 16; i++)
        if (dst_base[i] != 0xA5) return fprintf(stderr, "byte after the range written (len %llu, lead %llu)\n", len, dst_lead), 1;
    return 0;
}

int main() {
    const u64 lens[] = {0, 1, 15, 16, 17, 31, 33, 255, 4095, 4096, 65536 + 7, (2u << 20) - 3, 2u << 20};
    const u32 grids[][2] = {{8, 512}, {1, 1}, {3, 7}, {2, 64}};
    int cases = 0;
    for (const auto &grid : grids)
        for (u64 len : lens)
            for (u64 lead = 0; lead < 16; lead++) {
                if (run(lead, lead, len, grid[0], grid[1]) || run(lead, (lead + 5) % 16, len, grid[0], grid[1])) return 1;
                cases += 2;
            }
    printf("copy_share on the host: %d cases, every byte right\n", cases);
    return 0;
}
