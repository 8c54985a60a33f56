// Row sort of the dtypes sorted as 32-bit keys: the 32-bit ones, and the 8- and 16-bit ones
// widened (sort_kernels.cuh), so that CUB is compiled here once for all nine.
#include "backends/cuda/lib/sort_kernels.cuh"

namespace kiln::cuda::lib::sort_detail {

template std::size_t workspace_bytes<std::uint8_t, KeyKind::Signed>(const SortDesc&);
template std::size_t workspace_bytes<std::uint8_t, KeyKind::Unsigned>(const SortDesc&);
template std::size_t workspace_bytes<std::uint16_t, KeyKind::Signed>(const SortDesc&);
template std::size_t workspace_bytes<std::uint16_t, KeyKind::Unsigned>(const SortDesc&);
template std::size_t workspace_bytes<std::uint16_t, KeyKind::F16>(const SortDesc&);
template std::size_t workspace_bytes<std::uint16_t, KeyKind::BF16>(const SortDesc&);
template std::size_t workspace_bytes<std::uint32_t, KeyKind::Signed>(const SortDesc&);
template std::size_t workspace_bytes<std::uint32_t, KeyKind::Unsigned>(const SortDesc&);
template std::size_t workspace_bytes<std::uint32_t, KeyKind::F32>(const SortDesc&);
template void sort_typed<std::uint8_t, KeyKind::Signed>(const SortDesc&, const void*, void*, void*,
                                                        void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint8_t, KeyKind::Unsigned>(const SortDesc&, const void*, void*,
                                                          void*, void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint16_t, KeyKind::Signed>(const SortDesc&, const void*, void*, void*,
                                                         void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint16_t, KeyKind::Unsigned>(const SortDesc&, const void*, void*,
                                                           void*, void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint16_t, KeyKind::F16>(const SortDesc&, const void*, void*, void*,
                                                      void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint16_t, KeyKind::BF16>(const SortDesc&, const void*, void*, void*,
                                                       void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint32_t, KeyKind::Signed>(const SortDesc&, const void*, void*, void*,
                                                         void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint32_t, KeyKind::Unsigned>(const SortDesc&, const void*, void*,
                                                           void*, void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint32_t, KeyKind::F32>(const SortDesc&, const void*, void*, void*,
                                                      void*, std::size_t, cudaStream_t);

}  // namespace kiln::cuda::lib::sort_detail
