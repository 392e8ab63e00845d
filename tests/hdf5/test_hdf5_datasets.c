/*
 * test_hdf5_datasets: datasets written and read through the gdsroute HDF5 driver, checked byte
 * for byte against HDF5's sec2 driver. One job: the data path (files, datasets, counters); the
 * error cases are test_hdf5_errors.c's.
 *
 *   roundtrip DIR      every dataset of the table (1-D and 3-D, int8 to float64 and a compound;
 *                      contiguous, chunked, chunks larger than the default chunk cache, gzip,
 *                      compact)
 *                      with seeded random data into DIR/driver.h5 through the driver and
 *                      DIR/sec2.h5 through sec2; the two files compared byte for byte; each
 *                      read back whole and in part by the other driver, guard bytes checked; the
 *                      driver's counters, a read past the end of the file, the exit report.
 *   make FILE          the table's datasets through sec2 (input of the HDF5 tools' test)
 *   make-driver FILE   the same through the driver (for h5dump)
 *   verify FILE        FILE's datasets (made by make, then rewritten by a tool) through the driver
 *   verify-import FILE BIN   FILE's /imported (h5import of BIN as float64) through the driver
 *
 * Files go through the driver by H5Pset_fapl_gdsroute, or by HDF5_DRIVER when
 * GDSROUTE_HDF5_TEST_ROUTE=env (tools/hdf5/plugin-test.sh). Buffers of the datasets HDF5 hands to
 * the driver untouched (contiguous, and chunks larger than the dataset's chunk cache, without
 * filters: docs/hdf5.md, "What HDF5 copies", and test_hdf5_passthrough.c) are device memory where
 * a GPU is usable (hdf5_test.h).
 */
#include "hdf5_test.h"

#include <sys/stat.h>

enum layout { CONTIG, CHUNKED, BIG_CHUNKS, GZIP, COMPACT };
enum kind { I8, U8, I16, U16, I32, U32, I64, U64, F32, F64, COMPOUND, KINDS };
static const char *const kind_names[KINDS] = {"i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64", "compound"};

struct compound {
    int32_t a;
    double b;
    int8_t c[3];
};

struct spec {
    char name[48];
    enum kind kind;
    int rank;
    hsize_t dims[3];
    enum layout layout;
    hsize_t chunk[3];
};

#define MAX_SPECS 40
static struct spec specs[MAX_SPECS];
static int nspecs;

static void add_spec(enum kind kind, int rank, const hsize_t *dims, enum layout layout, const hsize_t *chunk) {
    static const char *const layout_names[] = {"contig", "chunked", "big_chunks", "gzip", "compact"};
    struct spec *s = &specs[nspecs++];
    snprintf(s->name, sizeof s->name, "%s_%dd_%s", kind_names[kind], rank, layout_names[layout]);
    s->kind = kind;
    s->rank = rank;
    s->layout = layout;
    for (int i = 0; i < rank; i++) {
        s->dims[i] = dims[i];
        s->chunk[i] = chunk ? chunk[i] : 0;
    }
}

static void build_specs(int gzip) {
    static const hsize_t d1[] = {100003}, d3[] = {17, 31, 45}, c3[] = {5, 8, 9};
    static const hsize_t small[] = {500}, cz[] = {4096}, dc[] = {20011};
    /* float64 chunks 8000 bytes larger than the default chunk cache, which depends on HDF5's
     * version (1 MiB under 1.10.8, 8 MiB under 2.2.0); two of them. */
    const hsize_t big_chunk[] = {h5t_default_chunk_cache() / 8 + 1000}, big[] = {2 * big_chunk[0]};
    for (int k = 0; k < KINDS; k++) {
        add_spec((enum kind)k, 1, d1, CONTIG, NULL);
        add_spec((enum kind)k, 3, d3, CHUNKED, c3);
    }
    add_spec(U16, 3, d3, CONTIG, NULL);
    add_spec(COMPOUND, 3, d3, CONTIG, NULL);
    add_spec(F64, 1, big, BIG_CHUNKS, big_chunk);
    add_spec(I64, 1, small, COMPACT, NULL);
    if (gzip) {
        add_spec(I32, 3, d3, GZIP, c3);
        add_spec(F32, 1, d1, GZIP, cz);
        add_spec(COMPOUND, 1, dc, GZIP, cz);
    }
}

