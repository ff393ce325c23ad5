# Reads a MAJOR.MINOR.PATCH version from #define lines of include/miopen_bn.h,
# the one place versions are written (the library, the Python package and the
# CMake packages all take theirs from it).
set(MIOPEN_BN_HEADER ${CMAKE_CURRENT_LIST_DIR}/../include/miopen_bn.h)

function(miopen_bn_header_version prefix out_var)
  set(parts "")
  foreach(part MAJOR MINOR PATCH)
    file(STRINGS ${MIOPEN_BN_HEADER} line
         REGEX "^#define ${prefix}_${part} +[0-9]+ *$")
    if(NOT line MATCHES "([0-9]+) *$")
      message(FATAL_ERROR "include/miopen_bn.h has no '#define ${prefix}_${part} <number>'")
    endif()
    list(APPEND parts ${CMAKE_MATCH_1})
  endforeach()
  list(JOIN parts . version)
  set(${out_var} ${version} PARENT_SCOPE)
endfunction()
