/* Links libgdsroute.a and a second Rust static library (other.rs) into one program and calls
 * both. With cargo's archive as it is, two Rust static libraries of different toolchains clash
 * ("multiple definition of rust_eh_personality"); the installed archive keeps only gdsroute_*
 * global. */
#include <gdsroute.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

size_t second_rust_lib_answer(void);

int main(void) {
    size_t answer = second_rust_lib_answer();
    int ok = answer == 42 && strcmp(gdsroute_version_string(), GDSROUTE_VERSION_STRING) == 0;
    printf("gdsroute %s, second library %zu: %s\n", gdsroute_version_string(), answer,
           ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
    return ok ? 0 : 1;
}
