/* gdsroute_stats_get_devices and gdsroute_stats_render_devices through the C ABI: the layout of
 * gdsroute_device_stats, every bad input with its exact status and message, outputs untouched on
 * failure, and that host-memory reads and writes are attributed to no device (so on a machine
 * without a GPU the device list stays empty). */
#define _GNU_SOURCE
#include "check.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define SENTINEL 0x5A5A5A5A5A5A5A5AULL

static void test_layout(void) {
    /* Every field a uint64_t, struct_size then device_ordinal first, 40 fields so far. */
    CHECK(sizeof(gdsroute_device_stats) == 40 * sizeof(uint64_t));
    CHECK(offsetof(gdsroute_device_stats, struct_size) == 0);
    CHECK(offsetof(gdsroute_device_stats, device_ordinal) == 8);
    CHECK(offsetof(gdsroute_device_stats, cufile_write_bytes_gpu) == 38 * 8);
    CHECK(GDSROUTE_NUMA_PLACEMENT_NO_BUFFERS == 0 && GDSROUTE_NUMA_PLACEMENT_PLACED == 1);
    CHECK(GDSROUTE_NUMA_PLACEMENT_NODE_UNKNOWN == 2 && GDSROUTE_NUMA_PLACEMENT_REFUSED == 3);
}

