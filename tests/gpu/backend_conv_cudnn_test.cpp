// Convolutions through cuDNN (KILN_CONV=cudnn; src/backends/cuda/conv_cudnn.h) against the CPU
// backend on the conv tests' cases (conv_cases.h): conv, conv_transpose and both gradients in
// f64, f32, f16 and bf16, 1d to 3d windows with groups, stride, padding, dilation and output
// padding, inputs contiguous, channels-last (given to cuDNN with their strides) and flipped or
// strided (copied first), an empty batch; the cases cuDNN must take are checked to have gone
// through it. Then what cuDNN cannot express (kiln's own path), KILN_CONV=kiln, a bad KILN_CONV,
// the choice per shape remembered in the autotune cache, tf32 only when allowed, and a CUDA graph
// capture. Skips without a GPU or without cuDNN; the autotune cache is a file of the test's own.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/conv_cases.h"
#include "gpu/gpu_test_support.h"
#include "gpu/own_autotune_cache.h"
#include "kiln/detail/tensor_ops.h"
#include "runtime/autotune.h"
#include "runtime/cuda_plugin.h"
#include "runtime/registry.h"
#include "support/scoped_env.h"

using namespace kiln;

namespace {

// Compiled on its own (not in a unity batch): the shared cases' names as they are.
using namespace gpu_conv;
using test::kFloatDTypes;
using test::on;
using test::ScopedEnv;

// The convolution ops GPU index has run through cuDNN, or -1 with the reason there is no cuDNN.
std::int64_t cudnn_calls(int index, std::string* reason = nullptr) {
  bool loaded = false;
  std::int64_t calls = 0;
  const std::string status = cuda_plugin(nullptr)->cudnn_status(index, &loaded, &calls);
  if (reason != nullptr) *reason = status;
  return loaded ? calls : -1;
}

// Whether a case must run through cuDNN: the plainest 2-d convolution in every dtype (cuDNN
// has deterministic algorithms for it in each), and the other 2-d cases in f32, whose FMA
// algorithms take any window. Elsewhere cuDNN may decline, and kiln's path answers.
bool cudnn_must_take(const std::string& name, DType dtype) {
  if (name == "64 channels 3x3") return true;
  return dtype == DType::F32 && name.rfind("2d", 0) == 0;
}

// Runs build on the GPU and the CPU and compares; when cuDNN must take the case, checks that the
// GPU's op went through it. Returns whether it did.
bool expect_through_cudnn(const Device& gpu, const test::Build& build, double tolerance,
                          const std::string& what, bool must) {
  const std::int64_t before = cudnn_calls(gpu.index());
  expect_same_finite(gpu, build, tolerance, what);
  const bool taken = cudnn_calls(gpu.index()) > before;
  if (must) {
    EXPECT_TRUE(taken) << what << ": expected to run through cuDNN";
  }
  return taken;
}

// cuDNN's Winograd and FFT algorithms (taken where fastest, as torch's benchmark mode takes them)
// transform the operands, so f32 results carry rounding errors of ~2e-5 of the sum's scale
// (sqrt(C k^2) / 3 for C k^2 products of values in [-1, 1): about 8 at 576) where kiln's path
// and the CPU's carry ~1e-6: measured 1.3e-4 against 1 + |expected| at 64 channels 3x3.
double cudnn_tolerance(DType dtype) { return dtype == DType::F32 ? 5e-4 : conv_tolerance(dtype); }

// Each case in every float dtype, its input laid out every way (views()), with its bias when it
// has one, against the CPU: op(d, case, x, w, bias) is the op on device d. Checks the cases
// cuDNN must take, and records how many it took.
template <class Case, class BiasSize, class Op>
void expect_cases_through_cudnn(const Device& device, const std::vector<Case>& cases,
                                std::uint64_t seed, const BiasSize& bias_size, const Op& op,
                                const std::vector<DType>& dtypes = {std::begin(kFloatDTypes),
                                                                    std::end(kFloatDTypes)}) {
  int taken = 0, ops = 0;
  for (DType dtype : dtypes) {
    for (const Case& c : cases) {
      Primitive w = host_random(c.w, dtype, seed++);
      Primitive b = host_random(Shape{bias_size(c)}, dtype, seed++);
      for (const auto& [view_name, x] : views(seed, dtype, c.x)) {
        taken += expect_through_cudnn(
            device,
            [&](Device d) {
              return op(d, c, x(d), on(w, d), c.bias ? OptionalPrimitive(on(b, d)) : std::nullopt);
            },
            cudnn_tolerance(dtype),
            std::string(dtype_name(dtype)) + " " + c.name + " (" + view_name + ")",
            cudnn_must_take(c.name, dtype) && c.x[0] > 0);
        ++ops;
      }
    }
  }
  ::testing::Test::RecordProperty("through_cudnn",
                                  std::to_string(taken) + " of " + std::to_string(ops));
  std::printf("through_cudnn: %d of %d ops\n", taken, ops);  // for scripts/gpu-check gpu-conv
}

}  // namespace

