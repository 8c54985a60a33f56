// Not a case: the harness's own check. Line 6 is legal and marked; the error is a typo on line 7,
// which must not count as kiln rejecting line 6 (compile_fail.harness_ignores_unrelated_errors).
#include <kiln/kiln.h>
using namespace kiln;
void f(Device dev) {
  auto a = Tensor<2, Int>::ones({2, 2}, dev);  // error: is_same_v<[A-Za-z:, ]*Float>
  auto b = a.exq();
}
