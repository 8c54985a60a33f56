// The fusion decorator against op-by-op execution and a float64 reference on 1,000 seeded random
// expression graphs: elementwise ops of one and two operands, scalars, comparisons and masks,
// casts through f64, broadcast operands, transposed and sliced leaves, intermediates read or
// dropped, random tensors made inside the graph (their values drawn when the op is called, so
// fused and op by op see the same numbers; the reference reads them from the op-by-op run), and
// an op along a dim at the end (sum, mean, max, softmax, log_softmax), over shapes large enough
// that the CPU runs most groups piece by piece or tile by tile; products (a group's head), whose
// following add of a broadcast row and relu the CUDA backend runs in the product's epilogue.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support/spread.h"

namespace kiln::fusion_test {
namespace {

using Dims = std::array<std::int64_t, 3>;

// A float64 tensor of rank 3 for the reference.
struct Ref {
  Dims shape{1, 1, 1};
  std::vector<double> v;

  double at(std::int64_t i, std::int64_t j, std::int64_t k) const {
    // Broadcast: a size-1 dim reads index 0.
    const std::int64_t a = shape[0] == 1 ? 0 : i;
    const std::int64_t b = shape[1] == 1 ? 0 : j;
    const std::int64_t c = shape[2] == 1 ? 0 : k;
    return v[static_cast<std::size_t>((a * shape[1] + b) * shape[2] + c)];
  }
};

Dims broadcast(const Dims& a, const Dims& b) {
  return {std::max(a[0], b[0]), std::max(a[1], b[1]), std::max(a[2], b[2])};
}

template <class F>
Ref map2(const Ref& x, const Ref& y, F f) {
  Ref out;
  out.shape = broadcast(x.shape, y.shape);
  out.v.reserve(static_cast<std::size_t>(out.shape[0] * out.shape[1] * out.shape[2]));
  for (std::int64_t i = 0; i < out.shape[0]; ++i)
    for (std::int64_t j = 0; j < out.shape[1]; ++j)
      for (std::int64_t k = 0; k < out.shape[2]; ++k)
        out.v.push_back(f(x.at(i, j, k), y.at(i, j, k)));
  return out;
}
template <class F>
Ref map1(const Ref& x, F f) {
  Ref out = x;
  for (double& e : out.v) e = f(e);
  return out;
}

// Along dim d: reduce (keeps the dim, size 1) with init and op, or normalise each line.
Ref reduce(const Ref& x, int d, double init, double (*op)(double, double), bool mean) {
  Ref out;
  out.shape = x.shape;
  out.shape[static_cast<std::size_t>(d)] = 1;
  out.v.assign(static_cast<std::size_t>(out.shape[0] * out.shape[1] * out.shape[2]), init);
  for (std::int64_t i = 0; i < x.shape[0]; ++i)
    for (std::int64_t j = 0; j < x.shape[1]; ++j)
      for (std::int64_t k = 0; k < x.shape[2]; ++k) {
        const std::int64_t oi = d == 0 ? 0 : i, oj = d == 1 ? 0 : j, ok = d == 2 ? 0 : k;
        double& slot =
            out.v[static_cast<std::size_t>((oi * out.shape[1] + oj) * out.shape[2] + ok)];
        slot = op(slot, x.at(i, j, k));
      }
  if (mean) {
    for (double& e : out.v) e /= static_cast<double>(x.shape[static_cast<std::size_t>(d)]);
  }
  return out;
}
Ref softmax(const Ref& x, int d, bool log) {
  const Ref max = reduce(
      x, d, -INFINITY, [](double a, double b) { return std::max(a, b); }, false);
  const Ref e = map2(x, max, [](double a, double m) { return std::exp(a - m); });
  const Ref sum = reduce(
      e, d, 0.0, [](double a, double b) { return a + b; }, false);
  if (log) {
    return map2(map2(x, max, [](double a, double m) { return a - m; }), sum,
                [](double a, double s) { return a - std::log(s); });
  }
  return map2(e, sum, [](double a, double s) { return a / s; });
}

// One instruction of a random program: an op over earlier values (by index).
enum class Op {
  Exp,
  Tanh,
  Sigmoid,
  Neg,
  Abs,
  Square,
  Relu,
  Sin,
  Add,
  Sub,
  Mul,
  Max,
  Min,
  DivSafe,
  AddScalar,
  MulScalar,
  WhereGreater,  // where(a <= b, b, a): a comparison and a mask, continuous where a and b tie
  ThroughF64,    // cast to f64, tanh, cast back
  Random,        // a new random tensor (no operand): uniform or normal, maybe broadcast
  Matmul,        // a @ w, w [1, n, n] of its own (n: a's last dim), then maybe a bias and relu
};
constexpr int kUnaryOps = 8, kBinaryOps = 6;
enum class Last { None, Sum, Mean, Max, Softmax, LogSoftmax };

struct Instr {
  Op op;
  int a = 0, b = 0;
  double scalar = 0;
  Dims shape{1, 1, 1};  // Random's
  bool normal = false;  // Random: normal(0, 1), else uniform(-2.5, 2.5)
};

struct Program {
  std::vector<Dims> leaf_shapes;
  std::vector<int> leaf_view;  // 0 plain, 1 transposed (dims 1, 2), 2 sliced along dim 2
  std::vector<Instr> instrs;
  std::vector<bool> held;  // per instruction: read after the graph like the result
  Last last = Last::None;
  int last_dim = 2;
};

// A small deterministic generator (the tests' values must not depend on the standard library).
struct Rng {
  std::uint64_t s;
  std::uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(s >> 33);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint32_t>(n)); }
};

