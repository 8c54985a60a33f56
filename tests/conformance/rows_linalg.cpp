// Conformance rows: matmul, cross, linear, layer_norm, batch_norm, embedding (and its backward),
// attention. References are float64 loops over the values the backend actually holds.
#include <algorithm>
#include <cmath>
#include <limits>

#include "conformance/conformance.h"
#include "runtime/registry.h"
#include "support/layer_norm_reference.h"
#include "tensor/common.h"

namespace kiln::conformance {
namespace {

// The layout used for a second operand, so both operands see every layout over a row.
Layout other_layout(Layout layout) {
  switch (layout) {
    case Layout::Contiguous:
      return Layout::Transposed;
    case Layout::Strided:
      return Layout::Offset;
    case Layout::Transposed:
      return Layout::Contiguous;
    case Layout::Offset:
      return Layout::Strided;
  }
  return Layout::Contiguous;
}

// Offset of a broadcast operand of shape `s` (its last `tail` dims indexed by `inner`) at the
// output batch index `batch` (aligned from the right).
std::int64_t batch_offset(const Shape& s, std::size_t tail, const std::vector<std::int64_t>& batch,
                          const std::vector<std::int64_t>& inner) {
  std::vector<std::int64_t> index(s.rank());
  const std::size_t own = s.rank() - tail;
  for (std::size_t d = 0; d < own; ++d) {
    index[d] = s[d] == 1 ? 0 : batch[batch.size() - own + d];
  }
  for (std::size_t d = 0; d < tail; ++d) index[own + d] = inner[d];
  return ravel(index, s);
}

Shape matmul_shape(const Shape& a, const Shape& b) {
  const std::size_t ba = a.rank() - 2, bb = b.rank() - 2, rank = std::max(ba, bb);
  std::vector<std::int64_t> dims(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - ba ? 1 : a[i - (rank - ba)];
    const std::int64_t db = i < rank - bb ? 1 : b[i - (rank - bb)];
    dims[i] = da == 1 ? db : da;
  }
  dims.push_back(a[a.rank() - 2]);
  dims.push_back(b[b.rank() - 1]);
  return Shape(dims);
}

std::vector<double> ref_matmul(const std::vector<double>& a, const Shape& sa,
                               const std::vector<double>& b, const Shape& sb, const Shape& out,
                               DType dtype) {
  const std::int64_t m = sa[sa.rank() - 2], k = sa[sa.rank() - 1], n = sb[sb.rank() - 1];
  std::vector<double> result(static_cast<std::size_t>(out.num_elements()));
  const Shape batch(std::span<const std::int64_t>(out.dims().data(), out.rank() - 2));
  const std::int64_t count = batch.num_elements();
  for (std::int64_t bi = 0; bi < count; ++bi) {
    const auto bidx = unravel(bi, batch);
    const double* pa = a.data() + batch_offset(sa, 2, bidx, {0, 0});
    const double* pb = b.data() + batch_offset(sb, 2, bidx, {0, 0});
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < k; ++p) sum += pa[i * k + p] * pb[p * n + j];
        result[static_cast<std::size_t>((bi * m + i) * n + j)] = wrap_to(sum, dtype);
      }
    }
  }
  return result;
}

// Float matmul error grows with the depth of the sums.
double depth_scale(std::int64_t k) { return std::max(1.0, static_cast<double>(k) / 8.0); }

void check_matmul(const Device& device, DType dtype, Layout layout, const Shape& sa,
                  const Shape& sb, std::uint64_t seed, double lo = -3, double hi = 3) {
  const auto a = random_values(sa, dtype, seed, lo, hi);
  const auto b = random_values(sb, dtype, seed + 1, lo, hi);
  const Shape out = matmul_shape(sa, sb);
  auto result = detail::matmul(make_primitive(a, sa, dtype, layout, device),
                               make_primitive(b, sb, dtype, other_layout(layout), device));
  expect_close(detail::into_data(result), out, dtype,
               representable(ref_matmul(a, sa, b, sb, out, dtype), dtype),
               "matmul " + context(device, dtype, layout, sa) + " @ " + sb.to_string(),
               depth_scale(sa[sa.rank() - 1]));
}

const std::vector<std::pair<Shape, Shape>>& matmul_cases() {
  static const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},
      {{1, 6}, {6, 1}},
      {{2, 3, 4}, {2, 4, 5}},
      {{3, 3, 4}, {1, 4, 2}},        // shared rhs: the batch folds into one gemm
      {{1, 3, 4}, {3, 4, 2}},        // shared lhs
      {{2, 1, 3, 4}, {1, 3, 4, 5}},  // both broadcast
      {{0, 4}, {4, 5}},
      {{3, 0}, {0, 5}},  // K = 0: zeros
      {{3, 4}, {4, 0}},
      {{0, 3, 4}, {0, 4, 2}},
  };
  return cases;
}

}  // namespace

