/*
 * bench_hdf5: one job, timing one transfer of a contiguous HDF5 dataset between a file and the
 * program's memory (issue 28; docs/performance.md, "HDF5 driver (issue 28)"), one of three ways:
 * through the gdsroute HDF5 driver (H5Dread/H5Dwrite with the caller's pointer), through
 * gdsroute_file_pread/_pwrite of the same bytes (same file offset, from H5Dget_offset, and size),
 * or as such a program does today, HDF5's sec2 driver into host memory and a copy between that
 * and the program's memory. tools/hdf5/bench.sh runs the modes in interleaved rounds and sums up.
 *
 *   bench_hdf5 make FILE SIZE     the read modes' file: dataset "data", SIZE bytes (uint8, 1-D,
 *                                 contiguous) of the bench's pattern, written through sec2
 *   bench_hdf5 MODE FILE SIZE [--memory auto|device|host] [--warm-with PATH]
 *       driver-read, pread-read, sec2-read:     FILE (made by `make`, SIZE bytes) into memory
 *       driver-write, pwrite-write, sec2-write: SIZE bytes of the pattern into a new FILE; the
 *                                 HDF5 ways create it in their untimed open (H5Fcreate, H5Dcreate:
 *                                 allocated, never filled), the raw way gets the same file made
 *                                 through sec2 and cut at the dataset's offset: all three write
 *                                 past the end of the file, as a program writing a dataset does
 *       --memory     device: cuMemAlloc memory (libcuda loaded at run time, tools/gpu/cuda_setup.h);
 *                    host: pageable host memory; auto (default): device where a GPU is usable
 *       --warm-with  before the timed transfer, one transfer of the same mode with another file
 *                    (reads: a smaller file made by `make`; writes: a path created and removed,
 *                    64 MiB), so that the process's set-up (HDF5, gdsroute's pool and bounce
 *                    buffers, CUDA's first copies) is not timed, while FILE is one this process
 *                    has not touched. Without it the timed transfer is the process's first.
 *   bench_hdf5 version            the libraries' versions (and whether they load at all)
 *
 * Timed: the data call alone (H5Dread, H5Dwrite, pread + wait, pwrite + wait), with the sec2 ways'
 * copy (cuMemcpyHtoD/DtoH; memcpy to or from a second host buffer with host memory); total_s adds
 * the open and the close. Every buffer is touched before it; the destination's every byte is
 * POISON, with GUARD poisoned bytes on each side. After it, untimed: a read's destination is
 * compared whole with the pattern and its guards with POISON; a write's file is read back
 * through sec2 (64 MiB at a time) and compared, the dataset must be where the write put it (and
 * end the raw way's file), and the source must still hold the pattern. Prints one line:
 *   HDF5 mode= dir= bytes= seconds= gbps= mem= copy= copy_s= total_s= offset= threads= warm_up=
 *        route= gr_*= (gdsroute_stats_get deltas over the timed call) vfd_*= (the driver's
 *        counters over it) verified=1
 * Exit status 0; 1 on a failure (a wrong byte included, with its position); 2 on usage; 3 when
 * --memory device finds no usable GPU.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "H5FDgdsroute.h"
#include "cuda_setup.h"
#include "gdsroute.h"
#include "sizes.h"

#define DATASET "data"
#define GUARD 4096
#define POISON 0xA5
#define STAGING_POISON 0x5A
#define PIECE ((size_t)64 << 20) /* file verification and `make`, per H5Dread/H5Dwrite */
#define WARM_WRITE_BYTES ((size_t)64 << 20)

enum way { WAY_DRIVER, WAY_RAW, WAY_SEC2 };
struct mode {
    const char *name;
    enum way way;
    int write;
};
static const struct mode modes[] = {
    {"driver-read", WAY_DRIVER, 0},  {"pread-read", WAY_RAW, 0},   {"sec2-read", WAY_SEC2, 0},
    {"driver-write", WAY_DRIVER, 1}, {"pwrite-write", WAY_RAW, 1}, {"sec2-write", WAY_SEC2, 1},
};

