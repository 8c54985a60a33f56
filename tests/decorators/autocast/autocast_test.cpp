// AutocastScope: the dtype each op group runs in inside a scope (ops.def's amp column), values
// against float64 references of the rounded inputs, gradients through autodiff, nesting,
// threads, the weight-cast cache and the errors.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <thread>
#include <vector>

#include "contract/op_code.h"
#include "decorators/autocast/autocast_layer.h"
#include "runtime/registry.h"
#include "support/spread.h"

namespace kiln {
namespace {

const Device kCpu = Device::cpu();

template <std::size_t D>
Tensor<D> tensor(std::vector<std::int64_t> shape, std::uint32_t seed, Device device = kCpu,
                 DType dtype = DType::F32) {
  const Shape s(shape);
  const auto values = test::spread(s.num_elements(), seed, -1.0, 1.0);
  return Tensor<D>::from_data(TensorData::from_vec(values, s).convert(dtype), device);
}

template <std::size_t D, class K>
std::vector<double> values(const Tensor<D, K>& t) {
  return t.into_data().to_f64_vec();
}

// v rounded to dtype (bf16 or f16) and back, as the scope's casts round.
std::vector<double> rounded(const std::vector<double>& v, DType dtype) {
  return TensorData::from_vec(v, Shape{static_cast<std::int64_t>(v.size())})
      .convert(dtype)
      .to_f64_vec();
}

// a [m, k] times b [k, n] in double.
std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b,
                            std::int64_t m, std::int64_t k, std::int64_t n) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

TEST(AutocastPolicy, TheAmpColumnFollowsPyTorchsLists) {
  auto policy = [](std::string_view name) {
    for (const OpInfo& info : all_ops())
      if (info.name == name) return info.autocast;
    ADD_FAILURE() << "no op " << name;
    return AutocastPolicy::Keep;
  };
  for (auto name : {"matmul", "linear", "conv", "conv_transpose", "attention"})
    EXPECT_EQ(policy(name), AutocastPolicy::Low) << name;
  for (auto name : {"exp", "log", "pow", "sum_dim", "mean", "softmax", "log_softmax", "layer_norm",
                    "batch_norm", "logsumexp_dim", "cumsum"})
    EXPECT_EQ(policy(name), AutocastPolicy::F32) << name;
  for (auto name : {"cat", "mask_where"}) EXPECT_EQ(policy(name), AutocastPolicy::Widest) << name;
  for (auto name : {"add", "relu", "gelu", "reshape", "cast", "from_data", "argmax"})
    EXPECT_EQ(policy(name), AutocastPolicy::Keep) << name;
  // Only float ops are cast: an op that takes no float tensor has nothing to do in a scope.
  for (const OpInfo& info : all_ops()) {
    if (info.autocast != AutocastPolicy::Keep) {
      EXPECT_NE(info.kinds & kKindFloat, 0) << info.name;
    }
  }
}

TEST(Autocast, EachOpGroupRunsInItsDtype) {
  const auto a = tensor<2>({4, 6}, 1), b = tensor<2>({6, 3}, 2);
  const auto bias = tensor<1>({3}, 3);
  AutocastScope amp(kCpu, DType::BF16);
  EXPECT_EQ(amp.dtype(), DType::BF16);
  EXPECT_TRUE(amp.enabled());
  EXPECT_EQ(autocast_dtype(kCpu), DType::BF16);

  const auto y = a.matmul(b);  // LOW
  EXPECT_EQ(y.dtype(), DType::BF16);
  const auto w = tensor<2>({3, 6}, 4);
  EXPECT_EQ(module::linear(a, w, bias).dtype(), DType::BF16);
  EXPECT_EQ(module::conv2d(tensor<4>({1, 2, 5, 5}, 5), tensor<4>({3, 2, 3, 3}, 6)).dtype(),
            DType::BF16);
  const auto q = tensor<4>({1, 2, 4, 8}, 7);
  EXPECT_EQ(module::attention(q, q, q).dtype(), DType::BF16);

  EXPECT_EQ(activation::softmax(y, 1).dtype(), DType::F32);  // F32
  EXPECT_EQ(y.exp().dtype(), DType::F32);
  EXPECT_EQ(y.sum_dim(0).dtype(), DType::F32);
  EXPECT_EQ(module::layer_norm(y, Tensor<1>::ones({3}, kCpu)).dtype(), DType::F32);

  EXPECT_EQ((y + bias.reshape({1, 3})).dtype(), DType::F32);  // promotion, as outside
  EXPECT_EQ(activation::relu(y).dtype(), DType::BF16);        // KEEP
  EXPECT_EQ((y * 2.0).dtype(), DType::BF16);
  EXPECT_EQ(Tensor<2>::cat({y, a.slice({{0, 4}, {0, 3}})}, 0).dtype(), DType::F32);  // WIDEST

  // f64, integer and bool inputs are never cast.
  const auto d = tensor<2>({4, 6}, 8, kCpu, DType::F64);
  EXPECT_EQ(d.matmul(tensor<2>({6, 3}, 9, kCpu, DType::F64)).dtype(), DType::F64);
  const auto i = Tensor<1, Int>::arange(0, 6, kCpu).reshape({2, 3});
  EXPECT_EQ(i.matmul(i.transpose()).dtype(), i.dtype());
}

TEST(Autocast, ScopesEndNestAndStayOnTheirThread) {
  const auto a = tensor<2>({3, 3}, 11);
  {
    AutocastScope amp(kCpu, DType::F16);
    EXPECT_EQ(a.matmul(a).dtype(), DType::F16);
    {
      AutocastScope off(kCpu, DType::BF16, false);
      EXPECT_FALSE(off.enabled());
      EXPECT_EQ(a.matmul(a).dtype(), DType::F32) << "a disabled inner scope turns autocast off";
      EXPECT_EQ(autocast_dtype(kCpu), std::nullopt);
    }
    {
      AutocastScope inner(kCpu, DType::BF16);
      EXPECT_EQ(a.matmul(a).dtype(), DType::BF16) << "the innermost scope decides";
    }
    EXPECT_EQ(a.matmul(a).dtype(), DType::F16);
    DType other_thread = DType::Bool;
    std::thread([&] { other_thread = a.matmul(a).dtype(); }).join();
    EXPECT_EQ(other_thread, DType::F32) << "a scope covers its own thread only";
  }
  EXPECT_EQ(a.matmul(a).dtype(), DType::F32);
  EXPECT_EQ(autocast_dtype(kCpu), std::nullopt);
}

TEST(Autocast, CoversEveryChainOfTheDevicesHardware) {
  AutocastScope amp(kCpu, DType::BF16);
  for (const Device device : {kCpu.autodiff(), kCpu.fused(), kCpu.autodiff().fused()}) {
    const auto a = tensor<2>({5, 4}, 21, device), b = tensor<2>({4, 2}, 22, device);
    const auto y = a.matmul(b);
    EXPECT_EQ(y.dtype(), DType::BF16) << device.backend_name();
    EXPECT_EQ(activation::softmax(y, 1).dtype(), DType::F32) << device.backend_name();
    EXPECT_EQ(values(y).size(), 10u);
  }
  // The chain is the device's; autocast is the thread's state.
  EXPECT_EQ(kCpu.backend_name(), "cpu");
  EXPECT_EQ(kCpu.fused().backend_name(), "fusion<cpu>");
}

TEST(Autocast, ProductsEqualTheFloat64ProductOfTheRoundedInputs) {
  const std::int64_t m = 7, k = 33, n = 5;
  const auto a = tensor<2>({m, k}, 31), b = tensor<2>({k, n}, 32);
  for (const DType low : {DType::BF16, DType::F16}) {
    AutocastScope amp(kCpu, low);
    const auto want =
        rounded(product(rounded(values(a), low), rounded(values(b), low), m, k, n), low);
    const auto got = values(a.matmul(b));
    const double ulp = low == DType::BF16 ? 1.0 / 128 : 1.0 / 1024;
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_LE(std::abs(got[i] - want[i]), ulp * std::max(1.0, std::abs(want[i])))
          << dtype_name(low) << " [" << i << "]";
    }
  }
}

