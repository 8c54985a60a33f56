// There is no rank-0 tensor type.
#include <kiln/kiln.h>
using namespace kiln;
Tensor<0> t;  // error: kiln tensors have rank >= 1
