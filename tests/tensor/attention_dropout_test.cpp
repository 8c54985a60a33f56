// module::attention's dropout through the public API: the probability is checked, a device seed
// reproduces a mask, each call draws another, the kept weights are the softmax's over 1 - p in
// the expected share, and autodiff's gradients are the derivative of the dropped attention.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/module_ops.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "support/error_message.h"

namespace kiln {
namespace {

std::vector<double> uniform_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> out(n);
  for (double& v : out) v = dist(gen);
  return out;
}

Tensor<4> f64_tensor(const std::vector<double>& values, Shape shape, const Device& device) {
  return Tensor<4>::from_data(TensorData::from_vec(values, std::move(shape)), device);
}

std::vector<double> read(const Tensor<4>& x) { return x.into_data().to_f64_vec(); }

AttentionOptions with_dropout(double p, bool causal = false) {
  return {.scale = std::nullopt, .is_causal = causal, .dropout = p};
}

TEST(AttentionDropout, TheProbabilityIsChecked) {
  const Device dev = Device::cpu();
  const auto q = Tensor<4>::ones({1, 1, 2, 4}, dev);
  for (double p : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    test::expect_error<InvalidArgument>(
        [&] { (void)module::attention(q, q, q, std::nullopt, std::nullopt, with_dropout(p)); },
        "attention", {"dropout must be in [0, 1]"});
  }
}

TEST(AttentionDropout, ASeedReproducesAMaskAndEachCallDrawsAnother) {
  const Device dev = Device::cpu();
  const Shape shape{2, 3, 16, 8};
  const auto n = static_cast<std::size_t>(shape.num_elements());
  const Tensor<4> q = f64_tensor(uniform_values(n, 1), shape, dev);
  const Tensor<4> k = f64_tensor(uniform_values(n, 2), shape, dev);
  const Tensor<4> v = f64_tensor(uniform_values(n, 3), shape, dev);
  auto run = [&](double p) {
    return read(module::attention(q, k, v, std::nullopt, std::nullopt, with_dropout(p)));
  };
  // p = 0 is no dropout at all.
  EXPECT_EQ(run(0.0), read(module::attention(q, k, v)));
  dev.seed(5);
  const std::vector<double> first = run(0.3);
  const std::vector<double> second = run(0.3);
  dev.seed(5);
  EXPECT_EQ(run(0.3), first);
  EXPECT_NE(first, second);
  // p = 1 drops every weight.
  EXPECT_EQ(run(1.0), std::vector<double>(n, 0.0));
}

// With v the identity the output is the weights themselves: each is 0 or the softmax's weight
// over 1 - p, and about p of them are 0.
TEST(AttentionDropout, KeptWeightsAreScaledAndAboutPAreDropped) {
  const Device dev = Device::cpu();
  const std::int64_t sq = 64, sk = 64, d = 16;
  const Tensor<4> q = f64_tensor(uniform_values(sq * d, 4), Shape{1, 1, sq, d}, dev);
  const Tensor<4> k = f64_tensor(uniform_values(sk * d, 5), Shape{1, 1, sk, d}, dev);
  std::vector<double> eye(static_cast<std::size_t>(sk * sk), 0.0);
  for (std::int64_t j = 0; j < sk; ++j) eye[static_cast<std::size_t>(j * sk + j)] = 1.0;
  const Tensor<4> v = f64_tensor(eye, Shape{1, 1, sk, sk}, dev);
  const std::vector<double> weights = read(module::attention(q, k, v));
  for (double p : {0.1, 0.25, 0.6}) {
    const std::vector<double> dropped =
        read(module::attention(q, k, v, std::nullopt, std::nullopt, with_dropout(p)));
    const double scale = static_cast<float>(1.0 / (1.0 - p));
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      if (dropped[i] == 0.0) {
        ++zeros;
      } else {
        EXPECT_NEAR(dropped[i], weights[i] * scale, 1e-12 * scale) << "p " << p << " at " << i;
      }
    }
    const double share = static_cast<double>(zeros) / static_cast<double>(weights.size());
    // 4096 weights: the share's standard deviation is at most 0.008; five of them.
    EXPECT_NEAR(share, p, 0.04) << "p " << p;
  }
}

