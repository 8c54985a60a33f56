// Selection topk for 32-bit keys: Signed, Unsigned, F32.
#include "backends/cuda/lib/topk_launch.cuh"

namespace kiln::cuda::lib::topk_detail {

KILN_TOPK_INSTANTIATE(std::uint32_t, Signed);
KILN_TOPK_INSTANTIATE(std::uint32_t, Unsigned);
KILN_TOPK_INSTANTIATE(std::uint32_t, F32);

}  // namespace kiln::cuda::lib::topk_detail
