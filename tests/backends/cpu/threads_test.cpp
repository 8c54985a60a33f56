// The CPU backend used from several std::threads at once: each thread runs mixed ops on its own
// tensors and on one shared tensor nobody writes; every result is checked against the host.
#include "support/threads.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/devices.h"

namespace kiln {
namespace {

using kiln::test::kCpu;

std::vector<float> values(std::int64_t n, int seed) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = std::sin(static_cast<float>(i) * 0.37f + static_cast<float>(seed)) * 0.9f;
  }
  return out;
}

bool close(float got, double want) {
  return std::abs(got - want) <= 1e-5 * std::max(1.0, std::abs(want));
}

TEST(CpuThreads, MixedOpsFromFourThreads) {
  constexpr int kThreads = 4, kOps = 200;
  constexpr std::int64_t kSmall = 16, kLarge = 256;  // kLarge² also runs OpenMP inside each op
  const std::vector<float> shared_values = values(kLarge * kLarge, 99);
  const auto shared =
      Tensor<2>::from_data(TensorData::from_vec(shared_values, {kLarge, kLarge}), kCpu);
  const auto shared_corner = shared.slice({{0, kSmall}, {0, kSmall}});  // a shared view

  test::ThreadFailures failures(kThreads);
  auto worker = [&](int id) {
    const std::vector<float> own = values(kSmall * kSmall, id);
    const auto a = Tensor<2>::from_data(TensorData::from_vec(own, {kSmall, kSmall}), kCpu);
    auto fail = [&](int op, std::size_t i, float got, double want) {
      failures.add(id, "op " + std::to_string(op) + " element " + std::to_string(i) + ": " +
                           std::to_string(got) + " vs " + std::to_string(want));
    };
    auto s = [&](std::int64_t r, std::int64_t c) {
      return static_cast<double>(shared_values[static_cast<std::size_t>(r * kLarge + c)]);
    };
    for (int op = 0; op < kOps; ++op) {
      try {
        switch (op % 6) {
          case 0: {  // own * shared view + 1
            const auto got = (a * shared_corner + 1.0).into_data().to_vec<float>();
            for (std::int64_t i = 0; i < kSmall * kSmall; ++i) {
              const double want = double(own[i]) * s(i / kSmall, i % kSmall) + 1.0;
              if (!close(got[i], want)) fail(op, i, got[i], want);
            }
            break;
          }
          case 1: {  // exp(own - shared view), reusing the temporary in place
            const auto got = (a - shared_corner).exp().into_data().to_vec<float>();
            for (std::int64_t i = 0; i < kSmall * kSmall; ++i) {
              const double want = std::exp(double(own[i]) - s(i / kSmall, i % kSmall));
              if (!close(got[i], want)) fail(op, i, got[i], want);
            }
            break;
          }
          case 2: {  // transpose view times a scalar
            const auto got = (a.transpose() * 2.0).into_data().to_vec<float>();
            for (std::int64_t r = 0; r < kSmall; ++r) {
              for (std::int64_t c = 0; c < kSmall; ++c) {
                const double want = 2.0 * own[c * kSmall + r];
                if (!close(got[r * kSmall + c], want))
                  fail(op, r * kSmall + c, got[r * kSmall + c], want);
              }
            }
            break;
          }
          case 3: {  // a large op on the shared tensor (parallel inside)
            const auto got = (shared + shared.transpose()).into_data().to_vec<float>();
            for (std::int64_t i = 0; i < kLarge * kLarge; i += 97) {
              const double want = s(i / kLarge, i % kLarge) + s(i % kLarge, i / kLarge);
              if (!close(got[i], want)) fail(op, i, got[i], want);
            }
            break;
          }
          case 4: {  // tanh and a comparison
            const auto got = a.tanh().into_data().to_vec<float>();
            const auto flags = a.greater_elem(0.0).into_data().to_vec<bool>();
            for (std::int64_t i = 0; i < kSmall * kSmall; ++i) {
              if (!close(got[i], std::tanh(double(own[i])))) fail(op, i, got[i], std::tanh(own[i]));
              if (flags[i] != (own[i] > 0)) fail(op, i, flags[i], own[i] > 0);
            }
            break;
          }
          case 5: {  // division with a broadcast row of the shared tensor
            const auto row = shared.slice({{3, 4}, {0, kSmall}});
            const auto got = (a / (row + 2.0)).into_data().to_vec<float>();
            for (std::int64_t i = 0; i < kSmall * kSmall; ++i) {
              const double want = double(own[i]) / (s(3, i % kSmall) + 2.0);
              if (!close(got[i], want)) fail(op, i, got[i], want);
            }
            break;
          }
        }
      } catch (const std::exception& error) {
        failures.add(id, std::string("threw: ") + error.what());
      }
    }
  };
  test::run_together(kThreads, worker);

  failures.expect_none();
  EXPECT_EQ(shared.into_data().to_vec<float>(), shared_values) << "the shared tensor was written";
}

}  // namespace
}  // namespace kiln
