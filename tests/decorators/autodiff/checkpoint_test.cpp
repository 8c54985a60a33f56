// Checkpointing strategies: Balanced recomputes the outputs of memory-bound ops in backward
// instead of storing them. It must give the gradients StoreAll gives, with a lower peak of
// memory over forward + backward, also when the backward pass is itself recorded.
#include <cmath>
#include <cstdint>

#include "decorators/autodiff/test_support.h"

namespace kiln::autodiff_test {
namespace {

// The peak of bytes_in_use over a stretch of work, relative to where it started.
class PeakMeter {
 public:
  PeakMeter() : start_(kAd.memory_stats().bytes_in_use) { kAd.reset_peak_memory(); }
  std::int64_t peak() const { return kAd.memory_stats().peak_bytes_in_use - start_; }

 private:
  std::int64_t start_;
};

constexpr std::int64_t kRows = 256, kCols = 256;
constexpr int kBlocks = 30;

std::vector<double> column_values(double lo, double hi, std::uint32_t seed) {
  return spread(static_cast<std::size_t>(kCols), lo, hi, seed);
}

// h ← sin(tanh(h a_i + b_i)) c_i over kBlocks blocks, a_i b_i c_i per column ([1, kCols]).
struct Elementwise {
  std::vector<std::vector<double>> a, b, c;
  std::vector<double> x;

  Elementwise() : x(spread(static_cast<std::size_t>(kRows * kCols), -1, 1, 5)) {
    for (int i = 0; i < kBlocks; ++i) {
      a.push_back(column_values(0.5, 1.5, 100 + i));
      b.push_back(column_values(-0.3, 0.3, 200 + i));
      c.push_back(column_values(0.8, 1.2, 300 + i));
    }
  }

  struct Result {
    std::vector<std::vector<double>> da, db, dc;  // per block, per column
  };

  // Gradients of sum(h) in double, by hand: each element's trajectory forward, then back.
  Result reference() const {
    Result r;
    for (auto* g : {&r.da, &r.db, &r.dc}) {
      g->assign(kBlocks, std::vector<double>(static_cast<std::size_t>(kCols), 0.0));
    }
    std::vector<double> h(kBlocks), t(kBlocks), s(kBlocks);
    for (std::int64_t row = 0; row < kRows; ++row) {
      for (std::size_t col = 0; col < static_cast<std::size_t>(kCols); ++col) {
        double v = x[static_cast<std::size_t>(row * kCols) + col];
        for (int i = 0; i < kBlocks; ++i) {
          h[i] = v;
          t[i] = std::tanh(v * a[i][col] + b[i][col]);
          s[i] = std::sin(t[i]);
          v = s[i] * c[i][col];
        }
        double g = 1.0;
        for (int i = kBlocks - 1; i >= 0; --i) {
          r.dc[i][col] += g * s[i];
          const double du = g * c[i][col] * std::cos(t[i]) * (1 - t[i] * t[i]);
          r.da[i][col] += du * h[i];
          r.db[i][col] += du;
          g = du * a[i][col];
        }
      }
    }
    return r;
  }

  struct Run {
    std::vector<std::vector<double>> da, db, dc;
    std::int64_t peak = 0;
  };

  Run run(CheckpointStrategy strategy) const {
    std::vector<Tensor<2>> pa, pb, pc;
    for (int i = 0; i < kBlocks; ++i) {
      pa.push_back(tensor<2>(a[i], {1, kCols}).require_grad());
      pb.push_back(tensor<2>(b[i], {1, kCols}).require_grad());
      pc.push_back(tensor<2>(c[i], {1, kCols}).require_grad());
    }
    const auto input = tensor<2>(x, {kRows, kCols});
    Run out;
    Gradients g;
    {
      PeakMeter meter;
      {
        const CheckpointScope scope(strategy);
        auto h = input;
        for (int i = 0; i < kBlocks; ++i) h = (h * pa[i] + pb[i]).tanh().sin() * pc[i];
        const auto loss = h.sum();
        h = input;  // only the loss holds the graph now
        g = loss.backward();
      }
      out.peak = meter.peak();
    }
    for (int i = 0; i < kBlocks; ++i) {
      out.da.push_back(values(grad_of(pa[i], g)));
      out.db.push_back(values(grad_of(pb[i], g)));
      out.dc.push_back(values(grad_of(pc[i], g)));
    }
    return out;
  }
};

void expect_same(const std::vector<std::vector<double>>& got,
                 const std::vector<std::vector<double>>& want, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    expect_close(got[i], want[i], tolerance, what + " block " + std::to_string(i));
  }
}

// Bit for bit; reports how many values differ and the first one.
void expect_identical(const std::vector<std::vector<double>>& got,
                      const std::vector<std::vector<double>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t differing = 0;
  std::string first;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    for (std::size_t j = 0; j < got[i].size(); ++j) {
      if (got[i][j] == want[i][j]) continue;
      if (differing++ == 0) {
        first = "block " + std::to_string(i) + " [" + std::to_string(j) +
                "]: " + std::to_string(got[i][j]) + " vs " + std::to_string(want[i][j]);
      }
    }
  }
  EXPECT_EQ(differing, 0u) << what << ": first difference at " << first;
}

