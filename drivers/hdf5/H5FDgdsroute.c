/*
 * H5FDgdsroute.c: the gdsroute HDF5 virtual file driver, one job: HDF5's driver callbacks on a
 * gdsroute handle per file. Raw data goes through gdsroute_file_pread/_pwrite (gdsroute's
 * parallel calls, on its routes for host, device or managed memory), metadata through
 * gdsroute_file_read/_write, both with the pointer HDF5 gives; every failure goes on HDF5's error
 * stack with gdsroute's message. Users' guide, and what HDF5 does before a buffer reaches the
 * driver: docs/hdf5.md.
 *
 * In this file, in order: the HDF5 versions and the class layout they imply; errors; counters;
 * which memory a buffer is in; zeros past the end of the file; the locking switch; settings; the
 * callbacks; the class; the public functions and the plugin entry points.
 */
#ifndef _GNU_SOURCE /* memfd_create; HDF5 2.x's CMake package defines it too */
#define _GNU_SOURCE
#endif

#include "H5FDgdsroute.h"

#include <gdsroute.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ----------------------------------------------------------------------------------------------
 * HDF5 versions. H5FD_class_t gained a version, a value, vector and selection I/O, del and ctl
 * (and dynamically loaded drivers) in 1.13.2; 1.10 and 1.12 have the older layout.
 * H5Pget_file_locking, needed to honour H5Pset_file_locking as sec2 does, came in 1.10.7 and
 * 1.12.1.
 * ------------------------------------------------------------------------------------------- */
#if !H5_VERSION_GE(1, 10, 7) || (H5_VERSION_GE(1, 12, 0) && !H5_VERSION_GE(1, 12, 1)) ||             \
    (H5_VERSION_GE(1, 13, 0) && !H5_VERSION_GE(1, 13, 2))
#error "the gdsroute HDF5 driver needs HDF5 1.10.7+, 1.12.1+, or 1.13.2 and later (1.14, 2.x)"
#endif
#define GR_DYNAMIC_DRIVERS H5_VERSION_GE(1, 13, 2)
#if GR_DYNAMIC_DRIVERS
#include <H5PLextern.h>
#endif

#define GR_EXPORT H5FD_GDSROUTE_API

/* The largest address: off_t's range, as sec2's. */
_Static_assert(sizeof(off_t) == 8, "64-bit file offsets are required");
#define GR_MAXADDR ((haddr_t)INT64_MAX)

/* The driver's file: HDF5's public part first, as every driver's. */
typedef struct {
    H5FD_t pub;
    gdsroute_file *file;
    int fd;            /* gdsroute_file_fd: the get_handle callback's answer */
    char *name;        /* as HDF5 gave it, for messages */
    haddr_t eoa;       /* end of the address space HDF5 allocated */
    haddr_t eof;       /* end of the file as the driver left it */
    dev_t device;      /* device and inode: cmp */
    ino_t inode;
    bool ignore_disabled_file_locks;
    H5FD_gdsroute_fapl_t config;
} gr_file_t;

static const H5FD_class_t gr_class;
static _Atomic hid_t gr_driver_id = H5I_INVALID_HID;

/* ----------------------------------------------------------------------------------------------
 * Errors: the driver's own class on HDF5's default stack, HDF5's major and minor codes.
 * ------------------------------------------------------------------------------------------- */
static _Atomic hid_t gr_error_class = H5I_INVALID_HID;

/* The error class, registered once (again after the terminate callback). Every entry point
 * calls this first, before anything can fail: H5FD_gdsroute_init and the other public functions,
 * and the open and delete callbacks (the first of a file's callbacks, which under HDF5_DRIVER run
 * without any public function). H5Eregister_class is an API call and clears the thread's error
 * stack, so a registration at the first error would drop the records HDF5 had already pushed in
 * that call (the open callback's reads of its list are API calls too: gr_open). No lock of the
 * driver's is held across the HDF5 call: a threadsafe HDF5 holds its own around every callback,
 * so the two could deadlock; a registration that lost the race is undone. */
static hid_t gr_error_class_id(void) {
    hid_t id = atomic_load(&gr_error_class);
    if (id != H5I_INVALID_HID) return id;
    hid_t fresh = H5Eregister_class("gdsroute HDF5 driver", "gdsroute", GDSROUTE_VERSION_STRING);
    if (fresh < 0 || atomic_compare_exchange_strong(&gr_error_class, &id, fresh)) return fresh;
    (void)H5Eunregister_class(fresh);
    return id;
}

#define GR_ERROR(maj, min, ...) gr_push(__func__, __LINE__, (maj), (min), __VA_ARGS__)

