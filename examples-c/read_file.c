/*
 * read_file PATH: reads a whole file into host memory with gdsroute, twice (a parallel
 * gdsroute_file_pread and a synchronous gdsroute_file_read), and prints the bytes read, the
 * throughput and an FNV-1a checksum; then what the counters say in words (which route the reads
 * took and why), the verdict for a device read of the same file on this machine (cuFile, or the
 * POSIX backend and why), and the counters that are not 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <gdsroute.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Prints what failed, with the library's last error message for this thread. */
static int fail(const char *what, gdsroute_status status) {
    char message[1024];
    gdsroute_last_error_message(message, sizeof message);
    fprintf(stderr, "read_file: %s failed: %s (%u): %s\n", what, gdsroute_status_str(status),
            (unsigned)status, message);
    return 1;
}

/* The C name of a fallback reason, as in gdsroute.h. */
static const char *reason_name(uint32_t reason) {
    switch (reason) {
    case GDSROUTE_FALLBACK_REASON_NONE: return "GDSROUTE_FALLBACK_REASON_NONE";
    case GDSROUTE_FALLBACK_REASON_COMPAT_ON: return "GDSROUTE_FALLBACK_REASON_COMPAT_ON";
    case GDSROUTE_FALLBACK_REASON_CUDA_UNAVAILABLE: return "GDSROUTE_FALLBACK_REASON_CUDA_UNAVAILABLE";
    case GDSROUTE_FALLBACK_REASON_LIBRARY_UNAVAILABLE: return "GDSROUTE_FALLBACK_REASON_LIBRARY_UNAVAILABLE";
    case GDSROUTE_FALLBACK_REASON_NO_UDEV: return "GDSROUTE_FALLBACK_REASON_NO_UDEV";
    case GDSROUTE_FALLBACK_REASON_WSL: return "GDSROUTE_FALLBACK_REASON_WSL";
    case GDSROUTE_FALLBACK_REASON_DRIVER_OPEN_FAILED: return "GDSROUTE_FALLBACK_REASON_DRIVER_OPEN_FAILED";
    case GDSROUTE_FALLBACK_REASON_DIRECT_OPEN_FAILED: return "GDSROUTE_FALLBACK_REASON_DIRECT_OPEN_FAILED";
    case GDSROUTE_FALLBACK_REASON_REGISTER_FAILED: return "GDSROUTE_FALLBACK_REASON_REGISTER_FAILED";
    default: return "an unknown reason";
    }
}

/* Prints where a device read (at or above the GDS threshold) of this file would go on this
 * machine, and why. Asks once per handle; may load CUDA and cuFile, so it runs after the reads. */
