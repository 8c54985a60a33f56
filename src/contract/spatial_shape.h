// Output sizes of the sliding-window module ops (PyTorch's formulas), shared by the tensor
// layer (which validates them) and backends (which trust them). One spatial dim at a time.
// The formulas are templates on the integer type: the tensor layer evaluates them in 128 bits,
// where options as large as int64 allows cannot wrap, and backends in int64 on the sizes the
// tensor layer accepted.
#pragma once

#include <cstdint>

namespace kiln::spatial {

using Wide = __int128;

// Floor division for a positive divisor.
template <class I>
constexpr I floor_div(I a, I b) {
  const I q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

// Window positions of a convolution (and unfold): may be <= 0 when the dilated kernel is
// larger than the padded input.
template <class I>
constexpr I conv_output_size(I in, I kernel, I stride, I padding, I dilation) {
  return floor_div<I>(in + 2 * padding - dilation * (kernel - 1) - 1, stride) + 1;
}

// Output extent of a transposed convolution.
template <class I>
constexpr I conv_transpose_output_size(I in, I kernel, I stride, I padding, I dilation,
                                       I padding_out) {
  return (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + padding_out + 1;
}

// Window positions of max / average pooling; with ceil_mode a last partial window is kept
// unless it would start in the right padding.
template <class I>
constexpr I pool_output_size(I in, I kernel, I stride, I padding, I dilation, bool ceil_mode) {
  I out =
      floor_div<I>(in + 2 * padding - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0),
                   stride) +
      1;
  if (ceil_mode && (out - 1) * stride >= in + padding) --out;
  return out;
}

// PyTorch's adaptive pooling window [start, end) of output index i. The tensor layer keeps
// in * out below 2^62, so the products fit.
constexpr std::int64_t adaptive_start(std::int64_t i, std::int64_t in, std::int64_t out) {
  return (i * in) / out;
}
constexpr std::int64_t adaptive_end(std::int64_t i, std::int64_t in, std::int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

}  // namespace kiln::spatial
