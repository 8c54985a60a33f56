// Higher-order derivatives through BackwardOptions{.create_graph = true}: the backward pass is
// recorded, so its gradients can be differentiated again. Checked against closed forms in
// float64: second derivatives of elementwise maths, Hessian-vector products of matmul,
// reductions, softmax and log_softmax, and a third derivative.
#include <cmath>
#include <functional>

#include "decorators/autodiff/test_support.h"

namespace kiln::autodiff_test {
namespace {

constexpr double kTight = 1e-11;

template <std::size_t D>
Tensor<D> f64(const std::vector<double>& v, Shape shape) {
  return tensor<D>(v, std::move(shape), kAd, DType::F64);
}

struct SecondOrderCase {
  const char* name;
  std::function<Tensor<1>(const Tensor<1>&)> f;
  std::function<double(double)> d1, d2;
  double lo, hi;
};

// f applied elementwise and summed, so d/dx of sum(f'(x)) is f''(x) element by element.
TEST(AutodiffHigherOrder, SecondDerivativesOfElementwiseMaths) {
  const std::vector<SecondOrderCase> cases = {
      {"sin(x) x²", [](const Tensor<1>& x) { return x.sin() * x * x; },
       [](double x) { return std::cos(x) * x * x + 2 * x * std::sin(x); },
       [](double x) { return (2 - x * x) * std::sin(x) + 4 * x * std::cos(x); }, -2, 2},
      {"exp", [](const Tensor<1>& x) { return x.exp(); }, [](double x) { return std::exp(x); },
       [](double x) { return std::exp(x); }, -2, 2},
      {"tanh", [](const Tensor<1>& x) { return x.tanh(); },
       [](double x) { return 1 - std::tanh(x) * std::tanh(x); },
       [](double x) { return -2 * std::tanh(x) * (1 - std::tanh(x) * std::tanh(x)); }, -2, 2},
      {"log", [](const Tensor<1>& x) { return x.log(); }, [](double x) { return 1 / x; },
       [](double x) { return -1 / (x * x); }, 0.3, 3},
      {"x / (1 + x²)", [](const Tensor<1>& x) { return x / (x * x + 1.0); },
       [](double x) { return (1 - x * x) / std::pow(1 + x * x, 2); },
       [](double x) { return 2 * x * (x * x - 3) / std::pow(1 + x * x, 3); }, -2, 2},
      {"sqrt(x) cos(x)", [](const Tensor<1>& x) { return x.sqrt() * x.cos(); },
       [](double x) { return std::cos(x) / (2 * std::sqrt(x)) - std::sqrt(x) * std::sin(x); },
       [](double x) {
         return -std::cos(x) / (4 * std::pow(x, 1.5)) - std::sin(x) / std::sqrt(x) -
                std::sqrt(x) * std::cos(x);
       },
       0.3, 3},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<double> xv = spread(7, c.lo, c.hi, 11);
    const auto x = f64<1>(xv, {7}).require_grad();
    const Gradients first = c.f(x).sum().backward({.create_graph = true});
    const auto gx = grad_of(x, first);
    EXPECT_TRUE(gx.is_require_grad()) << "create_graph gives tracked gradients";
    const Gradients second = gx.sum().backward();
    std::vector<double> want1, want2;
    for (double v : xv) {
      want1.push_back(c.d1(v));
      want2.push_back(c.d2(v));
    }
    expect_close(values(gx), want1, kTight, "first derivative");
    expect_close(values(grad_of(x, second)), want2, kTight, "second derivative");
  }
}

TEST(AutodiffHigherOrder, FirstOrderResultsEqualThoseOfAPlainBackward) {
  const std::vector<double> xv = spread(6, -1.5, 1.5, 3);
  for (DType dtype : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto x = tensor<2>(xv, {2, 3}, kAd, dtype).require_grad();
    const auto w = tensor<2>(spread(9, -1, 1, 4), {3, 3}, kAd, dtype).require_grad();
    const auto loss = (x.matmul(w).tanh() * x.exp()).mean();
    const Gradients plain = loss.backward({.retain_graph = true});
    const Gradients recorded = loss.backward({.create_graph = true});
    EXPECT_FALSE(grad_of(x, plain).is_require_grad());
    EXPECT_TRUE(grad_of(x, recorded).is_require_grad());
    EXPECT_TRUE(grad_of(w, recorded).is_require_grad());
    EXPECT_EQ(grad_of(x, recorded).dtype(), dtype);
    EXPECT_EQ(values(grad_of(x, recorded)), values(grad_of(x, plain)));
    EXPECT_EQ(values(grad_of(w, recorded)), values(grad_of(w, plain)));
  }
}

// f(x) = sum((A x)²) has gradient 2 Aᵀ A x and Hessian 2 AᵀA: H v = 2 Aᵀ (A v).
TEST(AutodiffHigherOrder, HessianVectorProductOfAQuadraticForm) {
  const std::vector<double> av = spread(12, -1, 1, 21), xv = spread(3, -1, 1, 22),
                            vv = spread(3, -1, 1, 23);
  const auto a = f64<2>(av, {4, 3});
  const auto x = f64<2>(xv, {3, 1}).require_grad();
  const auto v = f64<2>(vv, {3, 1});
  const Gradients first = a.matmul(x).square().sum().backward({.create_graph = true});
  const Gradients second = (grad_of(x, first) * v).sum().backward();
  std::vector<double> ax(4, 0), avv(4, 0), want_g(3, 0), want_hv(3, 0);
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 3; ++k) {
      ax[i] += av[i * 3 + k] * xv[k];
      avv[i] += av[i * 3 + k] * vv[k];
    }
  }
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < 4; ++i) {
      want_g[k] += 2 * av[i * 3 + k] * ax[i];
      want_hv[k] += 2 * av[i * 3 + k] * avv[i];
    }
  }
  expect_close(values(grad_of(x, first)), want_g, kTight, "2 AᵀA x");
  expect_close(values(grad_of(x, second)), want_hv, kTight, "2 AᵀA v");
}

