// The network of `kiln train digits`, shared with bench/train_bench.cpp so the benchmark times
// exactly what the main job trains: two 3x3 convolutions over the 8x8 image, a 2x2 max pool, and
// a 512-128-10 head with dropout.
#pragma once

#include <kiln/kiln.h>
#include <kiln/nn/nn.h>

namespace kiln::tools {

struct DigitsNet {
  nn::Conv2d conv1, conv2;
  nn::Linear hidden, out;
  nn::MaxPool2d pool{.kernel_size = {2, 2}};
  nn::Dropout dropout{.p = 0.25};
  KILN_MODULE(conv1, conv2, hidden, out)

  // pixels [n, 64] -> logits [n, 10]
  Tensor<2> forward(const Tensor<2>& pixels) const {
    const std::int64_t n = pixels.dims()[0];
    auto x = activation::relu(conv1.forward(pixels.reshape<4>(Shape{n, 1, 8, 8})));
    x = pool.forward(activation::relu(conv2.forward(x)));  // [n, 32, 4, 4]
    return out.forward(
        dropout.forward(activation::relu(hidden.forward(x.reshape<2>(Shape{n, 512})))));
  }
};

inline DigitsNet make_digits_net(const Device& device) {
  return DigitsNet{nn::Conv2dConfig{1, 16, {3, 3}, {1, 1}, {1, 1}}.init(device),
                   nn::Conv2dConfig{16, 32, {3, 3}, {1, 1}, {1, 1}}.init(device),
                   nn::LinearConfig{512, 128}.init(device), nn::LinearConfig{128, 10}.init(device)};
}

}  // namespace kiln::tools
