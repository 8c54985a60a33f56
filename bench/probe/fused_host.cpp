// Host time per op of chain8 on [64, 64] f32 on a device, fused or not, in bursts of 25 chains
// flushed one by one (gpu_ops_bench's chain8_host, without its result checks): on cuda:0 over
// the fake driver (tests/gpu/fake_driver), where launches cost nothing, it times kiln's own host
// path (recording, grouping, capturing or running a plan, allocating, queueing launches) without
// a GPU. A probe run by bench/probe/fake_driver_host.sh; not part of kiln's build.
//   fused_host FUSED(0|1) [OPS]     KILN_PROBE_DEVICE: the device (default cuda:0)
#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace kiln;

int main(int argc, char** argv) {
  const bool fused = argc > 1 && argv[1][0] == '1';
  const int ops = argc > 2 ? std::atoi(argv[2]) : 40000;
  const char* name = std::getenv("KILN_PROBE_DEVICE");
  const Device base = Device::parse(name != nullptr ? name : "cuda:0");
  const Device device = fused ? base.fused() : base.without_fusion();
  const auto dist = Distribution::uniform(-1, 1);
  const auto x = Tensor<2>::random({64, 64}, dist, device);
  const auto y = Tensor<2>::random({64, 64}, dist, device);
  const auto z = Tensor<2>::random({64, 64}, dist, device);
  auto chain = [&] { return ((((-(x * y + z)).exp() * 2.0) + 1.0).tanh()) * x; };
  constexpr int kChains = 25, kOpsPerChain = 8;
  std::vector<Tensor<2>> results;
  results.reserve(kChains);
  std::vector<double> per_op;
  const KernelStats before = device.kernel_stats();
  for (int burst = 0; burst < std::max(1, ops / (kChains * kOpsPerChain)); ++burst) {
    results.clear();
    device.sync();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kChains; ++i) {
      results.push_back(chain());
      device.flush();
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    per_op.push_back(took.count() / (kChains * kOpsPerChain));
  }
  device.sync();
  // A group that runs its plan looks up no kernel; one captured anew finds its kernel loaded.
  const KernelStats after = device.kernel_stats();
  const double chains = static_cast<double>(per_op.size()) * kChains;
  std::sort(per_op.begin(), per_op.end());
  std::printf(
      "%s: host per op median %.0f ns, best %.0f ns (%zu bursts); kernel lookups per "
      "chain %.2f, compiles %lld\n",
      device.backend_name().c_str(), 1e9 * per_op[per_op.size() / 2], 1e9 * per_op[0],
      per_op.size(), static_cast<double>(after.memory_hits - before.memory_hits) / chains,
      static_cast<long long>(after.compiles - before.compiles));
}
