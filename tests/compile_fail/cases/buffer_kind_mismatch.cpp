// An Int buffer holds Int tensors: a float tensor does not convert to one.
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  nn::Buffer<1, Int> ids;
  ids = Tensor<1>::zeros({3}, dev);  // error: (no match for.*operator=.*Int|no viable overloaded)
}