static hid_t type_of(enum kind k) {
    static const hid_t *const natives[] = {&H5T_NATIVE_INT8_g, &H5T_NATIVE_UINT8_g, &H5T_NATIVE_INT16_g,
                                           &H5T_NATIVE_UINT16_g, &H5T_NATIVE_INT32_g, &H5T_NATIVE_UINT32_g,
                                           &H5T_NATIVE_INT64_g, &H5T_NATIVE_UINT64_g, &H5T_NATIVE_FLOAT_g,
                                           &H5T_NATIVE_DOUBLE_g};
    H5open(); /* the H5T_NATIVE_*_g globals are set by the library's initialisation */
    if (k != COMPOUND) return H5Tcopy(*natives[k]);
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct compound));
    hsize_t three = 3;
    hid_t arr = H5Tarray_create2(H5T_NATIVE_INT8, 1, &three);
    H5Tinsert(t, "a", offsetof(struct compound, a), H5T_NATIVE_INT32);
    H5Tinsert(t, "b", offsetof(struct compound, b), H5T_NATIVE_DOUBLE);
    H5Tinsert(t, "c", offsetof(struct compound, c), arr);
    H5Tclose(arr);
    return t;
}

static size_t elements(const struct spec *s) {
    size_t n = 1;
    for (int i = 0; i < s->rank; i++) n *= (size_t)s->dims[i];
    return n;
}

static size_t element_size(const struct spec *s) {
    hid_t t = type_of(s->kind);
    size_t size = H5Tget_size(t);
    H5Tclose(t);
    return size;
}

/* The dataset's bytes: seeded by its name, the same on every run. */
static unsigned char *expected_bytes(const struct spec *s, size_t *size) {
    *size = elements(s) * element_size(s);
    unsigned char *data = malloc(*size);
    rng_state = 0x9E3779B97F4A7C15ULL;
    for (const char *p = s->name; *p; p++) rng_state = (rng_state ^ (unsigned char)*p) * 0x100000001B3ULL;
    if (rng_state == 0) rng_state = 1;
    for (size_t i = 0; i < *size; i++) data[i] = (unsigned char)(next_random() >> 56);
    return data;
}

static hid_t dcpl_of(const struct spec *s) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0); /* no times in the object headers: files comparable byte for byte */
    if (s->layout == COMPACT) H5Pset_layout(dcpl, H5D_COMPACT);
    if (s->layout == CHUNKED || s->layout == BIG_CHUNKS || s->layout == GZIP) H5Pset_chunk(dcpl, s->rank, s->chunk);
    if (s->layout == GZIP) H5Pset_deflate(dcpl, 6);
    /* A chunk's first write goes through the chunk cache (a host copy) when a fill value is to be
     * written around it; with none it goes to the driver with the caller's pointer. */
    if (s->layout == BIG_CHUNKS) H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    return dcpl;
}

/* Whether HDF5 hands the caller's buffer to the driver for this dataset as the file has it (a
 * tool may have changed its layout), with the memory type the file type as everywhere here
 * (docs/hdf5.md, "What HDF5 copies"): contiguous without filters, or chunks without filters
 * larger than the dataset's own chunk cache; for the first write of its chunks, only without a
 * fill value due (fill time never, or chunks allocated at creation). */
