// The flash-attention kernels' sources (attention.h): tensor_core.h's, attention_kernels.h's and
// attention_hopper.h's texts, and an extern "C" entry that instantiates one of the bodies for one
// dtype, head dim, mask and bias.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cuda/attention.h"
#include "backends/cuda/attention_hopper_source.h"
#include "backends/cuda/attention_kernels_source.h"
#include "backends/cuda/tensor_core_source.h"

namespace kiln::cuda {

bool attention_kernel_applies(DType dtype, std::int64_t depth) {
  return (dtype == DType::BF16 || dtype == DType::F16) && depth > 0 && depth <= 128 &&
         depth % 16 == 0;
}

bool attention_hopper_applies(int major, int minor, std::int64_t depth) {
  const char* choice = std::getenv("KILN_ATTENTION_WGMMA");
  if (choice != nullptr && std::strcmp(choice, "0") == 0) return false;
  return major == 9 && minor == 0 && attention_kernels::kh_depth_supported(static_cast<int>(depth));
}

bool attention_hopper_pipelined() {
  const char* choice = std::getenv("KILN_ATTENTION_WGMMA");
  return choice != nullptr && std::strcmp(choice, "2") == 0;
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
    case AttentionKernel::HopperForward:
      return "kiln_attention_wg";
    case AttentionKernel::HopperStats:
      return "kiln_attention_wg_stats";
    case AttentionKernel::HopperQuery:
      return "kiln_attention_wg_dq";
    case AttentionKernel::HopperKeyValue:
      return "kiln_attention_wg_dkv";
    case AttentionKernel::HopperPipelined:
      return "kiln_attention_wg_pipelined";
  }
  return "kiln_attention";
}

namespace {
bool hopper(AttentionKernel kernel) {
  return kernel == AttentionKernel::HopperForward || kernel == AttentionKernel::HopperStats ||
         kernel == AttentionKernel::HopperQuery || kernel == AttentionKernel::HopperKeyValue ||
         kernel == AttentionKernel::HopperPipelined;
}
}  // namespace

int attention_kernel_threads(AttentionKernel kernel) {
  return hopper(kernel) ? attention_kernels::kKhThreads : attention_kernels::kKaThreads;
}

int attention_kernel_rows(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::Forward:
    case AttentionKernel::Stats:
      return attention_kernels::kKaRows;
    case AttentionKernel::Query:
    case AttentionKernel::KeyValue:
      return attention_kernels::kKaKeys;
    case AttentionKernel::HopperForward:
    case AttentionKernel::HopperStats:
    case AttentionKernel::HopperQuery:
    case AttentionKernel::HopperKeyValue:
    case AttentionKernel::HopperPipelined:
      return attention_kernels::kKhRows;
  }
  return attention_kernels::kKaRows;
}

std::string attention_kernel_source(AttentionKernel kernel, DType dtype, std::int64_t depth,
                                    bool mask, bool bias) {
  // The body each entry instantiates, and the forward bodies' kStats.
  const char* body = kernel == AttentionKernel::Query             ? "ka_attention_dq"
                     : kernel == AttentionKernel::KeyValue        ? "ka_attention_dkv"
                     : kernel == AttentionKernel::HopperQuery     ? "kh_attention_dq"
                     : kernel == AttentionKernel::HopperKeyValue  ? "kh_attention_dkv"
                     : kernel == AttentionKernel::HopperPipelined ? "kh_attention_pipelined"
                     : hopper(kernel)                             ? "kh_attention"
                                                                  : "ka_attention";
  const char* extra =
      kernel == AttentionKernel::Forward || kernel == AttentionKernel::HopperForward ? ", false"
      : kernel == AttentionKernel::Stats || kernel == AttentionKernel::HopperStats   ? ", true"
                                                                                     : "";
  std::string source = kTensorCoreSource;
  source += kAttentionKernelsSource;
  if (hopper(kernel)) source += kAttentionHopperSource;
  // The Hopper body aligns its tiles to 1024 bytes itself; a one-block-per-SM bound lets it
  // have every register it needs.
  source += fmt::format(
      R"CUDA(
extern "C" __global__ void __launch_bounds__({}{}) {}(kiln::cuda::attention_kernels::KaParams p) {{
  extern __shared__ __align__(16) unsigned char kiln_attention_shared[];
  kiln::cuda::attention_kernels::{}<{}, {}, {}, {}{}>(p, {});
}}
)CUDA",
      attention_kernel_threads(kernel), hopper(kernel) ? ", 1" : "", attention_kernel_name(kernel),
      body, depth, dtype == DType::BF16, mask, bias, extra,
      hopper(kernel) ? "kiln_attention_shared"
                     : "reinterpret_cast<unsigned short*>(kiln_attention_shared)");
  return source;
}

unsigned attention_shared_bytes(AttentionKernel kernel, std::int64_t depth) {
  const int d = static_cast<int>(depth);
  return static_cast<unsigned>(hopper(kernel) ? attention_kernels::kh_shared_bytes(d)
                                              : attention_kernels::ka_shared_bytes(d));
}

}  // namespace kiln::cuda
