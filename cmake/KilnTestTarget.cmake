# kiln_test_target(TARGET [UNITY]): how a test binary is compiled.
#
# Test sources are most of the build's files, and most of their compile time went to optimising
# gtest's expanded macros and the float64 reference loops, neither of which needs speed: they
# are compiled at -O0 (the last -O wins), while the library they test keeps its build type's
# flags. UNITY compiles the sources in batches, parsing gtest and the kiln headers once per batch
# instead of once per file; each file of such a target keeps its file-local names distinct from
# the others' (shared helpers live in tests/support/ or the folder's header).
function(kiln_test_target target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "UNITY" "" "")
  target_compile_options(${target} PRIVATE -O0)
  if(ARG_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE BATCH
                                               UNITY_BUILD_BATCH_SIZE ${KILN_TEST_UNITY_BATCH})
  endif()
endfunction()
