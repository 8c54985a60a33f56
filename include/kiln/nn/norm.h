// Normalisation layers with PyTorch's parameter names, shapes and initial values (weight ones,
// bias zeros, running_mean zeros, running_var ones).
//
//   nn::BatchNorm bn = nn::BatchNormConfig{16}.init(dev);
//   auto y = bn.forward(x);        // x [N, 16, H, W]; on dev.autodiff(): batch statistics, and
//                                  // the running statistics move towards them
//   nn::LayerNorm ln = nn::LayerNormConfig{512}.init(dev);
//   auto z = ln.forward(h);        // over the last dim of h [..., 512]
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/module_ops.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

// Batch normalisation over dim 1 of x [N, C] or [N, C, L] (PyTorch's BatchNorm1d), [N, C, H, W]
// (BatchNorm2d) or [N, C, D, H, W] (BatchNorm3d); one type serves them all, the parameters being
// the same.
//
// Training (x on an autodiff device): normalises with the batch's mean and biased variance over
// every dim but 1. When running statistics are tracked, num_batches_tracked counts the training
// forward passes and the statistics become (1 - a) * running + a * batch (the variance unbiased,
// as PyTorch), with a = momentum, or a = 1 / num_batches_tracked (after counting this batch) when
// momentum is none: then the running statistics are the plain average of every batch's (PyTorch's
// momentum=None). forward is const: the running statistics and the count are mutable, updated as
// PyTorch updates them in place.
// Evaluation (a plain device): normalises with the running statistics.
//
// Records hold num_batches_tracked as PyTorch's state_dict does (int64, shape []); a file without
// it (kiln before the counter existed) loads with the count at 0 (see nn/record.h).
struct BatchNorm {
  std::optional<Param<1>> weight;                      // [C], gamma (affine)
  std::optional<Param<1>> bias;                        // [C], beta (affine)
  mutable std::optional<Buffer<1>> running_mean;       // [C] (track_running_stats)
  mutable std::optional<Buffer<1>> running_var;        // [C]
  mutable std::optional<Counter> num_batches_tracked;  // (track_running_stats)
  std::int64_t num_features = 0;
  double epsilon = 1e-5;
  // none: cumulative average (needs num_batches_tracked; InvalidArgument in forward otherwise).
  std::optional<double> momentum = 0.1;
  KILN_MODULE(weight, bias, running_mean, running_var, num_batches_tracked)

  template <std::size_t D>
  requires(D >= 2 && D <= 5) Tensor<D> forward(const Tensor<D>& x)
  const;
};

struct BatchNormConfig {
  std::int64_t num_features;
  double epsilon = 1e-5;
  // In [0, 1]; std::nullopt for a cumulative average of the batch statistics (PyTorch's None).
  std::optional<double> momentum = 0.1;
  bool affine = true;
  // Without running statistics the batch statistics are used in evaluation too.
  bool track_running_stats = true;

  BatchNorm init(const Device& device = Device::default_device()) const;
};

// Layer normalisation over the last dim (PyTorch's LayerNorm with a one-dim normalized_shape):
// (x - mean) / sqrt(var + epsilon) * weight + bias, the variance biased.
struct LayerNorm {
  std::optional<Param<1>> weight;  // [size] (elementwise_affine)
  std::optional<Param<1>> bias;    // [size] (elementwise_affine and bias)
  std::int64_t normalized_size = 0;
  double epsilon = 1e-5;
  KILN_MODULE(weight, bias)

  template <std::size_t D>
  requires(D >= 1 && D <= 5) Tensor<D> forward(const Tensor<D>& x)
  const;
};

struct LayerNormConfig {
  std::int64_t normalized_size;
  double epsilon = 1e-5;
  bool elementwise_affine = true;
  bool bias = true;

  LayerNorm init(const Device& device = Device::default_device()) const;
};

// Root-mean-square normalisation over the last dim (PyTorch's RMSNorm):
// x / sqrt(mean(x^2) + epsilon) * weight. Without an epsilon, the machine epsilon of x's dtype,
// as PyTorch's eps=None.
struct RmsNorm {
  std::optional<Param<1>> weight;  // [size] (elementwise_affine)
  std::int64_t normalized_size = 0;
  std::optional<double> epsilon;
  KILN_MODULE(weight)

  template <std::size_t D>
  requires(D >= 1 && D <= 5) Tensor<D> forward(const Tensor<D>& x)
  const;
};

struct RmsNormConfig {
  std::int64_t normalized_size;
  std::optional<double> epsilon = std::nullopt;
  bool elementwise_affine = true;

  RmsNorm init(const Device& device = Device::default_device()) const;
};

// Group normalisation of x [N, C, *]: the C channels are split into num_groups groups of
// consecutive channels, each normalised over its channels and every spatial position (biased
// variance), then scaled and shifted per channel. Same in training and evaluation.
struct GroupNorm {
  std::optional<Param<1>> weight;  // [C] (affine)
  std::optional<Param<1>> bias;    // [C]
  std::int64_t num_groups = 1;
  std::int64_t num_channels = 0;
  double epsilon = 1e-5;
  KILN_MODULE(weight, bias)

  template <std::size_t D>
  requires(D >= 2 && D <= 5) Tensor<D> forward(const Tensor<D>& x)
  const;
};

struct GroupNormConfig {
  std::int64_t num_groups;
  std::int64_t num_channels;
  double epsilon = 1e-5;
  bool affine = true;

  GroupNorm init(const Device& device = Device::default_device()) const;
};

}  // namespace kiln::nn