__attribute__((format(printf, 5, 6))) static void gr_push(const char *func, unsigned line, hid_t maj,
                                                           hid_t min, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hid_t cls = gr_error_class_id();
    if (cls < 0) /* cannot happen short of HDF5 failing; say it where a person looks */
        fprintf(stderr, "gdsroute HDF5 driver: %s\n", msg);
    else
        H5Epush2(H5E_DEFAULT, __FILE__, func, line, cls, maj, min, "%s", msg);
}

/* Pushes the failure of the gdsroute call `what` (status `st`) with gdsroute's own message. */
#define GR_GDSROUTE_ERROR(maj, min, st, ...)                                                       \
    gr_push_gdsroute(__func__, __LINE__, (maj), (min), (st), __VA_ARGS__)

__attribute__((format(printf, 6, 7))) static void gr_push_gdsroute(const char *func, unsigned line, hid_t maj,
                                                                    hid_t min, gdsroute_status st,
                                                                    const char *fmt, ...) {
    char what[1024];
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    gdsroute_last_error_message(detail, sizeof detail);
    gr_push(func, line, maj, min, "%s: %s (gdsroute status %u, %s)", what, detail, (unsigned)st,
            gdsroute_status_str(st));
}

/* ----------------------------------------------------------------------------------------------
 * Counters: per process, atomic, each also added to gdsroute's exit report (section "hdf5").
 * One table: the public struct's field and the report's name of each.
 * ------------------------------------------------------------------------------------------- */
enum gr_counter {
    GR_OPENS, GR_OPEN_FAILURES, GR_RAW_READS, GR_RAW_READ_BYTES, GR_RAW_WRITES, GR_RAW_WRITE_BYTES,
    GR_META_READS, GR_META_READ_BYTES, GR_META_WRITES, GR_META_WRITE_BYTES, GR_DEVICE_CALLS,
    GR_HOST_CALLS, GR_ZERO_FILLED, GR_ERRORS, GR_COUNTERS
};
#define GR_FIELD(name) {#name, offsetof(H5FD_gdsroute_counters_t, name)}
static const struct {
    const char *name;
    size_t offset;
} gr_counter_fields[GR_COUNTERS] = {
    GR_FIELD(opens), GR_FIELD(open_failures), GR_FIELD(raw_reads), GR_FIELD(raw_read_bytes),
    GR_FIELD(raw_writes), GR_FIELD(raw_write_bytes), GR_FIELD(metadata_reads),
    GR_FIELD(metadata_read_bytes), GR_FIELD(metadata_writes), GR_FIELD(metadata_write_bytes),
    GR_FIELD(device_buffer_calls), GR_FIELD(host_buffer_calls), GR_FIELD(zero_filled_bytes),
    GR_FIELD(errors),
};
static _Atomic uint64_t gr_counters[GR_COUNTERS];

static void gr_count(enum gr_counter c, uint64_t delta) {
    if (delta == 0) return;
    atomic_fetch_add_explicit(&gr_counters[c], delta, memory_order_relaxed);
    /* Fails only for NULL or empty names, which these are not. */
    (void)gdsroute_report_add_counter("hdf5", gr_counter_fields[c].name, delta);
}

/* Which memory a raw-data buffer is in (metadata buffers are HDF5's own host memory), as gdsroute
 * routes it. Only host memory may be zeroed with memset past the end of the file; device and
 * managed memory, and a buffer whose classification failed (the CUDA driver failing: it may be a
 * device pointer), get their zeros through gdsroute, which works for any memory. */
enum gr_memory { GR_MEMORY_HOST, GR_MEMORY_DEVICE, GR_MEMORY_UNKNOWN };

static enum gr_memory gr_memory_of(const void *buf) {
    uint32_t kind = GDSROUTE_OBSERVED_MEMORY_UNKNOWN;
    if (gdsroute_memory_kind(buf, &kind) != GDSROUTE_STATUS_OK) return GR_MEMORY_UNKNOWN;
    return kind == GDSROUTE_OBSERVED_MEMORY_HOST ? GR_MEMORY_HOST : GR_MEMORY_DEVICE;
}

/* ----------------------------------------------------------------------------------------------
 * Zeros past the end of the file, in any memory: host buffers get memset; the others (device
 * memory, and memory gr_memory_of could not classify) are read from a sparse memfd through
 * gdsroute, which routes it as any read (compat mode ON: no cuFile probe of a memfd).
 * ------------------------------------------------------------------------------------------- */
#define GR_ZERO_SPAN ((size_t)1 << 30)
static pthread_once_t gr_zeros_once = PTHREAD_ONCE_INIT;
static gdsroute_file *gr_zeros;