// Declares `device` (cuda:0) or skips the test: no GPU, or no cuDNN there.
#define KILN_REQUIRE_CUDNN()                                                              \
  KILN_REQUIRE_GPU();                                                                     \
  if (std::string kiln_cudnn_reason; cudnn_calls(device.index(), &kiln_cudnn_reason) < 0) \
  GTEST_SKIP() << "no cuDNN: " << kiln_cudnn_reason

TEST(GpuConvCudnn, ConvMatchesCpu) {
  KILN_REQUIRE_CUDNN();
  const test::OwnAutotuneCache cache("kiln_conv_cudnn_autotune.tsv");
  const ScopedEnv path("KILN_CONV", "cudnn");
  expect_cases_through_cudnn(
      device, conv_cases(), 6000, [](const ConvCase& c) { return c.w[0]; },
      [](Device d, const ConvCase& c, Primitive x, Primitive w, OptionalPrimitive b) {
        return backend_for(d).conv(std::move(x), std::move(w), std::move(b), c.options);
      });
}

TEST(GpuConvCudnn, ConvTransposeMatchesCpu) {
  KILN_REQUIRE_CUDNN();
  const test::OwnAutotuneCache cache("kiln_conv_cudnn_autotune.tsv");
  const ScopedEnv path("KILN_CONV", "cudnn");
  expect_cases_through_cudnn(
      device, transpose_cases(), 7000,
      [](const TransposeCase& c) { return c.w[1] * c.options.groups; },
      [](Device d, const TransposeCase& c, Primitive x, Primitive w, OptionalPrimitive b) {
        return backend_for(d).conv_transpose(std::move(x), std::move(w), std::move(b), c.options);
      });
}

// The gradients as autodiff calls them: conv_x_backward (the default: a conv_transpose, through
// cuDNN's data gradient) and conv_weight_backward (its filter gradient), the output gradient
// contiguous and laid out the other ways, in each of dtypes.
void expect_gradients_through_cudnn(const Device& device, std::uint64_t seed,
                                    const std::vector<DType>& dtypes) {
  for (DType dtype : dtypes) {
    const double tol = gradient_tolerance(dtype) * cudnn_tolerance(dtype) / conv_tolerance(dtype);
    for (const ConvCase& c : conv_cases()) {
      const auto [x, w, y_shape] = gradient_inputs(c, dtype, seed);
      const std::string name = std::string(dtype_name(dtype)) + " " + c.name;
      const bool must = cudnn_must_take(c.name, dtype) && c.x[0] > 0;
      for (const auto& [view_name, dy] : views(seed, dtype, y_shape)) {
        expect_through_cudnn(
            device,
            [&](Device d) {
              return backend_for(d).conv_x_backward(on(x, d), on(w, d), dy(d), c.options);
            },
            tol, name + " dx (dy " + view_name + ")", must);
        expect_through_cudnn(
            device,
            [&](Device d) {
              return backend_for(d).conv_weight_backward(on(x, d), on(w, d), dy(d), c.options);
            },
            tol, name + " dw (dy " + view_name + ")", must);
      }
    }
  }
}