KILN_CONFORMANCE_ROW(matmul, ({"matmul"})) {
  std::uint64_t seed = 1000;
  for (DType dtype : kNumericDTypes) {
    for (Layout layout : kLayouts) {
      for (const auto& [sa, sb] : matmul_cases())
        check_matmul(device, dtype, layout, sa, sb, seed += 2);
    }
  }
  for (DType dtype : kFloatDTypes) {
    // Many small matrices (batch loop in parallel), one product large enough for BLAS threads,
    // a deep product, and operands of different ranks.
    check_matmul(device, dtype, Layout::Contiguous, {64, 5, 7}, {64, 7, 3}, seed += 2);
    check_matmul(device, dtype, Layout::Transposed, {2, 80, 70}, {2, 70, 90}, seed += 2);
    check_matmul(device, dtype, Layout::Contiguous, {4, 300}, {300, 3}, seed += 2, -1, 1);
    check_matmul(device, dtype, Layout::Offset, {3, 5, 4}, {4, 6}, seed += 2);
    check_matmul(device, dtype, Layout::Strided, {4, 6}, {2, 2, 6, 3}, seed += 2);
  }
  // Integer products wrap around the dtype's width.
  for (DType dtype : kIntDTypes) {
    check_matmul(device, dtype, Layout::Contiguous, {2, 5, 20}, {2, 20, 33}, seed += 2, -100, 100);
    check_matmul(device, dtype, Layout::Transposed, {5, 300}, {300, 260}, seed += 2, -3, 3);
  }
  // Mixed dtypes promote.
  {
    const Shape sa{2, 3}, sb{3, 2};
    const auto a = random_values(sa, DType::F32, 1), b = random_values(sb, DType::F64, 2);
    auto r = detail::matmul(make_primitive(a, sa, DType::F32, Layout::Contiguous, device),
                            make_primitive(b, sb, DType::F64, Layout::Contiguous, device));
    expect_close(detail::into_data(r), {2, 2}, DType::F64,
                 ref_matmul(a, sa, b, sb, {2, 2}, DType::F64), "matmul f32 @ f64");
    const auto c = random_values(sa, DType::I32, 3), d = random_values(sb, DType::U8, 4);
    auto s = detail::matmul(make_primitive(c, sa, DType::I32, Layout::Contiguous, device),
                            make_primitive(d, sb, DType::U8, Layout::Contiguous, device));
    expect_close(detail::into_data(s), {2, 2}, DType::I32,
                 ref_matmul(c, sa, d, sb, {2, 2}, DType::I32), "matmul i32 @ u8");
  }
  // NaN and infinity propagate through the products.
  for (DType dtype : kFloatDTypes) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    const std::vector<double> a{1, nan, 1, 2, inf, 1};
    const std::vector<double> b{1, 2, 3, 4};
    auto r = detail::matmul(make_primitive(a, {3, 2}, dtype, Layout::Contiguous, device),
                            make_primitive(b, {2, 2}, dtype, Layout::Contiguous, device));
    expect_close(detail::into_data(r), {3, 2}, dtype, {nan, nan, 7, 10, inf, inf},
                 "matmul NaN/inf " + std::string(dtype_name(dtype)));
  }
}

KILN_CONFORMANCE_ROW(cross, ({"cross"})) {
  struct Case {
    Shape a, b;
    std::int64_t dim;
  };
  const std::vector<Case> cases = {
      {{4, 3}, {4, 3}, 1}, {{3, 5}, {3, 5}, 0}, {{2, 1, 3}, {2, 4, 3}, -1}, {{0, 3}, {0, 3}, 1}};
  std::uint64_t seed = 2000;
  for (DType dtype : kNumericDTypes) {
    for (Layout layout : kLayouts) {
      for (const Case& c : cases) {
        const auto a = random_values(c.a, dtype, seed++);
        const auto b = random_values(c.b, dtype, seed++);
        const Shape out = detail::broadcast_shape(c.a, c.b, "cross");
        const auto dim = static_cast<std::size_t>(
            c.dim < 0 ? c.dim + static_cast<std::int64_t>(out.rank()) : c.dim);
        std::vector<double> expected(static_cast<std::size_t>(out.num_elements()));
        for (std::size_t i = 0; i < expected.size(); ++i) {
          auto index = unravel(static_cast<std::int64_t>(i), out);
          const std::int64_t component = index[dim];
          auto at = [&](const std::vector<double>& v, const Shape& s, std::int64_t comp) {
            index[dim] = comp;
            const double value = broadcast_at(v, s, index);
            index[dim] = component;
            return value;
          };
          const std::int64_t p = (component + 1) % 3, q = (component + 2) % 3;
          const double value = at(a, c.a, p) * at(b, c.b, q) - at(a, c.a, q) * at(b, c.b, p);
          expected[i] = wrap_to(value, dtype);
        }
        auto r = detail::cross(make_primitive(a, c.a, dtype, layout, device),
                               make_primitive(b, c.b, dtype, other_layout(layout), device), c.dim);
        expect_close(
            detail::into_data(r), out, dtype, representable(expected, dtype),
            "cross " + context(device, dtype, layout, c.a) + " dim " + std::to_string(c.dim), 2.0);
      }
    }
  }
}