static void gr_zeros_open(void) {
    int fd = memfd_create("gdsroute-hdf5-zeros", MFD_CLOEXEC);
    if (fd < 0) return;
    if (ftruncate(fd, (off_t)GR_ZERO_SPAN) != 0 ||
        gdsroute_file_open_fd_with_compat_mode(fd, GDSROUTE_COMPAT_MODE_ON, &gr_zeros) != GDSROUTE_STATUS_OK)
        gr_zeros = NULL;
    close(fd); /* the handle holds a duplicate */
}

/* Fills buf[0, len) with zeros. 0, or -1 with an error pushed. */
static int gr_zero_fill(const gr_file_t *f, void *buf, size_t len, uint64_t file_offset, enum gr_memory memory) {
    if (memory == GR_MEMORY_HOST) {
        memset(buf, 0, len);
        return 0;
    }
    pthread_once(&gr_zeros_once, gr_zeros_open);
    if (gr_zeros == NULL) {
        GR_ERROR(H5E_IO, H5E_READERROR,
                 "'%s': %zu bytes at offset %llu lie past the end of the file, to be zeroed in device "
                 "memory (or memory gdsroute_memory_kind could not classify), but no source of zeros "
                 "could be opened (memfd_create)",
                 f->name, len, (unsigned long long)file_offset);
        return -1;
    }
    for (size_t done = 0; done < len;) {
        size_t n = len - done < GR_ZERO_SPAN ? len - done : GR_ZERO_SPAN;
        size_t got = 0;
        gdsroute_status st = gdsroute_file_read(gr_zeros, (char *)buf + done, n, 0, &got);
        if (st != GDSROUTE_STATUS_OK || got != n) {
            GR_GDSROUTE_ERROR(H5E_IO, H5E_READERROR, st,
                              "'%s': zero-filling %zu bytes past the end of the file (offset %llu)",
                              f->name, n, (unsigned long long)(file_offset + done));
            return -1;
        }
        done += n;
    }
    return 0;
}

/* ----------------------------------------------------------------------------------------------
 * HDF5_USE_FILE_LOCKING's override of the ignore-when-disabled flag, read once per process at
 * the first open, as sec2 reads it.
 * ------------------------------------------------------------------------------------------- */
static pthread_once_t gr_lock_env_once = PTHREAD_ONCE_INIT;
static int gr_lock_env = -1; /* 1 BEST_EFFORT, 0 TRUE/1, -1 unset (the property decides) */

static void gr_read_lock_env(void) {
    const char *v = getenv("HDF5_USE_FILE_LOCKING");
    if (v != NULL && strcmp(v, "BEST_EFFORT") == 0)
        gr_lock_env = 1;
    else if (v != NULL && (strcmp(v, "TRUE") == 0 || strcmp(v, "1") == 0))
        gr_lock_env = 0;
}

/* ----------------------------------------------------------------------------------------------
 * Settings of a file access list.
 * ------------------------------------------------------------------------------------------- */
static const H5FD_gdsroute_fapl_t gr_default_config = {H5FD_GDSROUTE_FAPL_VERSION, H5FD_GDSROUTE_COMPAT_DEFAULT, 0};

static bool gr_config_valid(const H5FD_gdsroute_fapl_t *c) {
    return c->version == H5FD_GDSROUTE_FAPL_VERSION &&
           (c->compat_mode == H5FD_GDSROUTE_COMPAT_DEFAULT || c->compat_mode <= GDSROUTE_COMPAT_MODE_AUTO) &&
           c->sync_on_flush <= 1;
}

/* The list's settings, or the defaults for a list that names the driver without them. */
static H5FD_gdsroute_fapl_t gr_config_of(hid_t fapl_id) {
    const void *info = NULL;
    H5E_BEGIN_TRY { info = H5Pget_driver_info(fapl_id); }
    H5E_END_TRY
    if (info != NULL) return *(const H5FD_gdsroute_fapl_t *)info;
    /* H5E_BEGIN_TRY only silences the printing: the record of the missing info would outlive a
     * call that succeeds. */
    H5Eclear2(H5E_DEFAULT);
    return gr_default_config;
}

static void *gr_fapl_copy(const void *info) {
    H5FD_gdsroute_fapl_t *copy = malloc(sizeof *copy);
    if (copy != NULL) *copy = *(const H5FD_gdsroute_fapl_t *)info;
    return copy;
}

static herr_t gr_fapl_free(void *info) {
    free(info);
    return 0;
}

static void *gr_fapl_get(H5FD_t *file) { return gr_fapl_copy(&((gr_file_t *)file)->config); }