Program generate(std::uint64_t seed) {
  Rng rng{seed * 0x9e3779b97f4a7c15ull + 7};
  Program p;
  static constexpr std::int64_t kA[] = {1, 2, 3};
  static constexpr std::int64_t kB[] = {1, 3, 17, 64, 129};
  static constexpr std::int64_t kC[] = {1, 7, 64, 300, 1000, 5000, 20000};
  Dims full{kA[rng.below(3)], kB[rng.below(5)], kC[rng.below(7)]};
  while (full[0] * full[1] * full[2] > 60000) full[2] = std::max<std::int64_t>(1, full[2] / 4);
  const int leaves = 1 + rng.below(3);
  std::vector<Dims> shapes;  // of every value so far
  for (int l = 0; l < leaves; ++l) {
    Dims d = full;
    // Leaves after the first may broadcast along some dims.
    if (l > 0) {
      for (auto& e : d)
        if (rng.below(3) == 0) e = 1;
    }
    p.leaf_shapes.push_back(d);
    shapes.push_back(d);
    p.leaf_view.push_back(rng.below(4) == 0 ? 1 + rng.below(2) : 0);
  }
  const int count = 1 + rng.below(10);
  for (int i = 0; i < count; ++i) {
    const int values = leaves + i;
    Instr in;
    const int kind = rng.below(12);
    if (kind == 11) {
      in.op = Op::Matmul;
    } else if (kind == 10) {
      in.op = Op::Random;
      in.shape = full;
      for (auto& e : in.shape)
        if (rng.below(4) == 0) e = 1;
      in.normal = rng.below(2) == 0;
    } else if (kind < 4) {
      in.op = static_cast<Op>(rng.below(kUnaryOps));
    } else if (kind < 8) {
      in.op = static_cast<Op>(kUnaryOps + rng.below(kBinaryOps));
    } else if (kind == 8) {
      in.op = rng.below(2) == 0 ? Op::AddScalar : Op::MulScalar;
      in.scalar = (rng.below(2001) - 1000) / 400.0;
    } else {
      in.op = rng.below(2) == 0 ? Op::WhereGreater : Op::ThroughF64;
    }
    // Mostly the newest value, so chains form; sometimes any earlier one (diamonds, re-reads).
    in.a = rng.below(3) == 0 ? rng.below(values) : values - 1;
    in.b = rng.below(values);
    // A product needs a's last dim whole (not broadcast) and small enough for an n x n weight.
    const Dims& a = shapes[static_cast<std::size_t>(in.a)];
    if (in.op == Op::Matmul && (a[2] != full[2] || a[2] > 300)) in.op = Op::Tanh;
    if (in.op == Op::Random) {
      shapes.push_back(in.shape);
    } else if (static_cast<int>(in.op) >= kUnaryOps &&
               static_cast<int>(in.op) < kUnaryOps + kBinaryOps) {
      shapes.push_back(broadcast(a, shapes[static_cast<std::size_t>(in.b)]));
    } else if (in.op == Op::WhereGreater) {
      shapes.push_back(broadcast(a, shapes[static_cast<std::size_t>(in.b)]));
    } else {
      shapes.push_back(a);
    }
    p.instrs.push_back(in);
    p.held.push_back(rng.below(4) == 0);
  }
  p.last = static_cast<Last>(rng.below(6));
  p.last_dim = rng.below(4) == 0 ? rng.below(3) : 2 - rng.below(2);
  return p;
}

