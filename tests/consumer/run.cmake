# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DVERSION=... -DC_COMPILER=... -P run.cmake
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
foreach(f "${libdir}/libgdsroute.a" "${libdir}/pkgconfig/gdsroute.pc"
          "${libdir}/cmake/gdsroute/gdsrouteConfig.cmake"
          "${libdir}/cmake/gdsroute/gdsrouteConfigVersion.cmake"
          "${libdir}/cmake/gdsroute/gdsrouteTargets.cmake" "${prefix}/include/gdsroute.h")
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "consumer: ${f} was not installed")
  endif()
endforeach()
message(STATUS "consumer: installed tree at ${prefix} (libdir ${libdir}) is complete")

set(ENV{PKG_CONFIG_PATH} "${libdir}/pkgconfig")
set(build "${WORK_DIR}/build")
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${build}" "-DCMAKE_PREFIX_PATH=${prefix}"
    "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DEXPECTED_PREFIX=${prefix}/")
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

message("consumer: all passed")
