/*
 * test_hdf5_passthrough DIR: which H5Dread/H5Dwrite buffers HDF5 hands to the gdsroute driver
 * untouched and which it copies on the host, case by case, checked against what docs/hdf5.md
 * ("What HDF5 copies") promises for each. Revoked memory (PROT_NONE) stands in for device memory
 * (hdf5_test.h, h5t_probe). Each case runs twice, each time in a forked child that prepares its
 * file through the driver from host memory and then makes the one call with the revoked buffer:
 *
 *   revoked   the buffer stays revoked: where the caller's pointer reaches the driver, gdsroute's
 *             pread/pwrite fail with EFAULT and the call returns an HDF5 error; where HDF5 copies
 *             first, the child dies of SIGSEGV.
 *   window    the buffer is open to gdsroute alone, for the span of each of its transfers into or
 *             out of it (device_window.so, preloaded), as device memory is open to CUDA alone:
 *             the call succeeds with every byte right only where nothing but gdsroute touched
 *             the buffer; a copy by HDF5 before or after the driver's (HDF5 2.x converts types
 *             in place in the caller's buffer after reading into it) dies of SIGSEGV.
 *
 * A case the docs call safe for device memory must give EFAULT, then succeed; any other must die
 * of SIGSEGV in the window. The chunk cache is the file's default for its datasets (1 MiB under
 * HDF5 1.10.8, 8 MiB under 2.2.0), read at run time, and each dataset's own checked
 * (H5Dget_access_plist).
 */
#include "hdf5_test.h"

#define N 65536                   /* int32 elements of a dataset; BIG: two chunks; COMPACT: 4096 */
#define SMALL_CHUNK 1024          /* elements: 4 KiB, below any chunk cache */
#define BIG_CHUNK_PAST_CACHE 1024 /* elements a big chunk has beyond the cache (4 KiB) */

enum storage {
    CONTIG,
    NOCACHE,  /* 4 KiB chunks, the dataset's chunk cache 0 bytes (H5Pset_chunk_cache) */
    SMALL,    /* 4 KiB chunks, the default chunk cache */
    BIG,      /* chunks 4 KiB larger than the dataset's chunk cache */
    FILTERED, /* 4 KiB chunks through the shuffle filter, chunk cache 0 bytes */
    COMPACT,
};

enum {
    WRITE = 1 << 0,      /* H5Dwrite from the buffer; else H5Dread into it */
    WRITTEN = 1 << 1,    /* the dataset written from host memory first (and closed, reopened) */
    FILL_NEVER = 1 << 2, /* H5Pset_fill_time(H5D_FILL_TIME_NEVER) */
    EARLY = 1 << 3,      /* H5Pset_alloc_time(H5D_ALLOC_TIME_EARLY) */
    STRIDED = 1 << 4,    /* every 8th block of 4 elements, not the whole dataset */
    CONVERT = 1 << 5,    /* the file holds big-endian int32, memory native int32 */
    TRANSFORM = 1 << 6,  /* H5Pset_data_transform("x+1") */
    SELECTION_IO = 1 << 7, /* H5Pset_selection_io(ON), HDF5 1.14+ */
};

struct pcase {
    const char *name;
    enum storage storage;
    unsigned flags;
    int device_ok; /* docs/hdf5.md's promise: only the driver touches the buffer */
};

