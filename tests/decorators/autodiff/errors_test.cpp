// Misuse of autodiff: each mistake throws a typed kiln::Error whose message starts with the op,
// says what was wrong and what to call instead, and leaves the graph usable.
#include <string>

#include "decorators/autodiff/test_support.h"

namespace kiln::autodiff_test {
namespace {

// Runs f, which must throw E; returns the message.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& error) {
    return error.what();
  } catch (const std::exception& other) {
    ADD_FAILURE() << "threw another error: " << other.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

void expect_mentions(const std::string& message, const std::string& op,
                     const std::vector<std::string>& words) {
  EXPECT_EQ(message.rfind("[" + op + "]", 0), 0u) << message;
  for (const std::string& word : words) {
    EXPECT_NE(message.find(word), std::string::npos) << "'" << word << "' not in: " << message;
  }
}

const std::vector<double> kInputs = {0.5, -1.0, 2.0, 1.5};

TEST(AutodiffErrors, RequireGradOnAPlainDeviceSaysWhereToCreateTheTensor) {
  const auto plain = tensor<1>(kInputs, {4}, kCpu);
  const std::string m = message_of<AutodiffError>([&] { (void)plain.require_grad(); });
  expect_mentions(m, "require_grad", {"cpu", ".autodiff()"});
  // The tensor is still usable.
  EXPECT_EQ(values(plain), kInputs);
  EXPECT_TRUE(plain.to_device(kAd).require_grad().is_require_grad()) << "the advised fix works";
}

TEST(AutodiffErrors, RequireGradOnIntegerOrBoolTensors) {
  // The template refuses Int and Bool tensors at compile time; the runtime check behind it
  // catches a primitive of another kind.
  const auto ints = Tensor<1, Int>::arange(0, 4, kAd);
  const std::string m =
      message_of<AutodiffError>([&] { (void)detail::require_grad(ints.primitive(), true); });
  expect_mentions(m, "require_grad", {"float", "i64"});
  const auto flags = ints.greater_elem(1);
  const std::string mb =
      message_of<AutodiffError>([&] { (void)detail::require_grad(flags.primitive(), true); });
  expect_mentions(mb, "require_grad", {"float", "bool"});
}

TEST(AutodiffErrors, BackwardOnAnUntrackedTensorSaysToRequireGrad) {
  const auto on_autodiff = tensor<1>(kInputs, {4}).sum();
  const auto on_cpu = tensor<1>(kInputs, {4}, kCpu).sum();
  for (const auto& t : {on_autodiff, on_cpu}) {
    const std::string m = message_of<AutodiffError>([&] { (void)t.backward(); });
    expect_mentions(m, "backward", {"not tracked", "require_grad()"});
  }
  // A tensor cut from its graph is untracked as well.
  const auto x = tensor<1>(kInputs, {4}).require_grad();
  const std::string m =
      message_of<AutodiffError>([&] { (void)(x * 2.0).sum().detach().backward(); });
  expect_mentions(m, "backward", {"require_grad()"});
}

TEST(AutodiffErrors, BackwardOnANonScalarWithoutASeedSaysHowToReduceOrSeed) {
  const auto x = tensor<2>(kInputs, {2, 2}).require_grad();
  const auto y = x * x;
  const std::string m = message_of<AutodiffError>([&] { (void)y.backward(); });
  expect_mentions(m, "backward", {"[2, 2]", ".sum()", "seed"});
  // The failed call left the graph intact.
  const Gradients g = y.sum().backward();
  expect_close(values(grad_of(x, g)), {1.0, -2.0, 4.0, 3.0}, 1e-6, "after the error");
}

TEST(AutodiffErrors, ASeedOfTheWrongShapeIsAShapeMismatch) {
  const auto x = tensor<2>(kInputs, {2, 2}).require_grad();
  const auto y = x * 3.0;
  const std::string m = message_of<ShapeMismatch>([&] {
    (void)y.backward(tensor<2>({1, 1, 1, 1, 1, 1}, {2, 3}));
  });
  expect_mentions(m, "backward", {"[2, 3]", "[2, 2]"});
  // Nothing was freed: the right seed still works.
  const Gradients g = y.backward(tensor<2>({1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(values(grad_of(x, g)), (std::vector<double>{3, 6, 9, 12}));
}

TEST(AutodiffErrors, ASecondBackwardOverAFreedGraphSaysToRetainIt) {
  const auto x = tensor<1>(kInputs, {4}).require_grad();
  const auto loss = (x.exp() * x).sum();
  const Gradients first = loss.backward();
  const std::string m = message_of<AutodiffError>([&] { (void)loss.backward(); });
  expect_mentions(m, "backward", {"freed", "retain_graph = true"});
  // A graph that shares the freed part fails the same way, not with a crash.
  const auto more = loss * 2.0;
  const std::string m2 = message_of<AutodiffError>([&] { (void)more.backward(); });
  expect_mentions(m2, "backward", {"retain_graph"});
  EXPECT_TRUE(x.grad(first).has_value());
}

TEST(AutodiffErrors, RetainGraphAllowsASecondIdenticalBackward) {
  const auto x = tensor<1>(kInputs, {4}).require_grad();
  const auto loss = (x.exp() * x).sum();
  const Gradients first = loss.backward({.retain_graph = true});
  const Gradients second = loss.backward({.retain_graph = true});
  const Gradients third = loss.backward();  // the last one may free it
  std::vector<double> want;
  for (double v : kInputs) want.push_back(std::exp(v) * (v + 1));  // d/dx x eˣ
  for (const Gradients* g : {&first, &second, &third}) {
    expect_close(values(grad_of(x, *g)), want, 1e-6, "retained");
  }
  EXPECT_THROW((void)loss.backward(), AutodiffError);
}

TEST(AutodiffErrors, GradReplaceNeedsALeafAndTheLeafsShape) {
  const auto x = tensor<2>(kInputs, {2, 2}).require_grad();
  Gradients g = (x * 2.0).sum().backward();
  // Not a leaf: an intermediate, an untracked tensor, a plain one.
  const auto mid = x * 1.0;
  for (const auto& t : {mid, tensor<2>(kInputs, {2, 2}), tensor<2>(kInputs, {2, 2}, kCpu)}) {
    const std::string m = message_of<AutodiffError>([&] {
      t.grad_replace(g, tensor<2>(kInputs, {2, 2}));
    });
    expect_mentions(m, "grad_replace", {"require_grad()"});
  }
  const std::string m = message_of<ShapeMismatch>([&] {
    x.grad_replace(g, tensor<2>(kInputs, {4, 1}));
  });
  expect_mentions(m, "grad_replace", {"[4, 1]", "[2, 2]"});
  // The failed calls changed nothing.
  EXPECT_EQ(g.size(), 1u);
  EXPECT_EQ(values(grad_of(x, g)), std::vector<double>(4, 2.0));
}

TEST(AutodiffErrors, FromInnerTakesAPlainTensor) {
  const auto x = tensor<1>(kInputs, {4});
  const std::string m = message_of<AutodiffError>([&] { (void)Tensor<1>::from_inner(x); });
  expect_mentions(m, "from_inner", {"autodiff", "inner device"});
}

TEST(AutodiffErrors, OrdinaryOpErrorsStillComeFromTheOpOnTrackedTensors) {
  const auto x = tensor<2>(kInputs, {2, 2}).require_grad();
  const auto y = tensor<2>({1, 2, 3, 4, 5, 6}, {2, 3}).require_grad();
  EXPECT_THROW((void)(x + y), ShapeMismatch);
  const std::string m = message_of<ShapeMismatch>([&] { (void)y.matmul(y); });
  EXPECT_EQ(m.rfind("[matmul]", 0), 0u) << m;
  // x is still a working leaf.
  const Gradients g = (x * x).sum().backward();
  EXPECT_TRUE(x.grad(g).has_value());
}

}  // namespace
}  // namespace kiln::autodiff_test
