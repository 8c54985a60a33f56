// Shared by the attention tests (backend_attention_test.cpp on the GPU,
// backend_attention_emulated_test.cpp on the emulated grid): the cases, their inputs drawn on the
// CPU, and float64 loops to check a result against.
#pragma once

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"
#include "kiln/detail/tensor_ops.h"

// Named: the suite is compiled in unity batches, where anonymous namespaces merge.
namespace gpu_attention {

using namespace kiln;
using test::host_random;

// A rank-4 operand's values with the strides of its shape (broadcast dims read index 0).
// A [B, H, S, D] operand's values in float64, a dim of 1 broadcast. The strides are worked out
// once: the references read every element many times, in the tests' unoptimised builds.
struct Host4 {
  Shape shape;
  std::vector<double> values;
  std::int64_t strides[4] = {};  // 0 along a dim of 1

  double at(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return values[static_cast<std::size_t>(b * strides[0] + h * strides[1] + i * strides[2] +
                                           j * strides[3])];
  }
};

inline Host4 host4(const Primitive& p) {
  Host4 host{p->shape(), detail::into_data(p).to_f64_vec()};
  std::int64_t stride = 1;
  for (std::size_t d = 4; d-- > 0;) {
    host.strides[d] = host.shape[d] == 1 ? 0 : stride;
    stride *= host.shape[d];
  }
  return host;
}

struct Reference {
  Shape shape;
  std::vector<double> values;
};

// The softmax weights of query row i of (b, h) over the keys, in float64: w[j] = 0 for an
// excluded key. Returns false where every key is excluded (no weights), and sets nan where a kept
// score is NaN.
inline bool row_weights(const Host4& q, const Host4& k, const std::optional<Host4>& mask,
                        const std::optional<Host4>& bias, double scale, bool causal, std::int64_t b,
                        std::int64_t h, std::int64_t i, std::vector<double>& w, bool& nan) {
  const std::int64_t sk = k.shape[2], depth = q.shape[3];
  w.assign(static_cast<std::size_t>(sk), -std::numeric_limits<double>::infinity());
  double top = -std::numeric_limits<double>::infinity();
  bool any = false;
  nan = false;
  for (std::int64_t j = 0; j < sk; ++j) {
    if ((causal && j > i) || (mask && mask->at(b, h, i, j) != 0)) continue;
    double s = 0;
    for (std::int64_t d = 0; d < depth; ++d) s += q.at(b, h, i, d) * k.at(b, h, j, d);
    s = s * scale + (bias ? bias->at(b, h, i, j) : 0.0);
    any = true;
    nan = nan || std::isnan(s);
    w[static_cast<std::size_t>(j)] = s;
    if (!std::isnan(s)) top = std::max(top, s);
  }
  if (!any) return false;
  double total = 0;
  for (double& x : w) total += (x = std::exp(x - top));
  for (double& x : w) x /= total;
  return true;
}

// softmax(q kᵀ scale + bias, excluded -> -inf) v in float64; a row with every key excluded is 0.
inline Reference reference(const Host4& q, const Host4& k, const Host4& v,
                           const std::optional<Host4>& mask, const std::optional<Host4>& bias,
                           double scale, bool causal) {
  const std::int64_t batch = std::max({q.shape[0], k.shape[0], v.shape[0]});
  const std::int64_t heads = std::max({q.shape[1], k.shape[1], v.shape[1]});
  const std::int64_t sq = q.shape[2], sk = k.shape[2], dv = v.shape[3];
  Reference out{Shape{batch, heads, sq, dv}, {}};
  out.values.assign(static_cast<std::size_t>(batch * heads * sq * dv), 0.0);
  std::vector<double> w;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < sq; ++i) {
        bool nan = false;
        if (!row_weights(q, k, mask, bias, scale, causal, b, h, i, w, nan)) continue;
        double* row = &out.values[static_cast<std::size_t>(((b * heads + h) * sq + i) * dv)];
        if (nan) {
          for (std::int64_t d = 0; d < dv; ++d) row[d] = std::numeric_limits<double>::quiet_NaN();
          continue;
        }
        for (std::int64_t j = 0; j < sk; ++j) {
          if (w[static_cast<std::size_t>(j)] == 0) continue;
          for (std::int64_t d = 0; d < dv; ++d)
            row[d] += w[static_cast<std::size_t>(j)] * v.at(b, h, j, d);
        }
      }
    }
  }
  return out;
}