/* ----------------------------------------------------------------------------------------------
 * The callbacks.
 * ------------------------------------------------------------------------------------------- */

/* HDF5's access flags as gdsroute's open flags; NULL for a combination HDF5 does not make. */
static const char *gr_open_mode(unsigned flags) {
    unsigned create = flags & (H5F_ACC_CREAT | H5F_ACC_TRUNC | H5F_ACC_EXCL);
    if (!(flags & H5F_ACC_RDWR)) return create == 0 ? "r" : NULL;
    if (create == 0) return "r+";
    if (create == (H5F_ACC_CREAT | H5F_ACC_TRUNC)) return "w+";
    if (create == (H5F_ACC_CREAT | H5F_ACC_EXCL) || create == (H5F_ACC_CREAT | H5F_ACC_EXCL | H5F_ACC_TRUNC))
        return "x+";
    return NULL;
}

/* Reads its list through HDF5's API (H5Pget_driver_info, H5Pget_file_locking, ...), and every
 * API call clears the thread's error stack: records pushed earlier in the same HDF5 call would be
 * lost. HDF5 leaves none there when it calls open: 1.10.8 clears the stack before its second
 * attempt (H5Fcreate's, after the tentative open without creating failed), and 2.2.0 records
 * nothing during the first. */
static H5FD_t *gr_open(const char *name, unsigned flags, hid_t fapl_id, haddr_t maxaddr) {
    (void)gr_error_class_id();
    pthread_once(&gr_lock_env_once, gr_read_lock_env);
    const char *mode = gr_open_mode(flags);
    if (name == NULL || *name == '\0' || maxaddr == 0 || maxaddr == HADDR_UNDEF || maxaddr > GR_MAXADDR ||
        mode == NULL) {
        gr_count(GR_OPEN_FAILURES, 1);
        GR_ERROR(H5E_ARGS, H5E_BADVALUE, "open of '%s': bad arguments (flags 0x%x, maxaddr %llu)",
                 name ? name : "(null)", flags, (unsigned long long)maxaddr);
        return NULL;
    }
    H5FD_gdsroute_fapl_t config = gr_config_of(fapl_id);
#if GR_DYNAMIC_DRIVERS
    ssize_t config_str = 0;
    H5E_BEGIN_TRY { config_str = H5Pget_driver_config_str(fapl_id, NULL, 0); }
    H5E_END_TRY
    if (config_str > 0) {
        gr_count(GR_OPEN_FAILURES, 1);
        GR_ERROR(H5E_VFL, H5E_BADVALUE,
                 "open of '%s': the gdsroute driver takes no configuration string (HDF5_DRIVER_CONFIG); "
                 "use H5Pset_fapl_gdsroute or gdsroute's environment variables (KVIKIO_COMPAT_MODE, ...)",
                 name);
        return NULL;
    }
#endif
    hbool_t use_locks = true, ignore_disabled = false;
    if (gr_lock_env < 0 && H5Pget_file_locking(fapl_id, &use_locks, &ignore_disabled) < 0) {
        gr_count(GR_OPEN_FAILURES, 1);
        GR_ERROR(H5E_VFL, H5E_CANTGET, "open of '%s': cannot read the file locking property", name);
        return NULL;
    }
    gr_file_t *f = calloc(1, sizeof *f);
    char *name_copy = strdup(name);
    if (f == NULL || name_copy == NULL) {
        free(f);
        free(name_copy);
        gr_count(GR_OPEN_FAILURES, 1);
        GR_ERROR(H5E_RESOURCE, H5E_NOSPACE, "open of '%s': out of memory", name);
        return NULL;
    }
    gdsroute_status st =
        config.compat_mode == H5FD_GDSROUTE_COMPAT_DEFAULT
            ? gdsroute_file_open(name, mode, 0666, &f->file)
            : gdsroute_file_open_with_compat_mode(name, mode, 0666, config.compat_mode, &f->file);
    struct stat sb;
    if (st != GDSROUTE_STATUS_OK) {
        GR_GDSROUTE_ERROR(H5E_FILE, H5E_CANTOPENFILE, st, "gdsroute_file_open of '%s' with flags \"%s\"",
                          name, mode);
    } else if ((st = gdsroute_file_fd(f->file, &f->fd)) != GDSROUTE_STATUS_OK) {
        GR_GDSROUTE_ERROR(H5E_FILE, H5E_CANTOPENFILE, st, "gdsroute_file_fd of '%s'", name);
    } else if (fstat(f->fd, &sb) != 0) {
        int e = errno;
        GR_ERROR(H5E_FILE, H5E_BADFILE, "fstat of '%s': %s (errno %d)", name, strerror(e), e);
        st = GDSROUTE_STATUS_IO_ERROR;
    }
    if (st != GDSROUTE_STATUS_OK) {
        gdsroute_file_free(f->file);
        free(name_copy);
        free(f);
        gr_count(GR_OPEN_FAILURES, 1);
        return NULL;
    }
    f->name = name_copy;
    f->eof = (haddr_t)sb.st_size;
    f->device = sb.st_dev;
    f->inode = sb.st_ino;
    f->ignore_disabled_file_locks = gr_lock_env >= 0 ? gr_lock_env == 1 : ignore_disabled;
    f->config = config;
    gr_count(GR_OPENS, 1);
    return &f->pub;
}

