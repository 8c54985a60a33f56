// Giving a parameter a new value: `param = tensor` checks shape, dtype and device against the
// parameter and keeps its mode; whole-module changes (nn::cast, nn::to_device, nn::train) go
// through their own explicit path and keep tied slots tied.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/nn/linear.h>

#include <string>
#include <vector>

#include "support/devices.h"
#include "support/error_message.h"

namespace kiln::nn {
namespace {

using kiln::test::kCpu;

using test::expect_error;

std::vector<double> values(const ParamSlot& slot) {
  return TensorData(kiln::detail::into_data(kiln::detail::inner(slot.primitive()))).to_f64_vec();
}

template <std::size_t D>
Tensor<D> counting(Shape shape, const Device& device = kCpu) {
  std::vector<float> v(static_cast<std::size_t>(shape.num_elements()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 2.5f;
  return Tensor<D>::from_data(TensorData::from_vec(v, shape), device);
}

// The finding: a Linear(9 -> 7) weight is [out, in] = [7, 9]; [9, 7] and a Linear(4 -> 1)'s
// [1, 4] weight given [7, 9] were accepted before.
TEST(ParamAssign, RejectsAnotherShapeAndKeepsTheValue) {
  Linear layer = LinearConfig{9, 7}.init(kCpu);
  ASSERT_EQ(layer.weight.val().shape(), Shape({7, 9}));
  layer.weight = Tensor<2>::ones({7, 9}, kCpu);
  EXPECT_EQ(values(layer.weight), std::vector<double>(63, 1.0));

  expect_error<ShapeMismatch>(
      [&] {
        layer.weight = Tensor<2>::ones({9, 7}, kCpu);
      },
      "Param::assign", {"the parameter has shape [7, 9]", "new value has shape [9, 7]"});
  EXPECT_EQ(layer.weight.val().shape(), Shape({7, 9}));
  EXPECT_EQ(values(layer.weight), std::vector<double>(63, 1.0));

  Linear small = LinearConfig{4, 1}.init(kCpu);
  const std::vector<double> before = values(small.weight);
  expect_error<ShapeMismatch>(
      [&] {
        small.weight = Tensor<2>::ones({7, 9}, kCpu);
      },
      "Param::assign", {"[1, 4]", "[7, 9]"});
  expect_error<ShapeMismatch>([&] { *small.bias = Tensor<1>::ones({0}, kCpu); }, "Param::assign",
                              {"[1]", "[0]"});
  EXPECT_EQ(values(small.weight), before);
}

TEST(ParamAssign, RejectsAnotherDtypeNamingBoth) {
  Linear layer = LinearConfig{3, 2}.init(kCpu);
  const std::vector<double> before = values(layer.weight);
  expect_error<DTypeMismatch>(
      [&] {
        layer.weight = Tensor<2>::ones({2, 3}, kCpu).cast(DType::F64);
      },
      "Param::assign", {"the parameter is f32", "the new value is f64", "nn::cast"});
  expect_error<DTypeMismatch>(
      [&] {
        layer.weight = Tensor<2>::ones({2, 3}, kCpu).cast(DType::BF16);
      },
      "Param::assign", {"f32", "bf16"});
  EXPECT_EQ(layer.weight.val().dtype(), DType::F32);
  EXPECT_EQ(values(layer.weight), before);
  // Rank and kind are still checked on the untyped path.
  EXPECT_THROW(layer.weight.assign(Tensor<1>::zeros({6}, kCpu).primitive()), ShapeMismatch);
  EXPECT_THROW(layer.weight.assign(Tensor<2, Int>::zeros({2, 3}, kCpu).primitive()), DTypeMismatch);
}

TEST(ParamAssign, NamesTheParameterWhenTheNameIsKnown) {
  Linear layer = LinearConfig{3, 2}.init(kCpu);
  expect_error<ShapeMismatch>(
      [&] {
        layer.weight.assign(Tensor<2>::ones({3, 2}, kCpu).primitive(), "encoder.fc.weight");
      },
      "Param::assign", {"parameter 'encoder.fc.weight' has shape [2, 3]", "[3, 2]"});
}

TEST(ParamAssign, BuffersAreCheckedTheSameWay) {
  Buffer<1> running(Tensor<1>::zeros({4}, kCpu));
  running = Tensor<1>::ones({4}, kCpu);
  EXPECT_EQ(values(running), std::vector<double>(4, 1.0));
  expect_error<ShapeMismatch>([&] { running = Tensor<1>::ones({5}, kCpu); }, "Buffer::assign",
                              {"the buffer has shape [4]", "[5]"});
  expect_error<DTypeMismatch>([&] { running = Tensor<1>::ones({4}, kCpu).cast(DType::F16); },
                              "Buffer::assign", {"f32", "f16"});
}

// A slot without a value (a default-constructed layer) takes any value of its rank and kind.
TEST(ParamAssign, AnEmptySlotTakesAnyShape) {
  Param<2> weight;
  EXPECT_FALSE(weight.initialized());
  weight = counting<2>(Shape{3, 5});
  EXPECT_EQ(weight.val().shape(), Shape({3, 5}));
  weight = counting<2>(Shape{3, 5});  // from here on it is checked
  EXPECT_THROW(weight = counting<2>(Shape{5, 3}), ShapeMismatch);
}

// Assigning a Param replaces the parameter itself (what assigning whole modules does), so a
// layer can be rebuilt at another size on purpose.
TEST(ParamAssign, AssigningAParamReplacesIt) {
  Linear layer = LinearConfig{3, 2}.init(kCpu);
  layer.weight = Param<2>(Tensor<2>::ones({5, 3}, kCpu).cast(DType::F64));
  EXPECT_EQ(layer.weight.val().shape(), Shape({5, 3}));
  EXPECT_EQ(layer.weight.val().dtype(), DType::F64);
  layer = LinearConfig{4, 4}.init(kCpu);
  EXPECT_EQ(layer.weight.val().shape(), Shape({4, 4}));
}

// In training mode a new value becomes a tracked leaf on the autodiff device, whatever the
// value's own mode; in validation mode a tracked value lands plain and untracked.
TEST(ParamAssign, KeepsTheParametersMode) {
  Linear layer = train(LinearConfig{3, 2}.init(kCpu));
  layer.weight = counting<2>(Shape{2, 3});  // a plain tensor
  EXPECT_EQ(layer.weight.val().device(), kCpu.autodiff());
  EXPECT_TRUE(layer.weight.val().is_require_grad());
  EXPECT_EQ(values(layer.weight), counting<2>(Shape{2, 3}).into_data().to_f64_vec());
  // A tracked non-leaf (computed from the parameter) is detached: the parameter is a leaf again.
  layer.weight = layer.weight.val() * 2.0;
  const Tensor<2> x = Tensor<2>::ones({1, 3}, kCpu);
  Gradients grads = layer.forward(x).sum().backward();
  const std::optional<Tensor<2>> dw = layer.weight.val().grad(grads);
  ASSERT_TRUE(dw.has_value());
  EXPECT_EQ(dw->into_data().to_f64_vec(), std::vector<double>(6, 1.0));  // d sum(W x) / dW = x

  Linear plain = valid(layer);
  plain.weight = counting<2>(Shape{2, 3}, kCpu.autodiff()).require_grad();
  EXPECT_EQ(plain.weight.val().device(), kCpu);
  EXPECT_FALSE(plain.weight.val().is_require_grad());

  // A buffer of a training module stays an untracked constant on the autodiff device.
  struct WithBuffer {
    Buffer<1> stats;
    KILN_MODULE(stats)
  };
  WithBuffer m = train(WithBuffer{Buffer<1>(Tensor<1>::zeros({2}, kCpu))});
  m.stats = Tensor<1>::ones({2}, kCpu);
  EXPECT_EQ(m.stats.val().device(), kCpu.autodiff());
  EXPECT_FALSE(m.stats.val().is_require_grad());
}

struct Tied {
  Param<1> first;
  Param<1> second;
  KILN_MODULE(first, second)
};

TEST(ParamAssign, ATiedValueStaysTied) {
  Tied tied = train(Tied{Param<1>(counting<1>(Shape{3})), Param<1>(counting<1>(Shape{3}))});
  tied.second = tied.first.val();  // the same tracked leaf: kept as it is
  EXPECT_EQ(tied.first.primitive(), tied.second.primitive());
}

// ---- the explicit paths: nn::cast, nn::to_device, nn::train / valid ----

struct AssignNet {
  Linear fc;
  Buffer<1> stats;
  KILN_MODULE(fc, stats)
};

AssignNet make_assign_net() {
  return AssignNet{LinearConfig{3, 2}.init(kCpu), Buffer<1>(Tensor<1>::ones({2}, kCpu))};
}

TEST(ModuleCast, CastsEveryValueAndKeepsTheMode) {
  const AssignNet net = train(make_assign_net());
  const AssignNet wide = cast(net, DType::F64);
  for (const NamedParam& p : named_parameters(wide)) {
    EXPECT_EQ(p.value->dtype(), DType::F64) << p.name;
    EXPECT_TRUE(p.value->device().is_autodiff()) << p.name;
    EXPECT_EQ(kiln::detail::is_require_grad(p.value), p.trainable) << p.name;
  }
  // f32 -> f64 is exact, and the original keeps its dtype.
  EXPECT_EQ(values(wide.fc.weight), values(net.fc.weight));
  EXPECT_EQ(net.fc.weight.val().dtype(), DType::F32);
  // The f64 module trains: its parameters are leaves of their own.
  Gradients grads =
      wide.fc.forward(Tensor<2>::ones({1, 3}, kCpu).cast(DType::F64)).sum().backward();
  EXPECT_TRUE(wide.fc.weight.val().grad(grads).has_value());
  EXPECT_FALSE(net.fc.weight.val().grad(grads).has_value());
  // Values assigned afterwards are checked against the new dtype.
  AssignNet copy = wide;
  EXPECT_THROW(copy.fc.weight = Tensor<2>::ones({2, 3}, kCpu), DTypeMismatch);
  copy.fc.weight = Tensor<2>::ones({2, 3}, kCpu).cast(DType::F64);

  const AssignNet plain = cast(valid(net), DType::F16);
  for (const NamedParam& p : named_parameters(plain)) {
    EXPECT_EQ(p.value->dtype(), DType::F16) << p.name;
    EXPECT_EQ(p.value->device(), kCpu) << p.name;
  }
}

TEST(ModuleCast, RefusesANonFloatDtype) {
  const AssignNet net = make_assign_net();
  try {
    (void)cast(net, DType::I64);
    ADD_FAILURE() << "nn::cast to i64 was accepted";
  } catch (const DTypeMismatch& e) {
    EXPECT_EQ(std::string(e.what()),
              "[nn::cast] parameters are float tensors; i64 is not a float dtype");
  }
  EXPECT_THROW((void)cast(net, DType::Bool), DTypeMismatch);
  EXPECT_EQ(net.fc.weight.val().dtype(), DType::F32);
}

TEST(ModuleCast, TiedSlotsStayTiedThroughEveryWholeModuleChange) {
  Tied tied{Param<1>(counting<1>(Shape{3})), {}};
  tied.second = tied.first.val();
  auto shared = [](const Tied& t) { return t.first.primitive() == t.second.primitive(); };
  ASSERT_TRUE(shared(tied));
  const Tied training = train(tied);
  EXPECT_TRUE(shared(training));
  EXPECT_TRUE(training.first.val().is_require_grad());
  EXPECT_TRUE(shared(valid(training)));
  EXPECT_TRUE(shared(cast(training, DType::F64)));
  EXPECT_TRUE(shared(to_device(training, kCpu)));
  // One tensor, so one gradient accumulates both uses: d/dθ (θ · θ) = 2θ.
  Gradients grads = (training.first.val() * training.second.val()).sum().backward();
  EXPECT_EQ(training.first.val().grad(grads)->into_data().to_f64_vec(),
            (std::vector<double>{-5, -3, -1}));
}

}  // namespace
}  // namespace kiln::nn
