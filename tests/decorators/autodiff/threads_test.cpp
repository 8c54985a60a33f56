// Autodiff graphs built, differentiated and torn down on several threads at once, the way a model
// whose weights are shared is evaluated on several threads: every thread's graph reads one shared
// input and one shared tracked weight, and has a weight of its own. Each thread checks its
// gradients against the closed form. Under ThreadSanitizer (./run tsan) this checks that nothing
// in a graph node, the node order counter or the shared leaf is written without synchronisation.
#include "support/threads.h"

#include <string>

#include "decorators/autodiff/test_support.h"

namespace kiln::autodiff_test {
namespace {

TEST(AutodiffThreads, GraphsOnSeveralThreadsShareAWeightAndAnInput) {
  constexpr int kThreads = 4, kSteps = 8;
  constexpr std::int64_t kN = std::int64_t{1} << 16;  // each op also split over OpenMP threads
  const std::vector<double> xs = spread(kN, -1.0, 1.0, 7);
  const std::vector<double> ss = spread(kN, 0.5, 1.5, 8);
  const auto x = tensor<1>(xs, {kN});                      // shared, not tracked
  const auto shared = tensor<1>(ss, {kN}).require_grad();  // shared tracked leaf
  const std::vector<double> stored = values(shared);

  test::ThreadFailures failures(kThreads);
  test::run_together(kThreads, [&](int id) {
    auto fail = [&](const std::string& what) { failures.add(id, what); };
    auto check = [&](const std::vector<double>& got, const std::vector<double>& want,
                     double tolerance, const std::string& what) {
      for (std::size_t i = 0; i < want.size(); ++i) {
        if (std::abs(got[i] - want[i]) > tolerance * std::max(1.0, std::abs(want[i]))) {
          fail(what + " [" + std::to_string(i) + "]: got " + std::to_string(got[i]) + ", want " +
               std::to_string(want[i]));
          return;
        }
      }
    };
    try {
      const std::vector<double> ws = spread(kN, -1.0, 1.0, 100 + static_cast<std::uint32_t>(id));
      const auto w = tensor<1>(ws, {kN}).require_grad();
      for (int step = 0; step < kSteps; ++step) {
        // loss = sum(x s w²) + step · sum(s): d/dw = 2 x s w, d/ds = x w² + step.
        const auto loss = (x * shared * w * w).sum() + (shared * double(step)).sum();
        const Gradients g = loss.backward();
        std::vector<double> want_w(ws.size()), want_s(ws.size());
        double want_loss = 0, scale = 0;  // scale: the sum of the terms' magnitudes
        for (std::size_t i = 0; i < ws.size(); ++i) {
          want_w[i] = 2.0 * xs[i] * ss[i] * ws[i];
          want_s[i] = xs[i] * ws[i] * ws[i] + step;
          const double term = xs[i] * ss[i] * ws[i] * ws[i] + step * ss[i];
          want_loss += term;
          scale += std::abs(term);
        }
        const std::string at = "step " + std::to_string(step);
        check(values(grad_of(w, g)), want_w, 1e-5, at + " d/dw");
        check(values(grad_of(shared, g)), want_s, 1e-5, at + " d/dshared");
        const double got_loss = values(loss)[0];
        if (std::abs(got_loss - want_loss) > 1e-5 * scale) {
          fail(at + " loss " + std::to_string(got_loss) + ", want " + std::to_string(want_loss));
        }
      }
    } catch (const std::exception& error) {
      fail(std::string("threw: ") + error.what());
    }
  });
  failures.expect_none();
  EXPECT_EQ(values(shared), stored) << "the shared weight was written";
}

}  // namespace
}  // namespace kiln::autodiff_test
