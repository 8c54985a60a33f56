// Control: the autodiff API, used correctly, compiles.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto x = Tensor<2>::ones({2, 2}, dev.autodiff()).require_grad();
  auto loss = (x * x).sum();
  Gradients g = loss.backward({.retain_graph = true});
  std::optional<Tensor<2>> gx = x.grad(g);
  Gradients g2 = (x * x).backward(Tensor<2>::ones({2, 2}, dev.autodiff()), {.create_graph = true});
  bool tracked = x.is_require_grad() && !x.detach().is_require_grad();
  CheckpointScope scope(CheckpointStrategy::Balanced);
  Tensor<2> plain = x.inner();
  (void)gx; (void)g2; (void)tracked; (void)plain;
}
