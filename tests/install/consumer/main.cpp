// A program outside the kiln tree, built against the installed package.
#include <kiln/kiln.h>

#include <cstdio>

int main() {
  using namespace kiln;
  auto a = Tensor<2>::ones({2, 2}, Device::cpu());
  const std::vector<float> v = (a + a).into_data().to_vec<float>();
  if (v != std::vector<float>{2, 2, 2, 2}) return 1;
  std::puts("consumer ok");
  return 0;
}
