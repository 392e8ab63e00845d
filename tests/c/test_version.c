/* The header's version macros equal the loaded library's run-time version. */
#include "check.h"

/* The composite macro must be usable in #if. */
#if GDSROUTE_VERSION != GDSROUTE_VERSION_MAJOR * 10000 + GDSROUTE_VERSION_MINOR * 100 + GDSROUTE_VERSION_PATCH
#error "GDSROUTE_VERSION does not match its components"
#endif

int main(void) {
    CHECK(gdsroute_version_major() == GDSROUTE_VERSION_MAJOR);
    CHECK(gdsroute_version_minor() == GDSROUTE_VERSION_MINOR);
    CHECK(gdsroute_version_patch() == GDSROUTE_VERSION_PATCH);
    CHECK(gdsroute_version_major() * 10000 + gdsroute_version_minor() * 100 + gdsroute_version_patch() ==
          GDSROUTE_VERSION);
    CHECK(GDSROUTE_VERSION_MINOR < 100 && GDSROUTE_VERSION_PATCH < 100);
    const char *s = gdsroute_version_string();
    CHECK(s != NULL && strcmp(s, GDSROUTE_VERSION_STRING) == 0);
    char expected[64];
    snprintf(expected, sizeof expected, "%u.%u.%u", (unsigned)GDSROUTE_VERSION_MAJOR,
             (unsigned)GDSROUTE_VERSION_MINOR, (unsigned)GDSROUTE_VERSION_PATCH);
    CHECK(strcmp(expected, GDSROUTE_VERSION_STRING) == 0);
#ifdef GDSROUTE_EXPECTED_VERSION
    /* The CMake project version (from Cargo.toml) matches too. */
    CHECK(strcmp(GDSROUTE_EXPECTED_VERSION, GDSROUTE_VERSION_STRING) == 0);
#endif
    printf("gdsroute %s\n", s);
    return check_summary();
}