KILN_CONFORMANCE_ROW(linear, ({"linear"})) {
  struct Case {
    Shape x;
    std::int64_t out;
    bool bias;
  };
  const std::vector<Case> cases = {{{5, 7}, 4, true},
                                   {{2, 3, 7}, 6, true},
                                   {{2, 3, 7}, 6, false},
                                   {{7}, 3, true},
                                   {{4, 0}, 3, true},
                                   {{0, 5}, 2, true},
                                   {{3, 40}, 9, false},
                                   // Products the CPU splits over threads: by rows, by columns
                                   // (each block adds its share of the bias).
                                   {{300, 64}, 200, true},
                                   {{40, 64}, 500, true}};
  std::uint64_t seed = 3000;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const Case& c : cases) {
        const std::int64_t in = c.x[c.x.rank() - 1];
        const Shape ws{in, c.out}, bs{c.out};
        const auto x = random_values(c.x, dtype, seed++);
        const auto w = random_values(ws, dtype, seed++);
        const auto b = random_values(bs, dtype, seed++);
        std::vector<std::int64_t> od = c.x.to_vector();
        od.back() = c.out;
        const Shape out(od);
        const std::int64_t rows = c.x.num_elements() / std::max<std::int64_t>(in, 1);
        const std::int64_t out_rows = in == 0 ? out.num_elements() / c.out : rows;
        std::vector<double> expected(static_cast<std::size_t>(out.num_elements()));
        for (std::int64_t r = 0; r < out_rows; ++r) {
          for (std::int64_t j = 0; j < c.out; ++j) {
            double sum = c.bias ? b[static_cast<std::size_t>(j)] : 0.0;
            for (std::int64_t p = 0; p < in; ++p) {
              sum += x[static_cast<std::size_t>(r * in + p)] *
                     w[static_cast<std::size_t>(p * c.out + j)];
            }
            expected[static_cast<std::size_t>(r * c.out + j)] = sum;
          }
        }
        std::optional<Primitive> bias;
        if (c.bias) {
          bias =
              make_primitive(b, bs, dtype, seed % 2 ? Layout::Strided : Layout::Contiguous, device);
        }
        auto r = detail::linear(make_primitive(x, c.x, dtype, layout, device),
                                make_primitive(w, ws, dtype, other_layout(layout), device), bias);
        expect_close(detail::into_data(r), out, dtype, representable(expected, dtype),
                     "linear " + context(device, dtype, layout, c.x) + (c.bias ? " bias" : ""),
                     depth_scale(in));
      }
    }
  }
}

