// Control: the same kinds of calls, used correctly, compile.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto a = Tensor<2>::ones({2, 2}, dev);
  auto b = a + a;
  Tensor<2, Bool> m = b.greater_elem(0.5);
  Tensor<2, Int> i = Tensor<2, Int>::ones({2, 2}, dev);
  auto c = a.exp().matmul(a);
  auto s = c.sum();
  Tensor<1> flat = a.reshape<1>(Shape{4});
  (void)m; (void)i; (void)s; (void)flat;
}
