// A mask must be a Bool tensor of the same rank.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto a = Tensor<2>::ones({2, 2}, dev);
  auto b = a.mask_fill(a, 0.0);  // error: (cannot convert|no viable conversion).*Float>.*Bool>
}