TEST(AutodiffCheckpoint, DeepElementwiseNetworkSameGradientsLowerPeak) {
  const Elementwise net;
  const auto store_all = net.run(CheckpointStrategy::StoreAll);
  const auto balanced = net.run(CheckpointStrategy::Balanced);

  // StoreAll against double precision; Balanced against StoreAll to the bit, since recomputing
  // runs the same kernels on the same values.
  const auto want = net.reference();
  expect_same(store_all.da, want.da, 2e-4, "StoreAll da");
  expect_same(store_all.db, want.db, 2e-4, "StoreAll db");
  expect_same(store_all.dc, want.dc, 2e-4, "StoreAll dc");
  expect_identical(balanced.da, store_all.da, "Balanced da");
  expect_identical(balanced.db, store_all.db, "Balanced db");
  expect_identical(balanced.dc, store_all.dc, "Balanced dc");

  const std::int64_t activation = kRows * kCols * 4;
  EXPECT_GE(store_all.peak, kBlocks * activation) << "StoreAll keeps activations of every block";
  EXPECT_LT(balanced.peak, store_all.peak)
      << "Balanced peaked at " << balanced.peak / activation << " activations, StoreAll at "
      << store_all.peak / activation;
}

// h ← sin(tanh(h W_i + b_i)) over a few layers: matmul outputs are stored by both strategies,
// the elementwise tail of each layer only by StoreAll.
struct Layered {
  static constexpr std::int64_t kBatch = 256, kWidth = 128;
  static constexpr int kLayers = 8;
  std::vector<std::vector<double>> w, b;
  std::vector<double> x;

  Layered() : x(spread(static_cast<std::size_t>(kBatch * kWidth), -1, 1, 9)) {
    const double bound = 1.5 / std::sqrt(static_cast<double>(kWidth));
    for (int i = 0; i < kLayers; ++i) {
      w.push_back(spread(static_cast<std::size_t>(kWidth * kWidth), -bound, bound, 400 + i));
      b.push_back(spread(static_cast<std::size_t>(kWidth), -0.2, 0.2, 500 + i));
    }
  }

  struct Run {
    std::vector<std::vector<double>> dw, db;
    std::int64_t peak = 0;
  };

  Run run(CheckpointStrategy strategy) const {
    std::vector<Tensor<2>> pw, pb;
    for (int i = 0; i < kLayers; ++i) {
      pw.push_back(tensor<2>(w[i], {kWidth, kWidth}).require_grad());
      pb.push_back(tensor<2>(b[i], {1, kWidth}).require_grad());
    }
    const auto input = tensor<2>(x, {kBatch, kWidth});
    Run out;
    Gradients g;
    {
      PeakMeter meter;
      Tensor<1> loss = [&] {
        const CheckpointScope scope(strategy);
        auto h = input;
        for (int i = 0; i < kLayers; ++i) h = (h.matmul(pw[i]) + pb[i]).tanh().sin().exp();
        return h.mean();
      }();
      g = loss.backward();  // outside the scope: a graph keeps the strategy it was recorded with
      out.peak = meter.peak();
    }
    for (int i = 0; i < kLayers; ++i) {
      out.dw.push_back(values(grad_of(pw[i], g)));
      out.db.push_back(values(grad_of(pb[i], g)));
    }
    return out;
  }
};

TEST(AutodiffCheckpoint, MatmulLayersSameGradientsLowerPeak) {
  const Layered net;
  const auto store_all = net.run(CheckpointStrategy::StoreAll);
  const auto balanced = net.run(CheckpointStrategy::Balanced);
  expect_identical(balanced.dw, store_all.dw, "Balanced dW");
  expect_identical(balanced.db, store_all.db, "Balanced db");
  const std::int64_t activation = Layered::kBatch * Layered::kWidth * 4;
  EXPECT_LT(balanced.peak, store_all.peak)
      << "Balanced peaked at " << balanced.peak / activation << " activations, StoreAll at "
      << store_all.peak / activation;
}

