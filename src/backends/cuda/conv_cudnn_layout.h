// How the operands of cuDNN's convolutions lie in memory, as cuDNN is told (cuda_conv_cudnn.cpp,
// the legacy API; cuda_conv_cudnn_graph.cpp, the graph API).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_tensor.h"
#include "backends/cuda/lib/cudnn_api.h"

namespace kiln::cuda::cudnn {

// How an operand lies in memory, as cuDNN will be told.
enum class Layout { Nchw, Nhwc, Copy };

// Whether t's elements are packed in this order of dims (innermost first); size-1 dims may have
// any stride.
inline bool packed_in(const CudaTensor& t, const std::vector<std::size_t>& innermost_first) {
  std::int64_t expected = 1;
  for (std::size_t d : innermost_first) {
    if (t.shape()[d] != 1 && t.strides()[d] != expected) return false;
    expected *= t.shape()[d];
  }
  return true;
}

// Dims from the innermost out: channels-first (n, c, spatial...) or channels-last (c innermost).
inline std::vector<std::size_t> order(std::size_t rank, Layout layout) {
  std::vector<std::size_t> dims;
  if (layout == Layout::Nhwc) dims.push_back(1);
  for (std::size_t d = rank; d-- > 2;) dims.push_back(d);
  if (layout != Layout::Nhwc) dims.push_back(1);
  dims.push_back(0);
  return dims;
}

// The layout an operand read by cuDNN has: packed and 16-byte aligned as cuDNN's kernels want,
// or to be copied.
inline Layout layout_of(const CudaTensor& t) {
  if (t.data() % 16 != 0) return Layout::Copy;
  if (packed_in(t, order(t.rank(), Layout::Nchw))) return Layout::Nchw;
  if (packed_in(t, order(t.rank(), Layout::Nhwc))) return Layout::Nhwc;
  return Layout::Copy;
}

// Packed strides in layout of `rank` dims of these sizes (a Shape or a vector of ints), as Out.
template <class Out, class Sizes>
Out packed_strides(const Sizes& sizes, std::size_t rank, Layout layout) {
  Out strides(rank);
  std::int64_t step = 1;
  for (std::size_t d : order(rank, layout)) {
    strides[d] = static_cast<std::remove_cvref_t<decltype(strides[d])>>(step);
    step *= sizes[d];
  }
  return strides;
}

// Packed strides of sizes in layout.
inline std::vector<int> strides_of(const std::vector<int>& sizes, Layout layout) {
  return packed_strides<std::vector<int>>(sizes, sizes.size(), layout);
}

// cuDNN's type for a float dtype (f32 for any other).
inline DataType data_type(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return DataType::Double;
    case DType::F16:
      return DataType::Half;
    case DType::BF16:
      return DataType::BFloat16;
    default:
      return DataType::Float;
  }
}

}  // namespace kiln::cuda::cudnn
