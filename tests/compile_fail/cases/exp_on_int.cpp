// Float-only math on an Int tensor is rejected.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto a = Tensor<2, Int>::ones({2, 2}, dev);
  auto b = a.exp();  // error: is_same_v<[A-Za-z:, ]*Float>
}
