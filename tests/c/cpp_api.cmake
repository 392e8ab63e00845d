# Tests of the C++ API (include/gdsroute.hpp), included from tests/c/CMakeLists.txt: the header
# alone and in two translation units, and tests/c/test_cpp_api.cpp under C++17, C++20 and C++23
# (where the compiler has it) with -Wall -Wextra -Werror -pedantic, with exceptions and with
# -fno-exceptions (the non-throwing form alone).
include(CheckCXXCompilerFlag)
set(GDSROUTE_CXX_STANDARDS c++17 c++20)
check_cxx_compiler_flag(-std=c++23 GDSROUTE_HAVE_CXX23)
if(GDSROUTE_HAVE_CXX23)
  list(APPEND GDSROUTE_CXX_STANDARDS c++23)
else()
  check_cxx_compiler_flag(-std=c++2b GDSROUTE_HAVE_CXX2B)
  if(GDSROUTE_HAVE_CXX2B)
    list(APPEND GDSROUTE_CXX_STANDARDS c++2b)
  else()
    message(STATUS "no -std=c++23 or -std=c++2b: the C++ API is tested under C++17 and C++20 only")
  endif()
endif()
set(_cxx_warnings -Wall -Wextra -Werror -pedantic)

# The header alone, included twice; and C++14 is refused with a message, not errors deep inside.
foreach(_std ${GDSROUTE_CXX_STANDARDS})
  foreach(_exc exceptions no_exceptions)
    set(_flag)
    if(_exc STREQUAL "no_exceptions")
      set(_flag -fno-exceptions)
    endif()
    add_test(NAME header_hpp_${_std}_${_exc}
             COMMAND ${CMAKE_CXX_COMPILER} -std=${_std} ${_cxx_warnings} ${_flag} -fsyntax-only
                     "-I${PROJECT_SOURCE_DIR}/include" "${CMAKE_CURRENT_SOURCE_DIR}/header_only_hpp.cpp")
    set_tests_properties(header_hpp_${_std}_${_exc} PROPERTIES LABELS "header;cpp")
  endforeach()
endforeach()
add_test(NAME header_hpp_cxx14_refused
         COMMAND ${CMAKE_CXX_COMPILER} -std=c++14 -fsyntax-only "-I${PROJECT_SOURCE_DIR}/include"
                 "${CMAKE_CURRENT_SOURCE_DIR}/header_only_hpp.cpp")
set_tests_properties(header_hpp_cxx14_refused PROPERTIES LABELS "header;cpp" WILL_FAIL ON)

