// The relay kernels of stream-ordered calls on streams the legacy default stream waits for
// (src/sys/cuda/relay.rs, src/io/relay.rs, docs/routing.md "Relayed stream-ordered calls").
// The PTX beside this file (tools/gpu/relay-ptx.sh makes it) is what the library loads
// (cuModuleLoadData; the driver compiles it for the GPU at hand).
//
// A kernel launched on the caller's stream at the call is the call's place on that stream: when
// the stream reaches it, it tells the host (`started`) and moves the bytes between the caller's
// device buffer and slots of pinned, mapped host memory that host threads fill (`pread`) or drain
// (`pwrite`). The host makes no CUDA call while the stream waits, so a program's synchronous call
// on the legacy stream (which holds a lock of the driver that every copy needs) cannot wait for
// the transfer while the transfer waits for it.
//
// The control block (host memory, mapped; 32-bit words; the host writes, the kernel reads, or the
// other way round, never both):
//   [0] started    kernel: 1 once the stream reached the call
//   [1] go         host:   1 once slots, slot_bytes, nslots and total are written
//   [2] stop       host:   1: leave, and let the stream go on (the call is settled, or the
//                          process exits)
//   [3] abort      host:   1: move no more (a task failed); the stream still waits for stop
//   [4..5] slots   host:   device address of the slots
//   [6] slot_bytes host:   bytes per slot (a multiple of 16)
//   [7] nslots     host:   number of slots (<= MAX_SLOTS)
//   [8..9] total   host:   bytes to write (relay_out)
//   [16 + b] progress[b]  kernel: chunks block b has moved
//   [96 + b] exited[b]    kernel: 1 once block b touches nothing more
//   [256 + 2s] seq, [257 + 2s] len of slot s (its chunk at lead bytes into it): host. relay_in: chunk seq-1 is in slot s with len
//              bytes (bit 31: the last chunk); relay_out: chunk seq-1 of slot s has been written
//              to the file (the slot is free again).
//
// Compiled to PTX by clang without the CUDA toolkit (tools/gpu/relay-ptx.sh), so the
// definitions CUDA's headers would give are spelled out here. With RELAY_ON_HOST defined, the
// copy alone compiles for the host, where tests/relay_copy.rs runs each thread of a grid in turn.
typedef unsigned int u32;
typedef unsigned long long u64;
struct __attribute__((aligned(16))) u32x4 { u32 x, y, z, w; };

#ifdef RELAY_ON_HOST
#define DEVICE static inline
// The thread the host plays, set by the test before each call.
static u32 host_thread, host_block, host_block_threads, host_grid_blocks;
DEVICE u32 thread_index() { return host_thread; }
DEVICE u32 block_index() { return host_block; }
DEVICE u32 block_threads() { return host_block_threads; }
DEVICE u32 grid_blocks() { return host_grid_blocks; }
DEVICE u32x4 load_fresh16(const void *p) { return *(const u32x4 *)p; }
DEVICE char load_fresh1(const void *p) { return *(const char *)p; }
#else
#define GLOBAL extern "C" __attribute__((global))
#define DEVICE static __attribute__((device)) __attribute__((always_inline)) inline

DEVICE u32 thread_index() { return __nvvm_read_ptx_sreg_tid_x(); }
DEVICE u32 block_index() { return __nvvm_read_ptx_sreg_ctaid_x(); }
DEVICE u32 block_threads() { return __nvvm_read_ptx_sreg_ntid_x(); }
DEVICE u32 grid_blocks() { return __nvvm_read_ptx_sreg_nctaid_x(); }
DEVICE void sync_block() { __syncthreads(); }
DEVICE void fence_system() { __nvvm_membar_sys(); }
DEVICE void nap(u32 ns) { asm volatile("nanosleep.u32 %0;" ::"r"(ns)); }

// Loads that fetch again from memory (ld.global.cv): a slot of mapped host memory is refilled
// by the host between chunks, so no copy of it may be kept in a cache.
DEVICE u32x4 load_fresh16(const void *p) {
    u32x4 v;
    asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %4; ld.global.cv.v4.u32 {%0, %1, %2, %3}, [g]; }"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
