// Output sizes of the sliding-window module ops (PyTorch's formulas), shared by the tensor
// layer (which validates them) and backends (which trust them). One spatial dim at a time.
#pragma once

#include <cstdint>

namespace kiln::spatial {

// Floor division for a positive divisor.
constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

// Window positions of a convolution (and unfold): may be <= 0 when the dilated kernel is
// larger than the padded input.
constexpr std::int64_t conv_output_size(std::int64_t in, std::int64_t kernel, std::int64_t stride,
                                        std::int64_t padding, std::int64_t dilation) {
  return floor_div(in + 2 * padding - dilation * (kernel - 1) - 1, stride) + 1;
}

// Output extent of a transposed convolution.
constexpr std::int64_t conv_transpose_output_size(std::int64_t in, std::int64_t kernel,
                                                  std::int64_t stride, std::int64_t padding,
                                                  std::int64_t dilation, std::int64_t padding_out) {
  return (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + padding_out + 1;
}

// Window positions of max / average pooling; with ceil_mode a last partial window is kept
// unless it would start in the right padding.
constexpr std::int64_t pool_output_size(std::int64_t in, std::int64_t kernel, std::int64_t stride,
                                        std::int64_t padding, std::int64_t dilation,
                                        bool ceil_mode) {
  std::int64_t out =
      floor_div(in + 2 * padding - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0),
                stride) +
      1;
  if (ceil_mode && (out - 1) * stride >= in + padding) --out;
  return out;
}

// PyTorch's adaptive pooling window [start, end) of output index i.
constexpr std::int64_t adaptive_start(std::int64_t i, std::int64_t in, std::int64_t out) {
  return (i * in) / out;
}
constexpr std::int64_t adaptive_end(std::int64_t i, std::int64_t in, std::int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

}  // namespace kiln::spatial
