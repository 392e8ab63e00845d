#include <gdsroute.h>

#include <stdio.h>
#include <string.h>

const char *gdsroute_tu_a_version(void);

int main(void) {
    int ok = strcmp(gdsroute_tu_a_version(), gdsroute_version_string()) == 0 &&
             strcmp(gdsroute_version_string(), GDSROUTE_VERSION_STRING) == 0;
    printf("%s\n", ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
    return ok ? 0 : 1;
}
