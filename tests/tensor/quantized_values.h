// What the tests of QFloat tensors share: the CPU device chains they run on, seeded normal
// values, the float64 reference decoding of QFloat data, and a tolerant comparison.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/block_reference.h"

namespace kiln::quantized_values {

inline std::vector<Device> devices() {
  const Device cpu = Device::cpu();
  return {cpu, cpu.fused(), cpu.autodiff(), cpu.fused().autodiff()};
}

inline std::vector<float> normal(std::int64_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Every value of a QFloat TensorData decoded by the float64 reference of the block formulas
// (kiln's int8 schemes: each code times the f32 scale before its block).
inline std::vector<double> reference_values(const TensorData& q) {
  const QuantScheme::Kind kind = q.scheme().kind;
  std::vector<double> out;
  const std::byte* bytes = q.bytes().data();
  if (kind == QuantScheme::Kind::Int8Channel || kind == QuantScheme::Kind::Int8Block) {
    const std::int64_t block = kind == QuantScheme::Kind::Int8Channel
                                   ? q.shape()[q.shape().rank() - 1]
                                   : q.scheme().block_size;
    for (std::int64_t b = 0; b < q.num_elements() / block; ++b, bytes += 4 + block) {
      float scale = 0;
      std::memcpy(&scale, bytes, 4);
      for (std::int64_t j = 0; j < block; ++j) {
        out.push_back(double(scale) * static_cast<std::int8_t>(bytes[4 + j]));
      }
    }
    return out;
  }
  const quant_testing::Layout layout = quant_testing::layout(kind);
  for (std::int64_t b = 0; b < q.num_elements() / layout.values; ++b) {
    const std::vector<double> block =
        quant_testing::reference_block(kind, bytes + b * layout.bytes);
    out.insert(out.end(), block.begin(), block.end());
  }
  return out;
}

inline void expect_values(const TensorData& got, const std::vector<double>& want, double tolerance,
                          const std::string& context) {
  const std::vector<double> values = got.to_f64_vec();
  ASSERT_EQ(values.size(), want.size()) << context;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(values[i], want[i], tolerance * (1 + std::fabs(want[i]))) << context << " at " << i;
  }
}

}  // namespace kiln::quantized_values