// With A tracked too: d/dA <∇ₓf, v> = 2 (A v) xᵀ + 2 (A x) vᵀ, a mixed second derivative.
TEST(AutodiffHigherOrder, MixedSecondDerivativeThroughMatmul) {
  const std::vector<double> av = spread(12, -1, 1, 31), xv = spread(3, -1, 1, 32),
                            vv = spread(3, -1, 1, 33);
  const auto a = f64<2>(av, {4, 3}).require_grad();
  const auto x = f64<2>(xv, {3, 1}).require_grad();
  const auto v = f64<2>(vv, {3, 1});
  const Gradients first = a.matmul(x).square().sum().backward({.create_graph = true});
  const Gradients second = (grad_of(x, first) * v).sum().backward();
  std::vector<double> ax(4, 0), avv(4, 0), want_a, want_x(3, 0);
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 3; ++k) {
      ax[i] += av[i * 3 + k] * xv[k];
      avv[i] += av[i * 3 + k] * vv[k];
    }
  }
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 3; ++k) want_a.push_back(2 * avv[i] * xv[k] + 2 * ax[i] * vv[k]);
  }
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < 4; ++i) want_x[k] += 2 * av[i * 3 + k] * avv[i];
  }
  expect_close(values(grad_of(a, second)), want_a, kTight, "d/dA <grad_x f, v>");
  expect_close(values(grad_of(x, second)), want_x, kTight, "d/dx <grad_x f, v>");
}

// H v for f(x) given H as a function of (i, j).
std::vector<double> contract(const std::function<double(std::size_t, std::size_t)>& h,
                             const std::vector<double>& v) {
  std::vector<double> out(v.size(), 0.0);
  for (std::size_t i = 0; i < v.size(); ++i) {
    for (std::size_t j = 0; j < v.size(); ++j) out[i] += h(i, j) * v[j];
  }
  return out;
}