DEVICE char load_fresh1(const void *p) {
    u32 v;
    asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %1; ld.global.cv.u8 %0, [g]; }" : "=r"(v) : "l"(p));
    return (char)v;
}
#endif

// 16-byte loads each thread has in flight: a kernel's loads of mapped host memory cross PCIe,
// and only many at once hide its latency (tools/probes/probe-zero-copy.py measures the rates).
#ifndef RELAY_LOADS
#define RELAY_LOADS 4
#endif
#ifdef RELAY_ON_HOST
#define UNROLL
#else
#define UNROLL _Pragma("unroll")
#endif

#define MAX_BLOCKS 64
#define MAX_SLOTS 64
#define W_STARTED 0
#define W_GO 1
#define W_STOP 2
#define W_ABORT 3
#define W_SLOTS 4
#define W_SLOT_BYTES 6
#define W_NSLOTS 7
#define W_TOTAL 8
#define W_PROGRESS 16
#define W_EXITED 96
#define W_HEADERS 256
#define LAST_CHUNK 0x80000000u
// Slot s starts at slots + s * (slot_bytes + SLOT_PAD), page-aligned; a chunk lies in it at the
// caller's buffer's distance past a 16-byte boundary (`lead`, < 16).
#define SLOT_PAD 4096

#ifndef RELAY_ON_HOST
DEVICE u32 load_word(volatile u32 *ctl, int w) { return ctl[w]; }

DEVICE u64 load_u64(volatile u32 *ctl, int w) {
    return (u64)ctl[w] | ((u64)ctl[w + 1] << 32);
}

DEVICE void publish(volatile u32 *ctl, int w, u32 value) {
    fence_system();
    ctl[w] = value;
    fence_system();
}

// Thread 0 of the block waits until the word `w` is at least `want` (cyclic), or until the host
// says to move no more (abort or stop); every thread of the block learns which through the
// barrier's reduction (not through shared memory, whose load the compiler may hoist above the
// barrier). Returns 1 when the block is to move no more.
DEVICE int wait_for(volatile u32 *ctl, int w, u32 want) {
    int leaving = 0;
    if (thread_index() == 0) {
        unsigned ns = 64;
        for (;;) {
            if ((int)(load_word(ctl, w) - want) >= 0) break;
            if (load_word(ctl, W_STOP) || load_word(ctl, W_ABORT)) { leaving = 1; break; }
            nap(ns);
            if (ns < 2048) ns *= 2;
        }
        fence_system();
    }
    return __nvvm_bar0_or(leaving);
}

// Block 0 holds the stream until the host has settled the call (stop), whatever happened.
DEVICE void hold_until_settled(volatile u32 *ctl) {
    if (block_index() != 0) return;
    if (thread_index() == 0) {
        unsigned ns = 64;
        while (!load_word(ctl, W_STOP)) {
            nap(ns);
            if (ns < 2048) ns *= 2;
        }
    }
    sync_block();
}

DEVICE void leave(volatile u32 *ctl) {
    sync_block();
    if (thread_index() == 0) publish(ctl, W_EXITED + block_index(), 1);
}

#endif

// This block's share of copying `len` bytes; `from_host`: src is mapped host memory, read
// uncached (a slot is refilled between chunks). 16 bytes at a time where src and dst lie alike
// against 16-byte boundaries (the host places a chunk in its slot at the buffer's distance past
// one, `lead`), after the bytes before dst's first boundary.
DEVICE void copy_share(char *dst, const char *src, u64 len, int from_host) {
    u64 tid = (u64)block_index() * block_threads() + thread_index(), step = (u64)grid_blocks() * block_threads();
    u64 head = 0;
    if ((((u64)dst ^ (u64)src) & 15) == 0) {
        u64 first = (16 - ((u64)dst & 15)) & 15;
        if (first > len) first = len;
        for (u64 k = tid; k < first; k += step) dst[k] = from_host ? load_fresh1(src + k) : src[k];
        dst += first;
        src += first;
        len -= first;
        u64 n16 = len / 16;
        u32x4 *d = (u32x4 *)dst;
        const u32x4 *s = (const u32x4 *)src;
        u64 k = tid;
        for (; k + (RELAY_LOADS - 1) * step < n16; k += RELAY_LOADS * step) {
            u32x4 v[RELAY_LOADS];
            UNROLL for (int j = 0; j < RELAY_LOADS; j++) v[j] = from_host ? load_fresh16(s + k + j * step) : s[k + j * step];
            UNROLL for (int j = 0; j < RELAY_LOADS; j++) d[k + j * step] = v[j];
        }
        for (; k < n16; k += step) d[k] = from_host ? load_fresh16(s + k) : s[k];
        head = n16 * 16;
    }
    for (u64 k = head + tid; k < len; k += step) dst[k] = from_host ? load_fresh1(src + k) : src[k];
}

