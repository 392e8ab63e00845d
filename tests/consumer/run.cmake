# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DVERSION=... -DC_COMPILER=... -DCXX_COMPILER=...
#       -P run.cmake
# Installs the gdsroute build tree into WORK_DIR/prefix, checks the installed files, then builds
# and runs tests/consumer against that prefix (find_package, and pkg-config both through CMake and
# with a plain compiler command).
cmake_minimum_required(VERSION 3.16)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "consumer: command failed (${rc}): ${cmd}")
  endif()
endfunction()

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

# The installed layout, wherever the libdir is.
string(REGEX MATCH "^[0-9]+" major "${VERSION}")
file(GLOB_RECURSE real_so LIST_DIRECTORIES false "${prefix}/*/libgdsroute.so.${VERSION}")
list(LENGTH real_so count)
if(NOT count EQUAL 1)
  message(FATAL_ERROR "consumer: expected one libgdsroute.so.${VERSION} under ${prefix}, found: ${real_so}")
endif()
get_filename_component(libdir "${real_so}" DIRECTORY)
foreach(link "libgdsroute.so.${major}" "libgdsroute.so")
  if(NOT IS_SYMLINK "${libdir}/${link}")
    message(FATAL_ERROR "consumer: ${libdir}/${link} is not a symlink")
  endif()
endforeach()
file(READ_SYMLINK "${libdir}/libgdsroute.so.${major}" target)
if(NOT target STREQUAL "libgdsroute.so.${VERSION}")
  message(FATAL_ERROR "consumer: libgdsroute.so.${major} -> ${target}")
endif()
foreach(f "${libdir}/libgdsroute.a" "${libdir}/pkgconfig/gdsroute.pc" "${libdir}/pkgconfig/gdsroute-static.pc"
          "${prefix}/share/gdsroute/tsan.supp"
          "${libdir}/cmake/gdsroute/gdsrouteConfig.cmake"
          "${libdir}/cmake/gdsroute/gdsrouteConfigVersion.cmake"
          "${libdir}/cmake/gdsroute/gdsrouteTargets.cmake" "${prefix}/include/gdsroute.h"
          "${prefix}/include/gdsroute.hpp")
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "consumer: ${f} was not installed")
  endif()
endforeach()
message(STATUS "consumer: installed tree at ${prefix} (libdir ${libdir}) is complete")

# The installed archive defines no global symbol but the C API (unless built with
# -DGDSROUTE_LOCALIZE_STATIC=OFF).
file(STRINGS "${BUILD_DIR}/CMakeCache.txt" localize REGEX "^GDSROUTE_LOCALIZE_STATIC:BOOL=")
if(localize MATCHES "=(ON|TRUE|1|YES)$")
  run(sh "${SOURCE_DIR}/../c/check_archive_exports.sh" "${libdir}/libgdsroute.a" "${prefix}/include/gdsroute.h")
endif()

# find_package version rule: before 1.0, the same major.minor only (a minor release may change
# the ABI). A request for this version's major.minor (with any lower patch) is accepted; one for
# the previous or next minor, or another major, is refused.
string(REGEX MATCH "^([0-9]+)\\.([0-9]+)\\.([0-9]+)" _ "${VERSION}")
set(v_major "${CMAKE_MATCH_1}")
set(v_minor "${CMAKE_MATCH_2}")
math(EXPR next_minor "${v_minor} + 1")
math(EXPR next_major "${v_major} + 1")
set(accepted "${v_major}.${v_minor}" "${v_major}.${v_minor}.0" "${VERSION}")
set(refused "${v_major}.${next_minor}" "${next_major}.${v_minor}")
if(v_minor GREATER 0)
  math(EXPR prev_minor "${v_minor} - 1")
  list(APPEND refused "${v_major}.${prev_minor}.5")