std::vector<double> hvp(const std::function<Tensor<1>(const Tensor<1>&)>& f,
                        const std::vector<double>& xv, const std::vector<double>& vv) {
  const auto n = static_cast<std::int64_t>(xv.size());
  const auto x = f64<1>(xv, {n}).require_grad();
  const Gradients first = f(x).backward({.create_graph = true});
  const Gradients second = (grad_of(x, first) * f64<1>(vv, {n})).sum().backward();
  return values(grad_of(x, second));
}

TEST(AutodiffHigherOrder, HessianVectorProductsOfReductions) {
  const std::vector<double> xv = {0.7, -1.2, 1.5, 0.4, -0.9}, vv = {0.3, 1.0, -0.5, 2.0, -1.1};
  const double n = 5;
  double sum = 0, prod = 1;
  for (double x : xv) {
    sum += x;
    prod *= x;
  }
  // sum(x)²: H = 2 (all ones).
  expect_close(hvp([](const Tensor<1>& x) { return x.sum().square(); }, xv, vv),
               contract([](std::size_t, std::size_t) { return 2.0; }, vv), kTight, "sum²");
  // mean(x)²: H = 2 / n².
  expect_close(hvp([](const Tensor<1>& x) { return x.mean().square(); }, xv, vv),
               contract([&](std::size_t, std::size_t) { return 2.0 / (n * n); }, vv), kTight,
               "mean²");
  // sum(x) · mean(x) · 3 = 3 sum² / n: H = 6 / n.
  expect_close(hvp([](const Tensor<1>& x) { return x.sum() * x.mean() * 3.0; }, xv, vv),
               contract([&](std::size_t, std::size_t) { return 6.0 / n; }, vv), kTight,
               "sum · mean");
  // prod(x): H_ij = prod / (x_i x_j) off the diagonal, 0 on it.
  expect_close(
      hvp([](const Tensor<1>& x) { return x.prod(); }, xv, vv),
      contract([&](std::size_t i, std::size_t j) { return i == j ? 0.0 : prod / (xv[i] * xv[j]); },
               vv),
      kTight, "prod");
  // exp(sum(x)) · sum: a reduction feeding elementwise maths. With s = sum(x),
  // f = s eˢ and H = (s + 2) eˢ everywhere.
  expect_close(hvp([](const Tensor<1>& x) { return x.sum().exp() * x.sum(); }, xv, vv),
               contract([&](std::size_t, std::size_t) { return (sum + 2) * std::exp(sum); }, vv),
               kTight, "s exp(s)");
}

TEST(AutodiffHigherOrder, HessianVectorProductsOfRowReductions) {
  // f(X) = sum over rows of (sum_j X_ij)² + (mean_j X_ij)³: rows are independent.
  const std::vector<double> xv = {0.5, -0.2, 0.9, 1.1, 0.3, -0.7}, vv = {1, 0.5, -1, 0.2, 2, -0.3};
  const auto x = f64<2>(xv, {2, 3}).require_grad();
  const auto f = x.sum_dim(1).square().sum() + x.mean_dim(1).powf_scalar(3.0).sum();
  const Gradients first = f.backward({.create_graph = true});
  const Gradients second = (grad_of(x, first) * f64<2>(vv, {2, 3})).sum().backward();
  std::vector<double> want;
  for (int r = 0; r < 2; ++r) {
    double s = 0, sv = 0;
    for (int j = 0; j < 3; ++j) {
      s += xv[r * 3 + j];
      sv += vv[r * 3 + j];
    }
    // d²/dX_ij dX_ik of s² + (s/3)³ = 2 + 6 (s/3) / 9, the same for every pair in the row.
    const double h = 2 + 6 * (s / 3) / 9;
    for (int j = 0; j < 3; ++j) want.push_back(h * sv);
  }
  expect_close(values(grad_of(x, second)), want, kTight, "row reductions");
}