KILN_CONFORMANCE_ROW(layer_norm, ({"layer_norm"})) {
  const std::vector<Shape> shapes = {{4, 10}, {2, 3, 16}, {3, 1}, {0, 5}, {2, 300}};
  std::uint64_t seed = 4000;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : shapes) {
        for (bool with_beta : {true, false}) {
          const std::int64_t width = shape[shape.rank() - 1];
          // A large common offset checks the variance does not cancel.
          const double offset = dtype == DType::F64 || dtype == DType::F32 ? 100.0 : 0.0;
          const auto x = random_values(shape, dtype, seed++, offset - 3, offset + 3);
          const auto g = random_values({width}, dtype, seed++, 0.5, 2);
          const auto b = random_values({width}, dtype, seed++);
          const double eps = 1e-5;
          const std::vector<double> expected =
              test::layer_norm_reference(x, width, g, with_beta ? b : std::vector<double>{}, eps);
          std::optional<Primitive> beta;
          if (with_beta) beta = make_primitive(b, {width}, dtype, Layout::Offset, device);
          auto r = detail::layer_norm(make_primitive(x, shape, dtype, layout, device),
                                      make_primitive(g, {width}, dtype, Layout::Strided, device),
                                      beta, eps);
          expect_close(
              detail::into_data(r), shape, dtype, representable(expected, dtype),
              "layer_norm " + context(device, dtype, layout, shape) + (with_beta ? " beta" : ""),
              2.0);
        }
      }
    }
    // NaN in a row makes that row NaN and leaves the others alone.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    auto r = detail::layer_norm(
        make_primitive({1, nan, 3, 1, 2, 3}, {2, 3}, dtype, Layout::Contiguous, device),
        make_primitive({1, 1, 1}, {3}, dtype, Layout::Contiguous, device), std::nullopt, 0.0);
    const double s = std::sqrt(1.5);
    expect_close(detail::into_data(r), {2, 3}, dtype,
                 representable({nan, nan, nan, -s, 0, s}, dtype),
                 "layer_norm NaN " + std::string(dtype_name(dtype)), 2.0);
  }
}

// Both outputs against float64 loops, every float dtype and layout (a transposed grad too), a
// large common offset, rows of one value, no rows.
KILN_CONFORMANCE_ROW(layer_norm_backward, ({"layer_norm_backward"})) {
  const std::vector<Shape> shapes = {{4, 10}, {2, 3, 16}, {3, 1}, {0, 5}, {5, 300}};
  std::uint64_t seed = 4100;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : shapes) {
        const std::int64_t width = shape[shape.rank() - 1];
        const double offset = dtype == DType::F64 || dtype == DType::F32 ? 50.0 : 0.0;
        const auto x =
            representable(random_values(shape, dtype, seed++, offset - 3, offset + 3), dtype);
        const auto gamma = representable(random_values({width}, dtype, seed++, 0.5, 2), dtype);
        const auto grad = representable(random_values(shape, dtype, seed++, -1, 1), dtype);
        const double eps = 1e-5;
        std::vector<double> dx, dgamma;
        test::layer_norm_backward_reference(x, width, gamma, grad, eps, dx, dgamma);
        const auto [got_dx, got_dgamma] = detail::layer_norm_backward(
            make_primitive(x, shape, dtype, layout, device),
            make_primitive(gamma, {width}, dtype, Layout::Strided, device),
            make_primitive(grad, shape, dtype,
                           layout == Layout::Contiguous ? Layout::Transposed : Layout::Contiguous,
                           device),
            eps);
        const std::string ctx = "layer_norm_backward " + context(device, dtype, layout, shape);
        expect_close(detail::into_data(got_dx), shape, dtype, dx, ctx + " dx", 8.0);
        expect_close(detail::into_data(got_dgamma), Shape{width}, dtype, dgamma, ctx + " dgamma",
                     8.0);
      }
    }
  }
}

KILN_CONFORMANCE_ROW(batch_norm, ({"batch_norm"})) {
  const std::vector<Shape> shapes = {{4, 3}, {2, 3, 5}, {2, 3, 2, 2}, {0, 3, 4}, {2, 3, 2, 2, 2}};
  std::uint64_t seed = 5000;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const Shape& shape : shapes) {
        const std::int64_t c = shape[1];
        const auto x = random_values(shape, dtype, seed++);
        const auto g = random_values({c}, dtype, seed++, 0.5, 2);
        const auto b = random_values({c}, dtype, seed++);
        const auto mean = random_values({c}, dtype, seed++, -1, 1);
        const auto var = random_values({c}, dtype, seed++, 0.1, 3);
        const double eps = 1e-3;
        std::vector<double> expected(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
          const auto ch = static_cast<std::size_t>(unravel(static_cast<std::int64_t>(i), shape)[1]);
          expected[i] = (x[i] - mean[ch]) / std::sqrt(var[ch] + eps) * g[ch] + b[ch];
        }
        auto vec = [&](const std::vector<double>& v) {
          return make_primitive(v, {c}, dtype, Layout::Strided, device);
        };
        auto r = detail::batch_norm(make_primitive(x, shape, dtype, layout, device), vec(g), vec(b),
                                    vec(mean), vec(var), eps);
        expect_close(detail::into_data(r), shape, dtype, representable(expected, dtype),
                     "batch_norm " + context(device, dtype, layout, shape), 2.0);
      }
    }
  }
}

