/* consumer [PREFIX]: uses the installed library (version check and a read of this executable)
 * and checks where libgdsroute was loaded from: from PREFIX for a shared link, nowhere for the
 * static one. */
#define _GNU_SOURCE
#include <gdsroute.h>

#include <stdio.h>
#include <string.h>

static int loaded_from(const char *prefix) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (maps == NULL) {
        return 1; /* nothing to check on this system */
    }
    char line[4096];
    int found = 0, from_prefix = 0;
    while (fgets(line, sizeof line, maps) != NULL) {
        const char *path = strchr(line, '/');
        if (path != NULL && strstr(path, "libgdsroute.so") != NULL) {
            found = 1;
            from_prefix |= prefix[0] != '\0' && strncmp(path, prefix, strlen(prefix)) == 0;
            if (!from_prefix) {
                fprintf(stderr, "libgdsroute mapped from %s", path);
            }
        }
    }
    fclose(maps);
#ifdef CONSUMER_STATIC
    (void)from_prefix;
    return !found;
#else
    return found && (prefix[0] == '\0' || from_prefix);
#endif
}

int main(int argc, char **argv) {
    const char *prefix = argc > 1 ? argv[1] : "";
    if (strcmp(gdsroute_version_string(), GDSROUTE_VERSION_STRING) != 0) {
        fprintf(stderr, "header %s, library %s\n", GDSROUTE_VERSION_STRING, gdsroute_version_string());
        return 1;
    }
    gdsroute_file *file = NULL;
    if (gdsroute_file_open("/proc/self/exe", "r", 0, &file) != GDSROUTE_STATUS_OK) {
        char message[512];
        gdsroute_last_error_message(message, sizeof message);
        fprintf(stderr, "open: %s\n", message);
        return 1;
    }
    char buf[64];
    gdsroute_op *op = NULL;
    size_t n = 0;
    int ok = gdsroute_file_pread(file, buf, sizeof buf, 0, &op) == GDSROUTE_STATUS_OK &&
             gdsroute_op_wait(op, &n) == GDSROUTE_STATUS_OK && n == sizeof buf &&
             memcmp(buf, "\177ELF", 4) == 0;
    gdsroute_op_free(op);
    gdsroute_file_free(file);
    if (!ok) {
        fprintf(stderr, "read failed\n");
        return 1;
    }
    if (!loaded_from(prefix)) {
        fprintf(stderr, "libgdsroute was not loaded as expected (prefix %s)\n", prefix);
        return 1;
    }
    printf("consumer ok: gdsroute %s\n", gdsroute_version_string());
    return 0;
}