#ifndef RELAY_ON_HOST
// A read: host slots -> the caller's device buffer, chunk by chunk in file order; the stream goes
// on once the host says the call is settled (stop).
GLOBAL void gdsroute_relay_in(u32 *control, char *buffer) {
    volatile u32 *ctl = control;
    if (block_index() == 0 && thread_index() == 0) publish(ctl, W_STARTED, 1);
    if (wait_for(ctl, W_GO, 1)) {
        hold_until_settled(ctl);
        return leave(ctl);
    }
    const char *slots = (const char *)load_u64(ctl, W_SLOTS);
    u64 slot_bytes = load_word(ctl, W_SLOT_BYTES), stride = slot_bytes + SLOT_PAD, lead = (u64)buffer & 15;
    u32 nslots = load_word(ctl, W_NSLOTS);
    for (u64 i = 0;; i++) {
        u32 s = (u32)(i % nslots);
        if (wait_for(ctl, W_HEADERS + 2 * s, (u32)(i + 1))) break;
        u32 header = load_word(ctl, W_HEADERS + 2 * s + 1);
        u64 len = header & ~LAST_CHUNK;
        copy_share(buffer + i * slot_bytes, slots + s * stride + lead, len, 1);
        sync_block();
        if (thread_index() == 0) publish(ctl, W_PROGRESS + block_index(), (u32)(i + 1));
        if ((header & LAST_CHUNK) || len < slot_bytes) break;
    }
    // The stream goes on once the host has settled the call (and written a pointer form's byte
    // count): the host says so (stop) right after the last chunk is moved.
    hold_until_settled(ctl);
    leave(ctl);
}

// A write: the caller's device buffer -> host slots, which host threads write to the file; the
// stream goes on once the host says every byte is written (stop).
GLOBAL void gdsroute_relay_out(u32 *control, const char *buffer) {
    volatile u32 *ctl = control;
    if (block_index() == 0 && thread_index() == 0) publish(ctl, W_STARTED, 1);
    if (wait_for(ctl, W_GO, 1)) {
        hold_until_settled(ctl);
        return leave(ctl);
    }
    char *slots = (char *)load_u64(ctl, W_SLOTS);
    u64 slot_bytes = load_word(ctl, W_SLOT_BYTES), stride = slot_bytes + SLOT_PAD, lead = (u64)buffer & 15;
    u32 nslots = load_word(ctl, W_NSLOTS);
    u64 total = load_u64(ctl, W_TOTAL);
    u64 chunks = (total + slot_bytes - 1) / slot_bytes;
    for (u64 i = 0; i < chunks; i++) {
        u32 s = (u32)(i % nslots);
        if (i >= nslots && wait_for(ctl, W_HEADERS + 2 * s, (u32)(i - nslots + 1))) break;
        u64 len = total - i * slot_bytes < slot_bytes ? total - i * slot_bytes : slot_bytes;
        copy_share(slots + s * stride + lead, buffer + i * slot_bytes, len, 0);
        fence_system();  // each thread's stores to the slot reach host memory before the progress word
        sync_block();
        if (thread_index() == 0) publish(ctl, W_PROGRESS + block_index(), (u32)(i + 1));
    }
    hold_until_settled(ctl);
    leave(ctl);
}

// A call into host memory: only the call's place on the stream; the host moves the bytes.
GLOBAL void gdsroute_relay_gate(u32 *control) {
    volatile u32 *ctl = control;
    if (thread_index() == 0) publish(ctl, W_STARTED, 1);
    hold_until_settled(ctl);
    leave(ctl);
}
#endif