static const char *what_runs = "bench_hdf5"; /* the mode, for messages */

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_hdf5: %s: ", what_runs);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

static int fail_gdsroute(const char *call, gdsroute_status st) {
    char msg[1024];
    gdsroute_last_error_message(msg, sizeof msg);
    return fail("%s: status %u (%s): %s", call, (unsigned)st, gdsroute_status_str(st), msg);
}

/* An HDF5 call that must succeed (HDF5 has printed its error stack when it did not). */
#define H5_OK(call)                                                                                \
    do {                                                                                           \
        if ((call) < 0) return fail("%s failed", #call);                                           \
    } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ----------------------------------------------------------------------------------------------
 * The data: the dataset's byte at position p is byte p % 8 (little-endian) of splitmix64(p / 8),
 * so any piece can be made or checked without the rest.
 * ------------------------------------------------------------------------------------------- */
static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static inline unsigned char pattern_byte(uint64_t p) { return (unsigned char)(splitmix64(p / 8) >> (8 * (p % 8))); }

static void pattern_fill(unsigned char *buf, size_t len, uint64_t at) {
    size_t i = 0;
    for (; i < len && (at + i) % 8 != 0; i++) buf[i] = pattern_byte(at + i);
    for (; i + 8 <= len; i += 8) {
        uint64_t w = splitmix64((at + i) / 8);
        for (unsigned k = 0; k < 8; k++) buf[i + k] = (unsigned char)(w >> (8 * k));
    }
    for (; i < len; i++) buf[i] = pattern_byte(at + i);
}

/* The first index of buf[0, len) that differs from the pattern at `at`, or len. */
static size_t pattern_mismatch(const unsigned char *buf, size_t len, uint64_t at) {
    unsigned char want[8];
    for (size_t i = 0; i < len;) {
        size_t n = 8 - (size_t)((at + i) % 8);
        if (n > len - i) n = len - i;
        pattern_fill(want, n, at + i);
        if (memcmp(buf + i, want, n) != 0)
            for (size_t k = 0; k < n; k++)
                if (buf[i + k] != want[k]) return i + k;
        i += n;
    }
    return len;
}

/* The first index of buf[0, len) that is not `byte`, or len. */
static size_t first_not(const unsigned char *buf, size_t len, unsigned char byte) {
    for (size_t i = 0; i < len; i++)
        if (buf[i] != byte) return i;
    return len;
}

/* ----------------------------------------------------------------------------------------------
 * Memory. The program's buffer ("user memory") spans GUARD + size + GUARD bytes, the data in
 * the middle: device memory from cuda_setup, or pageable host memory. With device memory a host
 * buffer of the same span receives its copy for the checks. The sec2 ways add HDF5's host
 * buffer (staging). Host buffers are plain anonymous mappings, what malloc gives a program for
 * these sizes (not advised MADV_HUGEPAGE, unlike gdsroute-bench's).
 * ------------------------------------------------------------------------------------------- */
struct memory {
    int device;
    uint64_t dev;           /* device: the span */
    unsigned char *host;    /* host: the span; device: the checks' copy of it */
    unsigned char *staging; /* sec2 ways: size bytes */
    size_t size, span;
};

static unsigned char *host_alloc(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void *user_data(const struct memory *m) {
    return m->device ? (void *)(uintptr_t)(m->dev + GUARD) : (void *)(m->host + GUARD);
}

/* 0, or 3 when `want` is "device" and no GPU is usable, or -1. */
static int memory_setup(struct memory *m, const char *want, size_t size, int staging) {
    memset(m, 0, sizeof *m);
    m->size = size;
    m->span = size + 2 * (size_t)GUARD;
    if (strcmp(want, "host") != 0) {
        m->device = cuda_setup(m->span, POISON, &m->dev);
        if (!m->device && strcmp(want, "device") == 0) {
            fail("--memory device: no usable GPU (libcuda.so.1, cuInit, device 0's context or a %zu-byte cuMemAlloc failed)",
                 m->span);
            return 3;
        }
        if (!m->device)
            printf("NOTE %s: no usable GPU (libcuda.so.1, cuInit, device 0 or cuMemAlloc failed): host memory, the sec2 "
                   "ways' copy a memcpy\n",
                   what_runs);
    }
    m->host = host_alloc(m->span);
    if (m->host == NULL) return fail("cannot map %zu bytes of host memory: %s", m->span, strerror(errno));
    memset(m->host, POISON, m->span);
    if (staging) {
        m->staging = host_alloc(size);
        if (m->staging == NULL) return fail("cannot map %zu bytes of host memory: %s", size, strerror(errno));
        memset(m->staging, STAGING_POISON, size);
    }
    return 0;
}

/* User memory all POISON, then (with_pattern) the pattern in its middle; staging re-poisoned, so
 * that what a measured transfer moves cannot be left over from the warm-up. */
static int memory_reset(struct memory *m, int with_pattern) {
    if (m->staging) memset(m->staging, STAGING_POISON, m->size);
    memset(m->host, POISON, m->span);
    if (with_pattern) pattern_fill(m->host + GUARD, m->size, 0);
    if (!m->device) return 0;
    if (cu_memset_d8(m->dev, POISON, m->span) != 0) return fail("cuMemsetD8 failed");
    if (with_pattern && cu_memcpy_htod(m->dev + GUARD, m->host + GUARD, m->size) != 0)
        return fail("cuMemcpyHtoD failed");
    return 0;
}

/* The sec2 ways' copy: staging into user memory (reads) or user memory into staging (writes). */
static int copy_staging(struct memory *m, size_t n, int to_user) {
    if (!m->device) {
        if (to_user) memcpy(m->host + GUARD, m->staging, n);
        else memcpy(m->staging, m->host + GUARD, n);
        return 0;
    }
    int rc = to_user ? cu_memcpy_htod(m->dev + GUARD, m->staging, n) : cu_memcpy_dtoh(m->staging, m->dev + GUARD, n);
    return rc == 0 ? 0 : fail("%s failed (%d)", to_user ? "cuMemcpyHtoD" : "cuMemcpyDtoH", rc);
}

/* User memory as the checks see it: m->host, copied from the device first. */
static int memory_view(struct memory *m) {
    if (m->device && cu_memcpy_dtoh(m->host, m->dev, m->span) != 0) return fail("cuMemcpyDtoH failed");
    return 0;
}

/* Guards still POISON and the middle the pattern. */
static int check_user_memory(struct memory *m, const char *what) {
    if (memory_view(m) < 0) return -1;
    size_t at = first_not(m->host, GUARD, POISON);
    if (at < GUARD) return fail("%s: the guard before the buffer changed at byte %zu of %d", what, at, GUARD);
    at = first_not(m->host + GUARD + m->size, GUARD, POISON);
    if (at < GUARD) return fail("%s: the guard after the buffer changed at byte %zu of %d", what, at, GUARD);
    at = pattern_mismatch(m->host + GUARD, m->size, 0);
    if (at < m->size)
        return fail("%s: byte %zu of %zu is 0x%02x, not 0x%02x", what, at, m->size, m->host[GUARD + at],
                    pattern_byte(at));
    return 0;
}

/* ----------------------------------------------------------------------------------------------
 * Files.
 * ------------------------------------------------------------------------------------------- */
static hid_t fapl_of(enum way way) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return fapl;
    herr_t rc = way == WAY_DRIVER ? H5Pset_fapl_gdsroute(fapl, NULL) : H5Pset_fapl_sec2(fapl);
    if (rc < 0) {
        H5Pclose(fapl);
        return H5I_INVALID_HID;
    }
    return fapl;
}

/* The dataset of `size` bytes in the new file `fid`, allocated at once (its offset known from
 * then on) and never filled: a write moves the data alone, past the end of the file. */
static int create_dataset(hid_t fid, size_t size, hid_t *did) {
    hsize_t dims[1] = {size};
    hid_t sid, dcpl;
    H5_OK(sid = H5Screate_simple(1, dims, NULL));
    H5_OK(dcpl = H5Pcreate(H5P_DATASET_CREATE));
    H5_OK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
    H5_OK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
    H5_OK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    H5_OK(*did = H5Dcreate2(fid, DATASET, H5T_NATIVE_UINT8, sid, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5_OK(H5Pclose(dcpl));
    H5_OK(H5Sclose(sid));
    return 0;
}

/* The dataset of `path` open through `way`: the file there (read-only), or (create) a new one
 * holding a new dataset of `size` bytes, as a program writing a dataset makes it. */
static int open_dataset(enum way way, const char *path, int create, size_t size, hid_t *fapl, hid_t *fid, hid_t *did) {
    H5_OK(*fapl = fapl_of(way));
    if (create) {
        H5_OK(*fid = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, *fapl));
        return create_dataset(*fid, size, did);
    }
    H5_OK(*fid = H5Fopen(path, H5F_ACC_RDONLY, *fapl));
    H5_OK(*did = H5Dopen2(*fid, DATASET, H5P_DEFAULT));
    return 0;
}

static int close_dataset(hid_t fapl, hid_t fid, hid_t did) {
    H5_OK(H5Dclose(did));
    H5_OK(H5Fclose(fid));
    H5_OK(H5Pclose(fapl));
    return 0;
}

/* The dataset's file offset and size, through sec2; fails for anything but a contiguous 1-D
 * uint8 dataset with its storage allocated. */
static int dataset_info(const char *path, uint64_t *offset, size_t *size) {
    hid_t fapl, fid, did, sid, tid;
    hsize_t dims[1] = {0};
    if (open_dataset(WAY_SEC2, path, 0, 0, &fapl, &fid, &did) < 0) return -1;
    H5_OK(sid = H5Dget_space(did));
    H5_OK(tid = H5Dget_type(did));
    int rank = H5Sget_simple_extent_ndims(sid);
    if (rank != 1 || H5Sget_simple_extent_dims(sid, dims, NULL) != 1 || H5Tequal(tid, H5T_NATIVE_UINT8) <= 0)
        return fail("%s: dataset \"%s\" is not a 1-D uint8 dataset (rank %d)", path, DATASET, rank);
    haddr_t at = H5Dget_offset(did);
    if (at == HADDR_UNDEF) return fail("%s: dataset \"%s\" is not contiguous or not allocated (H5Dget_offset)", path, DATASET);
    H5_OK(H5Tclose(tid));
    H5_OK(H5Sclose(sid));
    if (close_dataset(fapl, fid, did) < 0) return -1;
    *offset = (uint64_t)at;
    *size = (size_t)dims[0];
    return 0;
}

/* Every byte of the open dataset `did` (of `path`) through sec2, PIECE bytes at a time (hyperslabs): written
 * with the pattern (`make`), or read back and compared with it. */
static int pattern_pass(const char *path, hid_t did, size_t size, int write) {
    size_t len = size < PIECE ? size : PIECE;
    unsigned char *piece = host_alloc(len);
    if (piece == NULL) return fail("cannot map %zu bytes of host memory", len);
    for (size_t at = 0; at < size; at += PIECE) {
        size_t n = size - at < PIECE ? size - at : PIECE;
        hsize_t start[1] = {at}, count[1] = {n};
        hid_t fsid, msid;
        H5_OK(fsid = H5Dget_space(did));
        H5_OK(H5Sselect_hyperslab(fsid, H5S_SELECT_SET, start, NULL, count, NULL));
        H5_OK(msid = H5Screate_simple(1, count, NULL));
        if (write) {
            pattern_fill(piece, n, at);
            H5_OK(H5Dwrite(did, H5T_NATIVE_UINT8, msid, fsid, H5P_DEFAULT, piece));
        } else {
            memset(piece, POISON, n);
            H5_OK(H5Dread(did, H5T_NATIVE_UINT8, msid, fsid, H5P_DEFAULT, piece));
            size_t bad = pattern_mismatch(piece, n, at);
            if (bad < n)
                return fail("%s: byte %zu of the dataset is 0x%02x, not 0x%02x", path, at + bad, piece[bad], pattern_byte(at + bad));
        }
        H5_OK(H5Sclose(msid));
        H5_OK(H5Sclose(fsid));
    }
    munmap(piece, len);
    return 0;
}

static int file_size(const char *path, uint64_t *size) {
    struct stat sb;
    if (stat(path, &sb) != 0) return fail("stat %s: %s", path, strerror(errno));
    *size = (uint64_t)sb.st_size;
    return 0;
}

/* ----------------------------------------------------------------------------------------------
 * Counters: gdsroute's route counters of each direction, and the driver's.
 * ------------------------------------------------------------------------------------------- */
#define GR_FIELD(name) {#name, offsetof(gdsroute_stats, name)},
#define GR_READ_FIELDS(X)                                                                          \
    X(calls) X(tasks) X(posix_tasks) X(posix_bytes) X(posix_tasks_host_memory) X(posix_tasks_compat_on)        \
        X(posix_tasks_auto_fallback) X(posix_mapped_bytes) X(posix_direct_bytes) X(cufile_tasks) X(cufile_bytes) \
            X(cufile_n_nvfs_reads) X(cufile_n_posix_reads)
#define GR_WRITE_FIELDS(X)                                                                         \
    X(write_calls) X(write_tasks) X(posix_write_tasks) X(posix_write_bytes) X(posix_direct_write_bytes)          \
        X(cufile_write_tasks) X(cufile_write_bytes) X(cufile_n_nvfs_writes) X(cufile_n_posix_writes)
struct field {
    const char *name;
    size_t offset;
};
static const struct field gr_read_fields[] = {GR_READ_FIELDS(GR_FIELD)};
static const struct field gr_write_fields[] = {GR_WRITE_FIELDS(GR_FIELD)};
#define VFD_FIELD(name) {#name, offsetof(H5FD_gdsroute_counters_t, name)},
static const struct field vfd_fields[] = {
    VFD_FIELD(opens) VFD_FIELD(open_failures) VFD_FIELD(raw_reads) VFD_FIELD(raw_read_bytes) VFD_FIELD(raw_writes)
        VFD_FIELD(raw_write_bytes) VFD_FIELD(metadata_reads) VFD_FIELD(metadata_read_bytes) VFD_FIELD(metadata_writes)
            VFD_FIELD(metadata_write_bytes) VFD_FIELD(device_buffer_calls) VFD_FIELD(host_buffer_calls)
                VFD_FIELD(zero_filled_bytes) VFD_FIELD(errors)};

static uint64_t field_of(const void *s, const struct field *f) {
    uint64_t v;
    memcpy(&v, (const char *)s + f->offset, sizeof v);
    return v;
}

struct counters {
    gdsroute_stats gr;
    H5FD_gdsroute_counters_t vfd;
};

static int counters_get(struct counters *c) {
    memset(c, 0, sizeof *c);
    c->gr.struct_size = sizeof c->gr;
    c->vfd.struct_size = sizeof c->vfd;
    gdsroute_status st = gdsroute_stats_get(&c->gr);
    if (st != GDSROUTE_STATUS_OK) return fail_gdsroute("gdsroute_stats_get", st);
    H5_OK(H5FD_gdsroute_get_counters(&c->vfd));
    return 0;
}

/* ----------------------------------------------------------------------------------------------
 * One transfer of the whole dataset of `path` (`size` bytes) in mode `mo`.
 * ------------------------------------------------------------------------------------------- */
struct run {
    double seconds, copy_s, total_s;
    uint64_t offset;
    struct counters before, after;
};

/* The raw way's file to write: HDF5's file as a program writing the dataset has it when its
 * H5Dwrite starts (metadata only; the data's place past the end). Made through sec2 with the
 * dataset allocated, then cut at the dataset's offset, which *offset receives. */
static int prepare_raw_write(const char *path, size_t size, uint64_t *offset) {
    hid_t fapl, fid, did;
    uint64_t length = 0;
    size_t have = 0;
    if (open_dataset(WAY_SEC2, path, 1, size, &fapl, &fid, &did) < 0 || close_dataset(fapl, fid, did) < 0 ||
        dataset_info(path, offset, &have) < 0 || file_size(path, &length) < 0)
        return -1;
    if (length != *offset + size) /* then the cut would lose metadata after the dataset */
        return fail("%s: %" PRIu64 " bytes, not the dataset's end (%" PRIu64 ")", path, length, *offset + size);
    if (truncate(path, (off_t)*offset) != 0) return fail("truncate %s: %s", path, strerror(errno));
    return 0;
}

static int transfer(const struct mode *mo, const char *path, struct memory *m, size_t size, struct run *r) {
    void *user = user_data(m);
    if (mo->write && mo->way == WAY_RAW) {
        if (prepare_raw_write(path, size, &r->offset) < 0) return -1;
    } else if (!mo->write) {
        size_t have = 0;
        if (dataset_info(path, &r->offset, &have) < 0) return -1;
        if (have != size) return fail("%s: dataset \"%s\" has %zu bytes, not %zu", path, DATASET, have, size);
    }
    double t0 = now(), t1, t2, tc = 0;
    if (mo->way == WAY_RAW) {
        gdsroute_file *f = NULL;
        gdsroute_status st = gdsroute_file_open(path, mo->write ? "r+" : "r", 0, &f); /* the driver's flags */
        if (st != GDSROUTE_STATUS_OK) return fail_gdsroute("gdsroute_file_open", st);
        if (counters_get(&r->before) < 0) return -1;
        t1 = now();
        gdsroute_op *op = NULL;
        st = mo->write ? gdsroute_file_pwrite(f, user, size, r->offset, &op) : gdsroute_file_pread(f, user, size, r->offset, &op);
        size_t done = 0;
        if (st == GDSROUTE_STATUS_OK) st = gdsroute_op_wait(op, &done);
        gdsroute_op_free(op);
        t2 = now();
        if (st != GDSROUTE_STATUS_OK) return fail_gdsroute(mo->write ? "gdsroute_file_pwrite" : "gdsroute_file_pread", st);
        if (done != size) return fail("%zu of %zu bytes moved", done, size);
        if (counters_get(&r->after) < 0) return -1;
        st = gdsroute_file_close(f);
        gdsroute_file_free(f);
        if (st != GDSROUTE_STATUS_OK) return fail_gdsroute("gdsroute_file_close", st);
    } else {
        int sec2 = mo->way == WAY_SEC2;
        unsigned char *staging = m->staging;
        hid_t fapl, fid, did;
        if (open_dataset(mo->way, path, mo->write, size, &fapl, &fid, &did) < 0) return -1;
        if (mo->write) {
            haddr_t at = H5Dget_offset(did);
            if (at == HADDR_UNDEF) return fail("%s: the new dataset has no offset (H5Dget_offset)", path);
            r->offset = (uint64_t)at;
        }
        if (counters_get(&r->before) < 0) return -1;
        t1 = now();
        if (!mo->write) {
            H5_OK(H5Dread(did, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, sec2 ? (void *)staging : user));
            tc = now();
            if (sec2 && copy_staging(m, size, 1) < 0) return -1;
        } else {
            if (sec2 && copy_staging(m, size, 0) < 0) return -1;
            tc = now();
            H5_OK(H5Dwrite(did, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, sec2 ? (void *)staging : user));
        }
        t2 = now();
        if (counters_get(&r->after) < 0) return -1;
        if (sec2) r->copy_s = mo->write ? tc - t1 : t2 - tc;
        if (close_dataset(fapl, fid, did) < 0) return -1;
    }
    double t3 = now();
    r->seconds = t2 - t1;
    r->total_s = t3 - t0;
    return 0;
}

/* A written file: the dataset where the write put it, of `size` bytes, every byte the pattern
 * (read back through sec2); the raw way's file ends where the dataset does. */
static int check_written_file(const struct mode *mo, const char *path, size_t size, uint64_t offset) {
    uint64_t length = 0, at = 0;
    size_t have = 0;
    if (file_size(path, &length) < 0 || dataset_info(path, &at, &have) < 0) return -1;
    if (at != offset || have != size)
        return fail("%s: the dataset holds %zu bytes at offset %" PRIu64 ", not %zu at %" PRIu64, path, have, at, size, offset);
    if (length < offset + size || (mo->way == WAY_RAW && length != offset + size))
        return fail("%s: %" PRIu64 " bytes long; the dataset ends at %" PRIu64, path, length, offset + size);
    hid_t fapl, fid, did;
    if (open_dataset(WAY_SEC2, path, 0, 0, &fapl, &fid, &did) < 0 || pattern_pass(path, did, size, 0) < 0) return -1;
    return close_dataset(fapl, fid, did);
}

static void print_run(const struct mode *mo, const struct memory *m, const struct run *r, int warm_up, int verified) {
    const struct field *gr = mo->write ? gr_write_fields : gr_read_fields;
    size_t ngr = mo->write ? sizeof gr_write_fields / sizeof *gr : sizeof gr_read_fields / sizeof *gr;
    const gdsroute_stats *a = &r->after.gr, *b = &r->before.gr;
    uint64_t posix = mo->write ? a->posix_write_tasks - b->posix_write_tasks : a->posix_tasks - b->posix_tasks;
    uint64_t cufile = mo->write ? a->cufile_write_tasks - b->cufile_write_tasks : a->cufile_tasks - b->cufile_tasks;
    const char *route = posix && cufile ? "mixed" : posix ? "posix" : cufile ? "cufile" : "none";
    const char *copy = mo->way != WAY_SEC2 ? "none" : !m->device ? "memcpy" : mo->write ? "cuMemcpyDtoH" : "cuMemcpyHtoD";
    size_t threads = 0;
    if (gdsroute_settings_get_num_threads(&threads) != GDSROUTE_STATUS_OK) threads = 0;
    printf("HDF5 mode=%s dir=%s bytes=%zu seconds=%.6f gbps=%.3f mem=%s copy=%s copy_s=%.6f total_s=%.6f offset=%" PRIu64
           " threads=%zu warm_up=%d route=%s",
           mo->name, mo->write ? "write" : "read", m->size, r->seconds, (double)m->size / r->seconds / 1e9,
           m->device ? "device" : "host", copy, r->copy_s, r->total_s, r->offset, threads, warm_up, route);
    for (size_t i = 0; i < ngr; i++)
        printf(" gr_%s=%" PRIu64, gr[i].name, field_of(&r->after.gr, &gr[i]) - field_of(&r->before.gr, &gr[i]));
    for (size_t i = 0; i < sizeof vfd_fields / sizeof *vfd_fields; i++)
        printf(" vfd_%s=%" PRIu64, vfd_fields[i].name,
               field_of(&r->after.vfd, &vfd_fields[i]) - field_of(&r->before.vfd, &vfd_fields[i]));
    printf(" verified=%d\n", verified);
    fflush(stdout);
}

/* ----------------------------------------------------------------------------------------------
 * Commands.
 * ------------------------------------------------------------------------------------------- */
static int make(const char *path, size_t size) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.part", path) >= (int)sizeof tmp) return fail("path too long");
    double t0 = now();
    hid_t fapl, fid, did;
    if (open_dataset(WAY_SEC2, tmp, 1, size, &fapl, &fid, &did) < 0 || pattern_pass(tmp, did, size, 1) < 0 ||
        close_dataset(fapl, fid, did) < 0)
        return -1;
    if (rename(tmp, path) != 0) return fail("rename %s to %s: %s", tmp, path, strerror(errno));
    uint64_t offset = 0;
    size_t have = 0;
    if (dataset_info(path, &offset, &have) < 0) return -1;
    printf("MADE file=%s bytes=%zu offset=%" PRIu64 " seconds=%.3f\n", path, have, offset, now() - t0);
    return 0;
}

static int run_mode(const struct mode *mo, const char *path, size_t size, const char *memory, const char *warm_with) {
    struct memory m;
    int rc = memory_setup(&m, memory, size, mo->way == WAY_SEC2);
    if (rc != 0) return rc;
    if (mo->write && memory_reset(&m, 1) < 0) return -1;
    struct run r;
    memset(&r, 0, sizeof r);
    if (warm_with != NULL) {
        size_t wsize = size < WARM_WRITE_BYTES ? size : WARM_WRITE_BYTES;
        uint64_t woffset = 0;
        if (!mo->write) {
            if (dataset_info(warm_with, &woffset, &wsize) < 0) return -1;
            if (wsize > size) return fail("--warm-with %s: its %zu bytes exceed the %zu of the buffer", warm_with, wsize, size);
        }
        if (transfer(mo, warm_with, &m, wsize, &r) < 0) return -1;
        if (mo->write && unlink(warm_with) != 0) return fail("unlink %s: %s", warm_with, strerror(errno));
        if (memory_reset(&m, mo->write) < 0) return -1;
    }
    memset(&r, 0, sizeof r);
    if (transfer(mo, path, &m, size, &r) < 0) return -1;
    /* The checks, untimed. */
    int ok = mo->write ? check_written_file(mo, path, size, r.offset) == 0 && check_user_memory(&m, "the source") == 0
                       : check_user_memory(&m, "the destination") == 0;
    print_run(mo, &m, &r, warm_with != NULL, ok);
    return ok ? 0 : -1;
}

static int usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s make FILE SIZE\n"
            "       %s MODE FILE SIZE [--memory auto|device|host] [--warm-with PATH]\n"
            "       %s version\n"
            "MODE: driver-read pread-read sec2-read driver-write pwrite-write sec2-write; SIZE: bytes, "
            "or with K, M, G (1G, 512MiB)\n",
            argv0, argv0, argv0);
    return 2;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "version") == 0) {
        unsigned maj = 0, min = 0, rel = 0;
        if (H5get_libversion(&maj, &min, &rel) < 0 || H5FD_GDSROUTE < 0) {
            fail("HDF5 or the driver failed to start");
            return 1;
        }
        printf("VERSION hdf5=%u.%u.%u gdsroute=%s driver=%s\n", maj, min, rel, gdsroute_version_string(), H5FD_GDSROUTE_NAME);
        return 0;
    }
    if (argc < 4) return usage(argv[0]);
    const char *path = argv[2];
    uint64_t size64 = parse_size(argv[3]);
    if (size64 == 0 || size64 > (uint64_t)SIZE_MAX / 2)
        return fprintf(stderr, "bench_hdf5: bad SIZE '%s'\n", argv[3]), usage(argv[0]);
    size_t size = (size_t)size64;
    if (strcmp(argv[1], "make") == 0) {
        what_runs = "make";
        return argc == 4 && make(path, size) == 0 ? 0 : argc == 4 ? 1 : usage(argv[0]);
    }
    const struct mode *mo = NULL;
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
        if (strcmp(argv[1], modes[i].name) == 0) mo = &modes[i];
    if (mo == NULL) return fprintf(stderr, "bench_hdf5: unknown mode '%s'\n", argv[1]), usage(argv[0]);
    what_runs = mo->name;
    const char *memory = "auto", *warm_with = NULL;
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "--memory") == 0 && i + 1 < argc) memory = argv[++i];
        else if (strcmp(argv[i], "--warm-with") == 0 && i + 1 < argc) warm_with = argv[++i];
        else return fprintf(stderr, "bench_hdf5: bad argument '%s'\n", argv[i]), usage(argv[0]);
    }
    if (strcmp(memory, "auto") != 0 && strcmp(memory, "device") != 0 && strcmp(memory, "host") != 0)
        return fprintf(stderr, "bench_hdf5: --memory takes auto, device or host, not '%s'\n", memory), usage(argv[0]);
    if (warm_with != NULL && strcmp(warm_with, path) == 0)
        return fprintf(stderr, "bench_hdf5: --warm-with must name another file than FILE\n"), usage(argv[0]);
    int rc = run_mode(mo, path, size, memory, warm_with);
    return rc == 0 ? 0 : rc == 3 ? 3 : 1;
}
