// A BERT-embeddings-like module for the tests of loading pretrained modules: a member saved
// under another name (KILN_NAMED), an Int buffer of token positions, a Bool mask and a Float
// buffer; its config, for nn::from_record; and the generator's state seen through its draws.
#pragma once

#include <kiln/kiln.h>

#include <cstdint>
#include <vector>

namespace kiln::test {

struct Embeddings {
  nn::Linear dense;
  nn::LayerNorm layer_norm;
  nn::Buffer<2, Int> position_ids;
  nn::Buffer<1, Bool> mask;
  nn::Buffer<1> running;
  KILN_MODULE(dense, KILN_NAMED(layer_norm, "LayerNorm"), position_ids, mask, running)
};

// position_ids [[0, 1, ..., positions - 1]] (i64), mask [false, false, true, ...], running ones.
struct EmbeddingsConfig {
  std::int64_t width = 4;
  std::int64_t positions = 6;

  Embeddings init(const Device& device) const {
    return {nn::LinearConfig{3, width}.init(device), nn::LayerNormConfig{width}.init(device),
            nn::Buffer<2, Int>(
                Tensor<1, Int>::arange(0, positions, device).reshape<2>(Shape{1, positions})),
            nn::Buffer<1, Bool>(Tensor<1>::arange(0, width, device).greater_elem(1.5)),
            nn::Buffer<1>(Tensor<1>::ones({width}, device))};
  }
};

// The next draws of device's generator: equal after two seedings with the same seed unless
// something drew in between.
inline std::vector<float> next_draws(const Device& device) {
  return Tensor<1>::random({16}, Distribution::uniform(0, 1), device).into_data().to_vec<float>();
}

}  // namespace kiln::test
