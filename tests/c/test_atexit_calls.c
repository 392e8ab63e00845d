/* Calls from an atexit handler, as HDF5 makes when it closes the files a program left open.
 * glibc runs the main thread's thread-local destructors before the atexit handlers, so every
 * call here runs on a thread whose thread-local state (the last error, the monitors' stack, the
 * direct-I/O scratch buffer) is gone: each must keep its status and never abort the process.
 *
 *   test_atexit_calls DIR
 * Before exit: writes DIR/atexit.bin with random bytes, makes one call fail (so the last error
 * exists and has a destructor), adds a monitor of calls and tasks, and calls exit(0). The handler
 * then checks, and prints "N passed, M failed": a failing open (its status; the last-error
 * getters answer without aborting), a write through a read-only handle, a parallel read and a
 * read with direct I/O on (every byte), and the monitor's removal. The exit status is 0 when
 * every check passed, 1 otherwise (a crash gives a signal). */
#define _GNU_SOURCE
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_SIZE (3u << 20) /* three tasks of 1 MiB */

static char path[4096];
static unsigned char expected[FILE_SIZE];
static uint64_t monitor_id;

static void on_observation(const gdsroute_observation *observation, void *user_data) {
    (void)observation;
    (void)user_data;
}

static void check_read(size_t offset, size_t size) {
    gdsroute_file *file = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &file), GDSROUTE_STATUS_OK);
    if (file == NULL) return;
    unsigned char *buf = malloc(size + 2);
    if (buf == NULL) {
        CHECK(buf != NULL);
        gdsroute_file_free(file);
        return;
    }
    memset(buf, 0xA5, size + 2);
    gdsroute_op *op = NULL;
    size_t got = 0;
    CHECK_STATUS(gdsroute_file_pread(file, buf + 1, size, offset, &op), GDSROUTE_STATUS_OK);
    if (op != NULL) {
        CHECK_STATUS(gdsroute_op_wait(op, &got), GDSROUTE_STATUS_OK);
        gdsroute_op_free(op);
    }
    CHECK(got == size);
    CHECK(memcmp(buf + 1, expected + offset, size) == 0);
    CHECK(buf[0] == 0xA5 && buf[size + 1] == 0xA5);
    free(buf);
    gdsroute_file_free(file);
}

static void at_exit(void) {
    /* A failing call: its status, and getters that answer. */
    gdsroute_file *missing = NULL;
    char missing_path[4200];
    snprintf(missing_path, sizeof missing_path, "%s.missing", path);
    CHECK(gdsroute_file_open(missing_path, "r", 0, &missing) == GDSROUTE_STATUS_OPEN_FAILED);
    CHECK(missing == NULL);
    (void)gdsroute_last_error_status();
    (void)gdsroute_last_error_errno();
    char message[256];
    (void)gdsroute_last_error_message(message, sizeof message);

    /* A write refused by the handle's access mode. */
    gdsroute_file *ro = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r", 0, &ro), GDSROUTE_STATUS_OK);
    if (ro != NULL) {
        size_t written = 7;
        CHECK(gdsroute_file_write(ro, expected, 4096, 0, &written) == GDSROUTE_STATUS_IO_ERROR);
        gdsroute_file_free(ro);
    }

    /* Reads: parallel tasks, then direct I/O of an unaligned range (the scratch buffer). */
    check_read(0, FILE_SIZE);
    check_read(4097, FILE_SIZE - 8000);
    CHECK_STATUS(gdsroute_settings_set_auto_direct_io_read(true), GDSROUTE_STATUS_OK);
    check_read(4097, FILE_SIZE - 8000);
    check_read(1, 100);

    CHECK_STATUS(gdsroute_monitor_remove(monitor_id), GDSROUTE_STATUS_OK);
    int failed = check_summary();
    fflush(stdout);
    _exit(failed);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    snprintf(path, sizeof path, "%s/atexit.bin", argv[1]);
    srand(20261204);
    for (size_t i = 0; i < FILE_SIZE; i++) expected[i] = (unsigned char)rand();
    CHECK_STATUS(gdsroute_settings_set_task_size(1u << 20), GDSROUTE_STATUS_OK);
    gdsroute_file *file = open_ok(path, "w");
    size_t written = 0;
    CHECK_STATUS(gdsroute_file_write(file, expected, FILE_SIZE, 0, &written), GDSROUTE_STATUS_OK);
    CHECK(written == FILE_SIZE);
    gdsroute_file_free(file);

    /* The last error and the monitors' stack exist on this thread before exit. */
    gdsroute_file *missing = NULL;
    CHECK(gdsroute_file_open("", "r", 0, &missing) == GDSROUTE_STATUS_INVALID_PATH);
    CHECK_STATUS(gdsroute_monitor_add(on_observation, NULL, GDSROUTE_MONITOR_TASKS, &monitor_id), GDSROUTE_STATUS_OK);
    check_read(0, 4096);
    if (check_failed != 0) return check_summary();
    if (atexit(at_exit) != 0) {
        fprintf(stderr, "atexit failed\n");
        return 3;
    }
    exit(0);
}
