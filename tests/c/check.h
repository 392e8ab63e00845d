/* Tiny assertion helpers shared by the C tests: each failure prints the file, line, the status
 * name and the library's last error message, and the run ends with "N passed, M failed". */
#ifndef GDSROUTE_TEST_CHECK_H
#define GDSROUTE_TEST_CHECK_H

#include <gdsroute.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_passed;
static int check_failed;

static inline const char *check_last_message(void) {
    static char message[4096];
    gdsroute_last_error_message(message, sizeof message);
    return message;
}

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (cond) {                                                                        \
            check_passed++;                                                                \
        } else {                                                                           \
            check_failed++;                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);       \
        }                                                                                  \
    } while (0)

/* The call returns exactly `expected`; for an error also a non-empty last-error message
 * (and last_error_status equal to it). */
#define CHECK_STATUS(call, expected)                                                       \
    do {                                                                                   \
        gdsroute_status check_st_ = (call);                                                \
        gdsroute_status check_exp_ = (expected);                                           \
        if (check_st_ != check_exp_) {                                                     \
            check_failed++;                                                                \
            fprintf(stderr, "%s:%d: %s returned %s (%u), expected %s (%u); last error: %s\n", \
                    __FILE__, __LINE__, #call, gdsroute_status_str(check_st_),             \
                    (unsigned)check_st_, gdsroute_status_str(check_exp_),                  \
                    (unsigned)check_exp_, check_last_message());                           \
        } else if (check_exp_ != GDSROUTE_STATUS_OK &&                                     \
                   (gdsroute_last_error_message(NULL, 0) == 0 ||                           \
                    gdsroute_last_error_status() != check_exp_)) {                         \
            check_failed++;                                                                \
            fprintf(stderr, "%s:%d: %s: missing last error (status %u, message \"%s\")\n", \
                    __FILE__, __LINE__, #call, (unsigned)gdsroute_last_error_status(),     \
                    check_last_message());                                                 \
        } else {                                                                           \
            check_passed++;                                                                \
        }                                                                                  \
    } while (0)

/* The last error message contains `needle`. */
#define CHECK_MESSAGE(needle)                                                              \
    do {                                                                                   \
        const char *check_msg_ = check_last_message();                                     \
        if (strstr(check_msg_, (needle)) != NULL) {                                        \
            check_passed++;                                                                \
        } else {                                                                           \
            check_failed++;                                                                \
            fprintf(stderr, "%s:%d: last error \"%s\" does not mention \"%s\"\n", __FILE__, \
                    __LINE__, check_msg_, (needle));                                       \
        }                                                                                  \
    } while (0)

/* Opens `path` with `flags` (mode 0644), which must work: a test that cannot open its file
 * cannot go on, so a failure is counted and the run ends. */
static inline gdsroute_file *open_ok(const char *path, const char *flags) {
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open(path, flags, 0644, &f), GDSROUTE_STATUS_OK);
    if (f == NULL) {
        fprintf(stderr, "cannot continue without %s\n", path);
        exit(1);
    }
    return f;
}

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed == 0 ? 0 : 1;
}

#endif
