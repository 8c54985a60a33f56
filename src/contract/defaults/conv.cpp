// Defaults of the convolution gradients: the input gradient is a transposed convolution, the
// weight gradient a convolution of the input by the output gradient with batch and channels
// swapped (one per group), the bias gradient a sum.
#include "contract/defaults/compose.h"

namespace kiln {

using namespace defaults;

namespace {

// Option i of a per-dim vector, or fallback when the vector was left empty.
std::int64_t option(const std::vector<std::int64_t>& values, std::size_t i, std::int64_t fallback) {
  return i < values.size() ? values[i] : fallback;
}

}  // namespace

Primitive Backend::conv_x_backward(Primitive x, Primitive weight, Primitive output_grad,
                                   ConvOptions options) {
  const std::size_t spatial = x->rank() - 2;
  ConvTransposeOptions transposed;
  transposed.groups = options.groups;
  for (std::size_t i = 0; i < spatial; ++i) {
    const std::int64_t stride = option(options.stride, i, 1);
    const std::int64_t padding = option(options.padding, i, 0);
    const std::int64_t dilation = option(options.dilation, i, 1);
    const std::int64_t kernel = weight->shape()[i + 2];
    const std::int64_t in_size = x->shape()[i + 2];
    const std::int64_t out_size = output_grad->shape()[i + 2];
    // Rows of x that no window reached come back through output padding (always < stride).
    const std::int64_t reached =
        (out_size - 1) * stride - 2 * padding + dilation * (kernel - 1) + 1;
    transposed.stride.push_back(stride);
    transposed.padding.push_back(padding);
    transposed.padding_out.push_back(in_size - reached);
    transposed.dilation.push_back(dilation);
  }
  return conv_transpose(std::move(output_grad), std::move(weight), std::nullopt,
                        std::move(transposed));
}

Primitive Backend::conv_weight_backward(Primitive x, Primitive weight, Primitive output_grad,
                                        ConvOptions options) {
  // dW[o, c, k] = sum_n sum_s g[n, o, s] x[n, c, s * stride + k * dilation - padding]: a conv of
  // x^T [c, n, ...] by g^T [o, n, ...] with stride and dilation exchanged, cut to the kernel.
  const Shape weight_shape = weight->shape();
  const std::size_t spatial = x->rank() - 2;
  const std::int64_t groups = options.groups;
  const std::int64_t in_per_group = weight_shape[1];
  const std::int64_t out_per_group = weight_shape[0] / groups;
  if (x->shape()[0] == 0 || output_grad->shape().num_elements() == 0) {
    return zeros(weight_shape, x->dtype(), x->device());
  }
  ConvOptions swapped;
  for (std::size_t i = 0; i < spatial; ++i) {
    swapped.stride.push_back(option(options.dilation, i, 1));
    swapped.padding.push_back(option(options.padding, i, 0));
    swapped.dilation.push_back(option(options.stride, i, 1));
  }
  PrimitiveList per_group;
  for (std::int64_t g = 0; g < groups; ++g) {
    Primitive xg = swap_dims(slice_dim(*this, x, 1, g * in_per_group, in_per_group), 0, 1);
    Primitive gg =
        swap_dims(slice_dim(*this, output_grad, 1, g * out_per_group, out_per_group), 0, 1);
    Primitive full_grad = conv(std::move(xg), std::move(gg), std::nullopt, swapped);
    ResolvedSlices kernel = full_slices(full_grad->shape());
    for (std::size_t i = 0; i < spatial; ++i) kernel[i + 2] = {0, weight_shape[i + 2], 1};
    per_group.push_back(swap_dims(slice(std::move(full_grad), std::move(kernel)), 0, 1));
  }
  return cat(std::move(per_group), 0);
}

Primitive Backend::conv_bias_backward(Primitive output_grad) {
  // Sum over the batch and every spatial dim: [N, C, ...] -> [C].
  const std::int64_t channels = output_grad->shape()[1];
  const std::size_t rank = output_grad->rank();
  Primitive total = sum_dim(std::move(output_grad), 0);
  for (std::size_t d = 2; d < rank; ++d)
    total = sum_dim(std::move(total), static_cast<std::int64_t>(d));
  return reshape(std::move(total), Shape{channels});
}

}  // namespace kiln
