# The remote backend's libraries (src/remote/): standalone Asio (header-only) and xxHash. Sets
# KILN_ASIO_INCLUDE_DIR, KILN_XXHASH_INCLUDE_DIR and KILN_XXHASH_LIBRARY, or stops naming `who`
# and the packages. Used by the top-level CMakeLists.txt and the fuzz build.
function(kiln_find_remote_dependencies who)
  find_path(KILN_ASIO_INCLUDE_DIR asio.hpp)
  find_path(KILN_XXHASH_INCLUDE_DIR xxhash.h)
  find_library(KILN_XXHASH_LIBRARY NAMES xxhash)
  if(NOT KILN_ASIO_INCLUDE_DIR OR NOT KILN_XXHASH_INCLUDE_DIR OR NOT KILN_XXHASH_LIBRARY)
    message(FATAL_ERROR "${who} needs Asio and xxHash (Debian/Ubuntu: apt-get install "
                        "libasio-dev libxxhash-dev)")
  endif()
endfunction()
