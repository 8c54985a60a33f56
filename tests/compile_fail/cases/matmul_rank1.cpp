// matmul needs rank >= 2.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto a = Tensor<1>::ones({4}, dev);
  auto b = a.matmul(a);  // error: (D|1) >= 2
}