std::vector<double> leaf_values(const Dims& d, std::uint32_t seed) {
  return test::spread(d[0] * d[1] * d[2], seed, -2.5, 2.5);
}

// The weight of the product at instruction i, [n, n] row-major, as f32 values: uniform within
// 1/sqrt(n), so products stay of the size of their inputs.
std::vector<double> weight_values(std::int64_t n, std::uint64_t seed, std::size_t i) {
  const double bound = 1 / std::sqrt(static_cast<double>(n));
  std::vector<double> w =
      test::spread(n * n, static_cast<std::uint32_t>(seed * 131 + i + 7), -bound, bound);
  for (double& e : w) e = static_cast<double>(static_cast<float>(e));
  return w;
}

// ---- the program on kiln ----
struct KilnRun {
  std::vector<Tensor<3>> held;
  std::vector<Tensor<3>> result;   // one
  std::vector<Tensor<3>> randoms;  // the Random ops' tensors, when asked for (they are then held)
};

Tensor<3> apply(const Instr& in, const Tensor<3>& a, const Tensor<3>& b) {
  switch (in.op) {
    case Op::Exp:
      return a.tanh().exp();  // bounded, so no overflow
    case Op::Tanh:
      return a.tanh();
    case Op::Sigmoid:
      return a.sigmoid();
    case Op::Neg:
      return -a;
    case Op::Abs:
      return a.abs();
    case Op::Square:
      return a.tanh().square();
    case Op::Relu:
      return activation::relu(a);
    case Op::Sin:
      return a.sin();
    case Op::Add:
      return a + b;
    case Op::Sub:
      return a - b;
    case Op::Mul:
      return a.tanh() * b;
    case Op::Max:
      return a.maximum(b);
    case Op::Min:
      return a.minimum(b);
    case Op::DivSafe:
      return a / (b.abs() + 1.0);
    case Op::AddScalar:
      return a + in.scalar;
    case Op::MulScalar:
      return a * in.scalar;
    case Op::WhereGreater:
      return a.mask_where(a.lower_equal(b), b);
    case Op::ThroughF64:
      return a.cast(DType::F64).tanh().cast(DType::F32);
    case Op::Random:  // made by run_kiln
    case Op::Matmul:
      break;
  }
  return a;
}

Tensor<3> finish(const Program& p, const Tensor<3>& last) {
  const std::int64_t d = p.last_dim;
  switch (p.last) {
    case Last::None:
      return last;
    case Last::Sum:
      return last.sum_dim(d);
    case Last::Mean:
      return last.mean_dim(d);
    case Last::Max:
      return last.max_dim(d);
    case Last::Softmax:
      return activation::softmax(last, d);
    case Last::LogSoftmax:
      return activation::log_softmax(last, d);
  }
  return last;
}