TEST(GpuConvCudnn, GradientsMatchCpu) {
  KILN_REQUIRE_CUDNN();
  const test::OwnAutotuneCache cache("kiln_conv_cudnn_autotune.tsv");
  const ScopedEnv path("KILN_CONV", "cudnn");
  expect_gradients_through_cudnn(device, 8000, {std::begin(kFloatDTypes), std::end(kFloatDTypes)});
}

// cuDNN's graph API alone (KILN_CUDNN_GRAPH=only) for the 16-bit dtypes it serves: conv, conv
// transpose (its data gradient) and both gradients on every case and layout, the filter read
// channels-last where it lies so; the plainest case must go through an engine of it (with no
// engine cuDNN would not be taken at all).
TEST(GpuConvCudnn, GraphEnginesMatchCpu) {
  KILN_REQUIRE_CUDNN();
  const test::OwnAutotuneCache cache("kiln_conv_cudnn_autotune.tsv");
  const ScopedEnv path("KILN_CONV", "cudnn");
  const ScopedEnv graph("KILN_CUDNN_GRAPH", "only");
  const std::vector<DType> dtypes = {DType::F16, DType::BF16};
  expect_cases_through_cudnn(
      device, conv_cases(), 6500, [](const ConvCase& c) { return c.w[0]; },
      [](Device d, const ConvCase& c, Primitive x, Primitive w, OptionalPrimitive b) {
        return backend_for(d).conv(std::move(x), std::move(w), std::move(b), c.options);
      },
      dtypes);
  expect_cases_through_cudnn(
      device, transpose_cases(), 7500,
      [](const TransposeCase& c) { return c.w[1] * c.options.groups; },
      [](Device d, const TransposeCase& c, Primitive x, Primitive w, OptionalPrimitive b) {
        return backend_for(d).conv_transpose(std::move(x), std::move(w), std::move(b), c.options);
      },
      dtypes);
  expect_gradients_through_cudnn(device, 8500, dtypes);
  // A channels-last filter as it lies (the legacy calls copy it to channels-first).
  for (DType dtype : dtypes) {
    // Channels-last storage viewed channels-first.
    Primitive x = host_random({2, 14, 14, 32}, dtype, 8600);
    Primitive w = host_random({48, 3, 3, 32}, dtype, 8601);
    const ConvOptions options{{1, 1}, {1, 1}, {1, 1}, 1};
    expect_through_cudnn(
        device,
        [&](Device d) {
          return backend_for(d).conv(detail::permute(on(x, d), {0, 3, 1, 2}),
                                     detail::permute(on(w, d), {0, 3, 1, 2}), std::nullopt,
                                     options);
        },
        conv_tolerance(dtype), std::string(dtype_name(dtype)) + " x and w channels-last", true);
  }
}

// A transposed convolution whose output padding reaches the stride (allowed below the
// dilation) has no forward convolution cuDNN could take the data gradient of: kiln's own path
// runs it, even with cuDNN forced.
TEST(GpuConvCudnn, WhatCudnnCannotExpressRunsKilnsPath) {
  KILN_REQUIRE_CUDNN();
  const ScopedEnv path("KILN_CONV", "cudnn");
  const ConvTransposeOptions options{{1, 1}, {0, 0}, {1, 1}, {2, 2}, 1};
  Primitive x = host_random({1, 2, 5, 5}, DType::F32, 9000);
  Primitive w = host_random({2, 3, 3, 3}, DType::F32, 9001);
  const std::int64_t before = cudnn_calls(device.index());
  expect_same_finite(
      device,
      [&](Device d) {
        return backend_for(d).conv_transpose(on(x, d), on(w, d), std::nullopt, options);
      },
      conv_tolerance(DType::F32), "output padding 1, stride 1, dilation 2");
  EXPECT_EQ(cudnn_calls(device.index()), before);
}

