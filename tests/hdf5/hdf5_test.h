/* Shared by the HDF5 driver's tests: the file access lists (the driver by property or, with
 * GDSROUTE_HDF5_TEST_ROUTE=env, by HDF5_DRIVER; sec2 for reference), the driver's counters,
 * searching HDF5's error stack, and the test memory: device memory (cuMemAlloc, libcuda loaded at
 * run time through tools/gpu/cuda_setup.h) when a GPU is usable, host memory otherwise
 * (GDSROUTE_HDF5_TEST_MEMORY=host|device|auto, default auto). Checks and the closing
 * "N passed, M failed" line come from tests/c/check.h. */
#ifndef GDSROUTE_HDF5_TEST_H
#define GDSROUTE_HDF5_TEST_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "H5FDgdsroute.h"
#include "check.h"
#include "cuda_setup.h"
#include "test_data.h"

/* An HDF5 call that must succeed: on failure its error stack is printed. */
#define CHECK_H5(call)                                                                             \
    do {                                                                                           \
        if ((call) >= 0) {                                                                         \
            check_passed++;                                                                        \
        } else {                                                                                   \
            check_failed++;                                                                        \
            fprintf(stderr, "%s:%d: %s failed; HDF5's error stack:\n", __FILE__, __LINE__, #call); \
            H5Eprint2(H5E_DEFAULT, stderr);                                                        \
        }                                                                                          \
    } while (0)

/* Files through the driver: H5Pset_fapl_gdsroute, or HDF5_DRIVER's default (route "env"). */
static inline int h5t_env_route(void) {
    const char *r = getenv("GDSROUTE_HDF5_TEST_ROUTE");
    return r != NULL && strcmp(r, "env") == 0;
}

static inline hid_t h5t_driver_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (!h5t_env_route()) CHECK_H5(H5Pset_fapl_gdsroute(fapl, NULL));
    return fapl;
}

static inline hid_t h5t_sec2_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK_H5(H5Pset_fapl_sec2(fapl));
    return fapl;
}

static inline H5FD_gdsroute_counters_t h5t_counters(void) {
    H5FD_gdsroute_counters_t c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    CHECK_H5(H5FD_gdsroute_get_counters(&c));
    return c;
}

/* Whether a record of the default error stack has class `cls` and mentions `needle`. */
struct h5t_search {
    const char *cls;
    const char *needle;
    int found;
};

static inline herr_t h5t_walk(unsigned n, const H5E_error2_t *e, void *data) {
    (void)n;
    struct h5t_search *s = data;
    char cls[128] = "";
    H5Eget_class_name(e->cls_id, cls, sizeof cls);
    if ((s->cls == NULL || strcmp(cls, s->cls) == 0) && e->desc != NULL && strstr(e->desc, s->needle) != NULL)
        s->found = 1;
    return 0;
}

/* Walks a copy of the default stack: H5Eget_class_name, an API call, clears the default one. */
static inline int h5t_stack_has(const char *cls, const char *needle) {
    struct h5t_search s = {cls, needle, 0};
    hid_t stack = H5Eget_current_stack();
    H5Ewalk2(stack, H5E_WALK_DOWNWARD, h5t_walk, &s);
    H5Eset_current_stack(stack); /* back where it was (and the copy closed) */
    return s.found;
}

#define H5T_DRIVER_CLASS "gdsroute HDF5 driver"

/* The test memory: one device arena handed out from its start for each case, or malloc. */
static struct {
    int device;
    uint64_t arena;
    size_t arena_size;
    size_t used;
    int (*htod)(uint64_t, const void *, size_t);
} h5t_mem;

/* Chooses the memory; returns 0 when the choice cannot be honoured (device asked, no GPU). */
static inline int h5t_memory_setup(size_t arena_size) {
    const char *want = getenv("GDSROUTE_HDF5_TEST_MEMORY");
    if (want == NULL || *want == '\0') want = "auto";
    int try_device = strcmp(want, "host") != 0;
    if (try_device && cuda_setup(arena_size, 0xA5, &h5t_mem.arena)) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        h5t_mem.htod = lib ? (int (*)(uint64_t, const void *, size_t))dlsym(lib, "cuMemcpyHtoD_v2") : NULL;
        h5t_mem.device = h5t_mem.htod != NULL;
        h5t_mem.arena_size = arena_size;
    }
    if (strcmp(want, "device") == 0 && !h5t_mem.device) {
        printf("memory: device asked for, but no usable GPU and libcuda\n");
        return 0;
    }
    printf("memory: %s\n", h5t_mem.device ? "device (cuMemAlloc; HDF5 hands it to the driver where it "
                                             "does not copy)"
                                           : "host (no usable GPU and libcuda)");
    return 1;
}

/* A buffer of `size` bytes for one case, with GUARD bytes of POISON around it. Device buffers
 * come from the arena (reset with h5t_mem_reset); host ones from guarded_alloc. */
static inline void *h5t_buffer(int device, size_t size) {
    if (!device) return guarded_alloc(size);
    size_t start = (h5t_mem.used + GUARD + 255) & ~(size_t)255;
    if (start + size + GUARD > h5t_mem.arena_size || cu_memset_d8(h5t_mem.arena + start - GUARD, POISON, size + 2 * GUARD) != 0) {
        fprintf(stderr, "device arena of %zu bytes too small or unusable\n", h5t_mem.arena_size);
        exit(2);
    }
    h5t_mem.used = start + size + GUARD;
    return (void *)(uintptr_t)(h5t_mem.arena + start);
}

static inline void h5t_buffer_free(int device, void *buf) {
    if (!device) guarded_free(buf);
}

static inline void h5t_mem_reset(void) { h5t_mem.used = 0; }

static inline void h5t_to_buffer(int device, void *dst, const void *src, size_t size) {
    if (!device) {
        memcpy(dst, src, size);
    } else if (h5t_mem.htod((uint64_t)(uintptr_t)dst, src, size) != 0) {
        fprintf(stderr, "cuMemcpyHtoD failed\n");
        exit(2);
    }
}

/* Copies `size` bytes and the guards around them to host memory: out[GUARD + size + GUARD]. */
static inline void h5t_from_buffer(int device, unsigned char *out, const void *src, size_t size) {
    const unsigned char *from = (const unsigned char *)src - GUARD;
    if (!device) {
        memcpy(out, from, size + 2 * GUARD);
    } else if (cu_memcpy_dtoh(out, (uint64_t)(uintptr_t)from, size + 2 * GUARD) != 0) {
        fprintf(stderr, "cuMemcpyDtoH failed\n");
        exit(2);
    }
}

#endif
