// The flash-attention kernels' sources (attention.h): tensor_core.h's and attention_kernels.h's
// texts, and an extern "C" entry that instantiates one of the bodies for one dtype, head dim,
// mask and bias.
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

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::Forward:
      return "kiln_attention";
    case AttentionKernel::Stats:
      return "kiln_attention_stats";
    case AttentionKernel::Query:
      return "kiln_attention_dq";
    case AttentionKernel::KeyValue:
      return "kiln_attention_dkv";
  }
  return "kiln_attention";
}

std::string attention_kernel_source(AttentionKernel kernel, DType dtype, std::int64_t depth,
                                    bool mask, bool bias) {
  // The body each entry instantiates, and the forward body's kStats.
  const char* body = kernel == AttentionKernel::Query      ? "ka_attention_dq"
                     : kernel == AttentionKernel::KeyValue ? "ka_attention_dkv"
                                                           : "ka_attention";
  const char* extra = kernel == AttentionKernel::Forward ? ", false"
                      : kernel == AttentionKernel::Stats ? ", true"
                                                         : "";
  std::string source = kTensorCoreSource;
  source += kAttentionKernelsSource;
  source += fmt::format(R"CUDA(
extern "C" __global__ void __launch_bounds__({}) {}(kiln::cuda::attention_kernels::KaParams p) {{
  extern __shared__ __align__(16) unsigned short kiln_attention_shared[];
  kiln::cuda::attention_kernels::{}<{}, {}, {}, {}{}>(p, kiln_attention_shared);
}}
)CUDA",
                        kAttentionThreads, attention_kernel_name(kernel), body, depth,
                        dtype == DType::BF16, mask, bias, extra);
  return source;
}

unsigned attention_shared_bytes(std::int64_t depth) {
  return static_cast<unsigned>(attention_kernels::ka_shared_bytes(static_cast<int>(depth)));
}

}  // namespace kiln::cuda
