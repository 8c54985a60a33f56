// The flash-attention kernel's source (attention.h): the body of attention_kernels.h and an
// extern "C" entry that instantiates it for one dtype, head dim, mask and bias.
#include <fmt/format.h>

#include <string>

#include "backends/cuda/attention.h"
#include "backends/cuda/attention_kernels_source.h"
#include "backends/cuda/tensor_core_source.h"

namespace kiln::cuda {

bool attention_kernel_applies(DType dtype, std::int64_t depth) {
  return (dtype == DType::BF16 || dtype == DType::F16) && depth > 0 && depth <= 128 &&
         depth % 16 == 0;
}

std::string attention_kernel_source(DType dtype, std::int64_t depth, bool mask, bool bias) {
  std::string source = kTensorCoreSource;
  source += kAttentionKernelsSource;
  source += fmt::format(R"CUDA(
extern "C" __global__ void __launch_bounds__({}) kiln_attention(
    kiln::cuda::attention_kernels::KaParams p) {{
  extern __shared__ __align__(16) unsigned short kiln_attention_shared[];
  kiln::cuda::attention_kernels::ka_attention<{}, {}, {}, {}>(p, kiln_attention_shared);
}}
)CUDA",
                        kAttentionThreads, depth, dtype == DType::BF16, mask, bias);
  return source;
}

unsigned attention_shared_bytes(std::int64_t depth) {
  return static_cast<unsigned>(attention_kernels::ka_shared_bytes(static_cast<int>(depth)));
}

}  // namespace kiln::cuda
