#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <sstream>

using namespace kiln;

TEST(Print, NestedBracketsAlignedRows) {
  auto t = Tensor<3, Int>::from_data(
      TensorData::from_vec(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}),
      Device::cpu());
  std::ostringstream out;
  out << t;
  EXPECT_EQ(out.str(),
            "Tensor(i64, shape [2, 2, 2], cpu)\n"
            "[[[1, 2],\n"
            "  [3, 4]],\n"
            " [[5, 6],\n"
            "  [7, 8]]]");
}

TEST(Print, EmptyAndLongTensors) {
  auto empty = Tensor<2>::zeros({0, 3}, Device::cpu());
  EXPECT_NE(empty.to_string().find("[]"), std::string::npos);
  auto long_one = Tensor<1>::ones({100}, Device::cpu());
  EXPECT_NE(long_one.to_string().find("(100 elements)"), std::string::npos);
}