KilnRun run_kiln(const Program& p, Device device, std::uint64_t seed, bool keep_randoms) {
  device.seed(seed);
  std::vector<Tensor<3>> values;
  for (std::size_t l = 0; l < p.leaf_shapes.size(); ++l) {
    const Dims& d = p.leaf_shapes[l];
    const auto seed32 = static_cast<std::uint32_t>(seed * 31 + l);
    if (p.leaf_view[l] == 1) {
      // The same values, stored transposed: the leaf is a non-contiguous view.
      const Shape stored{d[0], d[2], d[1]};
      std::vector<double> v = leaf_values(d, seed32), t(v.size());
      for (std::int64_t i = 0; i < d[0]; ++i)
        for (std::int64_t j = 0; j < d[1]; ++j)
          for (std::int64_t k = 0; k < d[2]; ++k)
            t[static_cast<std::size_t>((i * d[2] + k) * d[1] + j)] =
                v[static_cast<std::size_t>((i * d[1] + j) * d[2] + k)];
      values.push_back(
          Tensor<3>::from_data(TensorData::from_vec(t, stored).convert(DType::F32), device)
              .swap_dims(1, 2));
    } else if (p.leaf_view[l] == 2) {
      // Stored with two extra columns, then narrowed: rows with gaps between them.
      const Dims wide{d[0], d[1], d[2] + 2};
      std::vector<double> v = leaf_values(d, seed32), w;
      for (std::int64_t r = 0; r < d[0] * d[1]; ++r) {
        w.push_back(99.0);
        for (std::int64_t k = 0; k < d[2]; ++k)
          w.push_back(v[static_cast<std::size_t>(r * d[2] + k)]);
        w.push_back(-99.0);
      }
      values.push_back(
          Tensor<3>::from_data(
              TensorData::from_vec(w, Shape{wide[0], wide[1], wide[2]}).convert(DType::F32), device)
              .narrow(2, 1, d[2]));
    } else {
      values.push_back(Tensor<3>::from_data(
          TensorData::from_vec(leaf_values(d, seed32), Shape{d[0], d[1], d[2]}).convert(DType::F32),
          device));
    }
  }
  KilnRun run;
  for (std::size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.op == Op::Random) {
      const Distribution d =
          in.normal ? Distribution::normal(0, 1) : Distribution::uniform(-2.5, 2.5);
      values.push_back(Tensor<3>::random({in.shape[0], in.shape[1], in.shape[2]}, d, device));
      if (keep_randoms) run.randoms.push_back(values.back());
    } else if (in.op == Op::Matmul) {
      const Tensor<3>& a = values[static_cast<std::size_t>(in.a)];
      const std::int64_t n = a.shape()[2];
      const Tensor<3> w = Tensor<3>::from_data(
          TensorData::from_vec(weight_values(n, seed, i), Shape{1, n, n}).convert(DType::F32),
          device);
      values.push_back(a.matmul(w));
    } else {
      values.push_back(apply(in, values[static_cast<std::size_t>(in.a)],
                             values[static_cast<std::size_t>(in.b)]));
    }
    if (p.held[i]) run.held.push_back(values.back());
  }
  run.result.push_back(finish(p, values.back()));
  return run;
}

// ---- the program in float64 ----
struct RefRun {
  std::vector<Ref> held;
  Ref result;
};

