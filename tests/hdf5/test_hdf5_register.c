/*
 * test_hdf5_register: the driver's registration with HDF5 (H5FD_gdsroute_init, the first use of
 * H5FD_GDSROUTE) gives one identifier for the whole process, whoever gets there first.
 *
 *   race-threads DIR   two threads make their first H5Pset_fapl_gdsroute at once, both
 *                      registering the class (under register_race.so, REGISTER_RACE=threads);
 *                      skipped (exit 77) where HDF5 is not thread-safe
 *   race-nested DIR    another registration completes while the first is under way
 *                      (register_race.so, REGISTER_RACE=nested): one thread, any HDF5
 *   same-value DIR     (HDF5 1.13.2+) another driver registered first under the driver's value
 *                      (317) is not taken for it
 *
 * After each: both lists report the driver's settings, name one identifier, H5FD_GDSROUTE's, and
 * open files through it; the driver's errors carry its error class.
 */
#include "hdf5_test.h"

#include <dlfcn.h>
#include <pthread.h>

#define SKIPPED 77

/* The lists name the driver's one identifier and work: settings, a file, an error. */
static void check_one_driver(const char *dir, hid_t a, hid_t b) {
    H5FD_gdsroute_fapl_t got;
    CHECK_H5(H5Pget_fapl_gdsroute(a, &got));
    CHECK_H5(H5Pget_fapl_gdsroute(b, &got));
    hid_t id = H5FD_GDSROUTE;
    CHECK(id >= 0 && H5Pget_driver(a) == id && H5Pget_driver(b) == id);
    CHECK(H5FD_GDSROUTE == id);
    char path[4096];
    hid_t lists[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/list%d.h5", dir, i);
        uint64_t opens = h5t_counters().opens;
        hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, lists[i]);
        CHECK(file >= 0 && h5t_counters().opens > opens);
        if (file >= 0) CHECK_H5(H5Fclose(file));
    }
    CHECK(H5Pset_fapl_gdsroute(H5I_INVALID_HID, NULL) < 0);
    CHECK(h5t_stack_has(H5T_DRIVER_CLASS, "not a file access property list"));
}

/* register_race.so's count of the driver's H5FDregister calls; -1 without the shim. */
static int race_calls(void) {
    int (*calls)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "register_race_calls");
    return calls != NULL ? calls() : -1;
}

struct first_use {
    pthread_barrier_t *start;
    hid_t fapl;
    herr_t result;
};

static void *first_use(void *arg) {
    struct first_use *u = arg;
    pthread_barrier_wait(u->start);
    u->result = H5Pset_fapl_gdsroute(u->fapl, NULL);
    return NULL;
}

static int race_threads(const char *dir) {
    hbool_t threadsafe = 0;
    if (H5is_library_threadsafe(&threadsafe) < 0 || !threadsafe) {
        printf("skipped: HDF5 %d.%d.%d is not thread-safe (no HDF5 calls from two threads at once)\n",
               H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE);
        return SKIPPED;
    }
    if (race_calls() < 0) {
        fprintf(stderr, "race-threads: run under register_race.so (LD_PRELOAD, REGISTER_RACE=threads)\n");
        return 1;
    }
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    struct first_use uses[2];
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        uses[i] = (struct first_use){&start, H5Pcreate(H5P_FILE_ACCESS), -1};
        CHECK(uses[i].fapl >= 0);
    }
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&threads[i], NULL, first_use, &uses[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);
    CHECK(uses[0].result >= 0 && uses[1].result >= 0);
    /* Both registered: the race this test is about happened. */
    printf("registrations of the class: %d\n", race_calls());
    CHECK(race_calls() == 2);
    check_one_driver(dir, uses[0].fapl, uses[1].fapl);
    H5Pclose(uses[0].fapl);
    H5Pclose(uses[1].fapl);
    return check_summary();
}

static int race_nested(const char *dir) {
    if (race_calls() < 0) {
        fprintf(stderr, "race-nested: run under register_race.so (LD_PRELOAD, REGISTER_RACE=nested)\n");
        return 1;
    }
    hid_t a = H5Pcreate(H5P_FILE_ACCESS), b = H5Pcreate(H5P_FILE_ACCESS);
    CHECK_H5(H5Pset_fapl_gdsroute(a, NULL));
    printf("registrations of the class: %d\n", race_calls());
    CHECK(race_calls() == 2);
    CHECK_H5(H5Pset_fapl_gdsroute(b, NULL));
    check_one_driver(dir, a, b);
    H5Pclose(a);
    H5Pclose(b);
    return check_summary();
}

#if H5_VERSION_GE(1, 13, 2)
/* Another driver, registered under the gdsroute driver's value: its callbacks only fail. */
static H5FD_t *other_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
    (void)name, (void)flags, (void)fapl, (void)maxaddr;
    return NULL;
}
static herr_t other_close(H5FD_t *file) {
    (void)file;
    return -1;
}
static haddr_t other_get_eoa(const H5FD_t *file, H5FD_mem_t type) {
    (void)file, (void)type;
    return HADDR_UNDEF;
}
static herr_t other_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr) {
    (void)file, (void)type, (void)addr;
    return -1;
}
static herr_t other_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, void *buf) {
    (void)file, (void)type, (void)dxpl, (void)addr, (void)size, (void)buf;
    return -1;
}
static herr_t other_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size, const void *buf) {
    (void)file, (void)type, (void)dxpl, (void)addr, (void)size, (void)buf;
    return -1;
}
static const H5FD_class_t other_class = {
    .version = H5FD_CLASS_VERSION,
    .value = H5FD_GDSROUTE_VALUE,
    .name = "not-gdsroute",
    .maxaddr = HADDR_MAX,
    .fc_degree = H5F_CLOSE_WEAK,
    .open = other_open,
    .close = other_close,
    .get_eoa = other_get_eoa,
    .set_eoa = other_set_eoa,
    .get_eof = other_get_eoa,
    .read = other_read,
    .write = other_write,
};

static int same_value(const char *dir) {
    hid_t other = H5FDregister(&other_class);
    CHECK(other >= 0);
    CHECK(H5FDis_driver_registered_by_value(H5FD_GDSROUTE_VALUE) > 0);
    hid_t id = H5FD_GDSROUTE;
    CHECK(id >= 0 && id != other);
    hid_t a = H5Pcreate(H5P_FILE_ACCESS), b = H5Pcreate(H5P_FILE_ACCESS);
    CHECK_H5(H5Pset_fapl_gdsroute(a, NULL));
    CHECK_H5(H5Pset_driver_by_name(b, H5FD_GDSROUTE_NAME, NULL));
    check_one_driver(dir, a, b);
    H5Pclose(a);
    H5Pclose(b);
    CHECK_H5(H5FDunregister(other));
    return check_summary();
}
#endif

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (argc == 3 && strcmp(argv[1], "race-threads") == 0) return race_threads(argv[2]);
    if (argc == 3 && strcmp(argv[1], "race-nested") == 0) return race_nested(argv[2]);
#if H5_VERSION_GE(1, 13, 2)
    if (argc == 3 && strcmp(argv[1], "same-value") == 0) return same_value(argv[2]);
#endif
    fprintf(stderr, "usage: %s race-threads DIR | race-nested DIR | same-value DIR (HDF5 1.13.2+)\n", argv[0]);
    return 2;
}
