#include "kiln/nn/norm.h"

#include <limits>

#include "kiln/detail/format.h"

namespace kiln::nn {
namespace {

// [1, size, 1, ...] of rank D: a per-channel vector broadcast against [N, C, *].
template <std::size_t D>
Tensor<D> per_channel(const Tensor<1>& v) {
  kiln::detail::DimVector dims(D, 1);
  dims[1] = v.dims()[0];
  return v.template reshape<D>(Shape(std::move(dims)));
}

// [1, ..., 1, size] of rank D: a vector over the last dim.
template <std::size_t D>
Tensor<D> along_last(const Tensor<1>& v) {
  if constexpr (D == 1) {
    return v;
  } else {
    kiln::detail::DimVector dims(D, 1);
    dims[D - 1] = v.dims()[0];
    return v.template reshape<D>(Shape(std::move(dims)));
  }
}

// The mean over every dim but 1, keeping them all (size 1).
template <std::size_t D>
Tensor<D> mean_but_channels(const Tensor<D>& x) {
  Tensor<D> m = x.mean_dim(0);
  for (std::size_t d = 2; d < D; ++d) m = m.mean_dim(static_cast<std::int64_t>(d));
  return m;
}

void check_positive(const char* op, const char* what, std::int64_t value) {
  if (value <= 0) kiln::detail::fail<InvalidArgument>(op, what, " ", value, " must be positive");
}

void check_epsilon(const char* op, double epsilon) {
  if (!(epsilon >= 0.0)) {
    kiln::detail::fail<InvalidArgument>(op, "epsilon ", epsilon, " must be non-negative");
  }
}

template <std::size_t D>
void check_size(const char* op, const Tensor<D>& x, std::size_t dim, std::int64_t expected,
                const char* what) {
  if (x.dims()[dim] != expected) {
    kiln::detail::fail<ShapeMismatch>(op, "input ", x.shape().to_string(), " has ", x.dims()[dim],
                                      " ", what, " (dim ", dim, ") but the layer has ", expected);
  }
}

double machine_epsilon(DType dtype) {
  switch (dtype) {
    case DType::F64:
      return std::numeric_limits<double>::epsilon();
    case DType::F16:
      return 0.0009765625;  // 2^-10
    case DType::BF16:
      return 0.0078125;  // 2^-7
    default:
      return static_cast<double>(std::numeric_limits<float>::epsilon());
  }
}

}  // namespace

// ---- BatchNorm ----

BatchNorm BatchNormConfig::init(const Device& device) const {
  const char* op = "BatchNormConfig::init";
  check_positive(op, "num_features", num_features);
  check_epsilon(op, epsilon);
  if (momentum && !(*momentum >= 0.0 && *momentum <= 1.0)) {
    kiln::detail::fail<InvalidArgument>(op, "momentum ", *momentum, " is not in [0, 1]");
  }
  BatchNorm layer;
  const Shape shape{num_features};
  if (affine) {
    layer.weight = Param<1>(Tensor<1>::ones(shape, device));
    layer.bias = Param<1>(Tensor<1>::zeros(shape, device));
  }
  if (track_running_stats) {
    layer.running_mean = Buffer<1>(Tensor<1>::zeros(shape, device));
    layer.running_var = Buffer<1>(Tensor<1>::ones(shape, device));
    layer.num_batches_tracked = Counter{};
  }
  layer.num_features = num_features;
  layer.epsilon = epsilon;
  layer.momentum = momentum;
  return layer;
}

template <std::size_t D>
requires(D >= 2 && D <= 5) Tensor<D> BatchNorm::forward(const Tensor<D>& x)
const {
  const char* op = "BatchNorm::forward";
  check_size(op, x, 1, num_features, "channels");
  const bool tracked_stats = running_mean.has_value() && running_var.has_value();
  const bool training = x.device().is_autodiff();
  if (!training && tracked_stats) {
    const Tensor<1> mean = running_mean->val();
    const Tensor<1> gamma = weight ? weight->val() : Tensor<1>::ones_like(mean);
    const Tensor<1> beta = bias ? bias->val() : Tensor<1>::zeros_like(mean);
    return module::batch_norm(x, gamma, beta, mean, running_var->val(), epsilon);
  }
  const std::int64_t count = x.num_elements() / num_features;
  if (training && count < 2) {
    kiln::detail::fail<InvalidArgument>(op, "input ", x.shape().to_string(),
                                        " has one value per channel; training needs more");
  }
  const Tensor<D> mean = mean_but_channels(x);
  const Tensor<D> centred = x - mean;
  const Tensor<D> variance = mean_but_channels(centred.square());
  Tensor<D> y = centred * (variance + epsilon).rsqrt();
  if (weight) y = y * per_channel<D>(weight->val());
  if (bias) y = y + per_channel<D>(bias->val());
  if (training && tracked_stats) {
    if (!momentum && !num_batches_tracked) {
      kiln::detail::fail<InvalidArgument>(
          op,
          "momentum is none (a cumulative average) but the layer has no num_batches_tracked "
          "to average over");
    }
    // PyTorch counts every training batch, whatever the momentum.
    if (num_batches_tracked) ++*num_batches_tracked;
    const double factor =
        momentum ? *momentum : 1.0 / static_cast<double>(num_batches_tracked->value());
    // The statistics are constants to the graph; they join the buffers on the buffers' device.
    const Tensor<1> old_mean = running_mean->val();
    const Tensor<1> old_var = running_var->val();
    const Shape channels{num_features};
    const double unbiased = static_cast<double>(count) / static_cast<double>(count - 1);
    auto as_buffer = [&](const Tensor<D>& statistic, const Tensor<1>& like) {
      Tensor<1> s = statistic.detach().template reshape<1>(channels).to_device(like.device());
      return s.dtype() == like.dtype() ? s : s.cast(like.dtype());
    };
    *running_mean = old_mean * (1.0 - factor) + as_buffer(mean, old_mean) * factor;
    *running_var = old_var * (1.0 - factor) + as_buffer(variance, old_var) * (factor * unbiased);
  }
  return y;
}

template Tensor<2> BatchNorm::forward<2>(const Tensor<2>&) const;
template Tensor<3> BatchNorm::forward<3>(const Tensor<3>&) const;
template Tensor<4> BatchNorm::forward<4>(const Tensor<4>&) const;
template Tensor<5> BatchNorm::forward<5>(const Tensor<5>&) const;

// ---- LayerNorm ----

LayerNorm LayerNormConfig::init(const Device& device) const {
  const char* op = "LayerNormConfig::init";
  check_positive(op, "normalized_size", normalized_size);
  check_epsilon(op, epsilon);
  LayerNorm layer;
  if (elementwise_affine) {
    layer.weight = Param<1>(Tensor<1>::ones({normalized_size}, device));
    if (bias) layer.bias = Param<1>(Tensor<1>::zeros({normalized_size}, device));
  }
  layer.normalized_size = normalized_size;
  layer.epsilon = epsilon;
  return layer;
}

template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<D> LayerNorm::forward(const Tensor<D>& x)
const {
  check_size("LayerNorm::forward", x, D - 1, normalized_size, "features");
  // Without affine parameters the scale is a constant one (no gradient is asked of it).
  const Tensor<1> gamma =
      weight ? weight->val()
             : Tensor<1>::ones({normalized_size}, x.device().without_autodiff(), x.dtype());
  std::optional<Tensor<1>> beta;
  if (bias) beta = bias->val();
  return module::layer_norm(x, gamma, beta, epsilon);
}

template Tensor<1> LayerNorm::forward<1>(const Tensor<1>&) const;
template Tensor<2> LayerNorm::forward<2>(const Tensor<2>&) const;
template Tensor<3> LayerNorm::forward<3>(const Tensor<3>&) const;
template Tensor<4> LayerNorm::forward<4>(const Tensor<4>&) const;
template Tensor<5> LayerNorm::forward<5>(const Tensor<5>&) const;

// ---- RmsNorm ----

RmsNorm RmsNormConfig::init(const Device& device) const {
  const char* op = "RmsNormConfig::init";
  check_positive(op, "normalized_size", normalized_size);
  if (epsilon) check_epsilon(op, *epsilon);
  RmsNorm layer;
  if (elementwise_affine) layer.weight = Param<1>(Tensor<1>::ones({normalized_size}, device));
  layer.normalized_size = normalized_size;
  layer.epsilon = epsilon;
  return layer;
}

template <std::size_t D>
requires(D >= 1 && D <= 5) Tensor<D> RmsNorm::forward(const Tensor<D>& x)
const {
  check_size("RmsNorm::forward", x, D - 1, normalized_size, "features");
  const double eps = epsilon.value_or(machine_epsilon(x.dtype()));
  Tensor<D> y = x * (x.square().mean_dim(static_cast<std::int64_t>(D) - 1) + eps).rsqrt();
  if (weight) y = y * along_last<D>(weight->val());
  return y;
}

template Tensor<1> RmsNorm::forward<1>(const Tensor<1>&) const;
template Tensor<2> RmsNorm::forward<2>(const Tensor<2>&) const;
template Tensor<3> RmsNorm::forward<3>(const Tensor<3>&) const;
template Tensor<4> RmsNorm::forward<4>(const Tensor<4>&) const;
template Tensor<5> RmsNorm::forward<5>(const Tensor<5>&) const;

// ---- GroupNorm ----

GroupNorm GroupNormConfig::init(const Device& device) const {
  const char* op = "GroupNormConfig::init";
  check_positive(op, "num_groups", num_groups);
  check_positive(op, "num_channels", num_channels);
  check_epsilon(op, epsilon);
  if (num_channels % num_groups != 0) {
    kiln::detail::fail<InvalidArgument>(op, "num_channels ", num_channels,
                                        " is not divisible by num_groups ", num_groups);
  }
  GroupNorm layer;
  if (affine) {
    layer.weight = Param<1>(Tensor<1>::ones({num_channels}, device));
    layer.bias = Param<1>(Tensor<1>::zeros({num_channels}, device));
  }
  layer.num_groups = num_groups;
  layer.num_channels = num_channels;
  layer.epsilon = epsilon;
  return layer;
}

template <std::size_t D>
requires(D >= 2 && D <= 5) Tensor<D> GroupNorm::forward(const Tensor<D>& x)
const {
  check_size("GroupNorm::forward", x, 1, num_channels, "channels");
  const std::int64_t batch = x.dims()[0];
  // Consecutive channels form a group, so [N, C, *] reads as [N, G, C / G * spatial].
  const Tensor<3> grouped =
      x.template reshape<3>(Shape{batch, num_groups, x.num_elements() / (batch * num_groups)});
  const Tensor<3> centred = grouped - grouped.mean_dim(2);
  const Tensor<3> normalised = centred * (centred.square().mean_dim(2) + epsilon).rsqrt();
  Tensor<D> y = normalised.template reshape<D>(x.shape());
  if (weight) y = y * per_channel<D>(weight->val());
  if (bias) y = y + per_channel<D>(bias->val());
  return y;
}

template Tensor<2> GroupNorm::forward<2>(const Tensor<2>&) const;
template Tensor<3> GroupNorm::forward<3>(const Tensor<3>&) const;
template Tensor<4> GroupNorm::forward<4>(const Tensor<4>&) const;
template Tensor<5> GroupNorm::forward<5>(const Tensor<5>&) const;

}  // namespace kiln::nn