#define DRIVER 1
#define HOST 0
static const struct pcase cases[] = {
    {"contiguous read", CONTIG, WRITTEN, DRIVER},
    {"contiguous read, strided selection", CONTIG, WRITTEN | STRIDED, DRIVER},
    {"contiguous first write", CONTIG, WRITE, DRIVER},
    {"contiguous write, strided selection", CONTIG, WRITE | WRITTEN | STRIDED, DRIVER},
    {"contiguous read, never written (fill value)", CONTIG, 0, HOST},
    {"contiguous read, type conversion", CONTIG, WRITTEN | CONVERT, HOST},
    {"contiguous write, type conversion", CONTIG, WRITE | CONVERT, HOST},
    {"contiguous read, data transform", CONTIG, WRITTEN | TRANSFORM, HOST},
    {"chunked, 0-byte cache: read", NOCACHE, WRITTEN, DRIVER},
    {"chunked, 0-byte cache: read, strided selection", NOCACHE, WRITTEN | STRIDED, DRIVER},
    {"chunked, 0-byte cache: write over written chunks", NOCACHE, WRITE | WRITTEN, DRIVER},
    {"chunked, 0-byte cache: first write, fill time never", NOCACHE, WRITE | FILL_NEVER, DRIVER},
    {"chunked, 0-byte cache: first write, early allocation", NOCACHE, WRITE | EARLY, DRIVER},
    {"chunked, 0-byte cache: first write, fill value due", NOCACHE, WRITE, HOST},
    {"chunked, 0-byte cache: read, never written (fill value)", NOCACHE, 0, HOST},
    {"chunked below the cache: read", SMALL, WRITTEN, HOST},
    {"chunked below the cache: write over written chunks", SMALL, WRITE | WRITTEN, HOST},
    {"chunked below the cache: first write, fill time never", SMALL, WRITE | FILL_NEVER, HOST},
    {"chunked above the cache: read", BIG, WRITTEN, DRIVER},
    {"chunked above the cache: write over written chunks", BIG, WRITE | WRITTEN, DRIVER},
    {"chunked above the cache: first write, fill time never", BIG, WRITE | FILL_NEVER, DRIVER},
    {"chunked above the cache: first write, fill value due", BIG, WRITE, HOST},
    {"filtered (shuffle), 0-byte cache: read", FILTERED, WRITTEN, HOST},
    {"filtered (shuffle), 0-byte cache: write over written chunks", FILTERED, WRITE | WRITTEN, HOST},
    {"compact: read", COMPACT, WRITTEN, HOST},
    {"compact: write", COMPACT, WRITE, HOST},
#if H5_VERSION_GE(1, 14, 0)
    {"contiguous read, selection I/O on", CONTIG, WRITTEN | SELECTION_IO, DRIVER},
    {"chunked, 0-byte cache: read, selection I/O on", NOCACHE, WRITTEN | SELECTION_IO, DRIVER},
#endif
};
#undef DRIVER
#undef HOST

struct probe {
    const struct pcase *c;
    const char *dir;
    size_t cache; /* the chunk cache a dataset of the file gets by default, in bytes */
    int window;   /* the buffer open to gdsroute's transfers (device_window.so) */
};

/* device_window.so's functions, found at run time. */
static void (*window_set)(void *base, size_t size);
static uint64_t (*window_bytes)(void);

/* The values the file holds after the preparation, and those the buffer holds before the call. */
static int32_t file_value(hsize_t i) { return (int32_t)(i * 2654435761u); }
static int32_t buffer_value(hsize_t i) { return (int32_t)(~i * 40503u); }

static hsize_t elements_of(const struct probe *p) {
    return p->c->storage == BIG ? 2 * (p->cache / 4 + BIG_CHUNK_PAST_CACHE) : (p->c->storage == COMPACT ? 4096 : N);
}

static hid_t dcpl_of(const struct probe *p) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t chunk = p->c->storage == BIG ? elements_of(p) / 2 : SMALL_CHUNK;
    if (p->c->storage == COMPACT) H5Pset_layout(dcpl, H5D_COMPACT);
    if (p->c->storage != CONTIG && p->c->storage != COMPACT) H5Pset_chunk(dcpl, 1, &chunk);
    if (p->c->storage == FILTERED) H5Pset_shuffle(dcpl);
    if (p->c->flags & FILL_NEVER) H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    if (p->c->flags & EARLY) H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    return dcpl;
}