// randoms: the values of the Random ops' tensors, in order (read from an op-by-op run).
RefRun run_ref(const Program& p, std::uint64_t seed,
               const std::vector<std::vector<double>>& randoms) {
  std::size_t next_random = 0;
  std::vector<Ref> values;
  for (std::size_t l = 0; l < p.leaf_shapes.size(); ++l) {
    // The f32 values the kiln leaves hold.
    Ref r{p.leaf_shapes[l],
          leaf_values(p.leaf_shapes[l], static_cast<std::uint32_t>(seed * 31 + l))};
    for (double& e : r.v) e = static_cast<double>(static_cast<float>(e));
    values.push_back(std::move(r));
  }
  RefRun run;
  for (std::size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    const Ref& a = values[static_cast<std::size_t>(in.a)];
    const Ref& b = values[static_cast<std::size_t>(in.b)];
    const double s = static_cast<double>(static_cast<float>(in.scalar));
    Ref out;
    switch (in.op) {
      case Op::Exp:
        out = map1(a, [](double x) { return std::exp(std::tanh(x)); });
        break;
      case Op::Tanh:
        out = map1(a, [](double x) { return std::tanh(x); });
        break;
      case Op::Sigmoid:
        out = map1(a, [](double x) { return 1 / (1 + std::exp(-x)); });
        break;
      case Op::Neg:
        out = map1(a, [](double x) { return -x; });
        break;
      case Op::Abs:
        out = map1(a, [](double x) { return std::abs(x); });
        break;
      case Op::Square:
        out = map1(a, [](double x) { return std::tanh(x) * std::tanh(x); });
        break;
      case Op::Relu:
        out = map1(a, [](double x) { return x > 0 ? x : 0.0; });
        break;
      case Op::Sin:
        out = map1(a, [](double x) { return std::sin(x); });
        break;
      case Op::Add:
        out = map2(a, b, [](double x, double y) { return x + y; });
        break;
      case Op::Sub:
        out = map2(a, b, [](double x, double y) { return x - y; });
        break;
      case Op::Mul:
        out = map2(a, b, [](double x, double y) { return std::tanh(x) * y; });
        break;
      case Op::Max:
        out = map2(a, b, [](double x, double y) { return std::max(x, y); });
        break;
      case Op::Min:
        out = map2(a, b, [](double x, double y) { return std::min(x, y); });
        break;
      case Op::DivSafe:
        out = map2(a, b, [](double x, double y) { return x / (std::abs(y) + 1); });
        break;
      case Op::AddScalar:
        out = map1(a, [s](double x) { return x + s; });
        break;
      case Op::MulScalar:
        out = map1(a, [s](double x) { return x * s; });
        break;
      case Op::WhereGreater:
        out = map2(a, b, [](double x, double y) { return x <= y ? y : x; });
        break;
      case Op::ThroughF64:
        out = map1(a, [](double x) { return std::tanh(x); });
        break;
      case Op::Random:
        out = Ref{in.shape, randoms[next_random++]};
        break;
      case Op::Matmul: {
        const std::int64_t n = a.shape[2];
        const std::vector<double> w = weight_values(n, seed, i);
        out.shape = a.shape;
        out.v.assign(a.v.size(), 0.0);
        for (std::int64_t r = 0; r < a.shape[0] * a.shape[1]; ++r)
          for (std::int64_t k = 0; k < n; ++k) {
            const double x = a.v[static_cast<std::size_t>(r * n + k)];
            for (std::int64_t c = 0; c < n; ++c)
              out.v[static_cast<std::size_t>(r * n + c)] +=
                  x * w[static_cast<std::size_t>(k * n + c)];
          }
        break;
      }
    }
    values.push_back(out);
    if (p.held[i]) run.held.push_back(out);
  }
  Ref last = values.back();
  const int d = p.last_dim;
  auto add = [](double x, double y) { return x + y; };
  auto max = [](double x, double y) { return std::max(x, y); };
  switch (p.last) {
    case Last::None:
      break;
    case Last::Sum:
      last = reduce(last, d, 0.0, add, false);
      break;
    case Last::Mean:
      last = reduce(last, d, 0.0, add, true);
      break;
    case Last::Max:
      last = reduce(last, d, -INFINITY, max, false);
      break;
    case Last::Softmax:
      last = softmax(last, d, false);
      break;
    case Last::LogSoftmax:
      last = softmax(last, d, true);
      break;
  }
  run.result = last;
  return run;
}

