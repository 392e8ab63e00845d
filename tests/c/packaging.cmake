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
  PASS_REGULAR_EXPRESSION "\ndevice reads of this file( \\(requests of at least the GDS threshold\\) will use: (cuFile \\(|POSIX bounce buffers, because GDSROUTE_FALLBACK_REASON_[A-Z_]+: )|: none, CUDA is not usable here \\(GDSROUTE_FALLBACK_REASON_CUDA_UNAVAILABLE: )[^\n]+\n$")
add_test(NAME tool_diagnose_usage_error COMMAND "${GDSROUTE_DIAGNOSE}" --bogus)
set_tests_properties(tool_diagnose_usage_error PROPERTIES LABELS example WILL_FAIL ON)

# The static archive (staged here as it is installed) defines only the C API globally
# (cmake/gdsroute-localize-archive.cmake), and the read tests pass linked against it.
if(GDSROUTE_LOCALIZE_STATIC)
  add_test(NAME static_archive_exports
           COMMAND sh "${CMAKE_CURRENT_SOURCE_DIR}/check_archive_exports.sh" "${GDSROUTE_STATIC_LIB}"
                   "${PROJECT_SOURCE_DIR}/include/gdsroute.h")
  set_tests_properties(static_archive_exports PROPERTIES LABELS consumer
                       PASS_REGULAR_EXPRESSION "1 passed, 0 failed")
endif()
add_executable(test_reads_static test_reads.c)
target_link_libraries(test_reads_static PRIVATE gdsroute::gdsroute_static)
target_compile_options(test_reads_static PRIVATE ${GDSROUTE_WARNINGS})
set_target_properties(test_reads_static PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
add_test(NAME reads_static COMMAND test_reads_static)
set_tests_properties(reads_static PROPERTIES TIMEOUT 600 PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")

# ThreadSanitizer: a program built with -fsanitize=thread using the library from threads reports
# nothing with the shipped suppressions (cmake/tsan.supp, installed as share/gdsroute/tsan.supp),
# linked to the shared library or the archive; a race of its own is still reported. Skipped where
# the compiler or the machine cannot run TSan programs.
include(CheckCSourceRuns)
set(CMAKE_REQUIRED_FLAGS -fsanitize=thread)
set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=thread)
check_c_source_runs("int main(void) { return 0; }" GDSROUTE_HAVE_TSAN)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(GDSROUTE_HAVE_TSAN)
  foreach(_kind shared static)
    set(_lib gdsroute::gdsroute)
    if(_kind STREQUAL "static")
      set(_lib gdsroute::gdsroute_static)
    endif()
    add_executable(test_tsan_${_kind} test_tsan.c)
    target_link_libraries(test_tsan_${_kind} PRIVATE ${_lib} Threads::Threads)
    target_compile_options(test_tsan_${_kind} PRIVATE ${GDSROUTE_WARNINGS} -fsanitize=thread -g -O1)
    target_link_options(test_tsan_${_kind} PRIVATE -fsanitize=thread)
    set_target_properties(test_tsan_${_kind} PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
    add_test(NAME tsan_${_kind} COMMAND test_tsan_${_kind})
    set_tests_properties(tsan_${_kind} PROPERTIES LABELS reliability TIMEOUT 300
      ENVIRONMENT "TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/cmake/tsan.supp"
      PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed" FAIL_REGULAR_EXPRESSION "ThreadSanitizer")
  endforeach()
  add_test(NAME tsan_own_race_still_reported COMMAND test_tsan_shared racy)
  set_tests_properties(tsan_own_race_still_reported PROPERTIES LABELS reliability TIMEOUT 300
    ENVIRONMENT "TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/cmake/tsan.supp"
    PASS_REGULAR_EXPRESSION "WARNING: ThreadSanitizer: data race[^\n]*\n[^\n]*\n[^\n]*racy")
else()
  message(STATUS "no working -fsanitize=thread: the TSan suppression tests are not registered")
endif()

# Two Rust static libraries in one program: libgdsroute.a and tests/c/second_rust_lib, built by
# another toolchain's rustc where rustup has nightly (the clash with cargo's archive as it is),
# else by the same rustc. Needs the localized archive.
get_filename_component(_cargo_bin_dir "${CARGO_EXECUTABLE}" DIRECTORY)
find_program(GDSROUTE_RUSTC rustc HINTS "${_cargo_bin_dir}")
find_program(GDSROUTE_RUSTUP rustup HINTS "${_cargo_bin_dir}")
set(_second_rustc)
if(GDSROUTE_RUSTUP)
  execute_process(COMMAND "${GDSROUTE_RUSTUP}" run nightly rustc --version RESULT_VARIABLE _rc
                  OUTPUT_QUIET ERROR_QUIET)
  if(_rc EQUAL 0)
    set(_second_rustc "${GDSROUTE_RUSTUP}" run nightly rustc)
  endif()
endif()
if(NOT _second_rustc AND GDSROUTE_RUSTC)
  set(_second_rustc "${GDSROUTE_RUSTC}")
endif()
if(GDSROUTE_LOCALIZE_STATIC AND _second_rustc)
  set(_second_lib "${CMAKE_CURRENT_BINARY_DIR}/libsecond_rust_lib.a")
  add_custom_command(OUTPUT "${_second_lib}"
    COMMAND ${CMAKE_COMMAND} -E env --unset=MAKEFLAGS --unset=MFLAGS --unset=CARGO_MAKEFLAGS
            ${_second_rustc} --edition 2021 --crate-type staticlib -O
            "${CMAKE_CURRENT_SOURCE_DIR}/second_rust_lib/other.rs" -o "${_second_lib}"
    DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/second_rust_lib/other.rs"
    COMMENT "rustc: a second Rust static library" VERBATIM)
  add_custom_target(second_rust_lib DEPENDS "${_second_lib}")
  add_executable(test_two_rust_libs second_rust_lib/main.c)
  add_dependencies(test_two_rust_libs second_rust_lib)
  target_link_libraries(test_two_rust_libs PRIVATE gdsroute::gdsroute_static "${_second_lib}")
  target_compile_options(test_two_rust_libs PRIVATE ${GDSROUTE_WARNINGS})
  add_test(NAME two_rust_static_libraries COMMAND test_two_rust_libs)
  set_tests_properties(two_rust_static_libraries PROPERTIES LABELS consumer
                       PASS_REGULAR_EXPRESSION "1 passed, 0 failed")
endif()