static herr_t gr_close(H5FD_t *file) {
    gr_file_t *f = (gr_file_t *)file;
    gdsroute_status st = gdsroute_file_close(f->file);
    if (st != GDSROUTE_STATUS_OK) {
        gr_count(GR_ERRORS, 1);
        GR_GDSROUTE_ERROR(H5E_IO, H5E_CANTCLOSEFILE, st, "gdsroute_file_close of '%s'", f->name);
    }
    gdsroute_file_free(f->file);
    free(f->name);
    free(f);
    return st == GDSROUTE_STATUS_OK ? 0 : -1;
}

static int gr_cmp(const H5FD_t *a, const H5FD_t *b) {
    const gr_file_t *f1 = (const gr_file_t *)a, *f2 = (const gr_file_t *)b;
    if (f1->device != f2->device) return f1->device < f2->device ? -1 : 1;
    if (f1->inode != f2->inode) return f1->inode < f2->inode ? -1 : 1;
    return 0;
}

/* Feature flags: sec2's, less data sieving. With H5FD_FEAT_DATA_SIEVE HDF5 reads and writes a
 * contiguous dataset's pieces smaller than its sieve buffer (64 KiB) through that host buffer,
 * with memcpy to and from the caller's; without it every piece is handed to the driver with the
 * caller's pointer. The two aggregations concern file space only, and keep files laid out as
 * sec2 lays them. Metadata accumulation keeps metadata only: H5F__accum_read/_write hand raw
 * data (H5FD_MEM_DRAW) to the driver with the caller's pointer, and after a raw read
 * H5F__accum_read copies into its buffer the dirty accumulator bytes the read overlaps, which
 * needs raw data and metadata at the same addresses: a valid file never has that. */
static herr_t gr_query(const H5FD_t *file, unsigned long *flags) {
    (void)file;
    if (flags != NULL)
        *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_AGGREGATE_SMALLDATA |
                 H5FD_FEAT_POSIX_COMPAT_HANDLE | H5FD_FEAT_DEFAULT_VFD_COMPATIBLE;
    return 0;
}

static haddr_t gr_get_eoa(const H5FD_t *file, H5FD_mem_t type) {
    (void)type;
    return ((const gr_file_t *)file)->eoa;
}

static herr_t gr_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr) {
    (void)type;
    ((gr_file_t *)file)->eoa = addr;
    return 0;
}

static haddr_t gr_get_eof(const H5FD_t *file, H5FD_mem_t type) {
    (void)type;
    return ((const gr_file_t *)file)->eof;
}

static herr_t gr_get_handle(H5FD_t *file, hid_t fapl, void **handle) {
    (void)fapl;
    if (handle == NULL) {
        gr_count(GR_ERRORS, 1);
        GR_ERROR(H5E_ARGS, H5E_BADVALUE, "get_handle: NULL handle pointer");
        return -1;
    }
    *handle = &((gr_file_t *)file)->fd;
    return 0;
}

/* One transfer: raw data through gdsroute's parallel calls, metadata through its one-call forms.
 * *done receives the bytes moved. */
static gdsroute_status gr_transfer(const gr_file_t *f, bool raw, bool write, void *buf, size_t size,
                                   uint64_t offset, size_t *done) {
    if (!raw)
        return write ? gdsroute_file_write(f->file, buf, size, offset, done)
                     : gdsroute_file_read(f->file, buf, size, offset, done);
    gdsroute_op *op = NULL;
    gdsroute_status st = write ? gdsroute_file_pwrite(f->file, buf, size, offset, &op)
                               : gdsroute_file_pread(f->file, buf, size, offset, &op);
    if (st == GDSROUTE_STATUS_OK) st = gdsroute_op_wait(op, done);
    gdsroute_op_free(op);
    return st;
}