KILN_CONFORMANCE_ROW(embedding, ({"embedding", "embedding_backward"})) {
  const std::int64_t vocab = 7, width = 5;
  const Shape ws{vocab, width};
  const std::vector<Shape> index_shapes = {{3, 4}, {6}, {0, 2}, {2, 2, 3}};
  const DType index_dtypes[] = {DType::I64, DType::I32, DType::U8, DType::I16};
  std::uint64_t seed = 6000;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (std::size_t s = 0; s < index_shapes.size(); ++s) {
        const Shape& is = index_shapes[s];
        const DType idt = index_dtypes[s];
        const auto w = random_values(ws, dtype, seed++);
        const auto idx = random_values(is, idt, seed++, 0, vocab - 1);
        std::vector<std::int64_t> od = is.to_vector();
        od.push_back(width);
        const Shape out(od);
        std::vector<double> expected(static_cast<std::size_t>(out.num_elements()));
        for (std::size_t i = 0; i < idx.size(); ++i) {
          for (std::int64_t j = 0; j < width; ++j) {
            expected[i * width + static_cast<std::size_t>(j)] =
                w[static_cast<std::size_t>(static_cast<std::int64_t>(idx[i]) * width + j)];
          }
        }
        Primitive weights = make_primitive(w, ws, dtype, layout, device);
        Primitive indices = make_primitive(idx, is, idt, other_layout(layout), device);
        expect_close(detail::into_data(detail::embedding(weights, indices)), out, dtype, expected,
                     "embedding " + context(device, dtype, layout, is));

        // Backward: the gradient rows add up at their indices (indices repeat).
        const auto grad = random_values(out, dtype, seed++);
        std::vector<double> summed(static_cast<std::size_t>(vocab * width), 0.0);
        for (std::size_t i = 0; i < idx.size(); ++i) {
          for (std::int64_t j = 0; j < width; ++j) {
            summed[static_cast<std::size_t>(static_cast<std::int64_t>(idx[i]) * width + j)] +=
                grad[i * width + static_cast<std::size_t>(j)];
          }
        }
        Primitive g = make_primitive(grad, out, dtype, layout, device);
        Primitive back = backend_for(device).embedding_backward(weights, g, indices);
        expect_close(detail::into_data(back), ws, dtype, representable(summed, dtype),
                     "embedding_backward " + context(device, dtype, layout, is), 4.0);
      }
    }
  }
}

