// Convolutions over channels-first inputs, with PyTorch's parameter names, shapes and default
// initialisation (weight and bias uniform in ±1/sqrt(fan_in), fan_in = in_channels / groups *
// kernel elements for Conv, out_channels / groups * kernel elements for ConvTranspose), so
// state dicts interchange with torch.nn.Conv1d / Conv2d / ConvTranspose2d. Zero padding only
// (PyTorch's padding_mode 'zeros').
//
//   nn::Conv2d conv = nn::Conv2dConfig{.in_channels = 3, .out_channels = 16, .kernel_size = {3, 3},
//                                      .padding = {1, 1}}.init(dev);
//   Tensor<4> y = conv.forward(x);   // x [N, 3, H, W] -> [N, 16, H, W]
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "kiln/module_ops.h"
#include "kiln/nn/init.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// x [N, C_in, L] -> [N, C_out, L_out].
struct Conv1d {
  Param<3> weight;               // [out_channels, in_channels / groups, kernel]
  std::optional<Param<1>> bias;  // [out_channels]
  std::int64_t stride = 1;
  std::int64_t padding = 0;
  std::int64_t dilation = 1;
  std::int64_t groups = 1;
  KILN_MODULE(weight, bias)

  Tensor<3> forward(const Tensor<3>& x) const;
};

struct Conv1dConfig {
  std::int64_t in_channels;
  std::int64_t out_channels;
  std::int64_t kernel_size;
  std::int64_t stride = 1;
  std::int64_t padding = 0;
  std::int64_t dilation = 1;
  std::int64_t groups = 1;
  bool bias = true;
  Initializer initializer = Initializer::kaiming_uniform(0.5773502691896258);
  std::optional<Initializer> bias_initializer = std::nullopt;  // default ±1/sqrt(fan_in)

  Conv1d init(const Device& device = Device::default_device()) const;
};

// x [N, C_in, H, W] -> [N, C_out, H_out, W_out].
struct Conv2d {
  Param<4> weight;               // [out_channels, in_channels / groups, kh, kw]
  std::optional<Param<1>> bias;  // [out_channels]
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::int64_t, 2> padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};
  std::int64_t groups = 1;
  KILN_MODULE(weight, bias)

  Tensor<4> forward(const Tensor<4>& x) const;
};

struct Conv2dConfig {
  std::int64_t in_channels;
  std::int64_t out_channels;
  std::array<std::int64_t, 2> kernel_size;
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::int64_t, 2> padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};
  std::int64_t groups = 1;
  bool bias = true;
  Initializer initializer = Initializer::kaiming_uniform(0.5773502691896258);
  std::optional<Initializer> bias_initializer = std::nullopt;

  Conv2d init(const Device& device = Device::default_device()) const;
};

// The adjoint of Conv2d's input mapping (a "deconvolution"): x [N, C_in, H, W] ->
// [N, C_out, (H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1, ...].
struct ConvTranspose2d {
  Param<4> weight;               // [in_channels, out_channels / groups, kh, kw], as PyTorch
  std::optional<Param<1>> bias;  // [out_channels]
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::int64_t, 2> padding{0, 0};
  std::array<std::int64_t, 2> output_padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};
  std::int64_t groups = 1;
  KILN_MODULE(weight, bias)

  Tensor<4> forward(const Tensor<4>& x) const;
};

struct ConvTranspose2dConfig {
  std::int64_t in_channels;
  std::int64_t out_channels;
  std::array<std::int64_t, 2> kernel_size;
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::int64_t, 2> padding{0, 0};
  // Extra rows/columns on the bottom/right, to pick among the input sizes a strided Conv2d maps
  // to one output size; each must be below its stride or its dilation.
  std::array<std::int64_t, 2> output_padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};
  std::int64_t groups = 1;
  bool bias = true;
  Initializer initializer = Initializer::kaiming_uniform(0.5773502691896258);
  std::optional<Initializer> bias_initializer = std::nullopt;

  ConvTranspose2d init(const Device& device = Device::default_device()) const;
};

}  // namespace kiln::nn
