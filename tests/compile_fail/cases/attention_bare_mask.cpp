// An attention mask says its polarity: a bare bool tensor is not taken for one.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto q = Tensor<4>::ones({1, 1, 2, 2}, dev);
  auto m = Tensor<4, Bool>::zeros({1, 1, 2, 2}, dev);
  auto y = module::attention(q, q, q, m);  // error: (invalid initialization|no viable conversion).*AttentionMask
}
