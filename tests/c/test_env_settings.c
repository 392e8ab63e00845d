/* Run by ctest under KVIKIO_* environment values (the ENVIRONMENT property). Settings are read
 * once per process, so each value needs its own process.
 *   test_env_settings invalid VAR        open and every settings getter fail with INVALID_SETTING
 *                                        and a message naming VAR
 *   test_env_settings task_size N        the task size reads back N and a read works
 *   test_env_settings compat_mode N      the compat mode reads back N, and new handles take it
 *   test_env_settings cufile_fd N        the cuFile descriptor setting reads back N
 *   test_env_settings pin_max N          the page-cache pin limit reads back N
 *   test_env_settings num_threads N      the thread count reads back N and a read works
 *   test_env_settings message TEXT       open fails with INVALID_SETTING and a message containing
 *                                        TEXT
 *   test_env_settings repair VAR,VAR...  the listed variables are bad (in the library's order):
 *                                        open fails naming the first one not yet set; its setter
 *                                        works and replaces it; after the last, open, read and
 *                                        getters work with the values set
 */
#define _GNU_SOURCE
#include "check.h"

#include <stdlib.h>

static void check_invalid(const char *var) {
    if (getenv(var) == NULL) {
        fprintf(stderr, "%s is not set in the environment; the ctest ENVIRONMENT is missing\n", var);
        check_failed++;
        return;
    }
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open("/dev/null", "r", 0, &f), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK(f == NULL);
    CHECK_STATUS(gdsroute_file_open_with_compat_mode("/dev/null", "r", 0, GDSROUTE_COMPAT_MODE_ON, &f),
                 GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK(f == NULL);

    uint32_t mode = 77;
    size_t value = 77;
    CHECK_STATUS(gdsroute_settings_get_compat_mode(&mode), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK_STATUS(gdsroute_settings_get_num_threads(&value), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK_STATUS(gdsroute_settings_get_task_size(&value), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK_STATUS(gdsroute_settings_get_min_task_size(&value), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK_STATUS(gdsroute_settings_get_gds_threshold(&value), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK_STATUS(gdsroute_settings_get_bounce_buffer_size(&value), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK_STATUS(gdsroute_settings_get_cufile_fd(&mode), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    uint64_t pin = 77;
    CHECK_STATUS(gdsroute_settings_get_page_cache_pin_max(&pin), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    bool flag = true;
    CHECK_STATUS(gdsroute_settings_get_prepare_at_open(&flag), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK(flag);
    /* Starting the device set-up needs the settings too. */
    CHECK_STATUS(gdsroute_begin_device_setup(), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK(mode == 77 && value == 77 && pin == 77);
    /* The error is sticky: the same answer on a second try. */
    CHECK_STATUS(gdsroute_settings_get_task_size(&value), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    /* Calls that need no settings still work. */
    gdsroute_stats stats = {.struct_size = sizeof stats};
    CHECK_STATUS(gdsroute_stats_get(&stats), GDSROUTE_STATUS_OK);
    printf("message: %s\n", check_last_message());
}

/* A read of the test binary itself works (settings usable). */
static void check_read_works(void) {
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open("/proc/self/exe", "r", 0, &f), GDSROUTE_STATUS_OK);
    if (f == NULL) return;
    char buf[4096];
    gdsroute_op *op = NULL;
    size_t n = 0;
    CHECK_STATUS(gdsroute_file_pread(f, buf, sizeof buf, 0, &op), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_op_wait(op, &n), GDSROUTE_STATUS_OK);
    CHECK(n == sizeof buf && memcmp(buf, "\177ELF", 4) == 0);
    gdsroute_op_free(op);
    n = 0;
    CHECK_STATUS(gdsroute_file_read(f, buf, 16, 0, &n), GDSROUTE_STATUS_OK);
    CHECK(n == 16);
    gdsroute_file_free(f);
}

/* The setter that replaces the setting of `var`, with the value checked after the repair. */
static gdsroute_status repair(const char *var) {
    if (strcmp(var, "KVIKIO_COMPAT_MODE") == 0) return gdsroute_settings_set_compat_mode(GDSROUTE_COMPAT_MODE_ON);
    if (strcmp(var, "KVIKIO_NTHREADS") == 0 || strcmp(var, "KVIKIO_NUM_THREADS") == 0)
        return gdsroute_settings_set_num_threads(3);
    if (strcmp(var, "KVIKIO_TASK_SIZE") == 0) return gdsroute_settings_set_task_size(1 << 20);
    if (strcmp(var, "KVIKIO_GDS_THRESHOLD") == 0) return gdsroute_settings_set_gds_threshold(0);
    if (strcmp(var, "KVIKIO_BOUNCE_BUFFER_SIZE") == 0) return gdsroute_settings_set_bounce_buffer_size(1 << 20);
    if (strcmp(var, "GDSROUTE_CUFILE_STATS") == 0) return gdsroute_settings_set_cufile_stats(false);
    if (strcmp(var, "GDSROUTE_PAGE_CACHE_PIN_MAX") == 0) return gdsroute_settings_set_page_cache_pin_max(0);
    if (strcmp(var, "GDSROUTE_CUFILE_FD") == 0) return gdsroute_settings_set_cufile_fd(GDSROUTE_CUFILE_FD_BUFFERED);
    if (strcmp(var, "KVIKIO_AUTO_DIRECT_IO_READ") == 0) return gdsroute_settings_set_auto_direct_io_read(true);
    if (strcmp(var, "KVIKIO_AUTO_DIRECT_IO_WRITE") == 0) return gdsroute_settings_set_auto_direct_io_write(true);
    if (strcmp(var, "GDSROUTE_PREPARE_AT_OPEN") == 0) return gdsroute_settings_set_prepare_at_open(false);
    if (strcmp(var, "GDSROUTE_STREAM_ORDERED") == 0) return gdsroute_settings_set_stream_ordered(GDSROUTE_STREAM_ORDERED_OFF);
    if (strcmp(var, "GDSROUTE_STREAM_RELAY") == 0) return gdsroute_settings_set_stream_relay(true);
    if (strcmp(var, "KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE") == 0)
        return gdsroute_settings_set_thread_pool_per_block_device(true);
    if (strcmp(var, "GDSROUTE_CUFILE_ASYNC") == 0) return gdsroute_settings_set_cufile_async_native(true);
    if (strcmp(var, "GDSROUTE_MIN_TASK_SIZE") == 0) return gdsroute_settings_set_min_task_size(0);
    fprintf(stderr, "no setter known for %s\n", var);
    check_failed++;
    return GDSROUTE_STATUS_INTERNAL;
}

static void check_repaired_values(const char *var) {
    uint32_t u = 99;
    size_t z = 99;
    uint64_t q = 99;
    bool b = false;
    if (strcmp(var, "KVIKIO_COMPAT_MODE") == 0) {
        CHECK_STATUS(gdsroute_settings_get_compat_mode(&u), GDSROUTE_STATUS_OK);
        CHECK(u == GDSROUTE_COMPAT_MODE_ON);
    } else if (strcmp(var, "KVIKIO_NTHREADS") == 0 || strcmp(var, "KVIKIO_NUM_THREADS") == 0) {
        CHECK_STATUS(gdsroute_settings_get_num_threads(&z), GDSROUTE_STATUS_OK);
        CHECK(z == 3);
    } else if (strcmp(var, "KVIKIO_TASK_SIZE") == 0) {
        CHECK_STATUS(gdsroute_settings_get_task_size(&z), GDSROUTE_STATUS_OK);
        CHECK(z == 1 << 20);
    } else if (strcmp(var, "KVIKIO_GDS_THRESHOLD") == 0) {
        CHECK_STATUS(gdsroute_settings_get_gds_threshold(&z), GDSROUTE_STATUS_OK);
        CHECK(z == 0);
    } else if (strcmp(var, "KVIKIO_BOUNCE_BUFFER_SIZE") == 0) {
        CHECK_STATUS(gdsroute_settings_get_bounce_buffer_size(&z), GDSROUTE_STATUS_OK);
        CHECK(z == 1 << 20);
    } else if (strcmp(var, "GDSROUTE_CUFILE_STATS") == 0) {
        b = true;
        CHECK_STATUS(gdsroute_settings_get_cufile_stats(&b), GDSROUTE_STATUS_OK);
        CHECK(!b);
    } else if (strcmp(var, "GDSROUTE_PAGE_CACHE_PIN_MAX") == 0) {
        CHECK_STATUS(gdsroute_settings_get_page_cache_pin_max(&q), GDSROUTE_STATUS_OK);
        CHECK(q == 0);
    } else if (strcmp(var, "GDSROUTE_CUFILE_FD") == 0) {
        CHECK_STATUS(gdsroute_settings_get_cufile_fd(&u), GDSROUTE_STATUS_OK);
        CHECK(u == GDSROUTE_CUFILE_FD_BUFFERED);
    } else if (strcmp(var, "KVIKIO_AUTO_DIRECT_IO_READ") == 0) {
        CHECK_STATUS(gdsroute_settings_get_auto_direct_io_read(&b), GDSROUTE_STATUS_OK);
        CHECK(b);
    } else if (strcmp(var, "KVIKIO_AUTO_DIRECT_IO_WRITE") == 0) {
        CHECK_STATUS(gdsroute_settings_get_auto_direct_io_write(&b), GDSROUTE_STATUS_OK);
        CHECK(b);
    } else if (strcmp(var, "GDSROUTE_PREPARE_AT_OPEN") == 0) {
        b = true;
        CHECK_STATUS(gdsroute_settings_get_prepare_at_open(&b), GDSROUTE_STATUS_OK);
        CHECK(!b);
    } else if (strcmp(var, "GDSROUTE_STREAM_ORDERED") == 0) {
        u = GDSROUTE_STREAM_ORDERED_AUTO;
        CHECK_STATUS(gdsroute_settings_get_stream_ordered(&u), GDSROUTE_STATUS_OK);
        CHECK(u == GDSROUTE_STREAM_ORDERED_OFF);
    } else if (strcmp(var, "GDSROUTE_STREAM_RELAY") == 0) {
        CHECK_STATUS(gdsroute_settings_get_stream_relay(&b), GDSROUTE_STATUS_OK);
        CHECK(b);
    } else if (strcmp(var, "KVIKIO_THREAD_POOL_PER_BLOCK_DEVICE") == 0) {
        CHECK_STATUS(gdsroute_settings_get_thread_pool_per_block_device(&b), GDSROUTE_STATUS_OK);
        CHECK(b);
    } else if (strcmp(var, "GDSROUTE_CUFILE_ASYNC") == 0) {
        CHECK_STATUS(gdsroute_settings_get_cufile_async_native(&b), GDSROUTE_STATUS_OK);
        CHECK(b);
    } else if (strcmp(var, "GDSROUTE_MIN_TASK_SIZE") == 0) {
        CHECK_STATUS(gdsroute_settings_get_min_task_size(&z), GDSROUTE_STATUS_OK);
        CHECK(z == 0);
    }
}

static void check_repair(const char *list) {
    char vars[16][64];
    int count = 0;
    for (const char *p = list; *p != '\0' && count < 16;) {
        size_t len = strcspn(p, ",");
        snprintf(vars[count], sizeof vars[count], "%.*s", (int)len, p);
        count++;
        p += len + (p[len] == ',');
    }
    gdsroute_file *f = NULL;
    for (int i = 0; i < count; i++) {
        if (getenv(vars[i]) == NULL) {
            fprintf(stderr, "%s is not set in the environment; the ctest ENVIRONMENT is missing\n", vars[i]);
            check_failed++;
        }
        /* Still failing, on the first variable not yet replaced. */
        CHECK_STATUS(gdsroute_file_open("/dev/null", "r", 0, &f), GDSROUTE_STATUS_INVALID_SETTING);
        CHECK_MESSAGE(vars[i]);
        size_t task = 0;
        CHECK_STATUS(gdsroute_settings_get_task_size(&task), GDSROUTE_STATUS_INVALID_SETTING);
        CHECK_MESSAGE(vars[i]);
        /* An invalid value repairs nothing. */
        CHECK_STATUS(gdsroute_settings_set_task_size(0), GDSROUTE_STATUS_INVALID_SETTING);
        CHECK_STATUS(gdsroute_settings_set_num_threads(0), GDSROUTE_STATUS_INVALID_SETTING);
        CHECK_STATUS(gdsroute_file_open("/dev/null", "r", 0, &f), GDSROUTE_STATUS_INVALID_SETTING);
        CHECK_MESSAGE(vars[i]);
        /* The setter works and replaces the bad value. */
        CHECK_STATUS(repair(vars[i]), GDSROUTE_STATUS_OK);
        if (i + 1 < count) {
            CHECK_STATUS(gdsroute_file_open("/dev/null", "r", 0, &f), GDSROUTE_STATUS_INVALID_SETTING);
            CHECK_MESSAGE(vars[i + 1]);
        }
    }
    CHECK(f == NULL);
    for (int i = 0; i < count; i++) {
        check_repaired_values(vars[i]);
    }
    check_read_works();
    /* Without a GPU (CI) the set-up finds no libcuda and starts nothing; it still says OK. */
    CHECK_STATUS(gdsroute_begin_device_setup(), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_begin_device_setup(), GDSROUTE_STATUS_OK);
    check_read_works();
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr,
                "usage: %s invalid VAR | task_size N | compat_mode N | cufile_fd N | pin_max N | num_threads N |"
                " message TEXT | repair VAR,...\n",
                argv[0]);
        return 2;
    }
    const char *what = argv[1];
    unsigned long long expected = strtoull(argv[2], NULL, 10);
    if (strcmp(what, "invalid") == 0) {
        check_invalid(argv[2]);
    } else if (strcmp(what, "message") == 0) {
        gdsroute_file *f = NULL;
        CHECK_STATUS(gdsroute_file_open("/dev/null", "r", 0, &f), GDSROUTE_STATUS_INVALID_SETTING);
        CHECK_MESSAGE(argv[2]);
        printf("message: %s\n", check_last_message());
    } else if (strcmp(what, "repair") == 0) {
        check_repair(argv[2]);
    } else if (strcmp(what, "num_threads") == 0) {
        size_t threads = 0;
        CHECK_STATUS(gdsroute_settings_get_num_threads(&threads), GDSROUTE_STATUS_OK);
        CHECK(threads == expected);
        check_read_works();
    } else if (strcmp(what, "task_size") == 0) {
        size_t task = 0;
        CHECK_STATUS(gdsroute_settings_get_task_size(&task), GDSROUTE_STATUS_OK);
        CHECK(task == expected);
        gdsroute_file *f = NULL;
        CHECK_STATUS(gdsroute_file_open("/proc/self/exe", "r", 0, &f), GDSROUTE_STATUS_OK);
        char buf[4096];
        gdsroute_op *op = NULL;
        size_t n = 0;
        CHECK_STATUS(gdsroute_file_pread(f, buf, sizeof buf, 0, &op), GDSROUTE_STATUS_OK);
        CHECK_STATUS(gdsroute_op_wait(op, &n), GDSROUTE_STATUS_OK);
        CHECK(n == sizeof buf && memcmp(buf, "\177ELF", 4) == 0);
        gdsroute_op_free(op);
        gdsroute_file_free(f);
    } else if (strcmp(what, "compat_mode") == 0) {
        uint32_t mode = 99;
        CHECK_STATUS(gdsroute_settings_get_compat_mode(&mode), GDSROUTE_STATUS_OK);
        CHECK(mode == expected);
        gdsroute_file *f = NULL;
        CHECK_STATUS(gdsroute_file_open("/dev/null", "r", 0, &f), GDSROUTE_STATUS_OK);
        mode = 99;
        CHECK_STATUS(gdsroute_file_compat_mode(f, &mode), GDSROUTE_STATUS_OK);
        CHECK(mode == expected);
        gdsroute_file_free(f);
    } else if (strcmp(what, "cufile_fd") == 0) {
        uint32_t fd = 99;
        CHECK_STATUS(gdsroute_settings_get_cufile_fd(&fd), GDSROUTE_STATUS_OK);
        CHECK(fd == expected);
    } else if (strcmp(what, "pin_max") == 0) {
        uint64_t pin = 99;
        CHECK_STATUS(gdsroute_settings_get_page_cache_pin_max(&pin), GDSROUTE_STATUS_OK);
        CHECK(pin == expected);
    } else {
        fprintf(stderr, "unknown check %s\n", what);
        return 2;
    }
    return check_summary();
}