TEST(GpuConvCudnn, KilnConvKilnNeverCallsCudnn) {
  KILN_REQUIRE_CUDNN();
  const ScopedEnv path("KILN_CONV", "kiln");
  Primitive x = host_random({2, 8, 9, 9}, DType::F32, 9100);
  Primitive w = host_random({8, 8, 3, 3}, DType::F32, 9101);
  Primitive g = host_random({2, 8, 9, 9}, DType::F32, 9102);
  const ConvOptions options{{1, 1}, {1, 1}, {1, 1}, 1};
  const std::int64_t before = cudnn_calls(device.index());
  const double tol = conv_tolerance(DType::F32);
  expect_same_finite(
      device,
      [&](Device d) { return backend_for(d).conv(on(x, d), on(w, d), std::nullopt, options); }, tol,
      "conv");
  expect_same_finite(
      device,
      [&](Device d) {
        return backend_for(d).conv_x_backward(on(x, d), on(w, d), on(g, d), options);
      },
      tol, "dx");
  expect_same_finite(
      device,
      [&](Device d) {
        return backend_for(d).conv_weight_backward(on(x, d), on(w, d), on(g, d), options);
      },
      tol * 2, "dw");
  EXPECT_EQ(cudnn_calls(device.index()), before);
}

namespace {

// A dtype conv on device with an environment variable at a bad value: InvalidArgument naming the
// op and saying `message`.
void expect_conv_refused(const Device& device, DType dtype, const char* variable, const char* value,
                         const std::string& message) {
  const ScopedEnv bad(variable, value);
  Primitive x = on(host_random({1, 2, 5, 5}, dtype, 9200), device);
  Primitive w = on(host_random({2, 2, 3, 3}, dtype, 9201), device);
  try {
    (void)backend_for(device).conv(x, w, std::nullopt, ConvOptions{});
    ADD_FAILURE() << variable << "=" << value << " was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("[conv]"), std::string::npos) << error.what();
  }
}

}  // namespace

// Needs a GPU only: the value is read before cuDNN is looked at.
TEST(GpuConvCudnn, AnUnknownKilnConvIsRefused) {
  KILN_REQUIRE_GPU();
  expect_conv_refused(device, DType::F32, "KILN_CONV", "fastest",
                      "KILN_CONV must be auto, cudnn or kiln");
}

TEST(GpuConvCudnn, AnUnknownKilnCudnnGraphIsRefused) {
  KILN_REQUIRE_CUDNN();
  const ScopedEnv path("KILN_CONV", "cudnn");
  expect_conv_refused(device, DType::BF16, "KILN_CUDNN_GRAPH", "sometimes",
                      "KILN_CUDNN_GRAPH must be 1, 0 or only");
}

// With KILN_CONV=auto, the first call of a shape class times cuDNN and kiln's own path and
// remembers the faster in the autotune cache; the next call measures nothing.
TEST(GpuConvCudnn, TheChoicePerShapeIsMeasuredOnceAndRemembered) {
  KILN_REQUIRE_CUDNN();
  if (!autotune::enabled()) GTEST_SKIP() << "KILN_AUTOTUNE=0: nothing is measured";
  const test::OwnAutotuneCache cache("kiln_conv_cudnn_autotune.tsv");
  const ScopedEnv path("KILN_CONV", "auto");
  // A shape no other test uses (the choice is kept per process too).
  Primitive x = host_random({3, 16, 19, 17}, DType::F32, 9300);
  Primitive w = host_random({24, 16, 3, 3}, DType::F32, 9301);
  const ConvOptions options{{1, 1}, {1, 1}, {1, 1}, 1};
  auto conv = [&](Device d) {
    return backend_for(d).conv(on(x, d), on(w, d), std::nullopt, options);
  };
  expect_same_finite(device, conv, cudnn_tolerance(DType::F32), "first call");
  // kiln's path, timed against cuDNN, also leaves its cuBLASLt products' choices.
  std::vector<autotune::Choice> choices;
  for (const autotune::Choice& c : autotune::entries()) {
    if (c.key.rfind("conv ", 0) == 0) choices.push_back(c);
  }
  ASSERT_EQ(choices.size(), 1u);
  const autotune::Choice& choice = choices.front();
  EXPECT_EQ(choice.key.rfind("conv forward f32 fma x [3, 16, 19, 17]", 0), 0u) << choice.key;
  EXPECT_NE(choice.key.find("/cudnn 9."), std::string::npos) << choice.key;
  EXPECT_TRUE(choice.choice == "kiln" || choice.choice.rfind("cudnn algo=", 0) == 0)
      << choice.choice;
  EXPECT_GT(choice.heuristic_us, 0);
  EXPECT_GT(choice.chosen_us, 0);
  RecordProperty("choice", choice.choice + " (" + std::to_string(choice.chosen_us) + " us; cuDNN " +
                               std::to_string(choice.heuristic_us) + " us)");
  const std::size_t entries = autotune::entries().size();
  expect_same_finite(device, conv, cudnn_tolerance(DType::F32), "second call");
  EXPECT_EQ(autotune::entries().size(), entries);
}

