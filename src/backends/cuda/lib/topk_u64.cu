// Selection topk for 64-bit keys: Signed, Unsigned, F64.
#include "backends/cuda/lib/topk_launch.cuh"

namespace kiln::cuda::lib::topk_detail {

KILN_TOPK_INSTANTIATE(std::uint64_t, Signed);
KILN_TOPK_INSTANTIATE(std::uint64_t, Unsigned);
KILN_TOPK_INSTANTIATE(std::uint64_t, F64);

}  // namespace kiln::cuda::lib::topk_detail
