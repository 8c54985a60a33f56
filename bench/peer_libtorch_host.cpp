// libtorch (C++) peer for gpu_ops_bench's small_add_host/16: the host time of one eager add of
// two 16-element f32 CUDA tensors, in bursts of 200 with no sync inside, per add. The Python
// peer (peer_torch_gpu.py) adds the interpreter's cost; this is what torch's C++ users pay, on
// the same driver as kiln. Built by bench/run_gpu.sh against the torch that KILN_PEER_PYTHON
// imports (not part of kiln's build: Debian ships no libtorch for CUDA).
//   peer_libtorch_host [--repeats 20] [--out FILE]   prints JSON like peer_torch_gpu.py
#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#ifndef KILN_TORCH_VERSION
#define KILN_TORCH_VERSION "?"
#endif

namespace {

constexpr int kBurst = 200;  // as gpu_ops_bench
constexpr int kBurstsPerRepeat = 50;

// Through ATen's CUDA hooks: no CUDA header needed (libtorch_cuda registers them when loaded).
void device_sync() { at::detail::getCUDAHooks().deviceSynchronize(0); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 20;
  std::string out;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--repeats") == 0)
      repeats = std::max(1, std::atoi(argv[i + 1]));
    else if (std::strcmp(argv[i], "--out") == 0)
      out = argv[i + 1];
  }
  at::manual_seed(7);
  const auto options = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, 0);
  const at::Tensor x = at::rand({16}, options), y = at::rand({16}, options);
  // The result is checked against float64 sums of the same values on the host.
  const at::Tensor got = (x + y).cpu(), xs = x.cpu(), ys = y.cpu();
  for (int i = 0; i < 16; ++i) {
    const double want = double(xs[i].item<float>()) + double(ys[i].item<float>());
    if (std::abs(double(got[i].item<float>()) - want) > 1e-6 * std::abs(want) + 1e-7) {
      std::cerr << "peer_libtorch_host: x + y is wrong at " << i << "\n";
      return 1;
    }
  }
  for (int i = 0; i < 1000; ++i) (void)(x + y);  // warm-up: kernel load, allocator
  device_sync();

  using Clock = std::chrono::steady_clock;
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    double total = 0;
    for (int b = 0; b < kBurstsPerRepeat; ++b) {
      device_sync();
      const auto start = Clock::now();
      for (int i = 0; i < kBurst; ++i) {
        at::Tensor sum = x + y;
        asm volatile("" : : "r"(sum.data_ptr()) : "memory");
      }
      total += std::chrono::duration<double>(Clock::now() - start).count() / kBurst;
    }
    device_sync();
    samples.push_back(total / kBurstsPerRepeat);
  }
  std::ostringstream json;
  json << "{\"small_add_host/16\": {\"median_s\": " << median(samples)
       << ", \"repeats\": " << repeats << ", \"timing\": \"host wall clock per add, bursts of "
       << kBurst << " without sync\"}, \"torch_version\": \"" << KILN_TORCH_VERSION
       << " (libtorch C++)\"}\n";
  std::cout << json.str();
  if (!out.empty()) std::ofstream(out) << json.str();
  return 0;
}