static void test_get_bad_inputs(void) {
    gdsroute_device_stats devices[2];
    size_t count = 42;
    memset(devices, 0x5A, sizeof devices);
    devices[0].struct_size = sizeof devices[0];

    CHECK_STATUS(gdsroute_stats_get_devices(devices, 2, NULL), GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_MESSAGE("count");
    CHECK_STATUS(gdsroute_stats_get_devices(NULL, 2, &count), GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_MESSAGE("array");
    CHECK(count == 42);

    static const uint64_t bad_sizes[] = {0, 7, 8, 12, 20};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        devices[0].struct_size = bad_sizes[i];
        CHECK_STATUS(gdsroute_stats_get_devices(devices, 2, &count), GDSROUTE_STATUS_INVALID_ARGUMENT);
        CHECK_MESSAGE("struct_size");
        CHECK(count == 42 && devices[0].struct_size == bad_sizes[i] && devices[0].device_ordinal == SENTINEL);
    }
    /* capacity elements of struct_size bytes beyond the address space. */
    devices[0].struct_size = sizeof devices[0];
    CHECK_STATUS(gdsroute_stats_get_devices(devices, SIZE_MAX / 8, &count), GDSROUTE_STATUS_OVERFLOW);
    CHECK(count == 42);
}

static void test_get_sizing_and_no_device_without_device_memory(void) {
    size_t count = 42;
    /* The sizing call: no array, no capacity. */
    CHECK_STATUS(gdsroute_stats_get_devices(NULL, 0, &count), GDSROUTE_STATUS_OK);
    size_t before = count;

    /* Host-memory reads and writes are attributed to no device. */
    char path[] = "/tmp/gdsroute-device-stats-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    gdsroute_file *f = NULL;
    CHECK_STATUS(gdsroute_file_open(path, "r+", 0644, &f), GDSROUTE_STATUS_OK);
    char data[8192], back[8192];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (char)(i * 7 + 1);
    size_t n = 0;
    CHECK_STATUS(gdsroute_file_write(f, data, sizeof data, 0, &n), GDSROUTE_STATUS_OK);
    CHECK_STATUS(gdsroute_file_read(f, back, sizeof back, 0, &n), GDSROUTE_STATUS_OK);
    CHECK(n == sizeof back && memcmp(data, back, sizeof back) == 0);
    gdsroute_file_free(f);
    unlink(path);

    gdsroute_stats totals = {.struct_size = sizeof totals};
    CHECK_STATUS(gdsroute_stats_get(&totals), GDSROUTE_STATUS_OK);
    CHECK(totals.tasks >= 1 && totals.write_tasks >= 1);
    CHECK_STATUS(gdsroute_stats_get_devices(NULL, 0, &count), GDSROUTE_STATUS_OK);
    CHECK(count == before);

    /* With room for more entries than there are devices: the rest stays untouched. */
    gdsroute_device_stats devices[4];
    memset(devices, 0x5A, sizeof devices);
    devices[0].struct_size = sizeof devices[0];
    CHECK_STATUS(gdsroute_stats_get_devices(devices, 4, &count), GDSROUTE_STATUS_OK);
    CHECK(count == before);
    uint64_t summed_tasks = 0;
    for (size_t i = 0; i < count && i < 4; i++) {
        CHECK(devices[i].struct_size == sizeof devices[i]);
        summed_tasks += devices[i].tasks;
    }
    /* Device tasks never exceed the process's tasks of device memory. */
    CHECK(summed_tasks <= totals.tasks - totals.posix_tasks_host_memory);
    for (size_t i = count; i < 4; i++) CHECK(devices[i].device_ordinal == SENTINEL);
}

static void test_render(void) {
    char buf[4096];
    size_t len = 42;
    CHECK_STATUS(gdsroute_stats_render_devices(NULL, 0, GDSROUTE_STATS_FORMAT_JSON, buf, sizeof buf, &len), GDSROUTE_STATUS_OK);
    CHECK(len == 2 && strcmp(buf, "[]") == 0);
    CHECK_STATUS(gdsroute_stats_render_devices(NULL, 0, GDSROUTE_STATS_FORMAT_TEXT, buf, sizeof buf, &len), GDSROUTE_STATUS_OK);
    CHECK(strncmp(buf, "no device counters", 18) == 0 && len == strlen(buf));

    /* Two entries of an older, 3-field layout: the stride is array[0].struct_size. */
    uint64_t old[2][3] = {{24, 0, 5}, {24, 1, 7}};
    CHECK_STATUS(gdsroute_stats_render_devices((const gdsroute_device_stats *)(void *)old, 2, GDSROUTE_STATS_FORMAT_JSON, NULL, 0, &len), GDSROUTE_STATUS_OK);
    const char *want = "[{\"struct_size\":24,\"device_ordinal\":0,\"tasks\":5},{\"struct_size\":24,\"device_ordinal\":1,\"tasks\":7}]";
    CHECK(len == strlen(want));
    CHECK_STATUS(gdsroute_stats_render_devices((const gdsroute_device_stats *)(void *)old, 2, GDSROUTE_STATS_FORMAT_JSON, buf, sizeof buf, &len), GDSROUTE_STATUS_OK);
    CHECK(strcmp(buf, want) == 0);
    CHECK_STATUS(gdsroute_stats_render_devices((const gdsroute_device_stats *)(void *)old, 2, GDSROUTE_STATS_FORMAT_TEXT, buf, sizeof buf, &len), GDSROUTE_STATUS_OK);
    CHECK(strcmp(buf, "device 0:\n  tasks                        5\ndevice 1:\n  tasks                        7\n") == 0);
    /* snprintf semantics: truncated, NUL-terminated, full length reported. */
    char small[8];
    CHECK_STATUS(gdsroute_stats_render_devices((const gdsroute_device_stats *)(void *)old, 2, GDSROUTE_STATS_FORMAT_JSON, small, sizeof small, &len), GDSROUTE_STATUS_OK);
    CHECK(len == strlen(want) && strlen(small) == sizeof small - 1 && strncmp(small, want, sizeof small - 1) == 0);

    len = 42;
    CHECK_STATUS(gdsroute_stats_render_devices((const gdsroute_device_stats *)(void *)old, 2, 7, buf, sizeof buf, &len), GDSROUTE_STATUS_INVALID_ENUM);
    CHECK_MESSAGE("7");
    CHECK(len == 42);
    CHECK_STATUS(gdsroute_stats_render_devices((const gdsroute_device_stats *)(void *)old, 2, GDSROUTE_STATS_FORMAT_JSON, buf, sizeof buf, NULL), GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_MESSAGE("length");
    CHECK_STATUS(gdsroute_stats_render_devices((const gdsroute_device_stats *)(void *)old, 2, GDSROUTE_STATS_FORMAT_JSON, NULL, 16, &len), GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_MESSAGE("buf");
    CHECK_STATUS(gdsroute_stats_render_devices(NULL, 1, GDSROUTE_STATS_FORMAT_JSON, buf, sizeof buf, &len), GDSROUTE_STATUS_NULL_ARGUMENT);
    CHECK_MESSAGE("array");
    old[0][0] = 12;
    CHECK_STATUS(gdsroute_stats_render_devices((const gdsroute_device_stats *)(void *)old, 2, GDSROUTE_STATS_FORMAT_JSON, buf, sizeof buf, &len), GDSROUTE_STATUS_INVALID_ARGUMENT);
    CHECK_MESSAGE("struct_size");
    CHECK(len == 42);
}

int main(void) {
    test_layout();
    test_get_bad_inputs();
    test_get_sizing_and_no_device_without_device_memory();
    test_render();
    return check_summary();
}