/* The read and write callbacks' one body. */
static herr_t gr_read_or_write(gr_file_t *f, H5FD_mem_t type, bool write, haddr_t addr, size_t size, void *buf) {
    bool raw = type == H5FD_MEM_DRAW;
    const char *call = raw ? (write ? "gdsroute_file_pwrite" : "gdsroute_file_pread")
                           : (write ? "gdsroute_file_write" : "gdsroute_file_read");
    if (addr == HADDR_UNDEF || addr > GR_MAXADDR || size > GR_MAXADDR - addr) {
        gr_count(GR_ERRORS, 1);
        GR_ERROR(H5E_ARGS, H5E_OVERFLOW, "'%s': %zu bytes at address %llu lie beyond the largest file offset",
                 f->name, size, (unsigned long long)addr);
        return -1;
    }
    enum gr_memory memory = raw ? gr_memory_of(buf) : GR_MEMORY_HOST;
    size_t done = 0;
    gdsroute_status st = gr_transfer(f, raw, write, buf, size, addr, &done);
    if (st != GDSROUTE_STATUS_OK) {
        gr_count(GR_ERRORS, 1);
        GR_GDSROUTE_ERROR(H5E_IO, write ? H5E_WRITEERROR : H5E_READERROR, st,
                          "%s of %zu bytes at offset %llu of '%s'", call, size, (unsigned long long)addr,
                          f->name);
        if (write) { /* part of it may have reached the file */
            uint64_t now = 0;
            if (gdsroute_file_size(f->file, &now) == GDSROUTE_STATUS_OK) f->eof = now;
        }
        return -1;
    }
    if (!write && done < size) {
        if (gr_zero_fill(f, (char *)buf + done, size - done, addr + done, memory) < 0) {
            gr_count(GR_ERRORS, 1);
            return -1;
        }
        gr_count(GR_ZERO_FILLED, size - done);
    }
    if (write && addr + size > f->eof) f->eof = addr + size;
    gr_count(raw ? (write ? GR_RAW_WRITES : GR_RAW_READS) : (write ? GR_META_WRITES : GR_META_READS), 1);
    gr_count(raw ? (write ? GR_RAW_WRITE_BYTES : GR_RAW_READ_BYTES) : (write ? GR_META_WRITE_BYTES : GR_META_READ_BYTES),
             done);
    if (memory != GR_MEMORY_UNKNOWN) gr_count(memory == GR_MEMORY_DEVICE ? GR_DEVICE_CALLS : GR_HOST_CALLS, 1);
    return 0;
}

static herr_t gr_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, void *buf) {
    (void)dxpl;
    return gr_read_or_write((gr_file_t *)file, type, false, addr, size, buf);
}

static herr_t gr_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, const void *buf) {
    (void)dxpl;
    /* A write only reads the buffer; gr_read_or_write takes one pointer type for both directions. */
    return gr_read_or_write((gr_file_t *)file, type, true, addr, size, (void *)(uintptr_t)buf);
}

static herr_t gr_flush(H5FD_t *file, hid_t dxpl, hbool_t closing) {
    (void)dxpl;
    (void)closing;
    gr_file_t *f = (gr_file_t *)file;
    if (!f->config.sync_on_flush) return 0;
    gdsroute_status st = gdsroute_file_sync(f->file);
    if (st == GDSROUTE_STATUS_OK) return 0;
    gr_count(GR_ERRORS, 1);
    GR_GDSROUTE_ERROR(H5E_IO, H5E_WRITEERROR, st, "gdsroute_file_sync of '%s'", f->name);
    return -1;
}

/* As sec2: the file's size becomes the end of the allocated address space. */
static herr_t gr_truncate(H5FD_t *file, hid_t dxpl, hbool_t closing) {
    (void)dxpl;
    (void)closing;
    gr_file_t *f = (gr_file_t *)file;
    if (f->eoa == f->eof) return 0;
    gdsroute_status st = gdsroute_file_truncate(f->file, f->eoa);
    if (st != GDSROUTE_STATUS_OK) {
        gr_count(GR_ERRORS, 1);
        GR_GDSROUTE_ERROR(H5E_IO, H5E_SEEKERROR, st, "gdsroute_file_truncate of '%s' to %llu bytes", f->name,
                          (unsigned long long)f->eoa);
        return -1;
    }
    f->eof = f->eoa;
    return 0;
}

/* A file system without flock (ENOSYS; gdsroute also names EOPNOTSUPP) is no error when HDF5 is
 * told to ignore disabled locks (H5Pset_file_locking, HDF5_USE_FILE_LOCKING=BEST_EFFORT). */