static hid_t dapl_of(const struct probe *p) {
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    if (p->c->storage == NOCACHE || p->c->storage == FILTERED)
        H5Pset_chunk_cache(dapl, H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
    return dapl;
}

/* The dataset's chunk cache is what the case assumes: 0 bytes, or the file's default. */
static int cache_as_assumed(const struct probe *p, hid_t dset) {
    if (p->c->storage == CONTIG || p->c->storage == COMPACT) return 1;
    hid_t dapl = H5Dget_access_plist(dset);
    size_t slots = 0, bytes = SIZE_MAX;
    double w0 = 0;
    herr_t r = H5Pget_chunk_cache(dapl, &slots, &bytes, &w0);
    H5Pclose(dapl);
    size_t want = p->c->storage == NOCACHE || p->c->storage == FILTERED ? 0 : p->cache;
    if (r < 0 || bytes != want) fprintf(stderr, "%s: chunk cache %zu bytes, %zu assumed\n", p->c->name, bytes, want);
    return r >= 0 && bytes == want;
}

/* The selection of the call: all, or every 8th block of 4 elements. */
static int selected(const struct probe *p, hsize_t i) { return !(p->c->flags & STRIDED) || i % 8 < 4; }

static hid_t space_of(const struct probe *p) {
    hsize_t n = elements_of(p);
    hid_t space = H5Screate_simple(1, &n, NULL);
    if (p->c->flags & STRIDED) {
        hsize_t start = 0, stride = 8, count = n / 8, block = 4;
        H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, &stride, &count, &block);
    }
    return space;
}

/* After a call in the window that succeeded: every byte as it should be, and at least the
 * selection's bytes moved by gdsroute. The child's exit status. */
static int window_check(const struct probe *p, hid_t file, hid_t dset, int32_t *buf, size_t size) {
    const struct pcase *c = p->c;
    hsize_t n = elements_of(p), wrong = 0, count = 0;
    if (mprotect(buf, size, PROT_READ | PROT_WRITE) != 0) return H5T_CHILD_SETUP_FAILED;
    uint64_t moved = window_bytes();
    if (c->flags & WRITE) { /* the file holds the buffer's values where selected */
        H5Dclose(dset);
        dset = H5Dopen2(file, "data", H5P_DEFAULT);
        int32_t *back = calloc(n, sizeof *back);
        if (back == NULL || H5Dread(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, back) < 0)
            return H5T_CHILD_SETUP_FAILED;
        for (hsize_t i = 0; i < n; i++) wrong += selected(p, i) && back[i] != buffer_value(i);
        free(back);
    } else { /* the buffer holds the file's values where selected, its own elsewhere */
        for (hsize_t i = 0; i < n; i++) {
            int32_t want = !selected(p, i)              ? buffer_value(i)
                           : !(c->flags & WRITTEN)     ? 0
                           : (c->flags & TRANSFORM)    ? file_value(i) + 1
                                                       : file_value(i);
            wrong += buf[i] != want;
        }
    }
    for (hsize_t i = 0; i < n; i++) count += selected(p, i);
    if (wrong > 0 || moved < count * sizeof(int32_t)) {
        fprintf(stderr, "%s: %llu elements wrong; gdsroute moved %llu bytes of the buffer, the selection has %llu\n",
                c->name, (unsigned long long)wrong, (unsigned long long)moved,
                (unsigned long long)(count * sizeof(int32_t)));
        return H5T_CHILD_OTHER_ERROR;
    }
    return H5T_CHILD_DRIVER_ONLY;
}

