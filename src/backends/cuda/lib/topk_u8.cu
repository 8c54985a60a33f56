// Selection topk for 8-bit keys: Signed, Unsigned.
#include "backends/cuda/lib/topk_launch.cuh"

namespace kiln::cuda::lib::topk_detail {

KILN_TOPK_INSTANTIATE(std::uint8_t, Signed);
KILN_TOPK_INSTANTIATE(std::uint8_t, Unsigned);

}  // namespace kiln::cuda::lib::topk_detail
