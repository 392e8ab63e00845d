# One test of the HDF5 driver under ctest (tests/hdf5/CMakeLists.txt, gdsroute_hdf5_test): runs
# COMMAND (a ;-list) with ENV (a ;-list of VAR=VALUE, set through `cmake -E env` so that only the
# program sees them, LD_PRELOAD included) and passes only when it exits with status 0 AND its
# output (stdout and stderr, merged) matches the regular expression PASS: a crash after the
# program printed its summary fails, and so does a status 0 without the summary. Exit status
# SKIP (when given) prints "gdsroute_hdf5_test: skipped", which the test's SKIP_REGULAR_EXPRESSION
# turns into a skipped test.
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${ENV} ${COMMAND}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(SKIP AND rc STREQUAL "${SKIP}")
  message("gdsroute_hdf5_test: skipped (exit status ${rc})")
  return()
endif()
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "exit status ${rc} (0 expected)")
endif()
if(NOT out MATCHES "${PASS}")
  message(FATAL_ERROR "exit status 0, but the output does not match \"${PASS}\"")
endif()
