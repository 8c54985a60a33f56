// A small deterministic program for the fusion-bisect test (cli_test.sh): chains of elementwise
// ops, a softmax and a reduction on Device::default_device() (fused unless KILN_FUSION=0), each
// read and printed, so each read runs one group and every group's result reaches the output.
#include <kiln/kiln.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

namespace {

// The first element and the sum: a fault in any group's first element shows in both.
template <std::size_t D>
void print(const char* what, int step, const kiln::Tensor<D>& t) {
  const std::vector<double> v = t.into_data().to_f64_vec();
  double sum = 0;
  for (double x : v) sum += x;
  std::printf("%s %d: first %.9g sum %.9g\n", what, step, v[0], sum);
}

}  // namespace

int main() {
  try {
    using kiln::Tensor;
    const kiln::Device device = kiln::Device::default_device();
    // As programs do: the name differs between the fused and the unfused device, so the
    // bisection's reference must be fused too.
    std::printf("device: %s\n", device.backend_name().c_str());
    constexpr std::int64_t kRows = 64, kCols = 128;  // above the fuser's eager size: recorded
    std::vector<float> start(kRows * kCols);
    for (std::size_t i = 0; i < start.size(); ++i)
      start[i] = std::sin(0.01f * static_cast<float>(i));
    Tensor<2> x =
        Tensor<2>::from_data(kiln::TensorData::from_vec(start, kiln::Shape{kRows, kCols}), device);
    for (int step = 0; step < 6; ++step) {
      x = ((x * 1.5 + 0.25).tanh() - x * 0.5).exp() - 1.0;  // bounded: stays in (-1, 2)
      print("chain", step, x);
    }
    print("softmax", 0, kiln::activation::softmax(x * 2.0, 1));
    print("sum", 0, (x * x).sum_dim(1));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fused_chains: %s\n", e.what());
    return 1;
  }
}
