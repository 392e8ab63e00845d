/* Shared by the HDF5 driver's tests: the file access lists (the driver by property or, with
 * GDSROUTE_HDF5_TEST_ROUTE=env, by HDF5_DRIVER; sec2 for reference), the driver's counters,
 * searching HDF5's error stack, and the test memory: device memory (cuMemAlloc, libcuda loaded at
 * run time through tools/gpu/cuda_setup.h) when a GPU is usable, host memory otherwise
 * (GDSROUTE_HDF5_TEST_MEMORY=host|device|auto, default auto); and revoked memory (PROT_NONE) in
 * forked children, which tells whether HDF5 handed a buffer to the driver. Checks and the closing
 * "N passed, M failed" line come from tests/c/check.h. */
#ifndef GDSROUTE_HDF5_TEST_H
#define GDSROUTE_HDF5_TEST_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* Where a record of the default error stack with class `cls` (NULL: any) mentioning `needle`
 * lies: its position from the innermost record, the first pushed (0), or -1 where none does. */
struct h5t_search {
    const char *cls;
    const char *needle;
    int found;
};

static inline herr_t h5t_walk(unsigned n, const H5E_error2_t *e, void *data) {
    struct h5t_search *s = data;
    char cls[128] = "";
    H5Eget_class_name(e->cls_id, cls, sizeof cls);
    if (s->found < 0 && (s->cls == NULL || strcmp(cls, s->cls) == 0) && e->desc != NULL &&
        strstr(e->desc, s->needle) != NULL)
        s->found = (int)n;
    return 0;
}

/* Walks a copy of the default stack (from the innermost record up): H5Eget_class_name, an API
 * call, clears the default one. */
static inline int h5t_stack_index(const char *cls, const char *needle) {
    struct h5t_search s = {cls, needle, -1};
    hid_t stack = H5Eget_current_stack();
    H5Ewalk2(stack, H5E_WALK_UPWARD, h5t_walk, &s);
    H5Eset_current_stack(stack); /* back where it was (and the copy closed) */
    return s.found;
}

static inline int h5t_stack_has(const char *cls, const char *needle) { return h5t_stack_index(cls, needle) >= 0; }

#define H5T_DRIVER_CLASS "gdsroute HDF5 driver"

/* The chunk cache a dataset gets by default (H5Pset_cache's rdcc_nbytes of a fresh file access
 * list): 1 MiB under HDF5 1.10.8, 8 MiB under 2.2.0; 0 if HDF5 cannot say. */
static inline size_t h5t_default_chunk_cache(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    int mdc = 0;
    size_t slots = 0, bytes = 0;
    double w0 = 0;
    if (H5Pget_cache(fapl, &mdc, &slots, &bytes, &w0) < 0) bytes = 0;
    H5Pclose(fapl);
    return bytes;
}

/* Memory whose access is revoked (PROT_NONE), the CPU's stand-in for device memory: where HDF5
 * hands the caller's pointer to the driver, gdsroute's pread/pwrite into it fail with EFAULT
 * (docs/reliability.md, "Bad pages in I/O buffers") and the HDF5 call returns an error with the
 * driver's record; where HDF5 copies on the host, the process dies of SIGSEGV, as it would with a
 * device pointer. h5t_probe runs such a call in a forked child and says which happened; with
 * test_hdf5_passthrough's device_window.so, a child may also find that only gdsroute touched it. */
enum h5t_reach { H5T_REACHED_DRIVER, H5T_COPIED_ON_HOST, H5T_DRIVER_ONLY, H5T_REACH_OTHER };
enum {
    H5T_CHILD_DRIVER_EFAULT = 10, /* the call failed, the driver's record naming EFAULT on the stack */
    H5T_CHILD_SUCCEEDED = 11,     /* nothing touched the revoked buffer: the case is wrong */
    H5T_CHILD_OTHER_ERROR = 12,   /* the call failed otherwise (the stack is printed) */
    H5T_CHILD_SETUP_FAILED = 13,
    H5T_CHILD_DRIVER_ONLY = 14,   /* the call succeeded, its bytes right, all moved by gdsroute */
};

