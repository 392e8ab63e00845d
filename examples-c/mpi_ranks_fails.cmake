# Runs mpi_ranks (COMMAND, a ;-list: the launcher and its flags, then the program) on PATH, which
# cannot be created, and checks what a user must see: each of the RANKS ranks prints gdsroute's
# open error naming PATH, and the job exits non-zero (within ctest's TIMEOUT, so not a hang).
execute_process(COMMAND ${COMMAND} "${PATH}" 4096 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REPLACE ";" "\\;" shown "${out}${err}")
message(STATUS "exit status ${rc}; output:\n${shown}")
if(rc EQUAL 0)
  message(FATAL_ERROR "mpi_ranks succeeded on ${PATH}")
endif()
math(EXPR last "${RANKS} - 1")
foreach(r RANGE ${last})
  string(FIND "${err}" "mpi_ranks: rank ${r}: gdsroute_file_open ${PATH} failed: status" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "rank ${r} did not print gdsroute's open error for ${PATH}")
  endif()
endforeach()
if(NOT err MATCHES "No such file or directory \\(os error 2\\)")
  message(FATAL_ERROR "no rank said why the open failed (ENOENT)")
endif()