// f32 through cuDNN is f32-accurate unless the device allows tf32 (then within tf32's rounding).
TEST(GpuConvCudnn, Tf32OnlyWhenAllowed) {
  KILN_REQUIRE_CUDNN();
  const test::OwnAutotuneCache cache("kiln_conv_cudnn_autotune.tsv");
  const ScopedEnv path("KILN_CONV", "cudnn");
  const bool was = device.allow_tf32();
  Primitive x = host_random({2, 16, 20, 20}, DType::F32, 9400);
  Primitive w = host_random({32, 16, 3, 3}, DType::F32, 9401);
  const ConvOptions options{{1, 1}, {1, 1}, {1, 1}, 1};
  const std::vector<double> want =
      detail::into_data(backend_for(Device::cpu())
                            .conv(detail::cast(x, DType::F64), detail::cast(w, DType::F64),
                                  std::nullopt, options))
          .to_f64_vec();
  auto error = [&](bool tf32) {
    device.set_allow_tf32(tf32);
    const std::vector<double> got =
        detail::into_data(
            backend_for(device).conv(on(x, device), on(w, device), std::nullopt, options))
            .to_f64_vec();
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      diff += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
    }
    return std::sqrt(diff / norm);
  };
  const std::int64_t before = cudnn_calls(device.index());
  const double off = error(false), on_tf32 = error(true);
  device.set_allow_tf32(was);
  EXPECT_EQ(cudnn_calls(device.index()), before + 2);
  RecordProperty("f32_relative_error", std::to_string(off));
  RecordProperty("tf32_relative_error", std::to_string(on_tf32));
  EXPECT_LT(off, 1e-5) << "f32 through cuDNN with tf32 off";
  EXPECT_LT(on_tf32, 5e-3) << "tf32 allowed: error beyond tf32's rounding";
}

// A convolution first met inside a CUDA graph capture takes cuDNN's heuristic algorithm (nothing
// is timed there) and keeps it: the graph's replays equal the op run eagerly, bit for bit.
TEST(GpuConvCudnn, ACapturedConvolutionReplaysAsItRunsEagerly) {
  KILN_REQUIRE_CUDNN();
  const ScopedEnv path("KILN_CONV", "cudnn");
  auto random = [&](Shape shape, std::uint64_t seed) {
    return Tensor<4>::wrap(test::host_random(shape, DType::F32, seed, -1, 1)).to_device(device);
  };
  auto same_bits = [](const Tensor<4>& a, const Tensor<4>& b) {
    const TensorData x = a.into_data(), y = b.into_data();
    return x.shape() == y.shape() && x.bytes().size() == y.bytes().size() &&
           std::memcmp(x.bytes().data(), y.bytes().data(), x.bytes().size()) == 0;
  };
  const ConvOptions options{.padding = {1, 1}};
  Tensor<4> x = random({2, 8, 13, 11}, 9500);
  const Tensor<4> w = random({16, 8, 3, 3}, 9501);
  Tensor<4> y;
  const std::int64_t before = cudnn_calls(device.index());
  const Graph graph = capture(device, [&] { y = module::conv2d(x, w, std::nullopt, options); });
  EXPECT_GT(cudnn_calls(device.index()), before) << "the captured conv did not use cuDNN";
  EXPECT_TRUE(same_bits(y, module::conv2d(x, w, std::nullopt, options)));
  for (std::uint64_t round = 0; round < 3; ++round) {
    const Tensor<4> next = random({2, 8, 13, 11}, 9510 + round);
    x.assign(next);
    graph.replay();
    EXPECT_TRUE(same_bits(y, module::conv2d(next, w, std::nullopt, options))) << "round " << round;
  }
}
