#include "kiln/nn/conv.h"

#include <cmath>
#include <span>

#include "kiln/detail/format.h"

namespace kiln::nn {
namespace {

// Checks what the module ops would only find at the first forward: channel counts divisible
// by groups, positive sizes, and strides/dilations of at least 1.
void check_geometry(const char* op, std::int64_t in_channels, std::int64_t out_channels,
                    std::int64_t groups, std::span<const std::int64_t> kernel,
                    std::span<const std::int64_t> stride, std::span<const std::int64_t> padding,
                    std::span<const std::int64_t> dilation) {
  if (in_channels <= 0 || out_channels <= 0 || groups <= 0) {
    kiln::detail::fail<InvalidArgument>(op, "in_channels ", in_channels, ", out_channels ",
                                        out_channels, " and groups ", groups,
                                        " must all be positive");
  }
  if (in_channels % groups != 0 || out_channels % groups != 0) {
    kiln::detail::fail<InvalidArgument>(op, "in_channels ", in_channels, " and out_channels ",
                                        out_channels, " must both be divisible by groups ", groups);
  }
  for (std::size_t i = 0; i < kernel.size(); ++i) {
    if (kernel[i] <= 0 || stride[i] <= 0 || dilation[i] <= 0 || padding[i] < 0) {
      kiln::detail::fail<InvalidArgument>(
          op, "spatial dim ", i, ": kernel_size ", kernel[i], ", stride ", stride[i], ", dilation ",
          dilation[i], " must be positive and padding ", padding[i], " non-negative");
    }
  }
}

// PyTorch's bias default: uniform in ±1/sqrt(fan_in), with fan_in taken from the weight shape.
Param<1> make_bias(const std::optional<Initializer>& custom, const Shape& weight_shape,
                   std::int64_t size, const Device& device) {
  const std::int64_t fan_in = Initializer::fan_in_of(weight_shape);
  const std::int64_t fan_out = Initializer::fan_out_of(weight_shape);
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  const Initializer init = custom.value_or(Initializer::uniform(-bound, bound));
  return Param<1>(init.init<1>(Shape{size}, fan_in, fan_out, device));
}

std::optional<Tensor<1>> value_of(const std::optional<Param<1>>& bias) {
  if (!bias) return std::nullopt;
  return bias->val();
}

}  // namespace

Conv1d Conv1dConfig::init(const Device& device) const {
  const std::int64_t k[1] = {kernel_size}, s[1] = {stride}, p[1] = {padding}, d[1] = {dilation};
  check_geometry("Conv1dConfig::init", in_channels, out_channels, groups, k, s, p, d);
  Conv1d layer;
  const Shape shape{out_channels, in_channels / groups, kernel_size};
  layer.weight = Param<3>(initializer.init<3>(shape, device));
  if (bias) layer.bias = make_bias(bias_initializer, shape, out_channels, device);
  layer.stride = stride;
  layer.padding = padding;
  layer.dilation = dilation;
  layer.groups = groups;
  return layer;
}

Tensor<3> Conv1d::forward(const Tensor<3>& x) const {
  return module::conv1d(x, weight.val(), value_of(bias),
                        ConvOptions{{stride}, {padding}, {dilation}, groups});
}

Conv2d Conv2dConfig::init(const Device& device) const {
  check_geometry("Conv2dConfig::init", in_channels, out_channels, groups, kernel_size, stride,
                 padding, dilation);
  Conv2d layer;
  const Shape shape{out_channels, in_channels / groups, kernel_size[0], kernel_size[1]};
  layer.weight = Param<4>(initializer.init<4>(shape, device));
  if (bias) layer.bias = make_bias(bias_initializer, shape, out_channels, device);
  layer.stride = stride;
  layer.padding = padding;
  layer.dilation = dilation;
  layer.groups = groups;
  return layer;
}

Tensor<4> Conv2d::forward(const Tensor<4>& x) const {
  return module::conv2d(
      x, weight.val(), value_of(bias),
      ConvOptions{
          {stride[0], stride[1]}, {padding[0], padding[1]}, {dilation[0], dilation[1]}, groups});
}

ConvTranspose2d ConvTranspose2dConfig::init(const Device& device) const {
  const char* op = "ConvTranspose2dConfig::init";
  check_geometry(op, in_channels, out_channels, groups, kernel_size, stride, padding, dilation);
  for (std::size_t i = 0; i < 2; ++i) {
    if (output_padding[i] < 0 ||
        (output_padding[i] >= stride[i] && output_padding[i] >= dilation[i])) {
      kiln::detail::fail<InvalidArgument>(
          op, "output_padding ", output_padding[i], " in spatial dim ", i,
          " must be non-negative and below stride ", stride[i], " or dilation ", dilation[i]);
    }
  }
  ConvTranspose2d layer;
  const Shape shape{in_channels, out_channels / groups, kernel_size[0], kernel_size[1]};
  layer.weight = Param<4>(initializer.init<4>(shape, device));
  if (bias) layer.bias = make_bias(bias_initializer, shape, out_channels, device);
  layer.stride = stride;
  layer.padding = padding;
  layer.output_padding = output_padding;
  layer.dilation = dilation;
  layer.groups = groups;
  return layer;
}

Tensor<4> ConvTranspose2d::forward(const Tensor<4>& x) const {
  return module::conv_transpose2d(x, weight.val(), value_of(bias),
                                  ConvTransposeOptions{{stride[0], stride[1]},
                                                       {padding[0], padding[1]},
                                                       {output_padding[0], output_padding[1]},
                                                       {dilation[0], dilation[1]},
                                                       groups});
}

}  // namespace kiln::nn
