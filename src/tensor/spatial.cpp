// Module ops on channels-first tensors (N, C, spatial...): convolution and its transpose,
// pooling, interpolation, unfold/fold. Option vectors left empty get their defaults here, and
// every shape rule is checked, so backends receive complete, valid options.
#include <sstream>

#include "contract/spatial_shape.h"
#include "core/checked.h"
#include "kiln/autocast.h"
#include "tensor/common.h"

namespace kiln::detail {

namespace {

using Sizes = std::vector<std::int64_t>;

std::string list(std::span<const std::int64_t> values) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

void check_spatial_dims(std::size_t dims, std::size_t max_dims, const char* op) {
  if (dims < 1 || dims > max_dims) {
    fail<InvalidArgument>(op, "takes 1 to ", max_dims, " spatial dims, got ", dims);
  }
}

// The input must be [N, C, spatial...] with `dims` spatial dims.
void check_input_rank(const Primitive& x, std::size_t dims, const char* what, const char* op) {
  if (x->rank() != dims + 2) {
    fail<ShapeMismatch>(op, what, " must have rank ", dims + 2, " (", dims,
                        " spatial dims), got shape ", x->shape().to_string());
  }
}

// An option vector: empty takes `dims` copies of fallback, otherwise one entry per spatial dim,
// each at least minimum.
Sizes option(Sizes values, std::size_t dims, std::int64_t fallback, std::int64_t minimum,
             const char* name, const char* op) {
  if (values.empty()) return Sizes(dims, fallback);
  if (values.size() != dims) {
    fail<InvalidArgument>(op, name, " ", list(values), " has ", values.size(),
                          " entries, expected ", dims, " (one per spatial dim)");
  }
  for (std::int64_t v : values) {
    if (v < minimum)
      fail<InvalidArgument>(op, name, " must be >= ", minimum, ", got ", list(values));
    // No window, stride or padding can usefully exceed the largest tensor; bounding them keeps
    // the backends' int64 size formulas far from overflow.
    if (v > checked::kMaxElements) {
      fail<InvalidArgument>(op, name, " ", list(values), " exceeds 2^48");
    }
  }
  return values;
}

// Float kind for every operand, one dtype, one device; returns the backend to run on. Inside an
// autocast scope operands of different float dtypes are promoted instead (the output of one
// convolution in bf16 meets the next one's f32 weight), and the scope's layer casts them.
Backend& check_operands(Primitive& x, Primitive* weight, Primitive* bias, const char* op) {
  check_float(x, op);
  Device device = x->device();
  for (Primitive* p : {weight, bias}) {
    if (p == nullptr) continue;
    check_float(*p, op);
    backend_of(x, *p, op);
    device = joined(device, (*p)->device());
    if ((*p)->dtype() != x->dtype() && autocast_dtype(device)) {
      promote(x, *p, op);
      if (weight != nullptr && p == bias) promote(x, *weight, op);
    }
    if ((*p)->dtype() != x->dtype()) {
      fail<DTypeMismatch>(op, "input is ", dtype_name(x->dtype()), " but ",
                          p == weight ? "weight" : "bias", " is ", dtype_name((*p)->dtype()),
                          "; convert one first");
    }
  }
  return backend_for(device);
}

void check_bias(const std::optional<Primitive>& bias, std::int64_t channels, const char* op) {
  if (bias && ((*bias)->rank() != 1 || (*bias)->shape()[0] != channels)) {
    fail<ShapeMismatch>(op, "bias must have shape [", channels, "] (one per output channel), got ",
                        (*bias)->shape().to_string());
  }
}

// A computed spatial output size (evaluated in 128 bits) as an int64 within the tensor limit.
std::int64_t checked_output(spatial::Wide size, const char* what, const char* op) {
  if (size > checked::kMaxElements) {
    fail<InvalidArgument>(op, what, " ", static_cast<double>(size), " exceeds 2^48");
  }
  return static_cast<std::int64_t>(size);
}

void check_groups(std::int64_t groups, std::int64_t channels, const char* what, const char* op) {
  if (groups < 1) fail<InvalidArgument>(op, "groups must be >= 1, got ", groups);
  if (groups > checked::kMaxElements) fail<InvalidArgument>(op, "groups ", groups, " exceeds 2^48");
  if (channels % groups != 0) {
    fail<ShapeMismatch>(op, what, " ", channels, " is not divisible by groups ", groups);
  }
}

// Every window position count must be positive: the dilated kernel fits the padded input.
void check_fits(const Shape& x, std::span<const std::int64_t> kernel, const Sizes& stride,
                const Sizes& padding, const Sizes& dilation, const char* op) {
  for (std::size_t d = 0; d < kernel.size(); ++d) {
    using spatial::Wide;
    const std::int64_t in = x[d + 2];
    const Wide extent = Wide{dilation[d]} * (kernel[d] - 1) + 1;
    const Wide out =
        spatial::conv_output_size<Wide>(in, kernel[d], stride[d], padding[d], dilation[d]);
    if (out < 1) {
      fail<ShapeMismatch>(op, "kernel ", list(kernel), " (dilated extent ",
                          static_cast<double>(extent), " in spatial dim ", d,
                          ") is larger than the padded input (", in, " + 2 * ", padding[d],
                          ") of shape ", x.to_string());
    }
    checked_output(out, "output size", op);
  }
}

std::span<const std::int64_t> kernel_of(const Primitive& weight) {
  return weight->shape().dims().subspan(2);
}

void check_kernel_not_empty(const Primitive& weight, const char* op) {
  for (std::int64_t k : kernel_of(weight)) {
    if (k < 1)
      fail<ShapeMismatch>(op, "weight ", weight->shape().to_string(), " has an empty kernel");
  }
}

// Fills and checks pooling options for x with `dims` spatial dims.
PoolOptions pool_options(Primitive& x, PoolOptions o, std::size_t dims, bool is_max,
                         const char* op) {
  check_spatial_dims(dims, 3, op);
  check_float(x, op);
  check_input_rank(x, dims, "input", op);
  if (o.kernel_size.size() != dims) {
    fail<InvalidArgument>(op, "kernel_size ", list(o.kernel_size), " must have ", dims,
                          " entries (one per spatial dim)");
  }
  o.kernel_size = option(std::move(o.kernel_size), dims, 1, 1, "kernel_size", op);
  // Windows do not overlap by default: stride = kernel_size.
  o.stride =
      o.stride.empty() ? o.kernel_size : option(std::move(o.stride), dims, 1, 1, "stride", op);
  o.padding = option(std::move(o.padding), dims, 0, 0, "padding", op);
  o.dilation = option(std::move(o.dilation), dims, 1, 1, "dilation", op);
  for (std::size_t d = 0; d < dims; ++d) {
    if (2 * o.padding[d] > o.kernel_size[d]) {
      fail<InvalidArgument>(op, "padding ", list(o.padding),
                            " must be at most half of kernel_size ", list(o.kernel_size));
    }
    if (!is_max && o.dilation[d] != 1) {
      fail<InvalidArgument>(op, "dilation ", list(o.dilation), " is for max pooling only");
    }
    const std::int64_t in = x->shape()[d + 2];
    const spatial::Wide out = spatial::pool_output_size<spatial::Wide>(
        in, o.kernel_size[d], o.stride[d], o.padding[d], o.dilation[d], o.ceil_mode);
    if (out < 1) {
      fail<ShapeMismatch>(op, "pooling window ", list(o.kernel_size), " with dilation ",
                          list(o.dilation), " does not fit the padded input of shape ",
                          x->shape().to_string(), " in spatial dim ", d, " (padding ", o.padding[d],
                          ")");
    }
    checked_output(out, "output size", op);
  }
  return o;
}

// Output sizes given by the caller: one per spatial dim, each positive.
void check_output_size(const Sizes& size, std::size_t dims, const char* op) {
  if (size.size() != dims) {
    fail<InvalidArgument>(op, "output size ", list(size), " must have ", dims, " entries");
  }
  for (std::int64_t s : size) {
    if (s < 1) fail<InvalidArgument>(op, "output size ", list(size), " must be positive");
  }
}

// [N, C, output_size...] within the tensor limit.
void check_output_shape(const Primitive& x, const Sizes& output_size, const char* op) {
  Shape out = x->shape();
  for (std::size_t d = 0; d < output_size.size(); ++d) out[d + 2] = output_size[d];
  checked::check_shape(out, op);
}

void check_spatial_not_empty(const Primitive& x, const char* op) {
  for (std::size_t d = 2; d < x->rank(); ++d) {
    if (x->shape()[d] < 1) {
      fail<ShapeMismatch>(op, "input ", x->shape().to_string(), " has an empty spatial dim");
    }
  }
}

UnfoldOptions unfold_options(UnfoldOptions o, const char* op) {
  if (o.kernel_size.size() != 2) {
    fail<InvalidArgument>(op, "kernel_size ", list(o.kernel_size), " must have 2 entries");
  }
  o.kernel_size = option(std::move(o.kernel_size), 2, 1, 1, "kernel_size", op);
  o.stride = option(std::move(o.stride), 2, 1, 1, "stride", op);
  o.padding = option(std::move(o.padding), 2, 0, 0, "padding", op);
  o.dilation = option(std::move(o.dilation), 2, 1, 1, "dilation", op);
  return o;
}

}  // namespace

Primitive conv(Primitive x, Primitive weight, std::optional<Primitive> bias, ConvOptions options,
               std::size_t spatial_dims) {
  const char* op = "conv";
  check_spatial_dims(spatial_dims, 3, op);
  Backend& backend = check_operands(x, &weight, bias ? &*bias : nullptr, op);
  check_input_rank(x, spatial_dims, "input", op);
  check_input_rank(weight, spatial_dims, "weight", op);
  options.stride = option(std::move(options.stride), spatial_dims, 1, 1, "stride", op);
  options.padding = option(std::move(options.padding), spatial_dims, 0, 0, "padding", op);
  options.dilation = option(std::move(options.dilation), spatial_dims, 1, 1, "dilation", op);
  const std::int64_t in_channels = x->shape()[1], out_channels = weight->shape()[0];
  check_groups(options.groups, in_channels, "input channels", op);
  check_groups(options.groups, out_channels, "output channels (weight dim 0)", op);
  if (weight->shape()[1] != in_channels / options.groups) {
    fail<ShapeMismatch>(op, "weight ", weight->shape().to_string(), " expects ", weight->shape()[1],
                        " input channels per group, but input ", x->shape().to_string(), " has ",
                        in_channels, " channels in ", options.groups, " groups");
  }
  check_kernel_not_empty(weight, op);
  check_fits(x->shape(), kernel_of(weight), options.stride, options.padding, options.dilation, op);
  check_bias(bias, out_channels, op);
  return backend.conv(std::move(x), std::move(weight), std::move(bias), std::move(options));
}

Primitive conv_transpose(Primitive x, Primitive weight, std::optional<Primitive> bias,
                         ConvTransposeOptions options, std::size_t spatial_dims) {
  const char* op = "conv_transpose";
  check_spatial_dims(spatial_dims, 3, op);
  Backend& backend = check_operands(x, &weight, bias ? &*bias : nullptr, op);
  check_input_rank(x, spatial_dims, "input", op);
  check_input_rank(weight, spatial_dims, "weight", op);
  options.stride = option(std::move(options.stride), spatial_dims, 1, 1, "stride", op);
  options.padding = option(std::move(options.padding), spatial_dims, 0, 0, "padding", op);
  options.padding_out =
      option(std::move(options.padding_out), spatial_dims, 0, 0, "padding_out", op);
  options.dilation = option(std::move(options.dilation), spatial_dims, 1, 1, "dilation", op);
  const std::int64_t in_channels = x->shape()[1];
  check_groups(options.groups, in_channels, "input channels", op);
  if (weight->shape()[0] != in_channels) {
    fail<ShapeMismatch>(op, "weight ", weight->shape().to_string(),
                        " must have the input's channel count ", in_channels, " in dim 0 (input ",
                        x->shape().to_string(), ")");
  }
  check_kernel_not_empty(weight, op);
  const auto kernel = kernel_of(weight);
  for (std::size_t d = 0; d < spatial_dims; ++d) {
    if (options.padding_out[d] >= std::max(options.stride[d], options.dilation[d])) {
      fail<InvalidArgument>(op, "padding_out ", list(options.padding_out),
                            " must be smaller than stride ", list(options.stride), " or dilation ",
                            list(options.dilation));
    }
    const spatial::Wide out = spatial::conv_transpose_output_size<spatial::Wide>(
        x->shape()[d + 2], kernel[d], options.stride[d], options.padding[d], options.dilation[d],
        options.padding_out[d]);
    checked_output(out, "output size", op);
    if (out < 1) {
      fail<ShapeMismatch>(op, "output size ", static_cast<double>(out), " in spatial dim ", d,
                          " is not positive (input ", x->shape().to_string(), ", kernel ",
                          list(kernel), ", padding ", list(options.padding), ")");
    }
  }
  check_bias(bias, checked::mul(weight->shape()[1], options.groups, op, "output channels"), op);
  return backend.conv_transpose(std::move(x), std::move(weight), std::move(bias),
                                std::move(options));
}

Primitive max_pool(Primitive x, PoolOptions options, std::size_t spatial_dims) {
  options = pool_options(x, std::move(options), spatial_dims, true, "max_pool");
  return backend_of(x).max_pool(std::move(x), std::move(options));
}

PrimPair max_pool_with_indices(Primitive x, PoolOptions options, std::size_t spatial_dims) {
  options = pool_options(x, std::move(options), spatial_dims, true, "max_pool_with_indices");
  const DType index_dtype = default_dtype(x->device(), Kind::Int);
  return backend_of(x).max_pool_with_indices(std::move(x), std::move(options), index_dtype);
}

Primitive avg_pool(Primitive x, PoolOptions options, std::size_t spatial_dims) {
  options = pool_options(x, std::move(options), spatial_dims, false, "avg_pool");
  return backend_of(x).avg_pool(std::move(x), std::move(options));
}

Primitive adaptive_avg_pool(Primitive x, std::vector<std::int64_t> output_size) {
  const char* op = "adaptive_avg_pool";
  check_float(x, op);
  check_spatial_dims(output_size.size(), 3, op);
  check_input_rank(x, output_size.size(), "input", op);
  check_output_size(output_size, output_size.size(), op);
  check_spatial_not_empty(x, op);
  check_output_shape(x, output_size, op);
  for (std::size_t d = 0; d < output_size.size(); ++d) {
    // Window bounds are i * in / out: keep that product in int64.
    if (static_cast<spatial::Wide>(output_size[d]) * x->shape()[d + 2] > (std::int64_t{1} << 62)) {
      fail<InvalidArgument>(op, "output size ", list(output_size), " is too large for input ",
                            x->shape().to_string());
    }
  }
  return backend_of(x).adaptive_avg_pool(std::move(x), std::move(output_size));
}

Primitive interpolate(Primitive x, std::vector<std::int64_t> output_size,
                      InterpolateOptions options) {
  const char* op = "interpolate";
  check_float(x, op);
  check_input_rank(x, 2, "input", op);
  check_output_size(output_size, 2, op);
  check_spatial_not_empty(x, op);
  check_output_shape(x, output_size, op);
  return backend_of(x).interpolate(std::move(x), std::move(output_size), options);
}

Primitive unfold_patches(Primitive x, UnfoldOptions options) {
  const char* op = "unfold_patches";
  check_float(x, op);
  check_input_rank(x, 2, "input", op);
  options = unfold_options(std::move(options), op);
  check_fits(x->shape(), options.kernel_size, options.stride, options.padding, options.dilation,
             op);
  return backend_of(x).unfold_patches(std::move(x), std::move(options));
}

Primitive fold_patches(Primitive x, std::vector<std::int64_t> output_size, UnfoldOptions options) {
  const char* op = "fold_patches";
  check_float(x, op);
  if (x->rank() != 3) {
    fail<ShapeMismatch>(op, "input must have rank 3 [N, C * kernel taps, L], got shape ",
                        x->shape().to_string());
  }
  check_output_size(output_size, 2, op);
  options = unfold_options(std::move(options), op);
  const Shape image{x->shape()[0], 1, output_size[0], output_size[1]};
  check_fits(image, options.kernel_size, options.stride, options.padding, options.dilation, op);
  const std::int64_t taps =
      checked::product(options.kernel_size, op, "the kernel taps of kernel_size");
  if (x->shape()[1] % taps != 0) {
    fail<ShapeMismatch>(op, "input dim 1 (", x->shape()[1], ") is not a multiple of the ", taps,
                        " taps of kernel ", list(options.kernel_size));
  }
  checked::check_shape(Shape{x->shape()[0], x->shape()[1] / taps, output_size[0], output_size[1]},
                       op);
  std::int64_t positions = 1;
  for (std::size_t d = 0; d < 2; ++d) {
    positions = checked::mul(
        positions,
        spatial::conv_output_size(output_size[d], options.kernel_size[d], options.stride[d],
                                  options.padding[d], options.dilation[d]),
        op, "the window positions");
  }
  if (x->shape()[2] != positions) {
    fail<ShapeMismatch>(op, "input has ", x->shape()[2], " window positions but output size ",
                        list(output_size), " with kernel ", list(options.kernel_size), " gives ",
                        positions);
  }
  return backend_of(x).fold_patches(std::move(x), std::move(output_size), std::move(options));
}

}  // namespace kiln::detail