static int print_device_verdict(gdsroute_file *file) {
    uint32_t mode = 0, reason = 0;
    char why[1024];
    size_t len = 0;
    gdsroute_status st = gdsroute_file_compat_mode(file, &mode);
    if (st != GDSROUTE_STATUS_OK) {
        return fail("gdsroute_file_compat_mode", st);
    }
    st = gdsroute_file_cufile_verdict(file, &reason, why, sizeof why, &len);
    if (st != GDSROUTE_STATUS_OK) {
        return fail("gdsroute_file_cufile_verdict", st);
    }
    if (reason == GDSROUTE_FALLBACK_REASON_CUDA_UNAVAILABLE) {
        printf("device reads of this file: none, CUDA is not usable here (%s: %s)\n", reason_name(reason), why);
    } else if (reason == GDSROUTE_FALLBACK_REASON_NONE) {
        printf("device reads of this file: cuFile (%s)\n", why);
    } else if (mode == GDSROUTE_COMPAT_MODE_OFF) {
        printf("device reads of this file: fail (compat mode OFF), because %s: %s\n", reason_name(reason), why);
    } else {
        printf("device reads of this file: POSIX backend through bounce buffers, because %s: %s\n",
               reason_name(reason), why);
    }
    return 0;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t fnv1a(const unsigned char *data, size_t len) {
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        hash ^= data[i];
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

static void report(const char *how, size_t bytes, double seconds, uint64_t checksum) {
    double gbps = seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0;
    printf("%-6s %zu bytes in %.3f s (%.2f GB/s), fnv1a %016" PRIx64 "\n", how, bytes, seconds,
           gbps, checksum);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH\n", argv[0]);
        return 2;
    }
    int rc = 1;
    gdsroute_file *file = NULL;
    gdsroute_op *op = NULL;
    unsigned char *buf = NULL;
    char *text = NULL;

    gdsroute_status st = gdsroute_file_open(argv[1], "r", 0, &file);
    if (st != GDSROUTE_STATUS_OK) {
        rc = fail("gdsroute_file_open", st);
        goto out;
    }
    uint64_t size = 0;
    st = gdsroute_file_size(file, &size);
    if (st != GDSROUTE_STATUS_OK) {
        rc = fail("gdsroute_file_size", st);
        goto out;
    }
    if (size > SIZE_MAX - 1) {
        fprintf(stderr, "read_file: %s is too large for this address space\n", argv[1]);
        goto out;
    }
    buf = malloc(size > 0 ? (size_t)size : 1);
    if (buf == NULL) {
        fprintf(stderr, "read_file: cannot allocate %" PRIu64 " bytes\n", size);
        goto out;
    }

    /* Parallel read: task-size pieces on the shared thread pool. */
    double t0 = now_seconds();
    st = gdsroute_file_pread(file, buf, (size_t)size, 0, &op);
    if (st != GDSROUTE_STATUS_OK) {
        rc = fail("gdsroute_file_pread", st);
        goto out;
    }
    size_t got = 0;
    st = gdsroute_op_wait(op, &got);
    if (st != GDSROUTE_STATUS_OK) {
        rc = fail("gdsroute_op_wait", st);
        goto out;
    }
    double t1 = now_seconds();
    uint64_t parallel_sum = fnv1a(buf, got);
    report("pread", got, t1 - t0, parallel_sum);

    /* Synchronous read on this thread, for comparison. */
    t0 = now_seconds();
    size_t got_sync = 0;
    st = gdsroute_file_read(file, buf, (size_t)size, 0, &got_sync);
    if (st != GDSROUTE_STATUS_OK) {
        rc = fail("gdsroute_file_read", st);
        goto out;
    }
    t1 = now_seconds();
    uint64_t sync_sum = fnv1a(buf, got_sync);
    report("read", got_sync, t1 - t0, sync_sum);
    if (got != size || got_sync != size || parallel_sum != sync_sum) {
        fprintf(stderr, "read_file: the two reads disagree (size %" PRIu64 ")\n", size);
        goto out;
    }

    gdsroute_stats stats = {.struct_size = sizeof stats};
    st = gdsroute_stats_get(&stats);
    if (st != GDSROUTE_STATUS_OK) {
        rc = fail("gdsroute_stats_get", st);
        goto out;
    }
    size_t len = 0;
    st = gdsroute_stats_render(&stats, GDSROUTE_STATS_FORMAT_TEXT, NULL, 0, &len);
    if (st != GDSROUTE_STATUS_OK) {
        rc = fail("gdsroute_stats_render", st);
        goto out;
    }
    text = malloc(len + 1);
    if (text == NULL) {
        fprintf(stderr, "read_file: out of memory\n");
        goto out;
    }
    st = gdsroute_stats_render(&stats, GDSROUTE_STATS_FORMAT_TEXT, text, len + 1, &len);
    if (st != GDSROUTE_STATUS_OK) {
        rc = fail("gdsroute_stats_render", st);
        goto out;
    }
    /* The text starts with the summary in words; the counters that are not 0 follow it. */
    char *counters = strchr(text, '\n');
    if (counters != NULL) {
        *counters++ = '\0';
    } else {
        counters = text + len;
    }
    printf("summary: %s\n", text);
    if (print_device_verdict(file) != 0) {
        goto out;
    }
    printf("process counters that are not 0:\n%s", counters);
    rc = 0;

out:
    free(text);
    gdsroute_op_free(op); /* waits if still running, so buf is ours again */
    free(buf);
    gdsroute_file_free(file);
    return rc;
}
