/* Run by ctest under KVIKIO_* environment values (the ENVIRONMENT property). Settings are read
 * once per process, so each value needs its own process.
 *   test_env_settings invalid VAR        open and every settings getter fail with INVALID_SETTING
 *                                        and a message naming VAR
 *   test_env_settings task_size N        the task size reads back N and a read works
 *   test_env_settings compat_mode N      the compat mode reads back N, and new handles take it
 *   test_env_settings cufile_fd N        the cuFile descriptor setting reads back N
 *   test_env_settings pin_max N          the page-cache pin limit reads back N
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
    CHECK_STATUS(gdsroute_settings_get_gds_threshold(&value), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK_STATUS(gdsroute_settings_get_bounce_buffer_size(&value), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    CHECK_STATUS(gdsroute_settings_get_cufile_fd(&mode), GDSROUTE_STATUS_INVALID_SETTING);
    CHECK_MESSAGE(var);
    uint64_t pin = 77;
    CHECK_STATUS(gdsroute_settings_get_page_cache_pin_max(&pin), GDSROUTE_STATUS_INVALID_SETTING);
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

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s invalid VAR | task_size N | compat_mode N | cufile_fd N | pin_max N\n", argv[0]);
        return 2;
    }
    const char *what = argv[1];
    unsigned long long expected = strtoull(argv[2], NULL, 10);
    if (strcmp(what, "invalid") == 0) {
        check_invalid(argv[2]);
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
