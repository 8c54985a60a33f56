// Embedding: lookups against the table, PyTorch's names, shapes and N(0, 1) initialisation,
// padding_idx (zero row, no gradient) and bad indices.
#include <kiln/nn/embedding.h>

#include "nn/layer_test_util.h"

namespace kiln::nn {
namespace {

using testing::kCpu;

TEST(NnEmbedding, NamesShapesAndStandardNormalInitialisation) {
  kCpu.seed(17);
  const Embedding emb = EmbeddingConfig{.num_embeddings = 200, .embedding_dim = 50}.init(kCpu);
  EXPECT_EQ(testing::names(emb), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(testing::shapes(emb), (std::vector<std::vector<std::int64_t>>{{200, 50}}));
  EXPECT_EQ(emb.num_embeddings(), 200);
  EXPECT_EQ(emb.embedding_dim(), 50);
  double sum = 0, squares = 0;
  const std::vector<double> w = testing::param(emb, "weight");
  for (double v : w) {
    sum += v;
    squares += v * v;
  }
  const double n = static_cast<double>(w.size());
  // 10,000 draws: the mean's standard deviation is 0.01, the variance's about 0.014.
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_NEAR(squares / n - (sum / n) * (sum / n), 1.0, 0.07);
}

TEST(NnEmbedding, LooksUpRows) {
  const Embedding emb = EmbeddingConfig{.num_embeddings = 7, .embedding_dim = 3}.init(kCpu);
  const std::vector<double> w = testing::param(emb, "weight");
  const std::vector<std::int64_t> ids = {3, 0, 6, 3, 2, 5};
  const Tensor<3> e = emb.forward(testing::int_tensor<2>(ids, {2, 3}));
  EXPECT_EQ(e.shape(), (Shape{2, 3, 3}));
  std::vector<double> want;
  for (std::int64_t id : ids) want.insert(want.end(), w.begin() + id * 3, w.begin() + id * 3 + 3);
  EXPECT_EQ(testing::read(e), want);
  const Tensor<2> single = emb.forward(testing::int_tensor<1>({4}, {1}));
  EXPECT_EQ(testing::read(single), std::vector<double>(w.begin() + 12, w.begin() + 15));
  EXPECT_THROW(emb.forward(testing::int_tensor<1>({7}, {1})), InvalidArgument);
  EXPECT_THROW(emb.forward(testing::int_tensor<1>({-1}, {1})), InvalidArgument);
}

TEST(NnEmbedding, PaddingRowStartsAtZero) {
  const Embedding emb =
      EmbeddingConfig{.num_embeddings = 5, .embedding_dim = 4, .padding_idx = -2}.init(kCpu);
  ASSERT_TRUE(emb.padding_idx.has_value());
  EXPECT_EQ(*emb.padding_idx, 3);
  const std::vector<double> w = testing::param(emb, "weight");
  for (std::int64_t r = 0; r < 5; ++r) {
    for (std::int64_t c = 0; c < 4; ++c) {
      if (r == 3) {
        EXPECT_EQ(w[r * 4 + c], 0.0);
      } else {
        EXPECT_NE(w[r * 4 + c], 0.0);
      }
    }
  }
  EXPECT_THROW(
      EmbeddingConfig({.num_embeddings = 5, .embedding_dim = 4, .padding_idx = 5}).init(kCpu),
      InvalidArgument);
  EXPECT_THROW(EmbeddingConfig({.num_embeddings = 0, .embedding_dim = 4}).init(kCpu),
               InvalidArgument);
}

// Needs the embedding rule (ad-nn) and mask_where's rule (ad-data).
TEST(NnEmbedding, GradientsAccumulatePerRowAndSkipThePaddingRow) {
  Embedding emb =
      EmbeddingConfig{.num_embeddings = 4, .embedding_dim = 2, .padding_idx = 1}.init(kCpu);
  // A padding row with a value of its own is still looked up, but never trained.
  emb = testing::with_param(emb, "weight", {1, 2, 3, 4, 5, 6, 7, 8});
  emb = train(emb);
  const std::vector<std::int64_t> ids = {2, 1, 2, 0, 1};
  const Tensor<2> e = emb.forward(testing::int_tensor<1>(ids, {5}));
  EXPECT_EQ(testing::read(e), (std::vector<double>{5, 6, 3, 4, 5, 6, 1, 2, 3, 4}));
  const Tensor<2> seed = testing::tensor<2>(testing::values(10, 3), {5, 2});
  const Gradients g = (e * seed).sum().backward();
  const std::vector<double> s = testing::read(seed);
  // Row r's gradient sums the seeds of the positions that read it; row 1 (padding) gets none.
  std::vector<double> want(8, 0.0);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == 1) continue;
    want[ids[i] * 2] += s[i * 2];
    want[ids[i] * 2 + 1] += s[i * 2 + 1];
  }
  testing::expect_near(testing::read(*emb.weight.val().grad(g)), want, 1e-6);
}

}  // namespace
}  // namespace kiln::nn
