// The first program to run: create tensors, compute, read results back.
#include <kiln/kiln.h>

#include <iostream>

int main() {
  using namespace kiln;
  const Device dev = Device::cpu();
  dev.seed(42);

  auto a = Tensor<2>::from_data(TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, {2, 2}), dev);
  auto b = Tensor<2>::ones({2, 2}, dev);
  auto c = (a * 2.0 + b).exp().log();  // elementwise, on the CPU backend
  std::cout << "c = " << c << "\n";

  auto x = Tensor<2>::random({3, 4}, Distribution::normal(0, 1), dev);
  std::cout << "x = " << x << "\n";
  std::cout << "x > 0: " << x.greater_elem(0.0) << "\n";
  std::cout << "x transposed: " << x.transpose() << "\n";
  return 0;
}