// got against want: within tolerance relative to max(1, |want|), and the shapes equal.
::testing::AssertionResult close(const Tensor<3>& got, const std::vector<double>& want,
                                 const Dims& shape, double tolerance) {
  if (got.shape() != Shape{shape[0], shape[1], shape[2]}) {
    return ::testing::AssertionFailure() << "shape " << got.shape().to_string();
  }
  const std::vector<double> values = got.into_data().to_f64_vec();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double err = std::abs(values[i] - want[i]);
    if (!(err <= tolerance * std::max(1.0, std::abs(want[i])))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << values[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

std::string describe(const Program& p) {
  std::string s = "leaves";
  for (std::size_t l = 0; l < p.leaf_shapes.size(); ++l) {
    s += " [" + std::to_string(p.leaf_shapes[l][0]) + "," + std::to_string(p.leaf_shapes[l][1]) +
         "," + std::to_string(p.leaf_shapes[l][2]) + "]/view" + std::to_string(p.leaf_view[l]);
  }
  s += "; ops";
  for (const Instr& in : p.instrs) {
    s += " " + std::to_string(static_cast<int>(in.op)) + "(" + std::to_string(in.a) + "," +
         std::to_string(in.b) + ")";
  }
  s += "; last " + std::to_string(static_cast<int>(p.last)) + " dim " + std::to_string(p.last_dim);
  return s;
}

// KILN_RANDOM_GRAPHS_DEVICE=cuda:0 (scripts/gpu-check) runs the graphs on that device instead of
// the CPU: fused there against that device's op-by-op results.
Device graphs_device() {
  const char* text = std::getenv("KILN_RANDOM_GRAPHS_DEVICE");
  return text != nullptr && *text != '\0' ? Device::parse(text) : Device::cpu();
}

// KILN_RANDOM_GRAPHS_SHARD=i/n runs the seeds equal to i modulo n (scripts/gpu-check runs n
// processes at once: on the GPU most of the time is NVRTC compiling each graph's kernels).
std::pair<std::uint64_t, std::uint64_t> graphs_shard() {
  const char* text = std::getenv("KILN_RANDOM_GRAPHS_SHARD");
  unsigned long index = 0, count = 1;
  if (text != nullptr &&
      (std::sscanf(text, "%lu/%lu", &index, &count) != 2 || count == 0 || index >= count)) {
    ADD_FAILURE() << "KILN_RANDOM_GRAPHS_SHARD is '" << text << "'; want i/n with i < n";
    return {0, 1};
  }
  return {index, count};
}

TEST(FusionRandomGraphs, FusedMatchesOpByOpAndTheFloat64Reference) {
  const Device eager = graphs_device().without_fusion();
  const Device fused = eager.fused();
  constexpr int kGraphs = 1000;
  const auto [shard, shards] = graphs_shard();
  int failures = 0;
  for (std::uint64_t seed = shard; seed < kGraphs && failures < 5; seed += shards) {
    const Program p = generate(seed);
    const KilnRun f = run_kiln(p, fused, seed, false);
    const KilnRun e = run_kiln(p, eager, seed, true);
    std::vector<std::vector<double>> randoms;
    for (const Tensor<3>& t : e.randoms) randoms.push_back(t.into_data().to_f64_vec());
    const RefRun r = run_ref(p, seed, randoms);
    EXPECT_EQ(f.result[0].device(), fused);
    // The same kernels run in both, on pieces in one: equal but for the rounding of a reduction
    // split differently or a vector math path taken on a piece that happens to be contiguous.
    const auto fused_ok =
        close(f.result[0], e.result[0].into_data().to_f64_vec(), r.result.shape, 1e-5);
    const auto ref_ok = close(f.result[0], r.result.v, r.result.shape, 2e-4);
    EXPECT_TRUE(fused_ok) << "seed " << seed << ": fused vs op by op; " << describe(p);
    EXPECT_TRUE(ref_ok) << "seed " << seed << ": fused vs float64; " << describe(p);
    failures += !fused_ok || !ref_ok;
    for (std::size_t h = 0; h < f.held.size(); ++h) {
      const auto held_ok = close(f.held[h], r.held[h].v, r.held[h].shape, 2e-4);
      EXPECT_TRUE(held_ok) << "seed " << seed << ": held value " << h << "; " << describe(p);
      failures += !held_ok;
    }
    // The CUDA backend keeps a plan of each group it ran (cuda_fused.cpp): the same program again,
    // on new tensors of the same values (the device seeded alike), runs the plans and must give
    // the same results.
    if (fused.kind() != DeviceKind::Cpu) {
      const KilnRun again = run_kiln(p, fused, seed, false);
      const auto again_ok =
          close(again.result[0], e.result[0].into_data().to_f64_vec(), r.result.shape, 1e-5);
      EXPECT_TRUE(again_ok) << "seed " << seed << ": fused again (its plans) vs op by op; "
                            << describe(p);
      failures += !again_ok;
      for (std::size_t h = 0; h < again.held.size(); ++h) {
        const auto held_ok = close(again.held[h], r.held[h].v, r.held[h].shape, 2e-4);
        EXPECT_TRUE(held_ok) << "seed " << seed << ": held value " << h << " again; "
                             << describe(p);
        failures += !held_ok;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::fusion_test