namespace {

struct AttentionCase {
  Shape q, k, v;
  std::optional<Shape> mask, bias;
  AttentionOptions options;
  bool fully_masked_row = false;  // mask every key of query row 0
  std::int64_t dropout_seed = 0;  // the seed operand's value where options.dropout > 0
};

// Attention dropout's mask as the op documents it (ops.def; contract/attention_dropout.h),
// written out again here: SplitMix64's finaliser, key = mix(seed), score n (row-major over
// [B, H, Sq, Sk]) kept when mix(key ^ n) >> 40 >= round(p * 2^24); kept weights times 1/(1-p).
std::uint64_t splitmix_finaliser(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double dropout_factor(const AttentionCase& c, std::uint64_t score) {
  const double p = c.options.dropout;
  if (p <= 0) return 1.0;
  const std::uint64_t key = splitmix_finaliser(static_cast<std::uint64_t>(c.dropout_seed));
  const double bits = static_cast<double>(splitmix_finaliser(key ^ score) >> 40);
  if (bits < std::nearbyint(p * 16777216.0)) return 0.0;
  return p >= 1 ? 0.0 : static_cast<double>(static_cast<float>(1.0 / (1.0 - p)));
}

// Flat index of element (b, h, i, j) of a row-major rank-4 operand broadcast over its size-1
// dims.
std::size_t index4(const Shape& s, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  const std::int64_t bb = s[0] == 1 ? 0 : b, hh = s[1] == 1 ? 0 : h;
  const std::int64_t ii = s[2] == 1 ? 0 : i, jj = s[3] == 1 ? 0 : j;
  return static_cast<std::size_t>(((bb * s[1] + hh) * s[2] + ii) * s[3] + jj);
}
double at4(const std::vector<double>& values, const Shape& s, std::int64_t b, std::int64_t h,
           std::int64_t i, std::int64_t j) {
  return values[index4(s, b, h, i, j)];
}

// A case's inputs (random values exact in dtype), and its float64 attention and gradients.
struct AttentionRun {
  std::vector<double> q, k, v, mask, bias, grad;
  Shape out_shape;
  std::vector<double> out, dq, dk,
      dv;  // dq, dk and dv summed over the dims their operand broadcasts
};

// The weights P of each query row (rows with every key excluded: zeros), out = P v, and with
// `gradients`, for a random output gradient g: dP = g vᵀ, dS = P (dP - Σ P dP), dq = scale dS k,
// dk = scale dSᵀ q, dv = Pᵀ g.
AttentionRun attention_run(const AttentionCase& c, DType dtype, std::uint64_t seed,
                           bool gradients) {
  AttentionRun r;
  r.q = random_values(c.q, dtype, seed, -1, 1);
  r.k = random_values(c.k, dtype, seed + 1, -1, 1);
  r.v = random_values(c.v, dtype, seed + 2);
  if (c.mask) {
    r.mask = random_values(*c.mask, DType::Bool, seed + 3);
    if (c.fully_masked_row) {
      for (std::size_t i = 0; i < r.mask.size(); ++i) {
        if (unravel(static_cast<std::int64_t>(i), *c.mask)[2] == 0) r.mask[i] = 1;
      }
    }
  }
  if (c.bias) r.bias = random_values(*c.bias, dtype, seed + 4);
  const std::int64_t batch = std::max({c.q[0], c.k[0], c.v[0]});
  const std::int64_t heads = std::max({c.q[1], c.k[1], c.v[1]});
  const std::int64_t sq = c.q[2], sk = c.k[2], d = c.q[3], dv = c.v[3];
  r.out_shape = Shape{batch, heads, sq, dv};
  r.grad = random_values(r.out_shape, dtype, seed + 5, -1, 1);
  const double scale = c.options.scale ? *c.options.scale : 1.0 / std::sqrt(static_cast<double>(d));
  r.out.assign(static_cast<std::size_t>(r.out_shape.num_elements()), 0.0);
  r.dq.assign(r.q.size(), 0.0);
  r.dk.assign(r.k.size(), 0.0);
  r.dv.assign(r.v.size(), 0.0);
  std::vector<double> p(static_cast<std::size_t>(sk)), dp(static_cast<std::size_t>(sk));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < sq; ++i) {
        double max = -std::numeric_limits<double>::infinity();
        std::vector<bool> excluded(static_cast<std::size_t>(sk), false);
        for (std::int64_t j = 0; j < sk; ++j) {
          double s = 0;
          for (std::int64_t e = 0; e < d; ++e) {
            s += at4(r.q, c.q, b, h, i, e) * at4(r.k, c.k, b, h, j, e);
          }
          s *= scale;
          if (c.bias) s += at4(r.bias, *c.bias, b, h, i, j);
          excluded[static_cast<std::size_t>(j)] =
              (c.options.is_causal && j > i) || (c.mask && at4(r.mask, *c.mask, b, h, i, j) != 0);
          p[static_cast<std::size_t>(j)] = s;
          if (!excluded[static_cast<std::size_t>(j)]) max = std::max(max, s);
        }
        double sum = 0;
        for (std::int64_t j = 0; j < sk; ++j) {
          double& w = p[static_cast<std::size_t>(j)];
          w = excluded[static_cast<std::size_t>(j)] ? 0.0 : std::exp(w - max);
          sum += w;
        }
        double dot = 0;  // Σ_j P dP
        for (std::int64_t j = 0; j < sk; ++j) {
          double& w = p[static_cast<std::size_t>(j)];
          w = sum > 0 ? w / sum : 0.0;
          // Dropout: the output takes w m, and dP = m (g vᵀ).
          const double m =
              dropout_factor(c, static_cast<std::uint64_t>(((b * heads + h) * sq + i) * sk + j));
          double grad = 0;
          for (std::int64_t e = 0; e < dv; ++e) {
            const double g = r.grad[index4(r.out_shape, b, h, i, e)];
            grad += g * at4(r.v, c.v, b, h, j, e);
            r.out[index4(r.out_shape, b, h, i, e)] += w * m * at4(r.v, c.v, b, h, j, e);
            r.dv[index4(c.v, b, h, j, e)] += w * m * g;
          }
          dp[static_cast<std::size_t>(j)] = grad * m;
          dot += w * grad * m;
        }
        for (std::int64_t j = 0; j < sk && gradients; ++j) {
          const double ds =
              p[static_cast<std::size_t>(j)] * (dp[static_cast<std::size_t>(j)] - dot);
          for (std::int64_t e = 0; e < d; ++e) {
            r.dq[index4(c.q, b, h, i, e)] += scale * ds * at4(r.k, c.k, b, h, j, e);
            r.dk[index4(c.k, b, h, j, e)] += scale * ds * at4(r.q, c.q, b, h, i, e);
          }
        }
      }
    }
  }
  return r;
}

