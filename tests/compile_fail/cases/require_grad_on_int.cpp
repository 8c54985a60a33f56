// Only float tensors have gradients.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto i = Tensor<2, Int>::ones({2, 2}, dev.autodiff()).require_grad();  // error: is_same_v<[A-Za-z:, ]*Float>
}
