// Error paths across the public Tensor API: each failure is the typed kiln::Error, and its
// message starts with "[op]" and names the offending values.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>
#include <vector>

#include "support/devices.h"
#include "support/error_message.h"

namespace kiln {
namespace {

using kiln::test::kCpu;

using test::expect_error;

Tensor<2> floats(std::int64_t rows, std::int64_t cols) {
  return Tensor<2>::ones({rows, cols}, kCpu);
}

TEST(TensorErrors, AddShapeMismatchNamesOpAndBothShapes) {
  expect_error<ShapeMismatch>([] { (void)(floats(2, 3) + floats(4, 3)); }, "add",
                              {"[2, 3]", "[4, 3]"});
  expect_error<ShapeMismatch>([] { (void)(floats(2, 3) * floats(2, 4)); }, "mul",
                              {"[2, 3]", "[2, 4]"});
  expect_error<ShapeMismatch>([] { (void)floats(5, 1).sub(floats(2, 3)); }, "sub",
                              {"[5, 1]", "[2, 3]"});
  // Broadcasting size-1 dims is fine.
  EXPECT_NO_THROW((void)(floats(2, 1) + floats(1, 3)));
}

TEST(TensorErrors, ComparisonShapeMismatch) {
  expect_error<ShapeMismatch>([] { (void)floats(2, 3).greater(floats(3, 2)); }, "greater",
                              {"[2, 3]", "[3, 2]"});
}

TEST(TensorErrors, FromDataRankMismatch) {
  auto data = TensorData::from_vec(std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  expect_error<ShapeMismatch>([&] { (void)Tensor<3>::from_data(data, kCpu); }, "from_data",
                              {"[2, 2]", "rank 2", "rank 3"});
  expect_error<ShapeMismatch>([&] { (void)Tensor<1>::from_data(data, kCpu); }, "from_data");
}

TEST(TensorErrors, FromDataKindMismatch) {
  auto ints = TensorData::from_vec(std::vector<std::int32_t>{1, 2}, Shape{2});
  expect_error<DTypeMismatch>([&] { (void)Tensor<1>::from_data(ints, kCpu); }, "from_data",
                              {"i32"});
  auto flags = TensorData::from_vec(std::vector<bool>{true}, Shape{1});
  expect_error<DTypeMismatch>([&] { (void)Tensor<1, Int>::from_data(flags, kCpu); }, "from_data",
                              {"bool"});
}

TEST(TensorErrors, CreationShapeOfTheWrongRank) {
  expect_error<ShapeMismatch>(
      [] {
        (void)Tensor<2>::zeros({2, 3, 4}, kCpu);
      },
      "full", {"[2, 3, 4]"});
  expect_error<InvalidArgument>(
      [] {
        (void)Tensor<2>::zeros({2, -3}, kCpu);
      },
      "full", {"negative"});
  expect_error<DTypeMismatch>(
      [] {
        (void)Tensor<2>::zeros({2, 3}, kCpu, DType::I32);
      },
      "full", {"i32"});
}

TEST(TensorErrors, CastAcrossKindsIsDTypeMismatch) {
  expect_error<DTypeMismatch>([] { (void)floats(2, 2).cast(DType::I32); }, "cast",
                              {"i32", ".int_()"});
  auto ints = Tensor<1, Int>::zeros({3}, kCpu);
  expect_error<DTypeMismatch>([&] { (void)ints.cast(DType::F32); }, "cast", {"f32"});
  expect_error<DTypeMismatch>([&] { (void)ints.cast(DType::Bool); }, "cast", {"bool"});
  // Within a kind, cast works.
  EXPECT_EQ(floats(2, 2).cast(DType::BF16).dtype(), DType::BF16);
  EXPECT_EQ(ints.cast(DType::U8).dtype(), DType::U8);
}

TEST(TensorErrors, ToVecOfTheWrongType) {
  auto data = floats(2, 2).into_data();
  expect_error<DTypeMismatch>([&] { (void)data.to_vec<double>(); }, "TensorData::to_vec",
                              {"f64", "f32"});
  auto flags = floats(1, 2).greater_elem(0.5).into_data();
  expect_error<DTypeMismatch>([&] { (void)flags.to_vec<float>(); }, "TensorData::to_vec", {"bool"});
  EXPECT_EQ(flags.to_vec<bool>(), (std::vector<bool>{true, true}));
}

TEST(TensorErrors, FloatScalarWithIntTensor) {
  auto ints = Tensor<1, Int>::zeros({3}, kCpu);
  expect_error<DTypeMismatch>([&] { (void)(ints + 2.5); }, "add_scalar", {"2.5"});
  expect_error<DTypeMismatch>([&] { (void)(ints * 0.5); }, "mul_scalar");
  // An integral value is fine, even when written as a double.
  EXPECT_EQ((ints + 2).into_data().to_vec<std::int64_t>(), (std::vector<std::int64_t>{2, 2, 2}));
}

TEST(TensorErrors, DimsOutOfRange) {
  auto x = floats(2, 3);
  expect_error<InvalidArgument>([&] { (void)x.swap_dims(0, 2); }, "swap_dims", {"2"});
  expect_error<InvalidArgument>([&] { (void)x.swap_dims(-3, 0); }, "swap_dims", {"-3"});
  expect_error<InvalidArgument>([&] { (void)x.permute({0, 0}); }, "permute", {"repeated"});
  expect_error<InvalidArgument>([&] { (void)x.flip({5}); }, "flip", {"5"});
  expect_error<InvalidArgument>([&] { (void)x.narrow(0, 1, 5); }, "narrow");
  expect_error<InvalidArgument>([&] { (void)x.unsqueeze(4); }, "unsqueeze", {"4"});
  // Negative dims count from the end.
  EXPECT_EQ(x.swap_dims(-1, -2).shape(), (Shape{3, 2}));
}

TEST(TensorErrors, SliceArguments) {
  auto x = floats(2, 3);
  expect_error<InvalidArgument>(
      [&] {
        (void)x.slice({{0, 1}, {0, 1}, {0, 1}});
      },
      "slice", {"3 slices", "rank 2"});
  expect_error<InvalidArgument>([&] { (void)x.slice({Slice(0, 2, 0)}); }, "slice", {"step"});
}

TEST(TensorErrors, ReshapeArguments) {
  auto x = floats(2, 3);
  expect_error<ShapeMismatch>([&] { (void)x.reshape<2>({4, 2}); }, "reshape", {"[2, 3]", "[4, 2]"});
  expect_error<InvalidArgument>([&] { (void)x.reshape<2>({-1, -1}); }, "reshape", {"-1"});
  EXPECT_EQ(x.reshape<2>({-1, 2}).shape(), (Shape{3, 2}));
}

TEST(TensorErrors, ExpandToAnIncompatibleShape) {
  expect_error<ShapeMismatch>(
      [] {
        (void)floats(2, 3).expand(Shape{2, 4});
      },
      "expand", {"[2, 3]", "[2, 4]"});
}

TEST(TensorErrors, FromPrimitiveChecksRankAndKind) {
  auto x = floats(2, 3);
  EXPECT_THROW((void)Tensor<3>::from_primitive(x.primitive()), ShapeMismatch);
  EXPECT_THROW((void)(Tensor<2, Int>::from_primitive(x.primitive())), DTypeMismatch);
  DynamicTensor<Float> dynamic = x.reshape(Shape{6});
  EXPECT_THROW((void)dynamic.as_rank<2>(), ShapeMismatch);
  EXPECT_EQ(dynamic.as_rank<1>().shape(), (Shape{6}));
}

TEST(TensorErrors, ErrorsAreKilnErrors) {
  // Every typed error derives from kiln::Error (one catch for callers).
  EXPECT_THROW((void)(floats(2, 3) + floats(4, 3)), Error);
  EXPECT_THROW((void)floats(2, 2).cast(DType::I32), Error);
  EXPECT_THROW((void)floats(2, 2).swap_dims(0, 9), Error);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Shapes too large for any machine are refused with OutOfMemory, not by a crash or a short
// buffer: at creation, and when an op would materialise them.
TEST(ErrorPaths, AbsurdShapesAreRefused) {
  const Device dev = Device::cpu();
  EXPECT_THROW(Tensor<2>::zeros({std::int64_t{1} << 40, std::int64_t{1} << 40}, dev), OutOfMemory);
  EXPECT_THROW(Tensor<3>::empty({std::int64_t{1} << 62, 4, 4}, dev), OutOfMemory);
  auto x = Tensor<1>::ones({4}, dev);
  EXPECT_THROW(x.repeat_dim(0, std::int64_t{1} << 61), OutOfMemory);
  // A view may not pass the element limit either: refused at the expand, before any op could
  // compute a size from it.
  EXPECT_THROW((void)x.reshape<2>(Shape{4, 1}).expand<2>(Shape{4, std::int64_t{1} << 60}),
               InvalidArgument);
  // Under the limit, materialising a view larger than any allocation is OutOfMemory.
  auto wide = x.reshape<2>(Shape{4, 1}).expand<2>(Shape{4, std::int64_t{1} << 46});
  EXPECT_THROW(wide.exp(), OutOfMemory);
  // An empty tensor with a huge other dim is fine: nothing to allocate.
  EXPECT_EQ(Tensor<2>::zeros({0, std::int64_t{1} << 40}, dev).num_elements(), 0);
}

}  // namespace
}  // namespace kiln