TEST(Autocast, ConvolutionTakesAnInputOfTheScopesDtypeWithAnF32Weight) {
  const auto x = tensor<4>({2, 3, 6, 6}, 41, kCpu, DType::BF16);
  const auto w = tensor<4>({4, 3, 3, 3}, 42);
  EXPECT_THROW(module::conv2d(x, w), DTypeMismatch) << "outside a scope the dtypes must agree";
  AutocastScope amp(kCpu, DType::BF16);
  const auto y = module::conv2d(x, w, tensor<1>({4}, 43));
  EXPECT_EQ(y.dtype(), DType::BF16);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 4, 4}));
}

TEST(Autocast, GradientsOfF32ParametersAreF32) {
  const Device ad = kCpu.autodiff();
  const std::int64_t m = 4, k = 8, n = 3;
  const auto x = tensor<2>({m, k}, 51, ad);
  const auto w = tensor<2>({k, n}, 52, ad).require_grad();
  Gradients grads;
  {
    AutocastScope amp(ad, DType::BF16);
    const auto y = x.matmul(w);
    ASSERT_EQ(y.dtype(), DType::BF16);
    grads = (y.cast(DType::F32) * 3.0).sum().backward();
  }
  const auto gw = w.grad(grads);
  ASSERT_TRUE(gw.has_value());
  EXPECT_EQ(gw->dtype(), DType::F32);
  // d/dw sum(3 x w) = 3 x^T 1, from x rounded to bf16 (the product read the rounded x).
  const auto xr = rounded(values(x), DType::BF16);
  const auto got = values(*gw);
  for (std::int64_t p = 0; p < k; ++p) {
    double want = 0;
    for (std::int64_t i = 0; i < m; ++i) want += 3.0 * xr[i * k + p];
    for (std::int64_t j = 0; j < n; ++j) {
      EXPECT_NEAR(got[p * n + j], want, 1.0 / 64 * std::max(1.0, std::abs(want))) << p << "," << j;
    }
  }
}