TEST(AutodiffCheckpoint, TheStrategyIsPerThreadAndRestoredByTheScope) {
  EXPECT_EQ(checkpointing(), CheckpointStrategy::StoreAll);
  {
    const CheckpointScope outer(CheckpointStrategy::Balanced);
    EXPECT_EQ(checkpointing(), CheckpointStrategy::Balanced);
    {
      const CheckpointScope inner(CheckpointStrategy::StoreAll);
      EXPECT_EQ(checkpointing(), CheckpointStrategy::StoreAll);
    }
    EXPECT_EQ(checkpointing(), CheckpointStrategy::Balanced);
  }
  EXPECT_EQ(checkpointing(), CheckpointStrategy::StoreAll);
}

// f(x) = sum(sin(x) x²) through recomputed values, differentiated twice:
// f' = cos(x) x² + 2x sin(x), f'' = (2 - x²) sin(x) + 4x cos(x).
TEST(AutodiffCheckpoint, BalancedWithCreateGraph) {
  const std::vector<double> xv = {-1.5, -0.4, 0.3, 1.1, 2.0};
  for (CheckpointStrategy strategy : {CheckpointStrategy::StoreAll, CheckpointStrategy::Balanced}) {
    SCOPED_TRACE(strategy == CheckpointStrategy::Balanced ? "Balanced" : "StoreAll");
    const CheckpointScope scope(strategy);
    const auto x = tensor<1>(xv, {5}, kAd, DType::F64).require_grad();
    const Gradients first = (x.sin() * x * x).sum().backward({.create_graph = true});
    const auto gx = grad_of(x, first);
    ASSERT_TRUE(gx.is_require_grad());
    const Gradients second = gx.sum().backward();
    std::vector<double> want1, want2;
    for (double v : xv) {
      want1.push_back(std::cos(v) * v * v + 2 * v * std::sin(v));
      want2.push_back((2 - v * v) * std::sin(v) + 4 * v * std::cos(v));
    }
    expect_close(values(gx), want1, 1e-12, "f'");
    expect_close(values(grad_of(x, second)), want2, 1e-12, "f''");
  }
}

// Hessian-vector products of a deep elementwise network. Every element goes through the same
// scalar map phi, so H v = phi''(x) v elementwise; phi'' is taken as a central difference of
// phi' (chain rule in double).
constexpr int kSmallBlocks = 6;
double block_scale(int i) { return 0.9 + 0.1 * i; }
double block_shift(int i) { return 0.05 * i; }

double phi_prime(double x) {
  double d = 1.0;
  for (int i = 0; i < kSmallBlocks; ++i) {
    const double t = std::tanh(x * block_scale(i) + block_shift(i));
    d *= block_scale(i) * (1 - t * t) * std::cos(t) * 1.1;
    x = std::sin(t) * 1.1;
  }
  return d;
}

TEST(AutodiffCheckpoint, BalancedHessianVectorProduct) {
  const std::vector<double> xv = spread(12, -1, 1, 77), vv = spread(12, -1, 1, 78);
  std::vector<double> want;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double e = 1e-5;
    want.push_back((phi_prime(xv[i] + e) - phi_prime(xv[i] - e)) / (2 * e) * vv[i]);
  }
  for (CheckpointStrategy strategy : {CheckpointStrategy::StoreAll, CheckpointStrategy::Balanced}) {
    SCOPED_TRACE(strategy == CheckpointStrategy::Balanced ? "Balanced" : "StoreAll");
    const CheckpointScope scope(strategy);
    const auto x = tensor<2>(xv, {3, 4}, kAd, DType::F64).require_grad();
    const auto v = tensor<2>(vv, {3, 4}, kAd, DType::F64);
    auto h = x;
    for (int i = 0; i < kSmallBlocks; ++i) {
      h = (h * block_scale(i) + block_shift(i)).tanh().sin() * 1.1;
    }
    const Gradients first = h.sum().backward({.create_graph = true});
    const Gradients second = (grad_of(x, first) * v).sum().backward();
    expect_close(values(grad_of(x, second)), want, 1e-7, "H v");
  }
}

}  // namespace
}  // namespace kiln::autodiff_test
