/* LD_PRELOAD shim for test_hdf5_passthrough: a region of revoked memory (PROT_NONE) that only
 * gdsroute may touch, as only gdsroute (through CUDA) may touch device memory. The test names the
 * region with device_window_set; the shim opens it (read and write) for the span of each
 * gdsroute_file_pread/_pwrite whose buffer lies in it, until the gdsroute_op_wait that ends the
 * operation, and revokes it again then. A copy by HDF5 into or out of the region therefore dies
 * of SIGSEGV, and a call that succeeds moved its bytes through gdsroute alone
 * (device_window_bytes counts them). HDF5 is single-threaded, so nothing else runs while the
 * region is open. */
#define _GNU_SOURCE
#include <gdsroute.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static char *window_base;
static size_t window_size;
static int window_open;
static uint64_t window_bytes;

void device_window_set(void *base, size_t size);
uint64_t device_window_bytes(void);

void device_window_set(void *base, size_t size) {
    window_base = base;
    window_size = size;
    window_open = 0;
    window_bytes = 0;
}

uint64_t device_window_bytes(void) { return window_bytes; }

static void *real(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        fprintf(stderr, "device_window: %s not found after the shim\n", name);
        abort();
    }
    return f;
}

static void set_protection(int prot) {
    if (mprotect(window_base, window_size, prot) != 0) {
        perror("device_window: mprotect");
        abort();
    }
    window_open = prot != PROT_NONE;
}

/* Opens the region for a transfer of buf[0, size) that lies in it. */
static void open_for(const void *buf, size_t size) {
    const char *p = buf;
    if (window_base == NULL || p < window_base || p + size > window_base + window_size) return;
    set_protection(PROT_READ | PROT_WRITE);
    window_bytes += size;
}

static void revoke(void) {
    if (window_open) set_protection(PROT_NONE);
}

typedef gdsroute_status (*pread_fn)(const gdsroute_file *, void *, size_t, uint64_t, gdsroute_op **);
typedef gdsroute_status (*pwrite_fn)(const gdsroute_file *, const void *, size_t, uint64_t, gdsroute_op **);
typedef gdsroute_status (*wait_fn)(const gdsroute_op *, size_t *);

gdsroute_status gdsroute_file_pread(const gdsroute_file *file, void *buf, size_t size, uint64_t offset, gdsroute_op **op) {
    open_for(buf, size);
    gdsroute_status st = ((pread_fn)real("gdsroute_file_pread"))(file, buf, size, offset, op);
    if (st != GDSROUTE_STATUS_OK) revoke();
    return st;
}

gdsroute_status gdsroute_file_pwrite(const gdsroute_file *file, const void *buf, size_t size, uint64_t offset,
                                     gdsroute_op **op) {
    open_for(buf, size);
    gdsroute_status st = ((pwrite_fn)real("gdsroute_file_pwrite"))(file, buf, size, offset, op);
    if (st != GDSROUTE_STATUS_OK) revoke();
    return st;
}

gdsroute_status gdsroute_op_wait(const gdsroute_op *op, size_t *done) {
    gdsroute_status st = ((wait_fn)real("gdsroute_op_wait"))(op, done);
    revoke();
    return st;
}
