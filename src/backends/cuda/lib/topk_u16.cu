// Selection topk for 16-bit keys: Signed, Unsigned, F16, BF16.
#include "backends/cuda/lib/topk_launch.cuh"

namespace kiln::cuda::lib::topk_detail {

KILN_TOPK_INSTANTIATE(std::uint16_t, Signed);
KILN_TOPK_INSTANTIATE(std::uint16_t, Unsigned);
KILN_TOPK_INSTANTIATE(std::uint16_t, F16);
KILN_TOPK_INSTANTIATE(std::uint16_t, BF16);

}  // namespace kiln::cuda::lib::topk_detail