static bool gr_lock_ignorable(const gr_file_t *f) {
    int e = gdsroute_last_error_errno();
    return f->ignore_disabled_file_locks && (e == ENOSYS || e == EOPNOTSUPP);
}

static herr_t gr_lock(H5FD_t *file, hbool_t rw) {
    gr_file_t *f = (gr_file_t *)file;
    gdsroute_status st = gdsroute_file_lock(f->file, rw, false);
    if (st == GDSROUTE_STATUS_OK || gr_lock_ignorable(f)) return 0;
    gr_count(GR_ERRORS, 1);
    GR_GDSROUTE_ERROR(H5E_VFL, H5E_CANTLOCKFILE, st, "gdsroute_file_lock (%s, no wait) of '%s'",
                      rw ? "exclusive" : "shared", f->name);
    return -1;
}

static herr_t gr_unlock(H5FD_t *file) {
    gr_file_t *f = (gr_file_t *)file;
    gdsroute_status st = gdsroute_file_unlock(f->file);
    if (st == GDSROUTE_STATUS_OK || gr_lock_ignorable(f)) return 0;
    gr_count(GR_ERRORS, 1);
    GR_GDSROUTE_ERROR(H5E_VFL, H5E_CANTUNLOCKFILE, st, "gdsroute_file_unlock of '%s'", f->name);
    return -1;
}

/* Registrations of the class that H5FD_gdsroute_init made and HDF5 has not freed yet: two while
 * one that lost the race of two first uses is being undone. */
static _Atomic int gr_registrations;

/* HDF5 frees a registration of the class (H5close, H5FDunregister). It calls this for each one it
 * frees, the duplicate H5FD_gdsroute_init undoes included: the identifier and the error class the
 * registrations share are reset (the next use registers anew) only with the last. */
static herr_t gr_terminate(void) {
    if (atomic_fetch_sub(&gr_registrations, 1) > 1) return 0;
    atomic_store(&gr_registrations, 0); /* HDF5's own registration of the plugin is not counted */
    atomic_store(&gr_driver_id, H5I_INVALID_HID);
    hid_t cls = atomic_exchange(&gr_error_class, H5I_INVALID_HID);
    if (cls != H5I_INVALID_HID) (void)H5Eunregister_class(cls);
    return 0;
}

#if GR_DYNAMIC_DRIVERS
static herr_t gr_delete(const char *name, hid_t fapl) {
    (void)fapl;
    (void)gr_error_class_id();
    if (unlink(name) == 0) return 0;
    int e = errno;
    gr_count(GR_ERRORS, 1);
    GR_ERROR(H5E_VFL, H5E_CANTDELETEFILE, "unlink of '%s': %s (errno %d)", name, strerror(e), e);
    return -1;
}
#endif

/* ----------------------------------------------------------------------------------------------
 * The class. Vector and selection I/O stay NULL: HDF5 then turns selection I/O off by default
 * and, where a program asks for it, splits it into the read and write callbacks above.
 * ------------------------------------------------------------------------------------------- */
static const H5FD_class_t gr_class = {
#if GR_DYNAMIC_DRIVERS
    .version = H5FD_CLASS_VERSION,
    .value = H5FD_GDSROUTE_VALUE,
    .del = gr_delete,
#endif
    .name = H5FD_GDSROUTE_NAME,
    .maxaddr = GR_MAXADDR,
    .fc_degree = H5F_CLOSE_WEAK,
    .terminate = gr_terminate,
    .fapl_size = sizeof(H5FD_gdsroute_fapl_t),
    .fapl_get = gr_fapl_get,
    .fapl_copy = gr_fapl_copy,
    .fapl_free = gr_fapl_free,
    .open = gr_open,
    .close = gr_close,
    .cmp = gr_cmp,
    .query = gr_query,
    .get_eoa = gr_get_eoa,
    .set_eoa = gr_set_eoa,
    .get_eof = gr_get_eof,
    .get_handle = gr_get_handle,
    .read = gr_read,
    .write = gr_write,
    .flush = gr_flush,
    .truncate = gr_truncate,
    .lock = gr_lock,
    .unlock = gr_unlock,
    .fl_map = H5FD_FLMAP_DICHOTOMY,
};

/* ----------------------------------------------------------------------------------------------
 * Public functions.
 * ------------------------------------------------------------------------------------------- */
/* The identifier of a registration HDF5 already holds under the driver's name (the one it made
 * when it loaded the driver as a plugin, HDF5_DRIVER), so that the class is not registered a
 * second time under another; else invalid. By name, not by value: the value may be another
 * driver's too (H5FDgdsroute.h). */