// Under autocast the op runs in the scope's type and drops the same weights: the seed is not a
// float operand, so it is neither cast nor counted in the op's widest type.
TEST(AttentionDropout, AutocastRunsItInTheLowTypeWithTheSameMask) {
  const Device dev = Device::cpu();
  const Shape shape{1, 2, 16, 8};
  const auto n = static_cast<std::size_t>(shape.num_elements());
  auto f32 = [&](std::uint32_t seed) {
    return Tensor<4>::from_data(
        TensorData::from_vec(uniform_values(n, seed), shape).convert(DType::F32), dev);
  };
  const Tensor<4> q = f32(11), k = f32(12), v = f32(13);
  auto run = [&](const Tensor<4>& a, const Tensor<4>& b, const Tensor<4>& c) {
    dev.seed(17);
    return module::attention(a, b, c, std::nullopt, std::nullopt, with_dropout(0.5));
  };
  Tensor<4> low;
  {
    AutocastScope amp(dev, DType::BF16);
    low = run(q, k, v);
  }
  EXPECT_EQ(low.dtype(), DType::BF16);
  const std::vector<double> want =
      read(run(q.cast(DType::BF16).cast(DType::F32), k.cast(DType::BF16).cast(DType::F32),
               v.cast(DType::BF16).cast(DType::F32)));
  const std::vector<double> got = read(low);
  for (std::size_t i = 0; i < got.size(); ++i) {
    // Another mask would move these by tenths; bf16's rounding moves them by hundredths.
    EXPECT_NEAR(got[i], want[i], 2e-2 * (1 + std::abs(want[i]))) << i;
  }
}

// Autodiff's gradients against central differences of the forward, the device reseeded before
// every forward so that each sees the same mask. Causal, a bias, broadcast k and v.
TEST(AttentionDropout, GradientsAreTheDroppedAttentionsDerivative) {
  const Device dev = Device::cpu().autodiff();
  const Shape qs{2, 2, 3, 4}, ks{1, 2, 5, 4}, vs{1, 2, 5, 3}, bs{1, 2, 3, 5}, out{2, 2, 3, 3};
  std::vector<double> qv = uniform_values(static_cast<std::size_t>(qs.num_elements()), 6);
  std::vector<double> kv = uniform_values(static_cast<std::size_t>(ks.num_elements()), 7);
  std::vector<double> vv = uniform_values(static_cast<std::size_t>(vs.num_elements()), 8);
  const std::vector<double> bias = uniform_values(static_cast<std::size_t>(bs.num_elements()), 9);
  const std::vector<double> weights =
      uniform_values(static_cast<std::size_t>(out.num_elements()), 10);
  const Tensor<4> c = f64_tensor(weights, out, dev);
  const Tensor<4> b = f64_tensor(bias, bs, dev);
  auto loss = [&](const Tensor<4>& q, const Tensor<4>& k, const Tensor<4>& v) {
    dev.seed(33);
    return (module::attention(q, k, v, std::nullopt, b, with_dropout(0.4, true)) * c).sum();
  };
  const Tensor<4> q = f64_tensor(qv, qs, dev).require_grad();
  const Tensor<4> k = f64_tensor(kv, ks, dev).require_grad();
  const Tensor<4> v = f64_tensor(vv, vs, dev).require_grad();
  const Gradients grads = loss(q, k, v).backward();
  struct Operand {
    const char* name;
    std::vector<double>* values;
    Shape shape;
    std::vector<double> grad;
  };
  std::vector<Operand> operands = {{"q", &qv, qs, q.grad(grads)->into_data().to_f64_vec()},
                                   {"k", &kv, ks, k.grad(grads)->into_data().to_f64_vec()},
                                   {"v", &vv, vs, v.grad(grads)->into_data().to_f64_vec()}};
  auto value_at = [&] {
    return loss(f64_tensor(qv, qs, dev), f64_tensor(kv, ks, dev), f64_tensor(vv, vs, dev))
        .into_data()
        .to_f64_vec()[0];
  };
  const double h = 1e-6;
  for (Operand& o : operands) {
    for (std::size_t i = 0; i < o.values->size(); ++i) {
      const double saved = (*o.values)[i];
      (*o.values)[i] = saved + h;
      const double up = value_at();
      (*o.values)[i] = saved - h;
      const double down = value_at();
      (*o.values)[i] = saved;
      EXPECT_NEAR(o.grad[i], (up - down) / (2 * h), 1e-7) << o.name << " at " << i;
    }
  }
}

}  // namespace
}  // namespace kiln
