// Float and Int tensors do not mix without a conversion.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto a = Tensor<2>::ones({2, 2}, dev);
  auto b = Tensor<2, Int>::ones({2, 2}, dev);
  auto c = a + b;  // error: (operator\+|invalid operands to binary expression).* and .*Tensor<2[UL]*, kiln::Int>
}