// f(x) = <softmax(x), w> per row. With s = softmax(x), μ = <s, w>, g = s ⊙ (w - μ):
// H_ij = s_i (δ_ij - s_j)(w_i - μ) - s_i g_j, so H v = s ⊙ (w - μ) ⊙ (v - <s, v>) - s <g, v>.
TEST(AutodiffHigherOrder, HessianVectorProductOfSoftmax) {
  const std::vector<double> xv = {0.2, -1.0, 0.7, 1.5, -0.3, 0.4, 0.9, -0.6},
                            wv = {1.0, -2.0, 0.5, 0.3, 1.2, -0.7, 0.1, 2.0},
                            vv = {0.4, 0.1, -1.0, 0.6, -0.2, 0.8, 1.1, -0.5};
  for (std::int64_t dim : {1, -1}) {
    const auto x = f64<2>(xv, {2, 4}).require_grad();
    const auto f = (activation::softmax(x, dim) * f64<2>(wv, {2, 4})).sum();
    const Gradients first = f.backward({.create_graph = true});
    const auto gx = grad_of(x, first);
    const Gradients second = (gx * f64<2>(vv, {2, 4})).sum().backward();
    std::vector<double> want_g, want_hv;
    for (int r = 0; r < 2; ++r) {
      std::vector<double> s(4);
      double total = 0;
      for (int j = 0; j < 4; ++j) total += s[j] = std::exp(xv[r * 4 + j]);
      double mu = 0, sv = 0;
      for (int j = 0; j < 4; ++j) {
        s[j] /= total;
        mu += s[j] * wv[r * 4 + j];
        sv += s[j] * vv[r * 4 + j];
      }
      std::vector<double> g(4);
      double gv = 0;
      for (int j = 0; j < 4; ++j) {
        g[j] = s[j] * (wv[r * 4 + j] - mu);
        gv += g[j] * vv[r * 4 + j];
      }
      for (int j = 0; j < 4; ++j) {
        want_g.push_back(g[j]);
        want_hv.push_back(s[j] * (wv[r * 4 + j] - mu) * (vv[r * 4 + j] - sv) - s[j] * gv);
      }
    }
    expect_close(values(gx), want_g, kTight, "softmax gradient");
    expect_close(values(grad_of(x, second)), want_hv, kTight, "softmax H v");
  }
}

// f(x) = <log_softmax(x), w> per row: ∇f = w - s Σw, H = -Σw (diag(s) - s sᵀ),
// so H v = -Σw · s ⊙ (v - <s, v>).
TEST(AutodiffHigherOrder, HessianVectorProductOfLogSoftmax) {
  const std::vector<double> xv = {0.2, -1.0, 0.7, 1.5, -0.3, 0.4, 0.9, -0.6},
                            wv = {0.0, 1.0, 0.0, 0.0, 0.25, 0.25, 0.5, 0.0},
                            vv = {0.4, 0.1, -1.0, 0.6, -0.2, 0.8, 1.1, -0.5};
  const auto x = f64<2>(xv, {2, 4}).require_grad();
  const auto f = (activation::log_softmax(x, 1) * f64<2>(wv, {2, 4})).sum();
  const Gradients first = f.backward({.create_graph = true});
  const auto gx = grad_of(x, first);
  const Gradients second = (gx * f64<2>(vv, {2, 4})).sum().backward();
  std::vector<double> want_g, want_hv;
  for (int r = 0; r < 2; ++r) {
    std::vector<double> s(4);
    double total = 0, wsum = 0, sv = 0;
    for (int j = 0; j < 4; ++j) {
      total += s[j] = std::exp(xv[r * 4 + j]);
      wsum += wv[r * 4 + j];
    }
    for (int j = 0; j < 4; ++j) sv += (s[j] /= total) * vv[r * 4 + j];
    for (int j = 0; j < 4; ++j) {
      want_g.push_back(wv[r * 4 + j] - s[j] * wsum);
      want_hv.push_back(-wsum * s[j] * (vv[r * 4 + j] - sv));
    }
  }
  expect_close(values(gx), want_g, kTight, "log_softmax gradient");
  expect_close(values(grad_of(x, second)), want_hv, kTight, "log_softmax H v");
}

