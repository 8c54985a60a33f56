// gather takes Int indices.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto a = Tensor<2>::ones({2, 2}, dev);
  auto g = a.gather(0, a);  // error: (cannot convert|no viable conversion).*Float>.*Int>
}
