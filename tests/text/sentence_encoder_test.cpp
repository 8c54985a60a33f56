// SentenceEncoder against sentence-transformers (a tiny model and the embeddings
// SentenceTransformer.encode gave, tests/cli/fixtures/make_tiny_sentence_model.py), and the
// pooling modes against float64 loops.
#include <kiln/text/sentence_encoder.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/layer_test_util.h"

namespace kiln::text {
namespace {

using nn::testing::kCpu;

const std::filesystem::path kFixtures =
    std::filesystem::path(KILN_TEST_SOURCE_DIR) / "cli/fixtures";

std::vector<std::string> fixture_texts() {
  std::ifstream in(kFixtures / "texts.txt");
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) texts.push_back(line);
  return texts;
}

std::vector<double> expected_embeddings() {
  std::ifstream in(kFixtures / "expected_embeddings.json");
  std::vector<double> flat;
  for (const auto& row : nlohmann::json::parse(in)) {
    for (double v : row.get<std::vector<double>>()) flat.push_back(v);
  }
  return flat;
}

TEST(TextSentenceEncoder, EmbeddingsEqualSentenceTransformers) {
  const SentenceEncoder encoder =
      SentenceEncoder::from_directory(kFixtures / "tiny_sentence_model", kCpu);
  EXPECT_EQ(encoder.pooling, Pooling::Mean);
  EXPECT_TRUE(encoder.normalize);
  EXPECT_EQ(encoder.dimension(), 16);
  const std::vector<std::string> texts = fixture_texts();
  ASSERT_EQ(texts.size(), 8u);
  const Tensor<2> e = encoder.encode(texts);
  EXPECT_EQ(e.shape(), (Shape{8, 16}));
  nn::testing::expect_near(nn::testing::read(e), expected_embeddings(), 2e-6, "one batch");
  // Text by text: padding in a batch changes nothing.
  std::vector<double> alone;
  for (const std::string& text : texts) {
    for (double v : nn::testing::read(encoder.encode({text}))) alone.push_back(v);
  }
  nn::testing::expect_near(alone, expected_embeddings(), 2e-6, "one by one");
  EXPECT_EQ(encoder.encode({}).shape(), (Shape{0, 16}));
}

// hidden [2, 3, 2]; sequence 0 has 2 tokens, sequence 1 all 3.
TEST(TextSentenceEncoder, PoolingModesSkipPadding) {
  const std::vector<double> h = {1,  -2, 3, 4, 100, 100,  //
                                 -1, 0,  2, 5, 6,   -7};
  const Tensor<3> hidden = nn::testing::tensor<3>(h, Shape{2, 3, 2});
  const Tensor<2, Int> mask = nn::testing::int_tensor<2>({1, 1, 0, 1, 1, 1}, Shape{2, 3});
  auto read = [&](Pooling p) { return nn::testing::read(pool(hidden, mask, p)); };
  nn::testing::expect_near(read(Pooling::Cls), {1, -2, -1, 0}, 0);
  nn::testing::expect_near(read(Pooling::Mean), {2, 1, 7.0 / 3, -2.0 / 3}, 1e-15);
  nn::testing::expect_near(read(Pooling::Max), {3, 4, 6, 5}, 0);
  nn::testing::expect_near(
      read(Pooling::MeanSqrtLen),
      {4 / std::sqrt(2.0), 2 / std::sqrt(2.0), 7 / std::sqrt(3.0), -2 / std::sqrt(3.0)}, 1e-15);
  EXPECT_THROW((void)pool(hidden, nn::testing::int_tensor<2>({1, 1}, Shape{1, 2}), Pooling::Mean),
               ShapeMismatch);
}

TEST(TextSentenceEncoder, DirectoriesItCannotRunAreNamed) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "kiln_sentence_encoder_bad";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(kFixtures / "tiny_sentence_model", dir,
                        std::filesystem::copy_options::recursive);
  auto expect_message = [&](const std::string& part) {
    try {
      (void)SentenceEncoder::from_directory(dir, kCpu);
      ADD_FAILURE() << "no exception; wanted " << part;
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find(part), std::string::npos) << error.what();
    }
  };
  const auto write = [&](const std::filesystem::path& file, const std::string& text) {
    std::ofstream(dir / file) << text;
  };
  write("1_Pooling/config.json", R"({"pooling_mode": "weightedmean"})");
  expect_message("pooling_mode 'weightedmean'");
  write("1_Pooling/config.json",
        R"({"pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true})");
  expect_message("several pooling modes");
  write("1_Pooling/config.json", R"({"pooling_mode_lasttoken": true})");
  expect_message("pooling_mode_lasttoken");
  write("1_Pooling/config.json", R"({"pooling_mode_cls_token": true})");
  EXPECT_EQ(SentenceEncoder::from_directory(dir, kCpu).pooling, Pooling::Cls);
  write("modules.json", R"([{"type": "sentence_transformers.models.Dense", "path": "2_Dense"}])");
  expect_message("'sentence_transformers.models.Dense'");
  std::filesystem::remove_all(dir);
  expect_message("is not a directory");
}

}  // namespace
}  // namespace kiln::text
