// Row sort for 64-bit keys: Signed, Unsigned, F64.
#include "backends/cuda/lib/sort_kernels.cuh"

namespace kiln::cuda::lib::sort_detail {

template std::size_t workspace_bytes<std::uint64_t, KeyKind::Signed>(const SortDesc&);
template std::size_t workspace_bytes<std::uint64_t, KeyKind::Unsigned>(const SortDesc&);
template std::size_t workspace_bytes<std::uint64_t, KeyKind::F64>(const SortDesc&);
template void sort_typed<std::uint64_t, KeyKind::Signed>(const SortDesc&, const void*, void*, void*,
                                                         void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint64_t, KeyKind::Unsigned>(const SortDesc&, const void*, void*,
                                                           void*, void*, std::size_t, cudaStream_t);
template void sort_typed<std::uint64_t, KeyKind::F64>(const SortDesc&, const void*, void*, void*,
                                                      void*, std::size_t, cudaStream_t);

}  // namespace kiln::cuda::lib::sort_detail
