#include <gtest/gtest.h>
#include <kiln/kiln.h>

using namespace kiln;

TEST(Smoke, AddOnes) {
  auto a = Tensor<2>::ones({2, 3}, Device::cpu());
  auto b = a + a;
  EXPECT_EQ(b.into_data().to_vec<float>(), std::vector<float>(6, 2.0f));
}
