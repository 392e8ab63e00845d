# cmake -DINPUT=cargo/libgdsroute.a -DOUTPUT=lib/libgdsroute.a -DHEADER=include/gdsroute.h
#       [-DMAP=src/gdsroute.map] -DWORK_DIR=... -DLINKER=ld -DOBJCOPY=objcopy -DAR=ar -P gdsroute-localize-archive.cmake
#
# Makes the installed static archive define no global symbol but the C API: cargo's staticlib
# carries Rust's std and every crate with global symbols (5,839 besides the 45 gdsroute_*
# functions in 0.1.0), which clash with a second Rust static library in the same program. Here the
# archive's members that the API needs are linked into one relocatable object (`ld -r`, with each
# function of the header as an undefined root, as a program's static link would pull them), every
# defined symbol but those functions (and DW.ref.rust_eh_personality, below) is made local
# (`objcopy --keep-global-symbols`; that includes rust_eh_personality and the __rust_* allocator
# shims, which only the library's own code uses), and the object is archived alone. Undefined references (libc, libgcc's unwinder) stay global. The
# objects' embedded LLVM bitcode (.llvmbc, .llvmcmd) is dropped: concatenated by `ld -r` it is no
# longer valid bitcode, and nm, ar and ld crash on it when an LLVM plugin is installed in
# bfd-plugins (measured with binutils 2.40 and LLVMgold 14).
cmake_minimum_required(VERSION 3.16)

foreach(_v INPUT OUTPUT HEADER WORK_DIR LINKER OBJCOPY AR)
  if(NOT DEFINED ${_v} OR "${${_v}}" STREQUAL "")
    message(FATAL_ERROR "gdsroute-localize-archive: ${_v} is not set")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "gdsroute-localize-archive: failed (${rc}): ${cmd}\n${out}${err}")
  endif()
endfunction()

# The API: every function the header declares.
file(READ "${HEADER}" _header)
string(REGEX MATCHALL "gdsroute_[a-z0-9_]+\\(" _calls "${_header}")
set(_api)
foreach(_c IN LISTS _calls)
  string(REPLACE "(" "" _c "${_c}")
  list(APPEND _api "${_c}")
endforeach()
list(REMOVE_DUPLICATES _api)
list(SORT _api)
list(LENGTH _api _count)
if(_count LESS 10)
  message(FATAL_ERROR "gdsroute-localize-archive: only ${_count} functions found in ${HEADER}")
endif()

file(MAKE_DIRECTORY "${WORK_DIR}")
set(_keep "${WORK_DIR}/gdsroute-api-symbols.txt")
# DW.ref.rust_eh_personality stays global (weak, hidden): it is the signature of the objects' one
# COMDAT group (the pointer to the personality routine that unwind tables use). Made local, the
# linker still merges the group with another Rust library's, keeps ours, and that library's
# references to the symbol are left undefined ("relocation ... against undefined hidden symbol").
# The objects name each function by its symbol version (`gdsroute_x@@GDSROUTE_0.1`: the `.symver`
# of src/ffi/, meant for the shared library). In an archive that name would stop a program from
# linking it into a shared object of its own ("version node not found"), so the archive's
# functions get their plain names back (`_rename`); versions belong to libgdsroute.so alone.
set(_versioned)
set(_rename_text "")
if(DEFINED MAP AND NOT "${MAP}" STREQUAL "")
  file(READ "${MAP}" _map)
  string(REPLACE ";" "," _map "${_map}") # a ';' would split CMake's lists
  # Each node "GDSROUTE_X.Y { global: names; ... }" versions the functions it lists.
  string(REGEX MATCHALL "GDSROUTE_[0-9.]+ {[^}]*}" _blocks "${_map}")
  foreach(_block IN LISTS _blocks)
    string(REGEX MATCH "^GDSROUTE_[0-9.]+" _n "${_block}")
    string(REGEX MATCHALL "gdsroute_[a-z0-9_]+," _names "${_block}")
    foreach(_s IN LISTS _names)
      string(REPLACE "," "" _s "${_s}")
      list(APPEND _versioned "${_s}@@${_n}")
      string(APPEND _rename_text "${_s}@@${_n} ${_s}\n")
    endforeach()
  endforeach()
endif()
string(REPLACE ";" "\n" _keep_text "${_api};${_versioned};DW.ref.rust_eh_personality")
file(WRITE "${_keep}" "${_keep_text}\n")
set(_roots)
foreach(_s IN LISTS _api)
  list(APPEND _roots -u "${_s}")
endforeach()

set(_combined "${WORK_DIR}/gdsroute-combined.o")
set(_local "${WORK_DIR}/gdsroute.o")
run("${LINKER}" -r -o "${_combined}" ${_roots} "${INPUT}")
set(_rename "${WORK_DIR}/gdsroute-unversion.txt")
file(WRITE "${_rename}" "${_rename_text}")
run("${OBJCOPY}" --remove-section=.llvmbc --remove-section=.llvmcmd "--keep-global-symbols=${_keep}"
    "--redefine-syms=${_rename}" "${_combined}" "${_local}")
file(REMOVE "${OUTPUT}" "${_combined}")
run("${AR}" rcs "${OUTPUT}" "${_local}")
file(REMOVE "${_local}")