// p(x) = x⁴ + 2x³ - x: p' = 4x³ + 6x² - 1, p'' = 12x² + 12x, p''' = 24x + 12.
TEST(AutodiffHigherOrder, ThirdDerivativeOfAPolynomial) {
  const std::vector<double> xv = {-1.5, -0.5, 0.25, 1.0, 2.0};
  const std::vector<std::pair<const char*, std::function<Tensor<1>(const Tensor<1>&)>>> forms = {
      {"products", [](const Tensor<1>& x) { return x * x * x * x + x * x * x * 2.0 - x; }},
      {"powers", [](const Tensor<1>& x) { return x.powf_scalar(4) + x.powf_scalar(3) * 2.0 - x; }},
  };
  for (const auto& [name, p] : forms) {
    SCOPED_TRACE(name);
    const auto x = f64<1>(xv, {5}).require_grad();
    const Gradients g1 = p(x).sum().backward({.create_graph = true});
    const auto d1 = grad_of(x, g1);
    const Gradients g2 = d1.sum().backward({.create_graph = true});
    const auto d2 = grad_of(x, g2);
    EXPECT_TRUE(d2.is_require_grad());
    const Gradients g3 = d2.sum().backward();
    const auto d3 = grad_of(x, g3);
    EXPECT_FALSE(d3.is_require_grad());
    std::vector<double> w1, w2, w3;
    for (double v : xv) {
      w1.push_back(4 * v * v * v + 6 * v * v - 1);
      w2.push_back(12 * v * v + 12 * v);
      w3.push_back(24 * v + 12);
    }
    expect_close(values(d1), w1, kTight, "p'");
    expect_close(values(d2), w2, kTight, "p''");
    expect_close(values(d3), w3, kTight, "p'''");
  }
}

TEST(AutodiffHigherOrder, ASeededCreateGraphBackward) {
  // y = x³ seeded with s: ∇ = 3x² s; differentiating <∇, 1> again gives 6x s.
  const std::vector<double> xv = {0.5, -1.0, 2.0}, sv = {1.0, 2.0, -0.5};
  const auto x = f64<1>(xv, {3}).require_grad();
  const Gradients first = (x * x * x).backward(f64<1>(sv, {3}), {.create_graph = true});
  const Gradients second = grad_of(x, first).sum().backward();
  std::vector<double> want;
  for (std::size_t i = 0; i < xv.size(); ++i) want.push_back(6 * xv[i] * sv[i]);
  expect_close(values(grad_of(x, second)), want, kTight, "6 x s");
}

// A tracked seed of another dtype than the output (a bf16 seed of an f64 loss) is cast on the
// graph: the recorded gradient stays differentiable in the seed. Before, the cast was made off
// the graph and d/ds came back zero.
TEST(AutodiffHigherOrder, ASeedOfAnotherDtypeStaysDifferentiable) {
  // y = x³ seeded with s: ∇ = 3x² s; d<∇, 1>/ds = 3x².
  const std::vector<double> xv = {0.5, -1.0, 2.0}, sv = {1.0, 2.0, -0.5};
  const auto x = f64<1>(xv, {3}).require_grad();
  const auto s = tensor<1>(sv, {3}, kAd, DType::BF16).require_grad();
  const Gradients first = (x * x * x).backward(s, {.create_graph = true});
  const Gradients second = grad_of(x, first).sum().backward();
  std::vector<double> want;
  for (double v : xv) want.push_back(3 * v * v);
  expect_close(values(grad_of(s, second)), want, 1e-2, "3 x² through the seed's cast");
}

}  // namespace
}  // namespace kiln::autodiff_test
