#include "backends/cpu/cpu_backend.h"

#include <cblas.h>

#include "backends/cpu/allocator.h"

namespace kiln {

DTypeUsageSet CpuBackend::dtype_usage(DType dtype) const {
  if (dtype == DType::QFloat) return {DTypeUsage::Storage};  // cpu_quant_tensor.h
  if (dtype == DType::Bool) return {DTypeUsage::Storage, DTypeUsage::Arithmetic};
  return {DTypeUsage::Storage, DTypeUsage::Arithmetic};
}

void CpuBackend::seed(std::uint64_t seed) {
  seed_.store(seed);
  counter_.store(0);
}

std::optional<RandomStream> CpuBackend::reserve_random(std::uint64_t count) {
  return RandomStream{seed_.load(), counter_.fetch_add(count)};
}

MemoryStats CpuBackend::memory_stats() const { return cpu::CachingAllocator::instance().stats(); }

void CpuBackend::memory_cleanup() { cpu::CachingAllocator::instance().release_cache(); }
void CpuBackend::reset_peak_memory() { cpu::CachingAllocator::instance().reset_peak(); }

std::shared_ptr<Backend> make_cpu_backend() {
  // kiln splits large products over its own threads (cpu_gemm.cpp, thread_pool.h); an OpenBLAS
  // threading them again, with pthreads (1) or OpenMP (2), would oversubscribe the cores.
  if (openblas_get_parallel() != 0) openblas_set_num_threads(1);
  return std::make_shared<CpuBackend>();
}

}  // namespace kiln
