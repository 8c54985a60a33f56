// The first use of a device from many threads at once: the CPU backend, its autodiff decorator
// and the device settings are all made on first use, so each test runs in a fresh process
// (support/fresh_process.h) where nothing has been made yet, and releases its threads together.
// Under ThreadSanitizer (./run tsan) these are the tests that check that first use is properly
// synchronised; everywhere they check that all threads agree on what was made.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <atomic>
#include <string>
#include <vector>

#include "runtime/registry.h"
#include "support/fresh_process.h"
#include "support/threads.h"

namespace kiln {
namespace {

using test::require;

class DeviceFirstUse : public test::FreshProcess {};

// Large enough that each thread's op is split over OpenMP threads too.
constexpr std::int64_t kElements = std::int64_t{1} << 17;

TEST_F(DeviceFirstUse, ManyThreadsAgreeOnOneBackendAndOneSettings) {
  KILN_IN_FRESH_PROCESS([] {
    constexpr int kThreads = 8;
    struct Seen {
      Backend* cpu = nullptr;
      Backend* autodiff = nullptr;
      DeviceSettings settings;
      DType made = DType::Bool;
      double sum = 0;
      double grad_sum = 0;
    };
    std::vector<Seen> seen(kThreads);
    test::run_together(kThreads, [&](int t) {
      Seen& s = seen[static_cast<std::size_t>(t)];
      // Half the threads reach the autodiff decorator first, half the settings, so each is
      // first reached from several threads.
      const Device tracked = Device::cpu().autodiff();
      if (t % 2 == 0) {
        s.autodiff = &backend_for(tracked);
        s.settings = Device::cpu().settings();
      } else {
        s.settings = tracked.settings();
        s.autodiff = &backend_for(tracked);
      }
      s.cpu = &backend_for(Device::cpu());
      const auto x = Tensor<1>::ones({kElements}, tracked).require_grad();
      s.made = x.dtype();
      const auto loss = (x * 2.0).sum();
      s.sum = loss.into_scalar<double>();
      s.grad_sum = x.grad(loss.backward())->sum().into_scalar<double>();
    });
    const DeviceSettings defaults = backend_for(Device::cpu()).default_settings();
    for (int t = 0; t < kThreads; ++t) {
      const Seen& s = seen[static_cast<std::size_t>(t)];
      const std::string who = "thread " + std::to_string(t);
      require(s.cpu == &backend_for(Device::cpu()), who + " saw another cpu backend");
      require(s.autodiff == &backend_for(Device::cpu().autodiff()),
              who + " saw another autodiff decorator");
      require(s.settings == defaults, who + " saw other settings than the backend's defaults");
      require(s.made == defaults.float_dtype, who + " made a tensor of another dtype");
      require(s.sum == 2.0 * kElements, who + " summed " + std::to_string(s.sum));
      require(s.grad_sum == 2.0 * kElements,
              who + " got gradient sum " + std::to_string(s.grad_sum));
    }
  });
}

// One thread fixes the settings while the others make the device's first tensors: either the
// setter wins and every thread sees its dtypes, or a use came first and the setter is refused
// with AlreadyInitialized. No thread sees a mix.
TEST_F(DeviceFirstUse, SettingTheDefaultsRacesTheFirstUse) {
  KILN_IN_FRESH_PROCESS([] {
    constexpr int kThreads = 8;  // thread 0 sets, the others use
    const DeviceSettings wanted{DType::F64, DType::I32, DType::Bool};
    std::atomic<int> outcome{0};  // 1: set, 2: refused
    std::vector<DeviceSettings> seen(kThreads);
    std::vector<DType> made(kThreads, DType::Bool);
    test::run_together(kThreads, [&](int t) {
      const Device cpu = Device::cpu();
      if (t == 0) {
        try {
          cpu.set_default_dtypes(wanted.float_dtype, wanted.int_dtype, wanted.bool_dtype);
          outcome.store(1);
        } catch (const AlreadyInitialized&) {
          outcome.store(2);
        }
        return;
      }
      made[static_cast<std::size_t>(t)] = Tensor<1>::zeros({kElements}, cpu).dtype();
      seen[static_cast<std::size_t>(t)] = cpu.settings();
    });
    require(outcome.load() != 0, "the setter neither set nor was refused");
    const DeviceSettings in_force =
        outcome.load() == 1 ? wanted : backend_for(Device::cpu()).default_settings();
    require(Device::cpu().settings() == in_force, "the settings in force changed afterwards");
    for (int t = 1; t < kThreads; ++t) {
      const std::string who = "thread " + std::to_string(t);
      require(seen[static_cast<std::size_t>(t)] == in_force, who + " saw other settings");
      require(made[static_cast<std::size_t>(t)] == in_force.float_dtype,
              who + " made a tensor of another dtype");
    }
  });
}

}  // namespace
}  // namespace kiln
