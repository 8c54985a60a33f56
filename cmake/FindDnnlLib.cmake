# Finds oneDNN (Debian's libdnnl-dev) and defines the interface target kiln_dnnl, which carries
# KILN_HAVE_DNNL=1 when the library is there. The CPU backend's float products go to oneDNN's
# sgemm and its float convolutions to oneDNN's convolution primitives, whose kernels follow the
# machine's vector width (AVX-512 where it has it); without oneDNN they stay with OpenBLAS and
# im2col. Off under ThreadSanitizer: oneDNN brings libgomp, the TSan
# build runs on LLVM's OpenMP.
include(${CMAKE_CURRENT_LIST_DIR}/KilnOptionalLibrary.cmake)
option(KILN_DNNL "Use oneDNN for the CPU backend's float products and convolutions when installed" ON)
if(KILN_DNNL AND NOT KILN_TSAN)
  find_path(KILN_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
  find_library(KILN_DNNL_LIBRARY NAMES dnnl)
endif()
kiln_optional_library(kiln_dnnl oneDNN KILN_DNNL KILN_HAVE_DNNL
  "not used (float products on OpenBLAS, convolutions on im2col; Debian: apt-get install libdnnl-dev)")