static int dataset_passes_through(hid_t dset, int first_write) {
    hid_t dcpl = H5Dget_create_plist(dset), dapl = H5Dget_access_plist(dset), type = H5Dget_type(dset);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int unfiltered = H5Pget_nfilters(dcpl) == 0;
    int through = unfiltered && layout == H5D_CONTIGUOUS;
    if (unfiltered && layout == H5D_CHUNKED) {
        hsize_t chunk[H5S_MAX_RANK];
        int rank = H5Pget_chunk(dcpl, H5S_MAX_RANK, chunk);
        size_t bytes = H5Tget_size(type), slots = 0, cache = SIZE_MAX;
        double w0 = 0;
        for (int i = 0; i < rank; i++) bytes *= (size_t)chunk[i];
        CHECK_H5(H5Pget_chunk_cache(dapl, &slots, &cache, &w0));
        H5D_fill_time_t fill_time = H5D_FILL_TIME_IFSET;
        H5D_alloc_time_t alloc_time = H5D_ALLOC_TIME_DEFAULT;
        H5Pget_fill_time(dcpl, &fill_time);
        H5Pget_alloc_time(dcpl, &alloc_time);
        int fill_due = fill_time != H5D_FILL_TIME_NEVER && alloc_time != H5D_ALLOC_TIME_EARLY;
        through = bytes > cache && !(first_write && fill_due);
    }
    H5Tclose(type);
    H5Pclose(dapl);
    H5Pclose(dcpl);
    return through;
}

/* Creates the dataset and writes `data` to it from a buffer of the test memory (device memory
 * where `device_ok` and HDF5 passes the dataset's buffers through): 1-D in two hyperslabs, each
 * from its own place in the buffer; 3-D in one call. */
