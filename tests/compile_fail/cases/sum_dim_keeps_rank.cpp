// sum_dim keeps the rank: assigning it to a lower-rank tensor is an error.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto a = Tensor<2>::ones({2, 2}, dev);
  Tensor<1> s = a.sum_dim(1);  // error: Tensor<2.*Tensor<1
}
