# Compiles CASE (syntax and semantics only) and checks the outcome against EXPECT.
execute_process(
  COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} ${CASE}
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(EXPECT STREQUAL "FAIL" AND result EQUAL 0)
  message(FATAL_ERROR "${CASE} compiled, but kiln must reject it")
elseif(EXPECT STREQUAL "PASS" AND NOT result EQUAL 0)
  message(FATAL_ERROR "${CASE} must compile:\n${err}")
endif()
message(STATUS "${CASE}: ${EXPECT} as expected")
