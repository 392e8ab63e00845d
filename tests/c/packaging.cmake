# Tests of the tools and the package around the library: what the demo prints, the
# gdsroute-diagnose CLI, the installed static archive, ThreadSanitizer suppressions.
# Included from tests/c/CMakeLists.txt.

# The demo program (scripts/demo.sh) says in words which route the reads took, then the verdict
# for a device read of the file, then only the counters that are not 0.
add_test(NAME example_read_file_summary COMMAND read_file "${GDSROUTE_SAMPLE_FILE}")
set_tests_properties(example_read_file_summary PROPERTIES
  FIXTURES_REQUIRED sample_file LABELS example
  PASS_REGULAR_EXPRESSION "\nsummary: 2 reads, 128 MiB, 17 tasks, all through the POSIX backend: host memory; cuFile not considered\ndevice reads of this file: [^\n]+\nprocess counters that are not 0:\ncalls +2\n"
  FAIL_REGULAR_EXPRESSION "\n[a-z_]+ +0\n")

# gdsroute-diagnose ends with its conclusion and names fallback reasons as the header does
# (tests/diagnose_cli.rs tests the command line in full).
add_test(NAME tool_diagnose_conclusion COMMAND "${GDSROUTE_DIAGNOSE}" "${GDSROUTE_SAMPLE_FILE}")
set_tests_properties(tool_diagnose_conclusion PROPERTIES FIXTURES_REQUIRED sample_file LABELS example
  PASS_REGULAR_EXPRESSION "\ndevice reads of this file \\(requests of at least the GDS threshold\\) will use: (cuFile \\(|POSIX bounce buffers, because GDSROUTE_FALLBACK_REASON_[A-Z_]+: )[^\n]+\n$")
add_test(NAME tool_diagnose_usage_error COMMAND "${GDSROUTE_DIAGNOSE}" --bogus)
set_tests_properties(tool_diagnose_usage_error PROPERTIES LABELS example WILL_FAIL ON)
