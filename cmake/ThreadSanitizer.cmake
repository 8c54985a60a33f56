# KILN_TSAN: everything built with ThreadSanitizer, checked with clang and LLVM's OpenMP runtime.
#
# TSan sees only the synchronisation of instrumented code and of the calls it intercepts. The
# OpenMP runtime hands work to its threads and joins them with its own atomics, so every parallel
# region would look like a race between the thread that fills a buffer and the threads that use
# it. GCC's libgomp is not instrumented and has no way to tell TSan about its barriers; LLVM's
# libomp does, through the OMPT tool Archer (libarcher.so, loaded with OMP_TOOL_LIBRARIES), which
# reports each fork, barrier, critical section and join to TSan. So the OpenMP regions are
# checked for real instead of suppressed: this build needs clang and libomp, and refuses GCC.
# (Measured: with the tool disabled, OMP_TOOL=disabled, the CPU thread, norm and parallel-kernel
# tests alone give 558 reports, all between one region's threads and the next region's; with
# Archer the whole suite gives none. libomp also loads libarcher.so by itself when it finds TSan
# in the process and no other tool; ./run tsan names it in OMP_TOOL_LIBRARIES all the same.)
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "KILN_TSAN needs clang (-DCMAKE_CXX_COMPILER=clang++): with GCC the "
                      "OpenMP runtime (libgomp) is not visible to ThreadSanitizer and every "
                      "parallel region would report false races")
endif()
if(NOT OpenMP_CXX_LIB_NAMES MATCHES "(^|;)omp($|;)")
  message(FATAL_ERROR "KILN_TSAN needs LLVM's OpenMP runtime (libomp; Debian: libomp-dev), "
                      "found '${OpenMP_CXX_LIB_NAMES}'")
endif()
# Archer lies next to libomp.
get_filename_component(_kiln_omp_dir "${OpenMP_omp_LIBRARY}" DIRECTORY)
find_library(KILN_ARCHER_LIBRARY NAMES archer HINTS "${_kiln_omp_dir}" NO_DEFAULT_PATH)
find_library(KILN_ARCHER_LIBRARY NAMES archer)
if(NOT KILN_ARCHER_LIBRARY)
  message(FATAL_ERROR "KILN_TSAN needs LLVM's OpenMP tool Archer (libarcher.so, next to "
                      "${OpenMP_omp_LIBRARY}; Debian: libomp-dev)")
endif()
message(STATUS "kiln: ThreadSanitizer build; run with OMP_TOOL_LIBRARIES=${KILN_ARCHER_LIBRARY}")

# The CUDA plugin stays out: nvcc compiles its host code with its own host compiler, which would
# leave the launcher thread and the driver calls unchecked while looking covered.
if(KILN_CUDA)
  message(STATUS "kiln: CUDA backend off in the ThreadSanitizer build")
  set(KILN_CUDA OFF)
endif()

# ThreadSanitizer checks loads and stores of up to 16 bytes and lets wider ones through
# unchecked: with -march=native (AVX2) the vectorised kernel loops store 32 bytes at a time, and a
# race between two threads' stores goes unreported (a deliberately overlapping split of
# layer_norm's rows was never reported with it). The baseline x86-64 target keeps vector accesses
# at 16 bytes, which TSan checks.
if(KILN_NATIVE)
  message(STATUS "kiln: KILN_NATIVE off in the ThreadSanitizer build (it checks 16-byte accesses at most)")
  set(KILN_NATIVE OFF)
endif()

# A small parallel grain (src/backends/cpu/parallel.h): the kernels split tensors of a few dozen
# elements over threads, so the whole test suite runs the CPU backend's parallel paths, and each
# thread's chunk is short enough that TSan still holds the history of both accesses of a race at
# a chunk boundary. TSan drops a race whose earlier access has left its thread's history: with
# the normal grain (chunks of 65,536 elements and more) the overlapping layer_norm split above
# was missed in most runs, and in every run with two threads; with this grain it is reported in
# every run of every test that uses layer_norm.
add_compile_definitions(KILN_PARALLEL_GRAIN=16)

# Debug information for the reports' stacks.
add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -g)
add_link_options(-fsanitize=thread)