static hid_t gr_registered_by_name(void) {
    hid_t id = H5I_INVALID_HID;
#if GR_DYNAMIC_DRIVERS
    if (H5FDis_driver_registered_by_name(H5FD_GDSROUTE_NAME) > 0) {
        hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
        if (fapl >= 0 && H5Pset_driver_by_name(fapl, H5FD_GDSROUTE_NAME, NULL) >= 0) id = H5Pget_driver(fapl);
        if (fapl >= 0) H5Pclose(fapl);
    }
#endif
    return id;
}

GR_EXPORT hid_t H5FD_gdsroute_init(void) {
    (void)gr_error_class_id();
    hid_t id = atomic_load(&gr_driver_id);
    if (H5Iget_type(id) == H5I_VFL) return id;
    hid_t existing = gr_registered_by_name();
    hid_t fresh = H5Iget_type(existing) == H5I_VFL ? existing : H5FDregister(&gr_class);
    if (fresh < 0) return H5I_INVALID_HID;
    if (fresh != existing) atomic_fetch_add(&gr_registrations, 1);
    /* As gr_error_class_id: no lock across HDF5 calls (one held while HDF5 runs a program's
     * callback that calls this would deadlock with HDF5's own), a second registration undone,
     * which gr_terminate tells from the last. */
    if (atomic_compare_exchange_strong(&gr_driver_id, &id, fresh)) return fresh;
    if (H5Iget_type(id) == H5I_VFL) {
        if (fresh != existing) (void)H5FDunregister(fresh);
        return id;
    }
    atomic_store(&gr_driver_id, fresh);
    return fresh;
}

GR_EXPORT herr_t H5Pset_fapl_gdsroute(hid_t fapl_id, const H5FD_gdsroute_fapl_t *config) {
    (void)gr_error_class_id();
    if (H5Pisa_class(fapl_id, H5P_FILE_ACCESS) <= 0) {
        GR_ERROR(H5E_ARGS, H5E_BADTYPE, "H5Pset_fapl_gdsroute: not a file access property list");
        return -1;
    }
    if (config != NULL && !gr_config_valid(config)) {
        GR_ERROR(H5E_ARGS, H5E_BADVALUE,
                 "H5Pset_fapl_gdsroute: bad settings (version %u, want %u; compat_mode %u; sync_on_flush %u)",
                 config->version, H5FD_GDSROUTE_FAPL_VERSION, config->compat_mode, config->sync_on_flush);
        return -1;
    }
    hid_t driver = H5FD_GDSROUTE;
    if (driver < 0) {
        GR_ERROR(H5E_VFL, H5E_CANTREGISTER, "H5Pset_fapl_gdsroute: cannot register the driver");
        return -1;
    }
    return H5Pset_driver(fapl_id, driver, config != NULL ? config : &gr_default_config);
}

GR_EXPORT herr_t H5Pget_fapl_gdsroute(hid_t fapl_id, H5FD_gdsroute_fapl_t *config) {
    (void)gr_error_class_id();
    if (config == NULL || H5Pisa_class(fapl_id, H5P_FILE_ACCESS) <= 0) {
        GR_ERROR(H5E_ARGS, H5E_BADTYPE, "H5Pget_fapl_gdsroute: NULL settings or not a file access property list");
        return -1;
    }
    if (H5Pget_driver(fapl_id) != H5FD_GDSROUTE) {
        GR_ERROR(H5E_PLIST, H5E_BADVALUE, "H5Pget_fapl_gdsroute: the list uses another driver");
        return -1;
    }
    *config = gr_config_of(fapl_id);
    return 0;
}

GR_EXPORT herr_t H5FD_gdsroute_get_counters(H5FD_gdsroute_counters_t *counters) {
    (void)gr_error_class_id();
    if (counters == NULL || counters->struct_size < sizeof(uint64_t)) {
        GR_ERROR(H5E_ARGS, H5E_BADVALUE, "H5FD_gdsroute_get_counters: NULL, or struct_size below 8");
        return -1;
    }
    for (size_t i = 0; i < GR_COUNTERS; i++) {
        size_t offset = gr_counter_fields[i].offset;
        if (offset + sizeof(uint64_t) > counters->struct_size) continue;
        uint64_t v = atomic_load_explicit(&gr_counters[i], memory_order_relaxed);
        memcpy((char *)counters + offset, &v, sizeof v);
    }
    return 0;
}

#if GR_DYNAMIC_DRIVERS
/* Dynamically loaded driver (HDF5_DRIVER=gdsroute, HDF5_PLUGIN_PATH). */
H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_VFD; }
const void *H5PLget_plugin_info(void) { return &gr_class; }
#endif
