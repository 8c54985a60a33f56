// Attention's backward pass in blocks of query rows (attention_backward_score_budget): cut into
// many blocks, every gradient equals the one-block pass, for masks and biases with and without a
// query dim of their own, causal masking, broadcast batch and head dims, f64 and f32, and an
// empty query dim. The one-block pass is checked against float64 finite differences by the
// conformance table's gradcheck rows.
#include "contract/defaults/attention_grads.h"
#include "decorators/autodiff/autodiff_backend.h"
#include "decorators/autodiff/test_support.h"

namespace kiln::autodiff_test {
namespace {

struct Case {
  const char* name;
  Shape q, k, v;
  std::optional<Shape> mask, bias;
  bool causal;
};

// Restores the budget however the test ends.
struct Budget {
  explicit Budget(std::int64_t elements) : saved(defaults::attention_backward_score_budget()) {
    defaults::attention_backward_score_budget() = elements;
  }
  ~Budget() { defaults::attention_backward_score_budget() = saved; }
  std::int64_t saved;
};

std::vector<std::vector<double>> gradients(const Case& c, DType dtype, std::int64_t budget) {
  const Budget scoped(budget);
  std::uint32_t seed = 1;
  auto leaf = [&](const Shape& s) {
    return tensor<4>(spread(static_cast<std::size_t>(s.num_elements()), -1, 1, seed++), s, kAd,
                     dtype)
        .require_grad();
  };
  const auto q = leaf(c.q), k = leaf(c.k), v = leaf(c.v);
  std::optional<Tensor<4>> bias;
  if (c.bias) bias = leaf(*c.bias);
  std::optional<module::AttentionMask<4>> mask;
  if (c.mask) {
    const auto pattern = spread(static_cast<std::size_t>(c.mask->num_elements()), 0, 1, 99);
    mask = module::AttentionMask<4>::exclude(tensor<4>(pattern, *c.mask, kAd).greater_elem(0.7));
  }
  const auto out = module::attention(q, k, v, mask, bias, {.is_causal = c.causal});
  const auto weights =
      tensor<4>(spread(static_cast<std::size_t>(out.shape().num_elements()), -1, 1, 77),
                out.shape(), kAd, dtype);
  const Gradients g = (out * weights).sum().backward();
  std::vector<std::vector<double>> all = {values(grad_of(q, g)), values(grad_of(k, g)),
                                          values(grad_of(v, g))};
  if (bias) all.push_back(values(grad_of(*bias, g)));
  return all;
}

TEST(AttentionBackwardBlocks, ManyBlocksGiveTheOneBlockGradients) {
  const Case cases[] = {
      {"plain", {2, 3, 9, 4}, {2, 3, 7, 4}, {2, 3, 7, 5}, std::nullopt, std::nullopt, false},
      {"causal", {1, 2, 11, 4}, {1, 2, 11, 4}, {1, 2, 11, 3}, std::nullopt, std::nullopt, true},
      {"key padding mask",
       {2, 2, 8, 4},
       {2, 2, 6, 4},
       {2, 2, 6, 4},
       Shape{2, 1, 1, 6},
       std::nullopt,
       false},
      {"full mask and bias",
       {1, 2, 7, 3},
       {1, 2, 5, 3},
       {1, 2, 5, 2},
       Shape{1, 2, 7, 5},
       Shape{1, 2, 7, 5},
       true},
      {"bias shared by the queries",
       {2, 1, 6, 4},
       {2, 1, 6, 4},
       {2, 1, 6, 4},
       std::nullopt,
       Shape{1, 1, 1, 6},
       false},
      {"broadcast batch and heads",
       {1, 3, 5, 4},
       {2, 1, 6, 4},
       {2, 3, 6, 2},
       std::nullopt,
       Shape{2, 3, 5, 6},
       false},
      {"no queries", {1, 2, 0, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, std::nullopt, std::nullopt, false},
  };
  for (const Case& c : cases) {
    for (const DType dtype : {DType::F64, DType::F32}) {
      const auto whole = gradients(c, dtype, std::int64_t{1} << 24);
      for (const std::int64_t budget : {1, 13, 40}) {
        const auto blocked = gradients(c, dtype, budget);
        ASSERT_EQ(blocked.size(), whole.size());
        for (std::size_t i = 0; i < whole.size(); ++i) {
          expect_close(blocked[i], whole[i], dtype == DType::F64 ? 1e-12 : 1e-5,
                       std::string(c.name) + " " + std::string(dtype_name(dtype)) + " budget " +
                           std::to_string(budget) + " gradient " + std::to_string(i));
        }
      }
    }
  }
}

// A query row with every key excluded has zero weights and an output of zeros; it passes no
// gradient (not NaN) to anything, and the other rows are unchanged.
TEST(AttentionBackwardBlocks, ARowWithEveryKeyExcludedPassesNoGradient) {
  const auto q = tensor<4>({0.5, -1.0, 0.25, 2.0}, Shape{1, 1, 2, 2}).require_grad();
  const auto k = tensor<4>({1.0, 0.5, -0.5, 1.5, 0.75, -1.0}, Shape{1, 1, 3, 2}).require_grad();
  const auto v = tensor<4>({2.0, -1.0, 0.5, 1.0, -0.25, 3.0}, Shape{1, 1, 3, 2}).require_grad();
  // Row 0 excludes every key; row 1 excludes key 2.
  const auto mask = module::AttentionMask<4>::exclude(
      tensor<4>({1, 1, 1, 0, 0, 1}, Shape{1, 1, 2, 3}, kAd).greater_elem(0.5));
  const auto out = module::attention(q, k, v, mask);
  EXPECT_EQ(values(out)[0], 0.0);
  EXPECT_EQ(values(out)[1], 0.0);
  const Gradients g = out.sum().backward();
  const auto dq = values(grad_of(q, g)), dk = values(grad_of(k, g)), dv = values(grad_of(v, g));
  EXPECT_EQ(dq[0], 0.0);
  EXPECT_EQ(dq[1], 0.0);
  for (double x : dq) EXPECT_TRUE(std::isfinite(x));
  for (double x : dk) EXPECT_TRUE(std::isfinite(x));
  // Row 1 attends keys 0 and 1 alone: dv of key 2 is 0, and keys 0 and 1 share 1 per column.
  EXPECT_EQ(dv[4], 0.0);
  EXPECT_EQ(dv[5], 0.0);
  EXPECT_NEAR(dv[0] + dv[2], 1.0, 1e-6);
  EXPECT_NEAR(dv[1] + dv[3], 1.0, 1e-6);
}

}  // namespace
}  // namespace kiln::autodiff_test
