// One quantized product on cuda:0, for Nsight Compute (bench/probe/quant_kernels.sh):
//   quant_probe KIND N K ROWS CALLS   (KIND q4_0, q4_k, q8_0; x bf16 [ROWS, K], W [N, K])
#include <kiln/kiln.h>
#include <kiln/quant.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc != 6) {
    std::fprintf(stderr, "usage: quant_probe KIND N K ROWS CALLS\n");
    return 2;
  }
  const std::string kind = argv[1];
  const long long n = std::atoll(argv[2]), k = std::atoll(argv[3]), rows = std::atoll(argv[4]);
  const int calls = std::atoi(argv[5]);
  const QuantScheme scheme = quant_scheme(kind == "q4_k"   ? QuantScheme::Kind::Q4_K
                                          : kind == "q8_0" ? QuantScheme::Kind::Q8_0
                                                           : QuantScheme::Kind::Q4_0);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> w(static_cast<std::size_t>(n * k)), x(static_cast<std::size_t>(rows * k));
  for (float& v : w) v = dist(rng);
  for (float& v : x) v = dist(rng);
  try {
    const Device device = Device::cuda(0);
    const auto q =
        Tensor<2>::from_data(TensorData::from_vec(w, Shape{n, k}).quantize(scheme), device);
    const auto xs =
        Tensor<2>::from_data(TensorData::from_vec(x, Shape{rows, k}), device).cast(DType::BF16);
    Tensor<2> y;
    for (int i = 0; i < calls; ++i) y = xs.matmul(q.transpose());
    std::printf("%s %lldx%lld rows %lld: y[0] = %g\n", kind.c_str(), n, k, rows,
                y.slice({Slice(0, 1), Slice(0, 1)}).into_data().to_f64_vec()[0]);
  } catch (const Error& e) {
    std::fprintf(stderr, "quant_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