std::string describe(const Device& device, DType dtype, Layout layout, const AttentionCase& c) {
  return context(device, dtype, layout, c.q) + " k " + c.k.to_string() + (c.mask ? " mask" : "") +
         (c.bias ? " bias" : "") + (c.options.is_causal ? " causal" : "") +
         (c.options.dropout > 0 ? " dropout " + std::to_string(c.options.dropout) : "");
}

// The seed operand of a case with dropout, on device.
OptionalPrimitive dropout_seed(const AttentionCase& c, const Device& device) {
  if (c.options.dropout <= 0) return std::nullopt;
  return make_primitive({static_cast<double>(c.dropout_seed)}, Shape{1}, DType::I64,
                        Layout::Contiguous, device);
}

void check_attention(const Device& device, DType dtype, Layout layout, const AttentionCase& c,
                     std::uint64_t seed) {
  const AttentionRun r = attention_run(c, dtype, seed, false);
  std::optional<Primitive> pm, pb;
  if (c.mask) pm = make_primitive(r.mask, *c.mask, DType::Bool, other_layout(layout), device);
  if (c.bias) pb = make_primitive(r.bias, *c.bias, dtype, layout, device);
  const Primitive pq = make_primitive(r.q, c.q, dtype, layout, device);
  const Primitive pk = make_primitive(r.k, c.k, dtype, other_layout(layout), device);
  const Primitive pv = make_primitive(r.v, c.v, dtype, layout, device);
  // With dropout the seed is given (the tensor layer would draw one): the backend's op itself.
  const Primitive out =
      c.options.dropout > 0
          ? backend_for(device).attention(pq, pk, pv, pm, pb, dropout_seed(c, device), c.options)
          : detail::attention(pq, pk, pv, pm, pb, c.options);
  expect_close(detail::into_data(out), r.out_shape, dtype, representable(r.out, dtype),
               "attention " + describe(device, dtype, layout, c), 4.0);
}

// attention_query_backward and attention_key_value_backward against attention_run's float64
// gradients; the forward's output, which the ops take, is the float64 one rounded to dtype.
void check_attention_backward(const Device& device, DType dtype, Layout layout,
                              const AttentionCase& c, std::uint64_t seed) {
  const AttentionRun r = attention_run(c, dtype, seed, true);
  std::optional<Primitive> pm, pb;
  if (c.mask) pm = make_primitive(r.mask, *c.mask, DType::Bool, other_layout(layout), device);
  if (c.bias) pb = make_primitive(r.bias, *c.bias, dtype, layout, device);
  const Primitive pq = make_primitive(r.q, c.q, dtype, layout, device);
  const Primitive pk = make_primitive(r.k, c.k, dtype, other_layout(layout), device);
  const Primitive pv = make_primitive(r.v, c.v, dtype, layout, device);
  const Primitive po =
      make_primitive(representable(r.out, dtype), r.out_shape, dtype, Layout::Contiguous, device);
  const Primitive pg = make_primitive(r.grad, r.out_shape, dtype, other_layout(layout), device);
  const std::string what = describe(device, dtype, layout, c);
  Backend& backend = backend_for(device);
  const OptionalPrimitive seed_operand = dropout_seed(c, device);
  expect_close(detail::into_data(backend.attention_query_backward(pq, pk, pv, po, pg, pm, pb,
                                                                  seed_operand, c.options)),
               c.q, dtype, representable(r.dq, dtype), "attention_query_backward " + what, 8.0);
  const auto [got_k, got_v] =
      backend.attention_key_value_backward(pq, pk, pv, po, pg, pm, pb, seed_operand, c.options);
  expect_close(detail::into_data(got_k), c.k, dtype, representable(r.dk, dtype),
               "attention_key_value_backward dk " + what, 8.0);
  expect_close(detail::into_data(got_v), c.v, dtype, representable(r.dv, dtype),
               "attention_key_value_backward dv " + what, 8.0);
}

// c with dropout p, its mask made from seed.
AttentionCase with_dropout(AttentionCase c, double p, std::int64_t seed) {
  c.options.dropout = p;
  c.dropout_seed = seed;
  return c;
}

