# Compiles CASE (syntax and semantics only) and checks the outcome against EXPECT. A case that
# must fail marks its offending line with `// error: REGEX`: the compiler must report an error on
# that line and its diagnostics must match REGEX, so a typo or an unrelated error elsewhere in
# the case does not count as kiln rejecting it. PCH_DIR (optional, GCC): where precompile.cmake put
# kiln/kiln.h.gch, searched before INCLUDE.
set(pch_include "")
if(PCH_DIR)
  set(pch_include -I${PCH_DIR})
endif()
execute_process(
  COMMAND ${CXX} -std=c++20 -fsyntax-only ${pch_include} -I${INCLUDE} ${CASE}
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(EXPECT STREQUAL "PASS")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${CASE} must compile:\n${err}")
  endif()
  message(STATUS "${CASE}: compiles as expected")
  return()
endif()
if(result EQUAL 0)
  message(FATAL_ERROR "${CASE} compiled, but kiln must reject it")
endif()

file(READ ${CASE} text)
string(REPLACE ";" "," text "${text}")
string(REPLACE "\n" ";" lines "${text}")
set(number 0)
set(line "")
foreach(l IN LISTS lines)
  math(EXPR number "${number} + 1")
  if(l MATCHES "// error: (.+)$")
    set(line ${number})
    set(pattern "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(line STREQUAL "")
  message(FATAL_ERROR "${CASE} marks no line with `// error: REGEX`")
endif()
get_filename_component(file ${CASE} NAME)
# Compilers quote the offending line, pattern included: those quotes must not match themselves.
string(REGEX REPLACE "[^\n]*// error:[^\n]*" "" err "${err}")
# The error itself, or (for an error inside a kiln header) the note naming the line that caused it.
if(NOT err MATCHES "${file}:${line}:[0-9]+: (error|note)")
  message(FATAL_ERROR "${CASE}: no error reported on line ${line}:\n${err}")
endif()
if(NOT err MATCHES "${pattern}")
  message(FATAL_ERROR "${CASE}: the diagnostics do not match `${pattern}`:\n${err}")
endif()
message(STATUS "${CASE}: rejected on line ${line} as expected")
