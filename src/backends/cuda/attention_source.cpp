// The flash-attention kernels' sources (attention.h): tensor_core.h's, attention_kernels.h's and
// attention_hopper.h's texts, and an extern "C" entry that instantiates one of the bodies for one
// dtype, head dim, mask and bias.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

#include "backends/cuda/attention.h"
#include "backends/cuda/attention_hopper_source.h"
#include "backends/cuda/attention_kernels_source.h"
#include "backends/cuda/attention_simt_source.h"
#include "backends/cuda/tensor_core_source.h"
#include "kiln/error.h"

namespace kiln::cuda {

bool attention_kernel_applies(DType dtype, std::int64_t depth) {
  return (dtype == DType::BF16 || dtype == DType::F16) && depth > 0 && depth <= 128 &&
         depth % 16 == 0;
}

bool attention_simt_applies(DType dtype, std::int64_t depth) {
  return dtype == DType::F32 && attention_kernels::kf_depth_supported(depth);
}

int attention_simt_keys() {
  static const int keys = [] {
    const char* text = std::getenv("KILN_ATTENTION_F32_KEYS");
    const int asked = text == nullptr ? 0 : std::atoi(text);
    return asked == 16 || asked == 32 || asked == 64 ? asked : attention_kernels::kKfKeys;
  }();
  return keys;
}

SimtKernel attention_simt_kernel(std::int64_t depth, bool tiled, int keys) {
  SimtKernel kernel;
  kernel.tiled = tiled;
  if (tiled) {
    kernel.threads = attention_kernels::kKtThreads;
    kernel.rows = attention_kernels::kKtRows;
    kernel.shared_bytes =
        static_cast<unsigned>(attention_kernels::kt_shared_bytes(static_cast<int>(depth)));
    kernel.min_blocks = attention_kernels::kKtMinBlocks;
  } else {
    kernel.keys = keys;
    kernel.threads = kernel.rows = attention_kernels::kKfRows;
    kernel.shared_bytes =
        static_cast<unsigned>(attention_kernels::kf_shared_bytes(static_cast<int>(depth), keys));
  }
  return kernel;
}

SimtKernel attention_simt_kernel(std::int64_t depth) {
  static const bool tiled_allowed = [] {
    const char* text = std::getenv("KILN_ATTENTION_F32_TILED");
    return text == nullptr || std::strcmp(text, "0") != 0;
  }();
  return attention_simt_kernel(depth, tiled_allowed && attention_kernels::kt_depth_supported(depth),
                               attention_simt_keys());
}

std::string attention_simt_source(const SimtKernel& kernel, std::int64_t depth, bool mask,
                                  bool bias, bool dropout) {
  std::string source = kTensorCoreSource;
  source += kAttentionKernelsSource;
  source += kAttentionSimtSource;
  const std::string body =
      kernel.tiled ? fmt::format("kt_attention<{}, {}, {}, {}>", depth, mask, bias, dropout)
                   : fmt::format("kf_attention<{}, {}, {}, {}, {}>", depth, kernel.keys, mask, bias,
                                 dropout);
  source += fmt::format(
      R"CUDA(
extern "C" __global__ void __launch_bounds__({}{}) {}(kiln::cuda::attention_kernels::KaParams p) {{
  extern __shared__ __align__(16) float kiln_attention_shared[];
  kiln::cuda::attention_kernels::{}(p, kiln_attention_shared);
}}
)CUDA",
      kernel.threads, kernel.min_blocks > 0 ? fmt::format(", {}", kernel.min_blocks) : "",
      kAttentionSimtName, body);
  return source;
}