endif()
foreach(request IN LISTS accepted refused)
  set(vdir "${WORK_DIR}/version-${request}")
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/version" -B "${vdir}"
                          "-DCMAKE_PREFIX_PATH=${prefix}" "-DREQUEST=${request}"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  list(FIND accepted "${request}" is_accepted)
  if(is_accepted GREATER -1 AND NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer: find_package(gdsroute ${request}) refused version ${VERSION}:\n${err}")
  elseif(is_accepted EQUAL -1 AND rc EQUAL 0)
    message(FATAL_ERROR "consumer: find_package(gdsroute ${request}) accepted version ${VERSION}")
  endif()
endforeach()
message(STATUS "consumer: find_package accepts ${accepted} and refuses ${refused} (version ${VERSION})")
# The package has no components: asking for one fails (REQUEST is the version and what follows).
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/version" -B "${WORK_DIR}/version-components"
                        "-DCMAKE_PREFIX_PATH=${prefix}" "-DREQUEST=${v_major}.${v_minor};COMPONENTS;bogus"
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "gdsroute has no components")
  message(FATAL_ERROR "consumer: find_package(gdsroute COMPONENTS bogus) was not refused:\n${err}")
endif()

set(ENV{PKG_CONFIG_PATH} "${libdir}/pkgconfig")
set(build "${WORK_DIR}/build")
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${build}" "-DCMAKE_PREFIX_PATH=${prefix}"
    "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DEXPECTED_PREFIX=${prefix}/")
run(${CMAKE_COMMAND} --build "${build}")
run(${CMAKE_CTEST_COMMAND} --test-dir "${build}" --output-on-failure)

# pkg-config with a plain compiler command, as a Makefile user would.
find_program(PKG_CONFIG pkg-config REQUIRED)
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs gdsroute OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
execute_process(COMMAND ${PKG_CONFIG} --variable=libdir gdsroute OUTPUT_VARIABLE pc_libdir
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer: pkg-config --cflags --libs gdsroute failed")
endif()
message(STATUS "consumer: pkg-config flags: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${C_COMPILER} -std=c99 -Wall -Wextra -Werror "${SOURCE_DIR}/consumer.c" -o "${WORK_DIR}/consumer_cc"
    ${flags} "-Wl,-rpath,${pc_libdir}")
run("${WORK_DIR}/consumer_cc" "${prefix}/")
# The C++ API through the same flags: gdsroute.hpp is found beside gdsroute.h.
run(${CXX_COMPILER} -std=c++17 -Wall -Wextra -Werror -pedantic "${SOURCE_DIR}/consumer.cpp"
    -o "${WORK_DIR}/consumer_cxx" ${flags} "-Wl,-rpath,${pc_libdir}")
run("${WORK_DIR}/consumer_cxx" "${prefix}/")

# The static archive through pkg-config, as documented: gdsroute-static names the archive by path.
# gdsroute.pc under --static must not ask for libgcc_s (there is no libgcc_s.a).
execute_process(COMMAND ${PKG_CONFIG} --static --libs gdsroute OUTPUT_VARIABLE static_flags
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(static_flags MATCHES "gcc_s")
  message(FATAL_ERROR "consumer: pkg-config --static --libs gdsroute still lists libgcc_s: ${static_flags}")
endif()
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs gdsroute-static OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT flags MATCHES "libgdsroute\\.a")
  message(FATAL_ERROR "consumer: pkg-config --cflags --libs gdsroute-static: ${flags}")
endif()
message(STATUS "consumer: pkg-config gdsroute-static flags: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${C_COMPILER} -std=c99 -Wall -Wextra -Werror -DCONSUMER_STATIC=1 "${SOURCE_DIR}/consumer.c"
    -o "${WORK_DIR}/consumer_cc_static" ${flags})
run("${WORK_DIR}/consumer_cc_static")
# A fully static program (cc -static), where the C library's static archive is installed.
file(WRITE "${WORK_DIR}/probe_static.c" "int main(void) { return 0; }\n")
execute_process(COMMAND ${C_COMPILER} -static "${WORK_DIR}/probe_static.c" -o "${WORK_DIR}/probe_static"
                RESULT_VARIABLE static_rc OUTPUT_QUIET ERROR_QUIET)
if(static_rc EQUAL 0)
  # glibc warns that dlopen (of libcuda and libcufile) in a static program needs the same glibc
  # at run time; the warnings are expected.
  run(${C_COMPILER} -static -std=c99 -DCONSUMER_STATIC=1 "${SOURCE_DIR}/consumer.c"
      -o "${WORK_DIR}/consumer_cc_fully_static" ${flags})
  run("${WORK_DIR}/consumer_cc_fully_static")
  message(STATUS "consumer: cc -static with pkg-config gdsroute-static: ok")
else()
  message(STATUS "consumer: no static C library here: the cc -static check is skipped")
endif()

message("consumer: all passed")
