# kiln/kiln.h promises the whole public API: every header under include/kiln (but detail/) must
# be among the headers the compiler reads for it (its dependency list, -MM).
execute_process(
  COMMAND ${CXX} -std=c++20 -MM -I${INCLUDE} -x c++ ${INCLUDE}/kiln/kiln.h
  RESULT_VARIABLE result OUTPUT_VARIABLE deps ERROR_VARIABLE err)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "kiln/kiln.h does not compile on its own:\n${err}")
endif()
file(GLOB_RECURSE headers RELATIVE ${INCLUDE} ${INCLUDE}/kiln/*.h)
set(missing "")
foreach(header ${headers})
  if(header MATCHES "^kiln/detail/" OR header STREQUAL "kiln/kiln.h")
    continue()
  endif()
  string(FIND "${deps}" "${INCLUDE}/${header}" at)
  if(at EQUAL -1)
    list(APPEND missing ${header})
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "kiln/kiln.h does not reach: ${missing}")
endif()
list(LENGTH headers count)
message(STATUS "kiln/kiln.h reaches all ${count} public headers")