namespace {

// KILN_ATTENTION_WGMMA: 0 the mma.sync kernels, 2 the pipelined Hopper forward pass, otherwise
// (unset, 1) the Hopper kernels.
int wgmma_choice() {
  const char* choice = std::getenv("KILN_ATTENTION_WGMMA");
  if (choice == nullptr) return 1;
  if (std::strcmp(choice, "0") == 0) return 0;
  return std::strcmp(choice, "2") == 0 ? 2 : 1;
}

// What each kernel is: its extern "C" name, the body it instantiates and that body's trailing
// template argument (the forward bodies' kStats, the dk/dv body's kQuery), the arguments that
// follow them for dropout (null: the body has none), whether it is a Hopper kernel, and the rows
// (queries, or keys for the dk/dv kernels) a block takes. In AttentionKernel's order.
struct KernelSpec {
  const char* name;
  const char* body;
  const char* stats;
  const char* dropout;
  bool hopper;
  int rows;
};
constexpr KernelSpec kSpecs[] = {
    {"kiln_attention", "ka_attention", ", false", ", true", false, attention_kernels::kKaRows},
    {"kiln_attention_stats", "ka_attention", ", true", nullptr, false, attention_kernels::kKaRows},
    {"kiln_attention_dq", "ka_attention_dq", "", ", true", false, attention_kernels::kKaKeys},
    {"kiln_attention_dkv", "ka_attention_dkv", "", ", true", false, attention_kernels::kKaKeys},
    {"kiln_attention_wg", "kh_attention", ", false", ", true", true, attention_kernels::kKhRows},
    {"kiln_attention_wg_stats", "kh_attention", ", true", nullptr, true,
     attention_kernels::kKhRows},
    {"kiln_attention_wg_dq", "kh_attention_dq", "", ", true", true, attention_kernels::kKhRows},
    {"kiln_attention_wg_dkv", "kh_attention_dkv", "", ", false, true", true,
     attention_kernels::kKhRows},
    {"kiln_attention_wg_pipelined", "kh_attention_pipelined", "", nullptr, true,
     attention_kernels::kKhRows},
    {"kiln_attention_delta", "ka_attention_delta", "", nullptr, false,
     attention_kernels::kKaThreads / 32},
    {"kiln_attention_wg_dqkv", "kh_attention_dkv", ", true", ", true", true,
     attention_kernels::kKhRows},
};
static_assert(std::size(kSpecs) ==
                  static_cast<std::size_t>(AttentionKernel::HopperQueryKeyValue) + 1,
              "one KernelSpec per AttentionKernel");

const KernelSpec& spec(AttentionKernel kernel) { return kSpecs[static_cast<int>(kernel)]; }

}  // namespace

bool attention_hopper_applies(int major, int minor, std::int64_t depth) {
  return wgmma_choice() != 0 && major == 9 && minor == 0 &&
         attention_kernels::kh_depth_supported(static_cast<int>(depth));
}

bool attention_hopper_pipelined() { return wgmma_choice() == 2; }

bool attention_query_merged() {
  const char* choice = std::getenv("KILN_ATTENTION_MERGED_DQ");
  return choice == nullptr || std::strcmp(choice, "0") != 0;
}

const char* attention_kernel_name(AttentionKernel kernel) { return spec(kernel).name; }

int attention_kernel_threads(AttentionKernel kernel) {
  return spec(kernel).hopper ? attention_kernels::kKhThreads : attention_kernels::kKaThreads;
}

int attention_kernel_rows(AttentionKernel kernel) { return spec(kernel).rows; }

bool attention_kernel_drops(AttentionKernel kernel) { return spec(kernel).dropout != nullptr; }

std::string attention_kernel_source(AttentionKernel kernel, DType dtype, std::int64_t depth,
                                    bool mask, bool bias, bool dropout) {
  const KernelSpec& k = spec(kernel);
  if (dropout && !attention_kernel_drops(kernel)) {
    throw UnsupportedOperation(fmt::format("[attention] {} has no dropout", k.name));
  }
  std::string source = kTensorCoreSource;
  source += kAttentionKernelsSource;
  if (k.hopper) source += kAttentionHopperSource;
  // The Hopper body aligns its tiles to 1024 bytes itself; a one-block-per-SM bound lets it
  // have every register it needs.
  source += fmt::format(
      R"CUDA(
extern "C" __global__ void __launch_bounds__({}{}) {}(kiln::cuda::attention_kernels::KaParams p) {{
  extern __shared__ __align__(16) unsigned char kiln_attention_shared[];
  kiln::cuda::attention_kernels::{}<{}, {}, {}, {}{}{}>(p, {});
}}
)CUDA",
      attention_kernel_threads(kernel), k.hopper ? ", 1" : "", k.name, k.body, depth,
      dtype == DType::BF16, mask, bias, k.stats, dropout ? k.dropout : "",
      k.hopper ? "kiln_attention_shared"
               : "reinterpret_cast<unsigned short*>(kiln_attention_shared)");
  return source;
}

unsigned attention_shared_bytes(AttentionKernel kernel, std::int64_t depth) {
  if (kernel == AttentionKernel::Delta) return 0;  // a warp a row, straight from global memory
  const int d = static_cast<int>(depth);
  if (kernel == AttentionKernel::HopperQueryKeyValue) {
    return static_cast<unsigned>(std::max(attention_kernels::kh_shared_bytes(d),
                                          attention_kernels::kh_dqkv_shared_bytes(d)));
  }
  return static_cast<unsigned>(spec(kernel).hopper ? attention_kernels::kh_shared_bytes(d)
                                                   : attention_kernels::ka_shared_bytes(d));
}

}  // namespace kiln::cuda