/* The child: prepares DIR/caseN.h5 through the driver, then the call with a revoked buffer. */
static void probe_body(const void *arg) {
    const struct probe *p = arg;
    const struct pcase *c = p->c;
    char path[4096];
    snprintf(path, sizeof path, "%s/case%d%s.h5", p->dir, (int)(c - cases), p->window ? "-window" : "");
    hid_t fapl = h5t_driver_fapl();
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    hsize_t n = elements_of(p);
    hid_t space = H5Screate_simple(1, &n, NULL), dcpl = dcpl_of(p), dapl = dapl_of(p);
    hid_t file_type = (c->flags & CONVERT) ? H5T_STD_I32BE : H5T_NATIVE_INT32;
    hid_t dset = H5Dcreate2(file, "data", file_type, space, H5P_DEFAULT, dcpl, dapl);
    if (file < 0 || dset < 0 || !cache_as_assumed(p, dset)) _exit(H5T_CHILD_SETUP_FAILED);
    if (c->flags & WRITTEN) {
        int32_t *host = calloc(n, sizeof *host);
        for (hsize_t i = 0; host != NULL && i < n; i++) host[i] = file_value(i);
        if (host == NULL || H5Dwrite(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, host) < 0)
            _exit(H5T_CHILD_SETUP_FAILED);
        free(host);
        /* Closed and opened again: nothing of it left in the chunk cache. */
        H5Dclose(dset);
        dset = H5Dopen2(file, "data", dapl);
        if (dset < 0 || !cache_as_assumed(p, dset)) _exit(H5T_CHILD_SETUP_FAILED);
    }
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    if ((c->flags & TRANSFORM) && H5Pset_data_transform(dxpl, "x+1") < 0) _exit(H5T_CHILD_SETUP_FAILED);
#if H5_VERSION_GE(1, 14, 0)
    if ((c->flags & SELECTION_IO) && H5Pset_selection_io(dxpl, H5D_SELECTION_IO_MODE_ON) < 0)
        _exit(H5T_CHILD_SETUP_FAILED);
#endif
    hid_t selection = space_of(p);
    size_t size = n * sizeof(int32_t);
    int32_t *buf = h5t_revoked(size);
    if (p->window) {
        if (mprotect(buf, size, PROT_READ | PROT_WRITE) != 0) _exit(H5T_CHILD_SETUP_FAILED);
        for (hsize_t i = 0; i < n; i++) buf[i] = buffer_value(i);
        if (mprotect(buf, size, PROT_NONE) != 0) _exit(H5T_CHILD_SETUP_FAILED);
        window_set(buf, size);
    }
    h5t_arm();
    herr_t r = (c->flags & WRITE) ? H5Dwrite(dset, H5T_NATIVE_INT32, selection, selection, dxpl, buf)
                                  : H5Dread(dset, H5T_NATIVE_INT32, selection, selection, dxpl, buf);
    if (!p->window) h5t_child_verdict(r);
    if (r < 0) {
        H5Eprint2(H5E_DEFAULT, stderr);
        _exit(H5T_CHILD_OTHER_ERROR);
    }
    _exit(window_check(p, file, dset, buf, size));
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    size_t cache = h5t_default_chunk_cache();
    CHECK(cache > 0);
    printf("HDF5 %u.%u.%u; a dataset's chunk cache by default: %zu bytes\n", H5_VERS_MAJOR, H5_VERS_MINOR,
           H5_VERS_RELEASE, cache);
    if (H5Zfilter_avail(H5Z_FILTER_SHUFFLE) <= 0) {
        printf("the shuffle filter is not available\n");
        CHECK(0);
    }
    window_set = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "device_window_set");
    window_bytes = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "device_window_bytes");
    if (window_set == NULL || window_bytes == NULL) {
        fprintf(stderr, "run under device_window.so (LD_PRELOAD)\n");
        return 1;
    }
    printf("%-60s %-10s %s\n", "case", "docs", "revoked; window");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct probe p = {&cases[i], argv[1], cache, 0};
        enum h5t_reach revoked = h5t_probe(probe_body, &p);
        p.window = 1;
        enum h5t_reach window = h5t_probe(probe_body, &p);
        int ok = cases[i].device_ok ? revoked == H5T_REACHED_DRIVER && window == H5T_DRIVER_ONLY
                                    : window == H5T_COPIED_ON_HOST &&
                                          (revoked == H5T_COPIED_ON_HOST || revoked == H5T_REACHED_DRIVER);
        printf("%-60s %-10s %s; %s%s\n", cases[i].name, cases[i].device_ok ? "driver" : "host", h5t_reach_name(revoked),
               h5t_reach_name(window), ok ? "" : "  <- not what docs/hdf5.md says");
        CHECK(ok);
    }
    return check_summary();
}