// The cases both attention rows take: broadcast batch and head dims, masks with and without a
// query dim, a bias, a scale, the causal cut, a fully masked row, no keys, no queries.
std::vector<AttentionCase> attention_cases() {
  std::vector<AttentionCase> cases = {
      {{2, 3, 5, 4}, {2, 3, 6, 4}, {2, 3, 6, 3}, std::nullopt, std::nullopt, {}},
      {{2, 3, 5, 4},
       {1, 3, 6, 4},
       {1, 3, 6, 2},
       Shape{2, 1, 5, 6},
       Shape{1, 3, 5, 6},
       {.scale = 0.3}},
      {{1, 2, 5, 4},
       {1, 2, 5, 4},
       {1, 2, 5, 4},
       std::nullopt,
       std::nullopt,
       {.scale = std::nullopt, .is_causal = true}},
      {{1, 2, 3, 4},
       {1, 2, 6, 4},
       {1, 2, 6, 4},
       Shape{1, 1, 3, 6},
       std::nullopt,
       {.scale = std::nullopt, .is_causal = true}},
      {{2, 1, 4, 3}, {2, 1, 5, 3}, {2, 1, 5, 3}, Shape{2, 1, 4, 5}, std::nullopt, {}, true},
      {{1, 1, 3, 4}, {1, 1, 0, 4}, {1, 1, 0, 2}, std::nullopt, std::nullopt, {}},  // no keys
      {{1, 2, 0, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, std::nullopt, std::nullopt, {}},  // no queries
      // Everything dropped.
      {{1, 1, 3, 4},
       {1, 1, 4, 4},
       {1, 1, 4, 2},
       std::nullopt,
       std::nullopt,
       {.scale = std::nullopt, .is_causal = false, .dropout = 1.0},
       false,
       12},
  };
  // Dropout on the cases with broadcasting, a mask, a bias and a scale; causal; a fully masked
  // row; no queries.
  cases.push_back(with_dropout(cases[1], 0.3, 918273));
  cases.push_back(with_dropout(cases[2], 0.5, (std::int64_t{1} << 52) + 77));
  cases.push_back(with_dropout(cases[4], 0.1, 5));
  cases.push_back(with_dropout(cases[6], 0.5, 3));
  return cases;
}

}  // namespace

KILN_CONFORMANCE_ROW(attention, ({"attention"})) {
  std::uint64_t seed = 7000;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const AttentionCase& c : attention_cases()) {
        check_attention(device, dtype, layout, c, seed += 5);
      }
    }
    // Blocks of query rows run in parallel; and rows too long for that run one block at a time.
    check_attention(device, dtype, Layout::Contiguous,
                    {{1, 2, 40, 64},
                     {1, 2, 300, 64},
                     {1, 2, 300, 8},
                     Shape{1, 1, 40, 300},
                     std::nullopt,
                     {.scale = std::nullopt, .is_causal = true}},
                    seed += 5);
    check_attention(
        device, dtype, Layout::Transposed,
        {{1, 1, 10, 64}, {1, 1, 600, 64}, {1, 1, 600, 16}, std::nullopt, Shape{1, 1, 10, 600}, {}},
        seed += 5);
    // Head dim 64 with dropout (the fused kernels' on cuda), keys cut by the tiles' ends.
    check_attention(device, dtype, Layout::Contiguous,
                    {{2, 2, 70, 64},
                     {2, 2, 150, 64},
                     {2, 2, 150, 64},
                     Shape{2, 1, 1, 150},
                     std::nullopt,
                     {.scale = std::nullopt, .is_causal = true, .dropout = 0.15},
                     false,
                     314159},
                    seed += 5);
  }
}

KILN_CONFORMANCE_ROW(attention_backward,
                     ({"attention_query_backward", "attention_key_value_backward"})) {
  std::uint64_t seed = 7500;
  for (DType dtype : kFloatDTypes) {
    for (Layout layout : kLayouts) {
      for (const AttentionCase& c : attention_cases()) {
        check_attention_backward(device, dtype, layout, c, seed += 5);
      }
    }
    // Head dims of 64 (the kernels' on cuda for 16-bit floats): query and key tiles cut by the
    // ends and the causal diagonal, a mask without a query dim, and a bias.
    if (dtype != DType::BF16 && dtype != DType::F16) continue;
    const AttentionCase diagonal{{1, 2, 70, 64},  {1, 2, 150, 64},
                                 {1, 2, 150, 64}, Shape{1, 1, 1, 150},
                                 std::nullopt,    {.scale = std::nullopt, .is_causal = true}};
    check_attention_backward(device, dtype, Layout::Contiguous, diagonal, seed += 5);
    check_attention_backward(
        device, dtype, Layout::Transposed,
        {{2, 2, 40, 64}, {2, 1, 90, 64}, {2, 1, 90, 64}, std::nullopt, Shape{1, 2, 40, 90}, {}},
        seed += 5);
    check_attention_backward(device, dtype, Layout::Contiguous, with_dropout(diagonal, 0.2, 271828),
                             seed += 5);
  }
}

}  // namespace kiln::conformance
