# Finds Gloo (Debian's libgloo-dev, the engine of PyTorch's CPU collectives) and defines the
# interface target kiln_gloo, which carries KILN_HAVE_GLOO=1 when the library is there (and sets
# KILN_HAVE_GLOO). libkiln_dist runs the collectives of groups of several processes over Gloo's
# TCP transport; without it a ProcessGroup of more than one rank throws UnsupportedOperation
# saying so, and the distributed tests skip. Off in a static build (libkiln_dist would have to
# export Gloo to its consumers) and under ThreadSanitizer (Gloo's own threads are not
# instrumented).
include(${CMAKE_CURRENT_LIST_DIR}/KilnOptionalLibrary.cmake)
option(KILN_GLOO "Use Gloo for the collectives of process groups when installed" ON)
if(KILN_GLOO AND BUILD_SHARED_LIBS AND NOT KILN_TSAN)
  find_path(KILN_GLOO_INCLUDE_DIR gloo/rendezvous/context.h)
  find_library(KILN_GLOO_LIBRARY NAMES gloo)
endif()
kiln_optional_library(kiln_gloo Gloo KILN_GLOO KILN_HAVE_GLOO
  "not used (process groups of one rank only; Debian: apt-get install libgloo-dev)")
set(KILN_HAVE_GLOO ${KILN_GLOO_USED})
