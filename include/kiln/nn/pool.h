// Pooling modules over [N, C, H, W] (no parameters), as torch.nn.MaxPool2d / AvgPool2d /
// AdaptiveAvgPool2d:
//
//   Tensor<4> y = nn::MaxPool2d{.kernel_size = {2, 2}}.forward(x);          // stride = kernel
//   Tensor<4> z = nn::AdaptiveAvgPool2d{.output_size = {1, 1}}.forward(x);  // global average
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "kiln/module_ops.h"
#include "kiln/nn/stateless.h"

namespace kiln::nn {

struct MaxPool2d {
  std::array<std::int64_t, 2> kernel_size;
  std::optional<std::array<std::int64_t, 2>> stride = std::nullopt;  // default: kernel_size
  std::array<std::int64_t, 2> padding{0, 0};  // implicit -inf padding, at most half the kernel
  std::array<std::int64_t, 2> dilation{1, 1};
  bool ceil_mode = false;
  KILN_STATELESS_MODULE

  Tensor<4> forward(const Tensor<4>& x) const {
    const auto s = stride.value_or(kernel_size);
    return module::max_pool2d(x, PoolOptions{.kernel_size = {kernel_size[0], kernel_size[1]},
                                             .stride = {s[0], s[1]},
                                             .padding = {padding[0], padding[1]},
                                             .dilation = {dilation[0], dilation[1]},
                                             .ceil_mode = ceil_mode});
  }
};

struct AvgPool2d {
  std::array<std::int64_t, 2> kernel_size;
  std::optional<std::array<std::int64_t, 2>> stride = std::nullopt;  // default: kernel_size
  std::array<std::int64_t, 2> padding{0, 0};
  bool ceil_mode = false;
  // Whether zero padding counts in a window's divisor (PyTorch's default: yes).
  bool count_include_pad = true;
  KILN_STATELESS_MODULE

  Tensor<4> forward(const Tensor<4>& x) const {
    const auto s = stride.value_or(kernel_size);
    return module::avg_pool2d(x, PoolOptions{.kernel_size = {kernel_size[0], kernel_size[1]},
                                             .stride = {s[0], s[1]},
                                             .padding = {padding[0], padding[1]},
                                             .ceil_mode = ceil_mode,
                                             .count_include_pad = count_include_pad});
  }
};

// Output cell i averages input rows [floor(i * H / h), ceil((i + 1) * H / h)), likewise columns.
struct AdaptiveAvgPool2d {
  std::array<std::int64_t, 2> output_size;
  KILN_STATELESS_MODULE

  Tensor<4> forward(const Tensor<4>& x) const {
    return module::adaptive_avg_pool2d(x, output_size);
  }
};

}  // namespace kiln::nn