// The gradients of the attention `reference` computes, for the output gradient g (values over
// [B, H, Sq, Dv]), before any sum over broadcast dims: dq over [B, H, Sq, D], dk over
// [B, H, Sk, D], dv over [B, H, Sk, Dv]. dS = P (dP - Σ P dP), dP = g vᵀ; excluded keys and rows
// whose every key is excluded pass nothing.
struct ReferenceGrads {
  std::vector<double> dq, dk, dv;
};
inline ReferenceGrads reference_grads(const Host4& q, const Host4& k, const Host4& v,
                                      const std::optional<Host4>& mask,
                                      const std::optional<Host4>& bias, const Host4& g,
                                      double scale, bool causal) {
  const std::int64_t batch = std::max({q.shape[0], k.shape[0], v.shape[0]});
  const std::int64_t heads = std::max({q.shape[1], k.shape[1], v.shape[1]});
  const std::int64_t sq = q.shape[2], sk = k.shape[2], depth = q.shape[3], dv = v.shape[3];
  ReferenceGrads out;
  out.dq.assign(static_cast<std::size_t>(batch * heads * sq * depth), 0.0);
  out.dk.assign(static_cast<std::size_t>(batch * heads * sk * depth), 0.0);
  out.dv.assign(static_cast<std::size_t>(batch * heads * sk * dv), 0.0);
  std::vector<double> p(static_cast<std::size_t>(sk)), dp(static_cast<std::size_t>(sk));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t bh = b * heads + h;
      for (std::int64_t i = 0; i < sq; ++i) {
        bool nan = false;
        if (!row_weights(q, k, mask, bias, scale, causal, b, h, i, p, nan)) continue;
        double dot = 0;
        for (std::int64_t j = 0; j < sk; ++j) {
          const double w = p[static_cast<std::size_t>(j)];
          double grad = 0;
          for (std::int64_t e = 0; e < dv; ++e) {
            grad += g.at(b, h, i, e) * v.at(b, h, j, e);
            out.dv[static_cast<std::size_t>((bh * sk + j) * dv + e)] += w * g.at(b, h, i, e);
          }
          dp[static_cast<std::size_t>(j)] = grad;
          dot += w * grad;
        }
        for (std::int64_t j = 0; j < sk; ++j) {
          const double ds =
              p[static_cast<std::size_t>(j)] * (dp[static_cast<std::size_t>(j)] - dot);
          if (ds == 0) continue;
          for (std::int64_t d = 0; d < depth; ++d) {
            out.dq[static_cast<std::size_t>((bh * sq + i) * depth + d)] +=
                scale * ds * k.at(b, h, j, d);
            out.dk[static_cast<std::size_t>((bh * sk + j) * depth + d)] +=
                scale * ds * q.at(b, h, i, d);
          }
        }
      }
    }
  }
  return out;
}

// values over `from` ([B, H, S, D]) summed over the dims where `to` has size 1.
inline std::vector<double> sum_to(const std::vector<double>& values, const Shape& from,
                                  const Shape& to) {
  std::vector<double> out(static_cast<std::size_t>(to.num_elements()), 0.0);
  for (std::int64_t i = 0; i < from.num_elements(); ++i) {
    std::int64_t rest = i, offset = 0, stride = 1;
    for (std::size_t d = 4; d-- > 0;) {
      const std::int64_t at = rest % from[d];
      rest /= from[d];
      offset += (to[d] == 1 ? 0 : at) * stride;
      stride *= to[d];
    }
    out[static_cast<std::size_t>(offset)] += values[static_cast<std::size_t>(i)];
  }
  return out;
}

// got against want within the tolerance of dtype, relative to want's largest magnitude (the
// gradients are sums of rounded products of every size).
inline void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                        DType dtype, const std::string& what);

// The weights are rounded to the input type before they meet v, the output once more.
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return 2.5e-2;
    case DType::F16:
      return 4e-3;
    case DType::F32:
      return 2e-5;
    default:
      return 1e-10;
  }
}

enum class MaskKind { None, Padding, Full };
enum class Layout { Contiguous, HeadsOfRows, Offset };

struct AttentionCase {
  DType dtype;
  std::int64_t batch, heads, queries, keys, depth;
  MaskKind mask = MaskKind::None;
  bool bias = false, causal = false;
  Layout layout = Layout::Contiguous;
  std::int64_t kv_heads = 0;  // 0: heads; 1: one key/value head for every query head
  bool nan = false;
};

inline std::string describe(const AttentionCase& c) {
  return std::string(dtype_name(c.dtype)) + " B" + std::to_string(c.batch) + " H" +
         std::to_string(c.heads) + " Sq" + std::to_string(c.queries) + " Sk" +
         std::to_string(c.keys) + " D" + std::to_string(c.depth) +
         (c.mask == MaskKind::Padding ? " padding mask"
          : c.mask == MaskKind::Full  ? " full mask"
                                      : "") +
         (c.bias ? " bias" : "") + (c.causal ? " causal" : "") +
         (c.layout == Layout::HeadsOfRows ? " heads of [B,S,H,D]"
          : c.layout == Layout::Offset    ? " rows off 16 bytes"
                                          : "") +
         (c.kv_heads == 1 ? " one kv head" : "") + (c.nan ? " NaN" : "");
}

