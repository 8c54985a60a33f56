// A bool tensor is not differentiable.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto m = Tensor<1>::ones({1}, dev.autodiff()).greater_elem(0);
  Gradients g = m.backward();  // error: is_same_v<[A-Za-z:, ]*Float>
}
