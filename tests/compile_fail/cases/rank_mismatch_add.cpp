// Adding tensors of different ranks is a compile error.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto a = Tensor<2>::ones({2, 2}, dev);
  auto b = Tensor<3>::ones({2, 2, 2}, dev);
  auto c = a + b;  // error: (operator\+|invalid operands to binary expression).* and .*Tensor<3
}
