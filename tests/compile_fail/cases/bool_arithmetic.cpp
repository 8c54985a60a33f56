// Bool tensors have no arithmetic.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto a = Tensor<2>::ones({2, 2}, dev).greater_elem(0);
  auto b = a + a;  // error: (operator\+|invalid operands to binary expression).*Bool>
}