// An operand [B, H, S, D] laid out as the case says, on the CPU.
inline Primitive operand(const AttentionCase& c, std::int64_t heads, std::int64_t rows,
                         std::uint64_t seed) {
  const std::int64_t depth = c.depth;
  switch (c.layout) {
    case Layout::HeadsOfRows:
      return detail::swap_dims(
          host_random(Shape{c.batch, rows, heads, depth}, c.dtype, seed, -1, 1), 1, 2);
    case Layout::Offset:
      return detail::narrow(
          host_random(Shape{c.batch, heads, rows, depth + 1}, c.dtype, seed, -1, 1), 3, 1, depth);
    default:
      return host_random(Shape{c.batch, heads, rows, depth}, c.dtype, seed, -1, 1);
  }
}

// A case's operands, on the CPU.
struct Inputs {
  Primitive q, k, v;
  std::optional<Primitive> mask, bias;
};

inline Inputs make_inputs(const AttentionCase& c, std::uint64_t seed) {
  const std::int64_t kv_heads = c.kv_heads == 1 ? 1 : c.heads;
  Primitive q = operand(c, c.heads, c.queries, seed);
  Primitive k = operand(c, kv_heads, c.keys, seed + 1);
  Primitive v = operand(c, kv_heads, c.keys, seed + 2);
  if (c.nan) {
    q = detail::slice_fill(q, {Slice::index(0), Slice::index(0), Slice::index(1), Slice::all()},
                           std::numeric_limits<double>::quiet_NaN());
  }
  std::optional<Primitive> mask, bias;
  if (c.mask != MaskKind::None) {
    // Padding: key j of batch b masked from a length per batch on (batch 0 keeps them all,
    // the last batch keeps none); full: a random pattern per (batch, query, key).
    const Shape shape = c.mask == MaskKind::Padding ? Shape{c.batch, 1, 1, c.keys}
                                                    : Shape{c.batch, 1, c.queries, c.keys};
    std::vector<double> bits(static_cast<std::size_t>(shape.num_elements()));
    std::uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
    for (std::size_t i = 0; i < bits.size(); ++i) {
      if (c.mask == MaskKind::Padding) {
        const std::int64_t b = static_cast<std::int64_t>(i) / c.keys;
        const std::int64_t j = static_cast<std::int64_t>(i) % c.keys;
        const std::int64_t length = c.batch == 1 ? c.keys - 3 : c.keys - b * c.keys / (c.batch - 1);
        bits[i] = j >= length ? 1 : 0;
      } else {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bits[i] = (state % 4 == 0) ? 1 : 0;  // a quarter of the keys masked
      }
    }
    mask = detail::from_data(TensorData::from_vec(bits, shape).convert(DType::Bool), Device::cpu(),
                             Kind::Bool, 4);
  }
  if (c.bias) bias = host_random(Shape{1, c.heads, c.queries, c.keys}, c.dtype, seed + 3, -2, 2);
  return {q, k, v, mask, bias};
}

inline void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                        DType dtype, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  const double tol = 2 * tolerance(dtype) * scale;
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
    }
  }
}

// got (the kernel's or the plugin's result for c's inputs) against float64 loops.
inline void expect_matches(const AttentionCase& c, const Inputs& in, const TensorData& got) {
  std::optional<Host4> mask_host, bias_host;
  if (in.mask) mask_host = host4(*in.mask);
  if (in.bias) bias_host = host4(*in.bias);
  const Reference want = reference(host4(in.q), host4(in.k), host4(in.v), mask_host, bias_host,
                                   1.0 / std::sqrt(static_cast<double>(c.depth)), c.causal);
  ASSERT_EQ(got.shape(), want.shape) << describe(c);
  ASSERT_EQ(got.dtype(), c.dtype) << describe(c);
  const std::vector<double> g = got.to_f64_vec();
  const double tol = tolerance(c.dtype);
  int reported = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double w = want.values[i];
    const bool both_nan = std::isnan(g[i]) && std::isnan(w);
    if (!both_nan && !(std::fabs(g[i] - w) <= tol * (1 + std::fabs(w))) && reported++ < 5) {
      ADD_FAILURE() << describe(c) << ": element " << i << " is " << g[i] << ", want " << w;
    }
  }
}

}  // namespace gpu_attention