static void write_dataset(hid_t file, const struct spec *s, const unsigned char *data, size_t size, int device_ok) {
    hid_t type = type_of(s->kind), space = H5Screate_simple(s->rank, s->dims, NULL), dcpl = dcpl_of(s);
    hid_t dset = H5Dcreate2(file, s->name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(dset >= 0);
    int device = device_ok && h5t_mem.device && dataset_passes_through(dset, 1);
    void *buf = h5t_buffer(device, size);
    h5t_to_buffer(device, buf, data, size);
    if (s->rank == 1) {
        hsize_t half = s->dims[0] / 2, parts[2][2] = {{0, half}, {half, s->dims[0] - half}};
        for (int p = 0; p < 2; p++) {
            hid_t fspace = H5Scopy(space), mspace = H5Screate_simple(1, &parts[p][1], NULL);
            H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &parts[p][0], NULL, &parts[p][1], NULL);
            const unsigned char *from = (const unsigned char *)buf + parts[p][0] * H5Tget_size(type);
            CHECK_H5(H5Dwrite(dset, type, mspace, fspace, H5P_DEFAULT, from));
            H5Sclose(fspace);
            H5Sclose(mspace);
        }
    } else {
        CHECK_H5(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
    }
    h5t_buffer_free(device, buf);
    h5t_mem_reset();
    H5Dclose(dset);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
}

/* The part read back: the middle third of a 1-D dataset, a block inside a 3-D one. */
static void part_of(const struct spec *s, hsize_t start[3], hsize_t count[3]) {
    if (s->rank == 1) {
        start[0] = s->dims[0] / 3;
        count[0] = s->dims[0] / 3 + 1;
    } else {
        const hsize_t st[3] = {2, 3, 4}, ct[3] = {10, 17, 26};
        memcpy(start, st, sizeof st);
        memcpy(count, ct, sizeof ct);
    }
}

/* The expected bytes of part_of's selection, in C order. */
static unsigned char *expected_part(const struct spec *s, const unsigned char *all, size_t esize, size_t *size) {
    hsize_t start[3] = {0}, count[3] = {1, 1, 1};
    part_of(s, start, count);
    hsize_t dims[3] = {s->dims[0], s->rank > 1 ? s->dims[1] : 1, s->rank > 2 ? s->dims[2] : 1};
    hsize_t st[3] = {start[0], s->rank > 1 ? start[1] : 0, s->rank > 2 ? start[2] : 0};
    hsize_t ct[3] = {count[0], s->rank > 1 ? count[1] : 1, s->rank > 2 ? count[2] : 1};
    *size = (size_t)(ct[0] * ct[1] * ct[2]) * esize;
    unsigned char *out = malloc(*size), *o = out;
    for (hsize_t i = 0; i < ct[0]; i++)
        for (hsize_t j = 0; j < ct[1]; j++) {
            size_t from = (size_t)((((st[0] + i) * dims[1] + st[1] + j) * dims[2] + st[2])) * esize;
            memcpy(o, all + from, (size_t)ct[2] * esize);
            o += ct[2] * esize;
        }
    return out;
}

/* Reads the whole dataset and its part into guarded buffers (device ones where `device_ok` and
 * the dataset passes through) and checks every byte and the guards. */
static void check_dataset(hid_t file, const struct spec *s, int device_ok, const char *label) {
    size_t size = 0, esize = element_size(s);
    unsigned char *want = expected_bytes(s, &size);
    hid_t dset = H5Dopen2(file, s->name, H5P_DEFAULT);
    CHECK(dset >= 0);
    int device = device_ok && h5t_mem.device && dataset_passes_through(dset, 0);
    hid_t type = type_of(s->kind);
    unsigned char *got = malloc(size + 2 * GUARD);
    void *buf = h5t_buffer(device, size);
    CHECK_H5(H5Dread(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
    h5t_from_buffer(device, got, buf, size);
    int ok = memcmp(got + GUARD, want, size) == 0 && guards_intact(got + GUARD, size);
    if (!ok) fprintf(stderr, "%s: %s read whole: bytes or guards differ\n", label, s->name);
    CHECK(ok);
    h5t_buffer_free(device, buf);

    size_t psize = 0;
    unsigned char *pwant = expected_part(s, want, esize, &psize);
    hsize_t start[3] = {0}, count[3] = {0};
    part_of(s, start, count);
    hid_t fspace = H5Dget_space(dset), mspace = H5Screate_simple(s->rank, count, NULL);
    H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL);
    buf = h5t_buffer(device, psize);
    CHECK_H5(H5Dread(dset, type, mspace, fspace, H5P_DEFAULT, buf));
    h5t_from_buffer(device, got, buf, psize);
    ok = memcmp(got + GUARD, pwant, psize) == 0 && guards_intact(got + GUARD, psize);
    if (!ok) fprintf(stderr, "%s: %s read in part: bytes or guards differ\n", label, s->name);
    CHECK(ok);
    h5t_buffer_free(device, buf);
    h5t_mem_reset();
    H5Sclose(fspace);
    H5Sclose(mspace);
    H5Tclose(type);
    H5Dclose(dset);
    free(pwant);
    free(got);
    free(want);
}

/* Creates `path` through `fapl` with every dataset of the table, from device buffers where
 * `device_ok` and the dataset passes through. */
static void make_file(const char *path, hid_t fapl, int device_ok) {
    /* The root group's header without times too (HDF5 2.x writes version 2 headers, with times). */
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_obj_track_times(fcpl, 0);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
    H5Pclose(fcpl);
    CHECK(file >= 0);
    for (int i = 0; i < nspecs; i++) {
        size_t size = 0;
        unsigned char *data = expected_bytes(&specs[i], &size);
        write_dataset(file, &specs[i], data, size, device_ok);
        free(data);
    }
    CHECK_H5(H5Fclose(file));
}

static void check_file(const char *path, hid_t fapl, int device_ok, const char *label) {
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    CHECK(file >= 0);
    for (int i = 0; i < nspecs; i++) check_dataset(file, &specs[i], device_ok, label);
    CHECK_H5(H5Fclose(file));
}

static int same_bytes(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa != NULL && fb != NULL;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Opens as H5FDgdsroute.h counts them: H5Fopen opens once, for writing too; H5Fcreate first opens
 * without creating, so over the existing file `path` it opens twice, and for a new file one open
 * fails. */
static void check_open_counts(const char *path, hid_t fapl) {
    H5FD_gdsroute_counters_t c0 = h5t_counters();
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, fapl);
    CHECK(file >= 0);
    if (file >= 0) CHECK_H5(H5Fclose(file));
    H5FD_gdsroute_counters_t c1 = h5t_counters();
    CHECK(c1.opens == c0.opens + 1 && c1.open_failures == c0.open_failures);
    file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(file >= 0);
    if (file >= 0) CHECK_H5(H5Fclose(file));
    H5FD_gdsroute_counters_t c2 = h5t_counters();
    CHECK(c2.opens == c1.opens + 2 && c2.open_failures == c1.open_failures);
    CHECK(unlink(path) == 0);
    file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(file >= 0);
    if (file >= 0) CHECK_H5(H5Fclose(file));
    H5FD_gdsroute_counters_t c3 = h5t_counters();
    CHECK(c3.opens == c2.opens + 1 && c3.open_failures == c2.open_failures + 1);
}

/* The counters of one contiguous dataset's write and read, and of a read past the end. */
static void check_counters(const char *dir, hid_t fapl) {
    char path[4096];
    snprintf(path, sizeof path, "%s/counters.h5", dir);
    const hsize_t n = (1 << 20) + 3;
    unsigned char *data = malloc(n);
    for (hsize_t i = 0; i < n; i++) data[i] = (unsigned char)(next_random() >> 56);
    int device = h5t_mem.device;
    void *buf = h5t_buffer(device, n);
    h5t_to_buffer(device, buf, data, n);

    H5FD_gdsroute_counters_t c0 = h5t_counters();
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    hid_t space = H5Screate_simple(1, &n, NULL);
    hid_t dset = H5Dcreate2(file, "probe", H5T_NATIVE_UINT8, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5FD_gdsroute_counters_t c1 = h5t_counters();
    CHECK(c1.opens >= c0.opens + 1);
    CHECK_H5(H5Dwrite(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
    H5FD_gdsroute_counters_t c2 = h5t_counters();
    CHECK(c2.raw_writes == c1.raw_writes + 1);
    CHECK(c2.raw_write_bytes == c1.raw_write_bytes + n);
    CHECK_H5(H5Dread(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
    H5FD_gdsroute_counters_t c3 = h5t_counters();
    CHECK(c3.raw_reads == c2.raw_reads + 1);
    CHECK(c3.raw_read_bytes == c2.raw_read_bytes + n);
    if (device) {
        CHECK(c3.device_buffer_calls == c1.device_buffer_calls + 2);
    } else { /* every call counted as host memory */
        uint64_t calls = (c3.raw_reads + c3.raw_writes + c3.metadata_reads + c3.metadata_writes) -
                         (c1.raw_reads + c1.raw_writes + c1.metadata_reads + c1.metadata_writes);
        CHECK(c3.host_buffer_calls - c1.host_buffer_calls == calls);
        CHECK(c3.device_buffer_calls == c1.device_buffer_calls);
    }
    unsigned char *back = malloc(n + 2 * GUARD);
    h5t_from_buffer(device, back, buf, n);
    CHECK(memcmp(back + GUARD, data, n) == 0 && guards_intact(back + GUARD, n));

    /* Storage allocated at creation and never written lies past the end of the file until HDF5
     * extends it at close: the read is filled with zeros, as sec2 fills it. */
    const hsize_t z = 65536;
    hid_t zspace = H5Screate_simple(1, &z, NULL), zdcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_alloc_time(zdcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(zdcpl, H5D_FILL_TIME_NEVER);
    hid_t zset = H5Dcreate2(file, "unwritten", H5T_NATIVE_UINT8, zspace, H5P_DEFAULT, zdcpl, H5P_DEFAULT);
    h5t_mem_reset();
    void *zbuf = h5t_buffer(device, z);
    H5FD_gdsroute_counters_t c4 = h5t_counters();
    CHECK_H5(H5Dread(zset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, zbuf));
    H5FD_gdsroute_counters_t c5 = h5t_counters();
    CHECK(c5.zero_filled_bytes == c4.zero_filled_bytes + z);
    CHECK(c5.raw_reads == c4.raw_reads + 1);
    unsigned char *zback = malloc(z + 2 * GUARD), *zeros = calloc(1, z);
    h5t_from_buffer(device, zback, zbuf, z);
    CHECK(memcmp(zback + GUARD, zeros, z) == 0 && guards_intact(zback + GUARD, z));
    H5Dclose(zset);
    H5Pclose(zdcpl);
    H5Sclose(zspace);

    H5Dclose(dset);
    H5Sclose(space);
    CHECK_H5(H5Fclose(file));
    H5FD_gdsroute_counters_t c6 = h5t_counters();
    CHECK(c6.metadata_writes > c5.metadata_writes);
    CHECK(c6.errors == c0.errors);

    /* The same counts in gdsroute's exit report, section "hdf5". */
    char report[16384], want[128];
    size_t len = 0;
    CHECK_STATUS(gdsroute_report_render(GDSROUTE_STATS_FORMAT_TEXT, report, sizeof report, &len),
                 GDSROUTE_STATUS_OK);
    const char *section = strstr(report, "  hdf5: ");
    CHECK(section != NULL);
    snprintf(want, sizeof want, " raw_reads=%llu ", (unsigned long long)c6.raw_reads);
    CHECK(section != NULL && strstr(section, want) != NULL);
    snprintf(want, sizeof want, " zero_filled_bytes=%llu", (unsigned long long)c6.zero_filled_bytes);
    CHECK(section != NULL && strstr(section, want) != NULL);
    if (section == NULL || strstr(section, want) == NULL) fprintf(stderr, "report:\n%s\n", report);
    check_open_counts(path, fapl);
    h5t_buffer_free(device, zbuf);
    h5t_buffer_free(device, buf);
    h5t_mem_reset();
    free(zeros);
    free(zback);
    free(back);
    free(data);
}

/* H5Pget_fapl_gdsroute gives back what H5Pset_fapl_gdsroute set, and bad settings are refused. */
static void check_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5FD_gdsroute_fapl_t set = {H5FD_GDSROUTE_FAPL_VERSION, GDSROUTE_COMPAT_MODE_ON, 1}, got;
    CHECK_H5(H5Pset_fapl_gdsroute(fapl, &set));
    CHECK_H5(H5Pget_fapl_gdsroute(fapl, &got));
    CHECK(got.version == set.version && got.compat_mode == set.compat_mode && got.sync_on_flush == 1);
    CHECK(H5Pget_driver(fapl) == H5FD_GDSROUTE);
    H5FD_gdsroute_fapl_t bad = {2, GDSROUTE_COMPAT_MODE_ON, 0};
    CHECK(H5Pset_fapl_gdsroute(fapl, &bad) < 0);
    CHECK(h5t_stack_has(H5T_DRIVER_CLASS, "bad settings"));
    bad.version = H5FD_GDSROUTE_FAPL_VERSION;
    bad.compat_mode = 7;
    CHECK(H5Pset_fapl_gdsroute(fapl, &bad) < 0);
    hid_t sec2 = h5t_sec2_fapl();
    CHECK(H5Pget_fapl_gdsroute(sec2, &got) < 0);
    CHECK(h5t_stack_has(H5T_DRIVER_CLASS, "another driver"));
    H5FD_gdsroute_counters_t small = {.struct_size = 4};
    CHECK(H5FD_gdsroute_get_counters(&small) < 0);
    H5Pclose(sec2);
    H5Pclose(fapl);
}

/* A file through the driver with the settings above: compat ON, fsync at flush. */
static void check_settings_in_use(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/settings.h5", dir);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5FD_gdsroute_fapl_t set = {H5FD_GDSROUTE_FAPL_VERSION, GDSROUTE_COMPAT_MODE_ON, 1}, got;
    CHECK_H5(H5Pset_fapl_gdsroute(fapl, &set));
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(file >= 0);
    CHECK_H5(H5Fflush(file, H5F_SCOPE_GLOBAL));
    hid_t access = H5Fget_access_plist(file);
    CHECK_H5(H5Pget_fapl_gdsroute(access, &got));
    CHECK(got.compat_mode == GDSROUTE_COMPAT_MODE_ON && got.sync_on_flush == 1);
    H5Pclose(access);
    CHECK_H5(H5Fclose(file));
    H5Pclose(fapl);
}

static int roundtrip(const char *dir) {
    char dpath[4096], spath[4096];
    snprintf(dpath, sizeof dpath, "%s/driver.h5", dir);
    snprintf(spath, sizeof spath, "%s/sec2.h5", dir);
    hid_t dfapl = h5t_driver_fapl(), sfapl = h5t_sec2_fapl();
    if (h5t_env_route()) { /* HDF5_DRIVER chose the driver for the default list */
        CHECK(H5Pget_driver(dfapl) == H5FD_GDSROUTE);
        printf("route: HDF5_DRIVER=%s\n", getenv("HDF5_DRIVER") ? getenv("HDF5_DRIVER") : "(unset)");
    } else {
        printf("route: H5Pset_fapl_gdsroute\n");
        check_fapl();
        check_settings_in_use(dir);
    }
    gdsroute_stats s0 = {.struct_size = sizeof s0};
    CHECK_STATUS(gdsroute_stats_get(&s0), GDSROUTE_STATUS_OK);
    H5FD_gdsroute_counters_t c0 = h5t_counters();

    make_file(dpath, dfapl, 1);
    make_file(spath, sfapl, 0);
    /* The table's big chunks are above this HDF5's default chunk cache: HDF5 passes them through. */
    hid_t file = H5Fopen(dpath, H5F_ACC_RDONLY, sfapl);
    for (int i = 0; i < nspecs; i++) {
        if (specs[i].layout != BIG_CHUNKS) continue;
        hid_t dset = H5Dopen2(file, specs[i].name, H5P_DEFAULT);
        CHECK(dset >= 0 && dataset_passes_through(dset, 1) && dataset_passes_through(dset, 0));
        H5Dclose(dset);
    }
    CHECK_H5(H5Fclose(file));
    int identical = same_bytes(dpath, spath);
    CHECK(identical);
    check_file(dpath, dfapl, 1, "driver's file through the driver");
    check_file(dpath, sfapl, 0, "driver's file through sec2");
    check_file(spath, dfapl, 1, "sec2's file through the driver");

    /* A change through the driver, read back by sec2. */
    file = H5Fopen(dpath, H5F_ACC_RDWR, dfapl);
    CHECK(file >= 0);
    hid_t dset = H5Dopen2(file, specs[0].name, H5P_DEFAULT);
    unsigned char patch[1000];
    memset(patch, 0x5C, sizeof patch);
    hsize_t start = 10, count = sizeof patch;
    hid_t fspace = H5Dget_space(dset), mspace = H5Screate_simple(1, &count, NULL);
    H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &count, NULL);
    CHECK_H5(H5Dwrite(dset, H5T_NATIVE_INT8, mspace, fspace, H5P_DEFAULT, patch));
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Dclose(dset);
    CHECK_H5(H5Fclose(file));
    file = H5Fopen(dpath, H5F_ACC_RDONLY, sfapl);
    dset = H5Dopen2(file, specs[0].name, H5P_DEFAULT);
    size_t size = 0;
    unsigned char *want = expected_bytes(&specs[0], &size);
    memset(want + start, 0x5C, sizeof patch);
    unsigned char *got = malloc(size);
    CHECK_H5(H5Dread(dset, H5T_NATIVE_INT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, got));
    CHECK(memcmp(got, want, size) == 0);
    free(got);
    free(want);
    H5Dclose(dset);
    CHECK_H5(H5Fclose(file));

    H5FD_gdsroute_counters_t c1 = h5t_counters();
    gdsroute_stats s1 = {.struct_size = sizeof s1};
    CHECK_STATUS(gdsroute_stats_get(&s1), GDSROUTE_STATUS_OK);
    /* Every byte the driver moved went through gdsroute. */
    CHECK(s1.bytes_read - s0.bytes_read >= (c1.raw_read_bytes + c1.metadata_read_bytes) -
                                               (c0.raw_read_bytes + c0.metadata_read_bytes));
    CHECK(s1.bytes_written - s0.bytes_written ==
          (c1.raw_write_bytes + c1.metadata_write_bytes) - (c0.raw_write_bytes + c0.metadata_write_bytes));
    CHECK(c1.raw_reads > c0.raw_reads && c1.metadata_reads > c0.metadata_reads);
    CHECK(c1.errors == c0.errors);
    printf("datasets: %d; the driver's and sec2's files byte-identical: %s\n", nspecs, identical ? "yes" : "NO");

    check_counters(dir, dfapl);
    H5Pclose(dfapl);
    H5Pclose(sfapl);
    return check_summary();
}

/* The table through sec2 or the driver: the tools' test's input and h5dump's. */
static int make(const char *path, int driver) {
    hid_t fapl = driver ? h5t_driver_fapl() : h5t_sec2_fapl();
    make_file(path, fapl, 0);
    H5Pclose(fapl);
    return check_summary();
}

static int verify(const char *path) {
    hid_t fapl = h5t_driver_fapl();
    check_file(path, fapl, 1, path);
    H5FD_gdsroute_counters_t c = h5t_counters();
    CHECK(c.raw_reads > 0 && c.errors == 0);
    H5Pclose(fapl);
    return check_summary();
}

static int verify_import(const char *path, const char *bin) {
    struct stat st;
    CHECK(stat(bin, &st) == 0);
    size_t size = (size_t)st.st_size;
    unsigned char *want = malloc(size), *got = guarded_alloc(size);
    FILE *f = fopen(bin, "rb");
    CHECK(f != NULL && fread(want, 1, size, f) == size);
    if (f) fclose(f);
    hid_t fapl = h5t_driver_fapl();
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    CHECK(file >= 0);
    hid_t dset = H5Dopen2(file, "/imported", H5P_DEFAULT);
    CHECK(dset >= 0);
    CHECK(H5Sget_simple_extent_npoints(H5Dget_space(dset)) * 8 == (hssize_t)size);
    CHECK_H5(H5Dread(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, got));
    CHECK(memcmp(got, want, size) == 0 && guards_intact(got, size));
    H5Dclose(dset);
    CHECK_H5(H5Fclose(file));
    H5Pclose(fapl);
    guarded_free(got);
    free(want);
    return check_summary();
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* CHECK_H5 prints the stack of an unexpected failure */
    int gzip = H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0;
    build_specs(gzip);
    printf("HDF5 %u.%u.%u, gzip %s\n", H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE, gzip ? "available" : "not available");
    if (argc == 3 && strcmp(argv[1], "roundtrip") == 0) {
        if (!h5t_memory_setup(64u << 20)) return 1;
        return roundtrip(argv[2]);
    }
    if (argc == 3 && strcmp(argv[1], "make") == 0) return make(argv[2], 0);
    if (argc == 3 && strcmp(argv[1], "make-driver") == 0) return make(argv[2], 1);
    if (argc == 3 && strcmp(argv[1], "verify") == 0) {
        if (!h5t_memory_setup(64u << 20)) return 1;
        return verify(argv[2]);
    }
    if (argc == 4 && strcmp(argv[1], "verify-import") == 0) return verify_import(argv[2], argv[3]);
    fprintf(stderr, "usage: %s roundtrip DIR | make FILE | make-driver FILE | verify FILE | verify-import FILE BIN\n", argv[0]);
    return 2;
}
