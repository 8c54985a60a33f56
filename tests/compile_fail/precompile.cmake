# Precompiles INCLUDE/kiln/kiln.h with GCC into PCH_DIR/kiln/kiln.h.gch, with the flags the cases
# are compiled with (check_compile.cmake): an #include <kiln/kiln.h> that searches PCH_DIR first
# loads it instead of parsing the header.
file(MAKE_DIRECTORY ${PCH_DIR}/kiln)
execute_process(
  COMMAND ${CXX} -std=c++20 -x c++-header -I${INCLUDE} ${INCLUDE}/kiln/kiln.h
          -o ${PCH_DIR}/kiln/kiln.h.gch
  RESULT_VARIABLE result ERROR_VARIABLE err)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "precompiling kiln/kiln.h failed:\n${err}")
endif()
