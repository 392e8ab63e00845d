# gdsroute_mpiexec_prefix(<out> <ranks>): the command line before the program for <ranks> ranks
# under MPIEXEC_EXECUTABLE (FindMPI's), for ctest. Open MPI refuses to run as root (CI does) and
# more ranks than cores unless asked, so its two flags are added; other MPIs (MPICH's Hydra) take
# neither flag and need neither. The caller appends the program and MPIEXEC_POSTFLAGS.
function(gdsroute_mpiexec_prefix out ranks)
  execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version OUTPUT_VARIABLE _version ERROR_QUIET)
  set(_flags "")
  if(_version MATCHES "Open MPI|OpenRTE")
    set(_flags --allow-run-as-root --oversubscribe)
  endif()
  set(${out} ${MPIEXEC_EXECUTABLE} ${_flags} ${MPIEXEC_NUMPROC_FLAG} ${ranks} ${MPIEXEC_PREFLAGS} PARENT_SCOPE)
endfunction()
