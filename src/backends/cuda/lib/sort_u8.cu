// Row sort for 8-bit keys: Signed, Unsigned.
#include "backends/cuda/lib/sort_kernels.cuh"

namespace kiln::cuda::lib::sort_detail {

template std::size_t workspace_bytes<std::uint8_t, KeyKind::Signed>(const SortDesc&);
template std::size_t workspace_bytes<std::uint8_t, KeyKind::Unsigned>(const SortDesc&);
template void sort_typed<std::uint8_t, KeyKind::Signed>(const SortDesc&, const void*, void*, void*,
                                                        void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint8_t, KeyKind::Unsigned>(const SortDesc&, const void*, void*,
                                                          void*, void*, std::size_t, cudaStream_t);

}  // namespace kiln::cuda::lib::sort_detail