TEST(Autocast, AHeldTensorIsCastOncePerScope) {
  Backend& chain = backend_for(kCpu);
  // Held by a tensor and by the op's argument, as a module's weight is.
  const auto module_weight = tensor<2>({3, 3}, 61);
  const Primitive weight = module_weight.primitive();
  AutocastScope amp(kCpu, DType::BF16);
  const Primitive first = autocast::cast_in_scope(chain, weight, DType::BF16);
  EXPECT_EQ(first->dtype(), DType::BF16);
  EXPECT_EQ(autocast::cast_in_scope(chain, weight, DType::BF16), first) << "the cast is reused";
  EXPECT_NE(autocast::cast_in_scope(chain, weight, DType::F16), first) << "per dtype";
  autocast::forget_cast(weight);
  EXPECT_NE(autocast::cast_in_scope(chain, weight, DType::BF16), first) << "forgotten on assign";
  // A temporary (held by the op alone) is cast for its one use.
  const Primitive once =
      autocast::cast_in_scope(chain, tensor<2>({3, 3}, 62).primitive(), DType::BF16);
  EXPECT_EQ(once->dtype(), DType::BF16);
  // A dead source's cast is never returned for a new tensor at the same address.
  std::vector<Primitive> casts;
  for (int i = 0; i < 200; ++i) {
    auto held = tensor<2>({2, 2}, 70 + i).primitive();
    const Primitive keep = held;
    casts.push_back(autocast::cast_in_scope(chain, held, DType::BF16));
    EXPECT_EQ(values(Tensor<2>::wrap(casts.back())),
              rounded(values(Tensor<2>::wrap(held)), DType::BF16));
  }
}

TEST(Autocast, ALinearWeightIsHeldOnceInTheScopesDtype) {
  // module::linear casts its f32 [out, in] weight once per scope; an f32 input and bias are cast
  // beside it, so that promoting them against the cast weight does not widen it back to f32 for
  // the layer to narrow again (a second bf16 copy, kept by the scope and by autodiff).
  const Device ad = kCpu.autodiff();
  const std::int64_t in = 512, out = 1024, weight_bytes = in * out * 2;
  const auto x = tensor<2>({2, in}, 81, ad);
  const auto w = tensor<2>({out, in}, 82, ad).require_grad();
  const auto b = tensor<1>({out}, 83, ad).require_grad();
  const std::int64_t before = ad.memory_stats().bytes_in_use;
  AutocastScope amp(ad, DType::BF16);
  const auto y = module::linear(x, w, b);
  EXPECT_EQ(y.dtype(), DType::BF16);
  const std::int64_t kept = ad.memory_stats().bytes_in_use - before;
  EXPECT_GE(kept, weight_bytes);
  EXPECT_LT(kept, weight_bytes + weight_bytes / 2) << "the weight is held in bf16 once";
  // The values: the product of the rounded operands, plus the rounded bias.
  const auto xr = rounded(values(x), DType::BF16), wr = rounded(values(w), DType::BF16);
  const auto br = rounded(values(b), DType::BF16);
  const auto got = values(y);
  for (std::int64_t i = 0; i < 2; ++i) {
    for (std::int64_t j = 0; j < out; j += 97) {
      double want = br[j];
      for (std::int64_t p = 0; p < in; ++p) want += xr[i * in + p] * wr[j * in + p];
      EXPECT_NEAR(got[i * out + j], want, 1.0 / 64 * std::max(1.0, std::abs(want)))
          << i << "," << j;
    }
  }
  // An f64 input is not narrowed, nor the weight it meets: the product is f64's, unrounded.
  const auto x64 = tensor<2>({2, in}, 84, ad, DType::F64);
  const auto y64 = module::linear(x64, w, b);
  EXPECT_EQ(y64.dtype(), DType::F64);
  const auto x64v = values(x64), wv = values(w), bv = values(b), got64 = values(y64);
  for (std::int64_t j = 0; j < out; j += 97) {
    double want = bv[j];
    for (std::int64_t p = 0; p < in; ++p) want += x64v[p] * wv[j * in + p];
    EXPECT_NEAR(got64[j], want, 1e-12 * std::max(1.0, std::abs(want))) << j;
  }
}

TEST(Autocast, OnlyF16AndBf16AreLowPrecisionTypes) {
  for (const DType bad : {DType::F32, DType::F64, DType::I32, DType::Bool}) {
    try {
      AutocastScope amp(kCpu, bad);
      ADD_FAILURE() << dtype_name(bad) << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("AutocastScope"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(dtype_name(bad)), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(autocast_dtype(kCpu), std::nullopt) << "a refused scope leaves no state";
}

}  // namespace
}  // namespace kiln