/* A revoked buffer of `size` bytes, for a child (it exits where mmap fails). */
static inline void *h5t_revoked(size_t size) {
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "mmap of %zu bytes: %s\n", size, strerror(errno));
        _exit(H5T_CHILD_SETUP_FAILED);
    }
    return p;
}

/* The pipe through which a child says it is about to make the call (h5t_arm): a SIGSEGV before
 * it (while the child prepares its file) is no verdict. */
static int h5t_armed_fd = -1;

/* In the child, just before the call given the revoked buffer. */
static inline void h5t_arm(void) {
    if (write(h5t_armed_fd, "a", 1) != 1) _exit(H5T_CHILD_SETUP_FAILED);
}

/* In the child: ends it with the verdict on `result`, the return of a call given a revoked buffer. */
static inline void h5t_child_verdict(herr_t result) {
    if (result >= 0) _exit(H5T_CHILD_SUCCEEDED);
    if (h5t_stack_has(H5T_DRIVER_CLASS, "Bad address")) _exit(H5T_CHILD_DRIVER_EFAULT);
    H5Eprint2(H5E_DEFAULT, stderr);
    _exit(H5T_CHILD_OTHER_ERROR);
}

static inline const char *h5t_reach_name(enum h5t_reach r) {
    return r == H5T_REACHED_DRIVER   ? "EFAULT in the driver"
           : r == H5T_COPIED_ON_HOST ? "SIGSEGV (a host copy)"
           : r == H5T_DRIVER_ONLY    ? "gdsroute alone, bytes right"
                                     : "neither (see above)";
}

/* Runs body(arg) in a forked child, without a core dump; body calls h5t_arm just before the
 * call and ends with h5t_child_verdict. Fork before the parent makes gdsroute calls of its own: a
 * child keeps none of the parent's threads. */
static inline enum h5t_reach h5t_probe(void (*body)(const void *), const void *arg) {
    int armed[2];
    if (pipe(armed) != 0) {
        fprintf(stderr, "pipe: %s\n", strerror(errno));
        return H5T_REACH_OTHER;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        close(armed[0]);
        h5t_armed_fd = armed[1];
        body(arg);
        _exit(H5T_CHILD_SETUP_FAILED); /* body did not give its verdict */
    }
    close(armed[1]);
    int status = 0;
    char byte = 0;
    int waited = child > 0 && waitpid(child, &status, 0) == child;
    int was_armed = read(armed[0], &byte, 1) == 1;
    close(armed[0]);
    if (!waited) {
        fprintf(stderr, "fork or waitpid: %s\n", strerror(errno));
        return H5T_REACH_OTHER;
    }
    if (was_armed && WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) return H5T_COPIED_ON_HOST;
    if (was_armed && WIFEXITED(status) && WEXITSTATUS(status) == H5T_CHILD_DRIVER_EFAULT) return H5T_REACHED_DRIVER;
    if (was_armed && WIFEXITED(status) && WEXITSTATUS(status) == H5T_CHILD_DRIVER_ONLY) return H5T_DRIVER_ONLY;
    if (WIFSIGNALED(status))
        fprintf(stderr, "the child died of signal %d%s\n", WTERMSIG(status), was_armed ? "" : " before the call");
    else
        fprintf(stderr, "the child exited with status %d%s\n", WEXITSTATUS(status), was_armed ? "" : " before the call");
    return H5T_REACH_OTHER;
}

/* The test memory: one device arena handed out from its start for each case, or malloc. */
static struct {
    int device;
    uint64_t arena;
    size_t arena_size;
    size_t used;
} h5t_mem;

/* Chooses the memory; returns 0 when the choice cannot be honoured (device asked, no GPU). */
static inline int h5t_memory_setup(size_t arena_size) {
    const char *want = getenv("GDSROUTE_HDF5_TEST_MEMORY");
    if (want == NULL || *want == '\0') want = "auto";
    int try_device = strcmp(want, "host") != 0;
    if (try_device && cuda_setup(arena_size, 0xA5, &h5t_mem.arena)) {
        h5t_mem.device = 1;
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
    } else if (cu_memcpy_htod((uint64_t)(uintptr_t)dst, src, size) != 0) {
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
