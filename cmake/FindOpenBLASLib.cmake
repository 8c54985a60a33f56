# Finds OpenBLAS (cblas.h and libopenblas) across Debian and Ubuntu layouts and defines the
# interface target kiln_openblas.
find_path(KILN_OPENBLAS_INCLUDE_DIR cblas.h
  PATH_SUFFIXES openblas-pthread openblas-openmp openblas x86_64-linux-gnu/openblas-pthread
                x86_64-linux-gnu/openblas-openmp x86_64-linux-gnu)
find_library(KILN_OPENBLAS_LIBRARY NAMES openblas
  PATH_SUFFIXES openblas-pthread openblas-openmp x86_64-linux-gnu/openblas-pthread
                x86_64-linux-gnu/openblas-openmp)
if(NOT KILN_OPENBLAS_INCLUDE_DIR OR NOT KILN_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS not found (Debian/Ubuntu: apt-get install libopenblas-dev)")
endif()
message(STATUS "OpenBLAS: ${KILN_OPENBLAS_LIBRARY} (headers ${KILN_OPENBLAS_INCLUDE_DIR})")
add_library(kiln_openblas INTERFACE)
target_include_directories(kiln_openblas INTERFACE $<BUILD_INTERFACE:${KILN_OPENBLAS_INCLUDE_DIR}>)
target_link_libraries(kiln_openblas INTERFACE $<BUILD_INTERFACE:${KILN_OPENBLAS_LIBRARY}>)
