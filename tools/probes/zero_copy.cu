// Probe kernels (tools/probes/probe-zero-copy.py): how fast a kernel copies between mapped,
// pinned host memory and device memory, by grid size and loads in flight per thread. The relay
// kernels of src/sys/cuda/relay/relay.cu copy this way (16-byte ld.global.cv loads). Compiled to
// PTX by clang like the relay (tools/gpu/relay-variants.sh build).
typedef unsigned int u32;
typedef unsigned long long u64;
struct __attribute__((aligned(16))) u32x4 { u32 x, y, z, w; };
#define GLOBAL extern "C" __attribute__((global))
#define DEVICE static __attribute__((device)) __attribute__((always_inline)) inline
DEVICE u32x4 load_cv(const void *p) {
    u32x4 v;
    asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %4; ld.global.cv.v4.u32 {%0, %1, %2, %3}, [g]; }"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
template <int U, int CV> DEVICE void copy(u32x4 *d, const u32x4 *s, u64 n16) {
    u64 step = (u64)__nvvm_read_ptx_sreg_nctaid_x() * __nvvm_read_ptx_sreg_ntid_x();
    u64 k = (u64)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x();
    for (; k + (U - 1) * step < n16; k += U * step) {
        u32x4 v[U];
#pragma unroll
        for (int j = 0; j < U; j++) v[j] = CV ? load_cv(s + k + j * step) : s[k + j * step];
#pragma unroll
        for (int j = 0; j < U; j++) d[k + j * step] = v[j];
    }
    for (; k < n16; k += step) d[k] = CV ? load_cv(s + k) : s[k];
}
GLOBAL void copy_cv4(u32x4 *d, const u32x4 *s, u64 n16) { copy<4, 1>(d, s, n16); }
GLOBAL void copy_cv8(u32x4 *d, const u32x4 *s, u64 n16) { copy<8, 1>(d, s, n16); }
GLOBAL void copy_cv16(u32x4 *d, const u32x4 *s, u64 n16) { copy<16, 1>(d, s, n16); }
GLOBAL void copy_plain8(u32x4 *d, const u32x4 *s, u64 n16) { copy<8, 0>(d, s, n16); }