# Two translation units using the same inline functions and templates, linked together.
add_executable(test_header_hpp_two_tus header_tu_a.cpp header_tu_b.cpp)
target_link_libraries(test_header_hpp_two_tus PRIVATE gdsroute::gdsroute)
target_compile_options(test_header_hpp_two_tus PRIVATE ${_cxx_warnings})
set_target_properties(test_header_hpp_two_tus PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
add_test(NAME header_hpp_two_tus COMMAND test_header_hpp_two_tus)
set_tests_properties(header_hpp_two_tus PROPERTIES LABELS "header;cpp" PASS_REGULAR_EXPRESSION "1 passed, 0 failed")

# The test program in every standard, with exceptions; under the oldest and the newest also
# without. `abort`: value() of a failed Result throws, or (without exceptions) prints the error
# and aborts (exit 134).
set(GDSROUTE_CPP_API_TESTS)
list(GET GDSROUTE_CXX_STANDARDS -1 _newest)
foreach(_std ${GDSROUTE_CXX_STANDARDS})
  foreach(_exc exceptions no_exceptions)
    if(_exc STREQUAL "no_exceptions" AND NOT (_std STREQUAL "c++17" OR _std STREQUAL _newest))
      continue()
    endif()
    string(REPLACE "+" "x" _tag "${_std}")
    set(_target test_cpp_api_${_tag}_${_exc})
    add_executable(${_target} test_cpp_api.cpp)
    target_link_libraries(${_target} PRIVATE gdsroute::gdsroute)
    target_compile_options(${_target} PRIVATE -std=${_std} ${_cxx_warnings})
    if(_exc STREQUAL "no_exceptions")
      target_compile_options(${_target} PRIVATE -fno-exceptions)
    endif()
    list(APPEND GDSROUTE_CPP_API_TESTS ${_target})
    add_test(NAME cpp_api_${_tag}_${_exc} COMMAND ${_target})
    set_tests_properties(cpp_api_${_tag}_${_exc} PROPERTIES LABELS cpp TIMEOUT 300
                         PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")
    add_test(NAME cpp_api_${_tag}_${_exc}_abort
             COMMAND sh -c "\"$0\" abort 2>&1; echo \"exit=$?\"" $<TARGET_FILE:${_target}>)
    if(_exc STREQUAL "no_exceptions")
      set(_expect "gdsroute: value\\(\\) of a failed gdsroute::Result: .*\\(200, errno 2\\): cannot open .*exit=134")
    else()
      set(_expect "threw: cannot open .*exit=0")
    endif()
    set_tests_properties(cpp_api_${_tag}_${_exc}_abort PROPERTIES LABELS cpp PASS_REGULAR_EXPRESSION "${_expect}")
  endforeach()
endforeach()

# The header alone under clang too, where one is installed beside the C++ compiler CMake uses.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  find_program(GDSROUTE_CLANGXX NAMES clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)
  if(GDSROUTE_CLANGXX)
    foreach(_std c++17 c++20)
      foreach(_flag -fexceptions -fno-exceptions)
        add_test(NAME header_hpp_clang_${_std}${_flag}
                 COMMAND ${GDSROUTE_CLANGXX} -std=${_std} ${_cxx_warnings} ${_flag} -fsyntax-only
                         "-I${PROJECT_SOURCE_DIR}/include" "${CMAKE_CURRENT_SOURCE_DIR}/header_only_hpp.cpp")
        set_tests_properties(header_hpp_clang_${_std}${_flag} PROPERTIES LABELS "header;cpp")
      endforeach()
    endforeach()
  endif()
endif()

# Out-parameters: the wrappers return what the C call wrote. The C calls are defined in the test
# itself (this machine's library reports HOST memory for every pointer), with and without
# exceptions.
foreach(_exc exceptions no_exceptions)
  set(_target test_cpp_out_params_${_exc})
  add_executable(${_target} test_cpp_out_params.cpp)
  target_link_libraries(${_target} PRIVATE gdsroute::gdsroute)
  target_compile_options(${_target} PRIVATE -std=c++17 ${_cxx_warnings})
  if(_exc STREQUAL "no_exceptions")
    target_compile_options(${_target} PRIVATE -fno-exceptions)
  endif()
  list(APPEND GDSROUTE_CPP_API_TESTS ${_target})
  add_test(NAME cpp_api_out_params_${_exc} COMMAND ${_target})
  set_tests_properties(cpp_api_out_params_${_exc} PROPERTIES LABELS cpp PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")
endforeach()

# One program with a translation unit of each mode: each keeps its own value() and monitor
# trampoline. -O0 keeps the header's calls out of line, so the linker sees both modes' copies; the
# -fno-exceptions one comes first, the copy a shared name would make the linker keep.
add_executable(test_cpp_mixed_modes cpp_modes_no_exceptions.cpp cpp_modes_exceptions.cpp)
target_link_libraries(test_cpp_mixed_modes PRIVATE gdsroute::gdsroute)
target_compile_options(test_cpp_mixed_modes PRIVATE -std=c++17 ${_cxx_warnings} -O0)
set_source_files_properties(cpp_modes_no_exceptions.cpp PROPERTIES COMPILE_OPTIONS -fno-exceptions)
list(APPEND GDSROUTE_CPP_API_TESTS test_cpp_mixed_modes)
add_test(NAME cpp_api_mixed_modes COMMAND test_cpp_mixed_modes)
set_tests_properties(cpp_api_mixed_modes PROPERTIES LABELS cpp PASS_REGULAR_EXPRESSION "[0-9]+ passed, 0 failed")

# The C++ example on an empty file (an empty std::vector has no data() to pass), beside the C one.
foreach(_example read_file read_file_cpp)
  add_test(NAME cpp_api_example_${_example}_empty
           COMMAND sh -c ": > \"$1\" && exec \"$0\" \"$1\"" $<TARGET_FILE:${_example}>
                   "${CMAKE_CURRENT_BINARY_DIR}/empty-${_example}.bin")
  set_tests_properties(cpp_api_example_${_example}_empty PROPERTIES LABELS "cpp;example"
                       PASS_REGULAR_EXPRESSION "pread +0 bytes in .*read +0 bytes in ")
endforeach()
